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

#include <deque>
#include <utility>

namespace partune {

namespace {

// Per chunk: the next forward, B and W micro-batch, and the steps so far.
struct VSteps {
  std::vector<ScheduleStep> steps;
  int f[2] = {0, 0}, b[2] = {0, 0}, w[2] = {0, 0};
  std::deque<std::pair<int, int>> held;  // (chunk, micro-batch) whose B ran and W did not
  void forward(int c) { steps.push_back({true, f[c]++, c, false}); }
  void input(int c) {
    held.push_back({c, b[c]});
    steps.push_back({false, b[c]++, c, false});
  }
  void weight(int c) {  // the oldest held W of chunk c
    for (auto it = held.begin(); it != held.end(); ++it)
      if (it->first == c) {
        steps.push_back({false, it->second, c, true});
        held.erase(it);
        ++w[c];
        return;
      }
  }
  void oldest_weight() {  // the oldest held W of either chunk, if any
    if (held.empty()) return;
    const auto [c, mb] = held.front();
    held.pop_front();
    steps.push_back({false, mb, c, true});
    ++w[c];
  }
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
  VSteps v;
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
  VSteps v;
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
  while (!v.held.empty()) v.oldest_weight();
  return v.steps;
}

}  // namespace partune
