// The tensor collectives the layers ran, booked to the program's tensor instructions
// (executor_state.hpp, TensorCallBook): each event of a tensor instruction carries, as its
// count, the calls of its kind the compute of the same (micro-batch, chunk, layer) made
// (at most the instruction's own count: two instructions of one kind, the re-gathers
// beside a backward and the gradient gathers after it, share them in program order),
// and, when it follows that compute directly, their measured time cut from the compute's
// event. Calls no instruction takes are a disagreement between the program and the layers.
// Collectives run in chunks beside a GEMM (tp_comm_overlap) are booked at the wait on their
// asynchronous instruction: their count to its event, the time the GEMM waited on them to
// the wait's event, cut from the compute's.
#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "executor_state.hpp"

namespace partune::backend {

namespace {

int kind_index(OpKind k) {
  const std::optional<CollectiveKind> c = collective_of(k);
  return c ? static_cast<int>(*c) : -1;
}

// Up to `most` calls of kind k from `open`, their share of its seconds and of those waited
// on collectives beside a GEMM.
struct Taken {
  int calls = 0;
  double seconds = 0, beside_gemm = 0;
};
Taken take_calls(TensorCalls& open, int k, int most) {
  const int available = open.calls[k];
  const int n = std::min(available, std::max(0, most));
  if (n == 0) return {};
  const Taken t{n, open.seconds[k] * n / available, open.waited_beside_gemm[k] * n / available};
  open.calls[k] -= n;
  open.seconds[k] -= t.seconds;
  open.waited_beside_gemm[k] -= t.beside_gemm;
  open.beside_gemm_calls[k] -= std::min(open.beside_gemm_calls[k], n);
  return t;
}

std::pair<int, double> take(TensorCalls& open, int k, int most) {
  const Taken t = take_calls(open, k, most);
  return {t.calls, t.seconds};
}

// The last event takes the compute's (events[c]) last `seconds` (at most its length): the
// compute ends that much earlier, the events between move back as much, and the last
// one starts that much earlier (its end, the timeline's, stays).
void hand_to_last(std::vector<TraceEvent>& events, std::size_t c, double seconds) {
  TraceEvent& compute = events[c];
  const double cut = std::min(seconds, compute.end - compute.start);
  if (cut <= 0 || c + 1 >= events.size()) return;
  compute.end -= cut;
  for (std::size_t j = c + 1; j + 1 < events.size(); ++j) {
    events[j].start -= cut;
    events[j].end -= cut;
  }
  events.back().start -= cut;
}

}  // namespace

void TensorCallBook::start_step() {
  open_.clear();
  async_event_.clear();
  compute_event_ = -1;
}

void TensorCallBook::after_compute(const Instruction& ins, const TensorCalls& calls, std::vector<TraceEvent>* events) {
  last_compute_ = key_of(ins);
  compute_event_ = events && !events->empty() ? static_cast<long>(events->size()) - 1 : -1;
  if (calls.total() > 0) open_[last_compute_] += calls;
}

void TensorCallBook::tensor_instruction(const Instruction& ins, std::size_t i, TraceEvent e,
                                        std::vector<TraceEvent>* events) {
  const int k = kind_index(ins.kind);
  double seconds = 0;
  e.count = 0;
  auto it = open_.find(key_of(ins));
  // An asynchronous one's calls run in the compute after it: its wait books them.
  if (k >= 0 && it != open_.end() && !ins.async) std::tie(e.count, seconds) = take(it->second, k, ins.count);
  if (!events) return;
  // Right after its compute (only tensor events between): the calls ran inside it, so the
  // compute's event ends `seconds` earlier and the events after it move back as much.
  const bool follows = compute_event_ >= 0 && key_of(ins) == last_compute_;
  if (follows) {
    TraceEvent& compute = (*events)[static_cast<std::size_t>(compute_event_)];
    const double end = events->back().end;
    const double cut = std::min(seconds, compute.end - compute.start);
    compute.end -= cut;
    for (std::size_t j = static_cast<std::size_t>(compute_event_) + 1; j < events->size(); ++j) {
      (*events)[j].start -= cut;
      (*events)[j].end -= cut;
    }
    e.start = end - cut;
    e.end = end;
  }
  if (ins.async) async_event_[i] = events->size();
  events->push_back(e);
}

void TensorCallBook::waited(const Instruction& awaited, std::size_t j, std::vector<TraceEvent>* events) {
  const int k = kind_index(awaited.kind);
  auto it = open_.find(key_of(awaited));
  if (k < 0 || it == open_.end()) return;
  const Taken taken = take_calls(it->second, k, awaited.count);
  auto e = async_event_.find(j);
  if (events && e != async_event_.end()) (*events)[e->second].count += taken.calls;
  // Collectives run beside the compute's GEMM (tp_comm_overlap): what the GEMM waited on
  // them is their exposed time, shown at this wait (events->back()) as the simulator shows
  // it, not in the compute's event.
  if (events && taken.beside_gemm > 0 && compute_event_ >= 0 && key_of(awaited) == last_compute_)
    hand_to_last(*events, static_cast<std::size_t>(compute_event_), taken.beside_gemm);
}

int TensorCallBook::unbooked() const {
  int n = 0;
  for (const auto& [key, calls] : open_) n += calls.total();
  return n;
}

}  // namespace partune::backend
