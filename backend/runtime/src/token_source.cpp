// Synthetic and byte-level tokens (token_source.hpp). std::mt19937_64 and integer
// arithmetic only, so the tokens are the same on every platform.
#include "partune/backend/token_source.hpp"

#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

namespace partune::backend {

namespace {

// Uniform integer in [0, n) without std::uniform_int_distribution (whose output is
// implementation-defined).
std::uint64_t below(std::mt19937_64& rng, std::uint64_t n) { return rng() % n; }

std::mt19937_64 step_rng(std::uint64_t seed, int step) {
  std::seed_seq s{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                  static_cast<std::uint32_t>(step), 0x70617274u /* "part" */};
  return std::mt19937_64(s);
}

}  // namespace

TokenSource::TokenSource(std::uint64_t seed, int vocab) : seed_(seed), vocab_(vocab) {
  if (vocab < 2) throw std::invalid_argument("token source: vocab must be >= 2");
  permutation_.resize(static_cast<std::size_t>(vocab));
  std::iota(permutation_.begin(), permutation_.end(), 0);
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  for (std::size_t i = permutation_.size() - 1; i > 0; --i) std::swap(permutation_[i], permutation_[below(rng, i + 1)]);
}

TokenSource::TokenSource(std::uint64_t seed, int vocab, const std::string& path)
    : seed_(seed), vocab_(vocab), path_(path) {
  if (vocab < 2) throw std::invalid_argument("token source: vocab must be >= 2");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(fmt::format("--data {}: cannot open the file", path));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  file_tokens_.reserve(bytes.size());
  for (unsigned char b : bytes) file_tokens_.push_back(static_cast<std::int64_t>(b) % vocab);
}

std::vector<std::int64_t> TokenSource::batch(int step, int sequences, int seq_len) const {
  const std::size_t window = static_cast<std::size_t>(seq_len) + 1;
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(sequences) * window);
  std::mt19937_64 rng = step_rng(seed_, step);
  if (!path_.empty()) {
    if (file_tokens_.size() < window)
      throw std::runtime_error(fmt::format("--data {}: {} bytes, fewer than one sequence of {} tokens + 1", path_,
                                           file_tokens_.size(), seq_len));
    const std::uint64_t starts = file_tokens_.size() - window + 1;
    for (int s = 0; s < sequences; ++s) {
      const std::size_t at = below(rng, starts);
      out.insert(out.end(), file_tokens_.begin() + static_cast<std::ptrdiff_t>(at),
                 file_tokens_.begin() + static_cast<std::ptrdiff_t>(at + window));
    }
    return out;
  }
  for (int s = 0; s < sequences; ++s) {
    std::int64_t x = static_cast<std::int64_t>(below(rng, static_cast<std::uint64_t>(vocab_)));
    for (std::size_t t = 0; t < window; ++t) {
      out.push_back(x);
      x = permutation_[static_cast<std::size_t>(x)];
    }
  }
  return out;
}

std::string TokenSource::describe() const {
  if (!path_.empty()) return fmt::format("byte-level tokens from {} ({} bytes)", path_, file_tokens_.size());
  return fmt::format("synthetic tokens (seeded permutation chains, seed {})", seed_);
}

}  // namespace partune::backend
