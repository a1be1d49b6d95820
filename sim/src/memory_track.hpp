#pragma once
// Private to sim/: one rank's device memory over its timeline (bytes): the live
// activations, the gradient buckets and offloaded activations as they come and go, and
// the peak. Pure bookkeeping: the program actor reports what happens, and completions
// reported by other actors take effect at the program's next instruction boundary.
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "partune/costmodel/activation_memory.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/program.hpp"

namespace partune::sim {

// What one rank's activations weigh, from the cost model (bytes).
// Per micro-batch, by the layer's kind (dense, with experts: activation_memory.hpp).
struct ActivationSizes {
  LayerKindBytes stored_checkpointed;  // a checkpointed layer keeps this
  LayerKindBytes stored_full;          // a layer that is not checkpointed
  double logits = 0;                   // the logits of one micro-batch
  double working = 0;                  // what recomputing a checkpointed layer materialises
  LayerKindBytes weight_held;          // a split backward: what a layer keeps from its B to its W
};

class MemoryTrack {
 public:
  // `static_bytes`: parameters, gradients, optimizer states, gathered parameters, reserved.
  MemoryTrack(const Job& job, int stage, double static_bytes, const ActivationSizes& sizes);

  double peak() const { return peak_; }

  // Activations: what a forward's layers keep stays until the matching backward (plus
  // the logits on the head's chunk); a recompute also holds its working set.
  void compute_done(const Instruction& in);

  // A gradient bucket (a data all-reduce or reduce-scatter, a sharded reduce-scatter,
  // issued asynchronously) holds its flat buffer from its issue until it completes.
  static bool is_bucket(const Instruction& in);
  void bucket_issued(int index, double bytes);
  void bucket_completed(int index);  // freed at the next instruction boundary
  void bucket_awaited(int index);    // its wait: freed now if still held

  // Offloaded activations leave the device when their copy completes and come back when
  // their reload starts (or never left, if the offload had not completed by then).
  void offload_issued(int index, const Instruction& in);
  void offload_completed(int index, const Instruction& in);  // leave at the next boundary
  void offload_awaited(const Instruction& in);  // its wait: leave now if still pending
  void reload_started(const Instruction& in);

  // Before each instruction: applies the completions reported since the last one.
  void at_instruction_boundary() {
    if (!completed_offloads_.empty()) release_completed_offloads();
    if (!completed_buckets_.empty()) release_completed_buckets();
  }

 private:
  using CopyKey = std::tuple<int, int, int>;  // micro-batch, chunk, layer (-1: whole chunk)
  static CopyKey key_of(const Instruction& in) { return CopyKey{in.microbatch, in.chunk, in.layer}; }
  void change(double delta);
  double stored_bytes(const Instruction& in) const;
  bool holds_logits(const Instruction& in) const;
  // Transformer layers an instruction covers (one, or its chunk's).
  double weight_held_of(const Instruction& in) const;  // what its layers keep from B to W
  void release_completed_offloads();
  void release_completed_buckets();

  const Job& job_;
  int stage_, chunks_;
  bool head_first_, head_stage_rank_;
  bool split_;  // the schedule splits backward into B and W
  ActivationSizes sizes_;
  double static_ = 0, live_ = 0, peak_ = 0;
  std::map<int, double> buckets_live_;  // instruction index -> bytes
  std::vector<int> completed_buckets_;  // completed since the last boundary
  std::map<CopyKey, std::pair<int, double>> offload_pending_;  // -> instruction index, bytes
  std::set<CopyKey> offloaded_;
  std::set<std::pair<int, int>> logits_released_;  // (micro-batch, chunk) freed at its recompute
  std::vector<std::pair<CopyKey, int>> completed_offloads_;  // since the last boundary
};

}  // namespace partune::sim
