// The program builder's collectives: the layer plan's tensor-parallel collectives around each
// compute instruction, and sharded data parallelism's per-layer gathers (with prefetch) and
// gradient reduce-scatters (sharding.hpp). program_builder_class.hpp has the class.
#include "program_builder_class.hpp"

namespace partune::detail {

Instruction ProgramBuilder::collective(OpKind kind, CommGroup group, double bytes, int count, int mb, int chunk,
                       int layer) const {
  Instruction in;
  in.kind = kind;
  in.group = group;
  in.bytes = bytes;
  in.count = count;
  in.microbatch = mb;
  in.chunk = static_cast<std::int16_t>(chunk);
  in.layer = static_cast<std::int16_t>(layer);
  return in;
}

std::vector<TensorCollective> ProgramBuilder::gather(std::initializer_list<Part> parts, bool overlapped) {
  std::vector<TensorCollective> out;
  for (const Part& p : parts)
    for (const TensorCollective& c : *p.list)
      if (c.overlapped == overlapped) add_folded(out, c, p.times);
  return out;
}

void ProgramBuilder::tensor_collectives_after(std::initializer_list<Part> parts, int mb, int chunk, int layer) {
  for (const TensorCollective& c : gather(parts, false))
    push(collective(op_kind(c.kind), comm_group(c), c.bytes, c.count, mb, chunk, layer));
}

std::vector<int> ProgramBuilder::tensor_collectives_beside(std::initializer_list<Part> parts, int mb, int chunk, int layer) {
  std::vector<int> started;
  for (const TensorCollective& c : gather(parts, true))
    started.push_back(start_async(collective(op_kind(c.kind), comm_group(c), c.bytes, c.count, mb, chunk, layer)));
  return started;
}

void ProgramBuilder::wait_all(const std::vector<int>& indices) {
  for (int i : indices) wait(i);
}

void ProgramBuilder::compute_with_collectives(const Instruction& work, std::initializer_list<Part> parts) {
  const int mb = work.microbatch, chunk = work.chunk, layer = work.layer;
  const std::vector<int> beside = tensor_collectives_beside(parts, mb, chunk, layer);
  push(work);
  wait_all(beside);
  tensor_collectives_after(parts, mb, chunk, layer);
}

void ProgramBuilder::gather_layer(int mb, int chunk, int layer, int layers_in_chunk, bool descending) {
  if (prefetched_ < 0) prefetched_ = start_gather(mb, chunk, layer);
  wait(prefetched_);
  prefetched_ = -1;
  if (descending && !sharding_.backward_prefetch_before_compute) return;  // prefetch_after
  prefetch(mb, chunk, descending ? layer - 1 : layer + 1, layers_in_chunk, descending);
}

void ProgramBuilder::prefetch(int mb, int chunk, int next, int layers_in_chunk, bool descending) {
  if (descending && !sharding_.backward_prefetch) return;
  if (next >= 0 && next < layers_in_chunk) prefetched_ = start_gather(mb, chunk, next);
}

int ProgramBuilder::start_gather(int mb, int chunk, int layer) {
  Instruction gather = sharded_gather(mb, chunk, layer);
  if (pc_.offload_parameters) {
    Instruction in = copy_of(OpKind::reload_parameters, gather.bytes * gather.count / sdp_);
    in.microbatch = mb;
    in.chunk = static_cast<std::int16_t>(chunk);
    in.layer = static_cast<std::int16_t>(layer);
    push(in);
  }
  return start_async(gather);
}

Instruction ProgramBuilder::copy_of(OpKind kind, double bytes) {
  Instruction in;
  in.kind = kind;
  in.bytes = bytes;
  return in;
}

Instruction ProgramBuilder::sharded_gather(int mb, int chunk, int layer) const {
  const double extra = extra_params(chunk, layer) * eb_;
  const int calls = sharding_.gather_calls() + (extra > 0 ? 1 : 0);
  const double bytes = sharding_.gathered * eb_ + extra;
  // No call at all when every parameter persists (a small layer under SMP's 1e6).
  return collective(OpKind::all_gather, CommGroup::sharded, calls > 0 ? bytes / calls : 0.0, calls, mb, chunk,
                    layer);
}

double ProgramBuilder::gather_copy_seconds(int chunk, int layer) const {
  if (!sharded_ || !sharding_.settings.gather_copies) return 0.0;
  const double elements = sharding_.gathered + extra_params(chunk, layer);
  return kernel_work_time(job_.cluster.instance.gpu, gather_copy_work(elements, eb_));
}

double ProgramBuilder::reduce_copy_seconds(int chunk, int layer) const {
  if (!sharded_ || !sharding_.settings.gather_copies) return 0.0;
  const double elements = sharding_.reduce_calls * sharding_.reduce_elements + extra_gradient_bytes(chunk, layer) / gb_;
  return kernel_work_time(job_.cluster.instance.gpu, reduce_copy_work(elements, eb_, gb_));
}

Instruction ProgramBuilder::sharded_reduce(int mb, int chunk, int layer) const {
  const double extra = extra_gradient_bytes(chunk, layer);
  const int calls = sharding_.reduce_calls + (extra > 0 ? 1 : 0);
  const double bytes = sharding_.reduce_calls * sharding_.reduce_elements * gb_ + extra;
  return collective(OpKind::reduce_scatter, CommGroup::sharded, bytes / calls, calls, mb, chunk, layer);
}

}  // namespace partune::detail
