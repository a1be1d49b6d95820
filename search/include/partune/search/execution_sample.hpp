#pragma once
// Which ranked candidates `partune search --execute K` runs for real: the top K, and K
// more spread over the rest of the ranked list from just below the top to the very
// bottom, so the measurement checks the whole ranking, not only its head.
#include <cstddef>
#include <vector>

namespace partune::search {

// Indices into a ranked list of `ranked` candidates, ascending, each once: 0..K-1, then
// K evenly spaced over [K, ranked - 1] including its last. All of them when ranked <= 2K.
std::vector<std::size_t> execution_sample(std::size_t ranked, std::size_t k);

}  // namespace partune::search
