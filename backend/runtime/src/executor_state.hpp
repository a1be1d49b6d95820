#pragma once
// The program executor's state and its steps (executor.hpp), private to the backend's
// executor_*.cpp files, one idea each. The gradient buckets (gradient_buckets.hpp), the
// optimizer on its masters (mixed_precision_optimizer.hpp) and the point-to-point channels
// (pipeline_channels.hpp) are classes of their own that it holds.
//   executor.cpp              construction, the optimizer step, the step loop, save / load
//   executor_compute.cpp      forward / recompute / backward of a part, offload / reload
//   executor_transfers.cpp    pipeline sends and receives (over PipelineChannels)
//   executor_collectives.cpp  data, sharded, replica and embedding collectives, the
//                             sequence-parallel gradient sum; completion of asynchronous work
//   tensor_call_booking.cpp   the tensor collectives the layers ran, booked to the
//                             program's tensor instructions (count and measured time)
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "partune/backend/compute_device.hpp"
#include "partune/backend/executor.hpp"
#include "partune/backend/gradient_buckets.hpp"
#include "partune/backend/mixed_precision_optimizer.hpp"
#include "partune/backend/pipeline_channels.hpp"
#include "partune/backend/weight_gradients.hpp"

namespace partune::backend {

// "instruction 7 (send_activation, micro-batch 2, chunk 0)"
std::string describe(const Instruction& ins, std::size_t index);

using ChunkKey = std::pair<int, int>;       // (micro-batch, chunk)
using PartKey = std::tuple<int, int, int>;  // (micro-batch, chunk, first layer in the chunk)

// What a forward left for its recompute and backward.
struct Part {
  int first = 0, count = 0;   // layers of the chunk covered: [first, first + count)
  bool embedding = false;     // starts with the embedding (input: the tokens)
  bool head = false;          // ends with the LM head and the loss
  bool checkpointed = false;  // fully checkpointed: the forward ran without autograd, recompute repeats it
  bool selective = false;     // selective checkpointing: the attention cores keep Q, K, V only
  SelectiveRecompute attention_cores;  // selective: its layers' attention cores, recomputed before backward
  // The layers' input: a leaf requiring grad; with the embedding undefined, or when the
  // part is checkpointed the embedding's output (kept with its graph: not recomputed).
  torch::Tensor input;
  torch::Tensor host_input;   // offloaded copy of the input
  torch::Tensor output;       // the layers' output, end of their graph (undefined with the head,
                              // unless checkpointed: then the recomputed layers' output)
  torch::Tensor head_input;   // checkpointed with the head: the leaf the head's graph starts from
  torch::Tensor loss;         // with the head: the scaled loss
  // A split backward: the weight gradients its backward (B) deferred to its backward_weight (W).
  WeightGradientStore weight_gradients;
};

// Drops what a part kept once its backward (or its send) no longer needs it.
void free_tensors(Part& part);

// The program's tensor instructions run by the layers (each follows the compute that ran
// them); the one without a micro-batch, the sequence-parallel gradient sum before the
// optimizer, is the executor's own.
inline bool run_by_layers(const Instruction& ins) {
  return is_collective(ins.kind) &&
         (ins.group == CommGroup::tensor || ins.group == CommGroup::expert || ins.group == CommGroup::expert_tensor ||
          ins.group == CommGroup::context || ins.group == CommGroup::context_a2a) &&
         ins.microbatch >= 0;
}

// An asynchronous instruction in flight: its c10d work and what completes it.
struct Pending {
  c10::intrusive_ptr<c10d::Work> work;  // null: completed when started (a local copy)
  std::function<void()> finish;
};

// The tensor collectives the layers ran, booked to the program's tensor instructions
// (tensor_call_booking.cpp). A compute instruction's calls wait, by kind, under its
// (micro-batch, chunk, layer); a tensor instruction of the same key takes up to its count
// of those of its kind (a synchronous one when it runs, an asynchronous one when its
// `wait` runs: the sequence-parallel re-gathers start before the backward that makes them).
class TensorCallBook {
 public:
  using Key = std::tuple<int, int, int>;
  static Key key_of(const Instruction& ins) { return {ins.microbatch, ins.chunk, ins.layer}; }

  void start_step();
  // After compute instruction `ins` (its event, when recorded, is events->back()).
  void after_compute(const Instruction& ins, const TensorCalls& calls, std::vector<TraceEvent>* events);
  // Fills `e` for tensor instruction `ins` (index i) and pushes it when events are kept.
  void tensor_instruction(const Instruction& ins, std::size_t i, TraceEvent e, std::vector<TraceEvent>* events);
  // A `wait` on instruction `awaited` (index j); its event, when recorded, is
  // events->back() and takes the time the compute waited on collectives beside its GEMM.
  void waited(const Instruction& awaited, std::size_t j, std::vector<TraceEvent>* events);
  // Any other instruction: the tensor events after it no longer follow a compute.
  void other_instruction() { compute_event_ = -1; }
  // Calls of the step that no tensor instruction took: a mismatch between the program
  // and the layers (0 when they agree).
  int unbooked() const;

 private:
  std::map<Key, TensorCalls> open_;
  std::map<std::size_t, std::size_t> async_event_;  // async tensor instruction -> its event
  Key last_compute_{-2, -2, -2};
  long compute_event_ = -1;  // index of the last compute's event while tensor events follow it
};

struct ProgramExecutor::Impl {
  const Job& job;
  RankProgram program;
  GPTModel model;
  const Communicators* comms;
  ComputeDevice compute;  // where the model's parameters are, and in which format
  int stage = 0, p = 1, v = 1, dp = 1, sdp = 1;
  bool head_first = false, sharded = false, zero1 = false;
  GradientBuckets buckets;
  std::unique_ptr<MixedPrecisionOptimizer> optimizer;
  PipelineChannels channels;
  torch::Tensor wte;  // this rank's tied token embedding (copy), when it syncs it
  std::set<const void*> sequence_parallel;  // parameters summed over the tensor group (by TensorImpl)

  // --- per step
  std::map<PartKey, Part> parts;
  std::map<ChunkKey, torch::Tensor> chunk_input;   // received activations (leaves)
  std::map<ChunkKey, torch::Tensor> output_grad;   // received gradients of chunk outputs
  std::map<int, Pending> pending;                  // by instruction index
  TensorCallBook tensor_calls;
  const std::vector<MicroBatchData>* data = nullptr;
  double loss_sum = 0;
  int microbatches = 0;

  Impl(const Job& j, RankProgram prog, GPTModel m, const Communicators* c);

  int model_stage(int chunk) const { return model_chunk(job.parallel, stage, chunk); }
  // The chunk of this stage that runs the model chunk after (direction +1) or before (-1)
  // `chunk`'s, or -1: a V's turn on the last stage hands activations and gradients over
  // without a transfer (the program lists none).
  int local_chunk(int chunk, int direction) const {
    const int k = model_stage(chunk) + direction;
    if (k < 0 || k >= p * v) return -1;
    const ChunkPosition at = chunk_position(job.parallel, k);
    return at.stage == stage ? at.chunk : -1;
  }
  bool first_model_stage(int chunk) const { return model_stage(chunk) == 0; }
  bool last_model_stage(int chunk) const { return model_stage(chunk) == p * v - 1; }
  int layers(int chunk) const { return job.layers_in_chunk(stage, chunk); }  // 0: the embedding or head alone
  const Communicator& group(CommGroup g) const { return comms->group(g); }
  int shard_degree() const { return sharded ? sdp : dp; }
  int shard_index() const { return group(sharded ? CommGroup::sharded : CommGroup::data).index; }

  // executor.cpp
  void build_optimizer(const OptimizerSettings& settings);
  void optimizer_step();
  void reload_parameters(const Instruction& ins);
  void zero_gradients();
  void execute(const Instruction& ins, std::size_t i, const std::set<PartKey>& recomputed, bool& head_ran);

  // executor_compute.cpp
  Part make_part(const Instruction& ins) const;
  void run_part(Part& part, int mb, int chunk, bool with_grad);
  void forward(const Instruction& ins, std::size_t i, const std::set<PartKey>& recomputed);
  Part& part_of(const Instruction& ins, std::size_t i, const char* what);
  void recompute(const Instruction& ins, std::size_t i);
  void backward(const Instruction& ins, std::size_t i);
  void backward_weight(const Instruction& ins, std::size_t i);
  void offload(const Instruction& ins, std::size_t i);
  void reload(const Instruction& ins, std::size_t i);
  template <class Pred>
  Part* find_part(int mb, int chunk, Pred pred) {
    for (auto& [k, part] : parts)
      if (std::get<0>(k) == mb && std::get<1>(k) == chunk && pred(part)) return &part;
    return nullptr;
  }

  // executor_transfers.cpp
  int output_chunk(const Instruction& ins) const;
  std::vector<std::int64_t> activation_shape() const;
  void send(const Instruction& ins, std::size_t i, torch::Tensor t, int tag);
  torch::Tensor receive(const Instruction& ins, std::size_t i, int tag);
  void send_activation(const Instruction& ins, std::size_t i);
  void send_gradient(const Instruction& ins, std::size_t i);

  // executor_collectives.cpp
  void start(int index, c10::intrusive_ptr<c10d::Work> work, std::function<void()> done, bool async);
  void finish(int index);
  void reap_completed();
  void collective(const Instruction& ins, std::size_t i);
  void bucket_all_reduce(const BucketKey& key, int index, bool async, CommGroup kind = CommGroup::data);
  torch::Tensor embedding_gradient();
  // `calls` collective calls over near-equal column pieces (the instruction's count).
  void reduce_scatter(int index, ParameterShards& s, const Communicator& g, bool async, int calls);
  void gather(int index, ParameterShards& s, const Communicator& g, bool async, int calls,
              const torch::Tensor& source = {});
  void release_after(const Instruction& ins);
  void sum_sequence_parallel_gradients(const Instruction& ins, std::size_t i);
};

}  // namespace partune::backend
