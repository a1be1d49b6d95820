#pragma once
// reproduce --markdown: the comparison as a Markdown table (the README's accuracy section is
// generated from it by scripts/readme-accuracy.sh). Presentation only.
#include <string>

#include "partune/costmodel/table.hpp"

namespace partune::cli {

// Rows off by more than this many percent get a `why` cell: the row's `known_gap`, or a
// note that the table file records none.
inline constexpr double kWhyThresholdPct = 10.0;

// `evaluator` names what predicted the rows ("estimator" or "simulator").
std::string reproduce_markdown(const ReproduceResult& r, const std::string& evaluator);

}  // namespace partune::cli
