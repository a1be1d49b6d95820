// The V-shaped schedules: two chunks a stage, chunk 0 running model chunk s down the
// pipeline and chunk 1 model chunk 2p - 1 - s back up (job.hpp's model_chunk), so the
// first stage holds both ends of the model and the last stage turns the micro-batches
// around without a transfer. Backward is split into B and W as in ZB-H1.
//  - ZBV (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory"; PyTorch's
//    ScheduleZBVZeroBubble): 1F1B's activation memory, bubble about zero at F = B = W.
//  - DualPipeV (DeepSeek's DualPipe folded into a V; PyTorch's ScheduleDualPipeV): its
//    overlapped F&B pairs run here as the forward then the whole backward (B and W at
//    once): the overlap of one micro-batch's communication with the other's compute is
//    not modelled.
#include "partune/costmodel/schedule.hpp"

#include <cstddef>
#include <vector>

namespace partune {

namespace {

// Per chunk: the next forward, B and W micro-batch, and the steps so far. The B's whose W
// has not run wait in one queue per chunk, each stamped with its order across both.
struct VSteps {
  struct Held {
    long order;
    int microbatch;
  };
  std::vector<ScheduleStep> steps;
  int f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};
  std::vector<Held> held[2];
  std::size_t next_held[2] = {0, 0};  // each queue's front
  long stamped = 0;
  explicit VSteps(int microbatches) { steps.reserve(6 * static_cast<std::size_t>(microbatches)); }
  bool holds(int c) const { return next_held[c] < held[c].size(); }
  void forward(int c) { steps.push_back({true, f[c]++, c, false}); }
  void input(int c) {
    held[c].push_back({stamped++, b[c]});
    steps.push_back({false, b[c]++, c, false});
  }
  void weight(int c) {  // the oldest held W of chunk c
    if (!holds(c)) return;
    steps.push_back({false, held[c][next_held[c]++].microbatch, c, true});
    ++w[c];
  }
  void oldest_weight() {  // the oldest held W of either chunk, if any
    if (!holds(0) && !holds(1)) return;
    const bool first = holds(0) && (!holds(1) || held[0][next_held[0]].order < held[1][next_held[1]].order);
    weight(first ? 0 : 1);
  }
  bool holds_any() const { return holds(0) || holds(1); }
  // B and W of one micro-batch back to back (DualPipeV's whole backward): nothing held.
  void full_backward(int c) {
    const int mb = b[c]++;
    ++w[c];
    steps.push_back({false, mb, c, false});
    steps.push_back({false, mb, c, true});
  }
};

}  // namespace

std::vector<ScheduleStep> schedule_zbv(int stages, int microbatches, int stage) {
  const int p = stages, m = microbatches, r = stage;
  VSteps v(m);
  for (int k = 0; k < 2 * (p - r) - 1 && v.f[0] < m; ++k) v.forward(0);
  for (int k = 0; k < r && v.f[0] < m; ++k) v.forward(1), v.forward(0);
  for (int k = 0; k < p - r && v.f[1] < v.f[0]; ++k) v.forward(1), v.input(1), v.weight(1);
  while (v.f[1] < v.f[0] || v.f[0] < m) {
    if (v.f[0] < m) v.forward(0);
    v.input(0), v.weight(0);
    v.forward(1), v.input(1), v.weight(1);
  }
  for (int k = 0; k < r && v.b[1] < m; ++k) v.input(0), v.input(1);
  while (v.b[0] < m) v.input(0), v.weight(0);
  while (v.w[1] < m) v.weight(1);
  while (v.w[0] < m) v.weight(0);
  return v.steps;
}

std::vector<ScheduleStep> schedule_dualpipev(int stages, int microbatches, int stage) {
  const int p = stages, m = microbatches, r = stage;
  VSteps v(m);
  for (int k = 0; k < 2 * (p - r - 1); ++k) v.forward(0);
  for (int k = 0; k < r + 1; ++k) v.forward(0), v.forward(1);
  for (int k = 0; k < p - r - 1; ++k) v.input(1), v.oldest_weight(), v.forward(1);
  for (int k = 0; k < m - 2 * p + r + 1; ++k) {  // F0 with B1, then F1 with B0 (F&B pairs)
    v.forward(0), v.full_backward(1);
    v.forward(1), v.full_backward(0);
  }
  for (int k = 0; k < p - r - 1; ++k) v.full_backward(1), v.forward(1), v.full_backward(0);
  // The last B's: the first half whole, then B alone (their W's wait), switching chunk
  // order by the stage's parity as DualPipeV does.
  bool split = false;
  for (int k = 0; k < r + 1; ++k) {
    if (k == (r + 1) / 2 && r % 2 == 1) split = true;
    split ? v.input(1) : v.full_backward(1);
    if (k == (r + 1) / 2 && r % 2 == 0) split = true;
    split ? v.input(0) : v.full_backward(0);
  }
  for (int k = 0; k < p - r - 1; ++k) v.oldest_weight(), split ? v.input(0) : v.full_backward(0);
  while (v.holds_any()) v.oldest_weight();
  return v.steps;
}

}  // namespace partune
