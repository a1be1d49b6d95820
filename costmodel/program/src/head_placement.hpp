#pragma once
// Private to program_builder.cpp: where stage 0 runs the LM head steps when lm_head_stage is
// first (list scheduling over the cost model's per-stage times).
#include <cstdint>
#include <vector>

#include "partune/costmodel/program.hpp"

namespace partune {
namespace detail {

// One step of a stage's program: a schedule step (a split backward's W: weight), or
// (stage 0, lm_head_stage: first) the LM head of a micro-batch.
struct Step {
  enum Kind : std::uint8_t { forward, backward, weight, head } kind = forward;
  int microbatch = 0;
  int chunk = 0;
};

// Predicted per-micro-batch times of every stage, for placing the head steps.
struct StageTimes {
  std::vector<double> forward, backward;  // per stage: kernels + tensor all-reduces
  double head = 0;                        // the head's forward + backward on stage 0
  double hop = 0;                         // one pipeline transfer
};

// lm_head_stage: first. Stage 0's steps with the head steps H(k) placed among them (see
// head_placement.cpp and docs/programs.md §4.7).
std::vector<Step> place_head_steps(const ParallelConfig& pc, const StageTimes& times);

}  // namespace detail
}  // namespace partune
