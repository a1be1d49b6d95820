#pragma once
// `partune bench collectives --compare`: the measured collectives against the cost model
// (collective_comparison.hpp), a table per file and a summary per fabric, as text or as
// one JSON object. No computation happens here.
#include <nlohmann/json.hpp>
#include <string>

#include "partune/costmodel/collective_comparison.hpp"

namespace partune::report {

std::string collective_comparison_text(const CollectiveComparison& c);
nlohmann::json collective_comparison_json(const CollectiveComparison& c);

}  // namespace partune::report
