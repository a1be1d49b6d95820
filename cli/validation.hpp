#pragma once
// Predicted vs measured for `partune validate`: the simulator's step of a job against the
// LibTorch backend's run of the same per-rank programs. Pure functions over the two
// timelines; cmd_validate.cpp runs the simulator and the backend and prints.
//
// "Time of an instruction kind" is the time a rank's program spends on instructions of
// that kind in one step: a synchronous instruction from issue to completion (for compute,
// including any slow-down; for a receive, the time waiting for the peer), an asynchronous
// one from its issue plus the time the program is blocked at its `wait`. Summed over the
// step on each rank, then averaged over every rank of the world (a rank that never runs
// the kind counts 0), so the per-kind times add up to about one step of one rank.
#include <map>
#include <string>
#include <vector>

#include "partune/costmodel/program.hpp"
#include "partune/sim/simulator.hpp"

namespace partune::cli {

using KindTimes = std::map<OpKind, double>;

// One complete event of a measured Chrome trace (partune run --trace), in seconds.
struct MeasuredEvent {
  int rank = 0;
  OpKind kind = OpKind::forward;
  CommGroup group = CommGroup::none;
  int microbatch = -1, chunk = 0, layer = -1;
  double start = 0, end = 0;
};

// Reads the trace partune run writes; throws std::runtime_error naming the file and what
// is wrong with it (an event name that is no instruction kind, a missing field).
std::vector<MeasuredEvent> read_measured_trace(const std::string& path);

// The simulator's side, from its recorded events (stream 0: synchronous instructions;
// stream 1: waits on sends and copies) and the programs it ran. The simulator records
// no event for a wait on an asynchronous collective: the gap on the program's timeline
// before the next recorded event is that wait, and is booked to the awaited
// collective's kind (to the last awaited one when several waits follow each other).
KindTimes predicted_kind_times(const std::vector<RankProgram>& programs, const sim::SimResult& result);

// The backend's side: each rank's events in program order, one per instruction, `steps`
// times over. Throws std::runtime_error when the events do not follow the programs.
struct MeasuredSteps {
  std::vector<KindTimes> kind_times;           // per step, averaged over ranks
  std::vector<std::vector<TraceEvent>> events;  // per step, every rank, named as the simulator
                                               // names them (a wait becomes the awaited
                                               // instruction), each rank's step starting at 0
};
MeasuredSteps split_measured_steps(const std::vector<RankProgram>& programs,
                                   const std::vector<MeasuredEvent>& events, int steps);

// The event names (to_string(OpKind)) of a timeline.
std::vector<std::string> event_kind_names(const std::vector<TraceEvent>& events);
std::vector<std::string> event_kind_names(const std::vector<MeasuredEvent>& events);

// 100 (predicted - measured) / measured; NaN when nothing was measured.
double error_pct(double predicted, double measured);
double median(std::vector<double> values);

}  // namespace partune::cli
