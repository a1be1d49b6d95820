// The collectives the executor runs itself (data, sharded, replica, embedding groups, and
// the sequence-parallel gradient sum over the tensor group) and completion of
// asynchronous work (executor_state.hpp). The other tensor-group instructions run inside
// the layers.
#include <fmt/format.h>

#include "executor_state.hpp"

namespace partune::backend {

using Impl = ProgramExecutor::Impl;

namespace {

c10d::AllreduceOptions sum() {
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return o;
}

}  // namespace

void Impl::start(int index, c10::intrusive_ptr<c10d::Work> work, std::function<void()> done, bool async) {
  pending[index] = Pending{std::move(work), std::move(done)};
  if (!async) finish(index);
}

// Completes instruction `index` when it is in flight; anything else (a tensor instruction,
// which ran inside the layers, or one already completed) is a no-op.
void Impl::finish(int index) {
  auto it = pending.find(index);
  if (it == pending.end()) return;
  Pending p = std::move(it->second);
  pending.erase(it);
  if (p.work) p.work->wait();
  if (p.finish) p.finish();
}

// Completes the asynchronous work that has finished, so its buffers (a gradient
// bucket's flat copy, a reduce-scatter's packed gradients) go as soon as they can, as
// DDP's completion hooks do, rather than at the program's wait before the optimizer.
void Impl::reap_completed() {
  for (auto it = pending.begin(); it != pending.end();) {
    const int index = it->first;
    ++it;  // finish erases the entry
    const Pending& p = pending.at(index);
    if (p.work && p.work->isCompleted()) finish(index);
  }
}

void Impl::collective(const Instruction& ins, std::size_t i) {
  const int index = static_cast<int>(i);
  const BucketKey key{ins.chunk, ins.layer};
  switch (ins.group) {
    case CommGroup::tensor:
      if (!run_by_layers(ins)) sum_sequence_parallel_gradients(ins, i);
      return;  // else run inside the layers (the plan's conjugates): booked by TensorCallBook
    case CommGroup::data: {
      const auto& g = group(CommGroup::data);
      if (ins.kind == OpKind::all_reduce) {
        bucket_all_reduce(key, index, ins.async);
      } else if (ins.kind == OpKind::reduce_scatter) {
        reduce_scatter(index, buckets.shard_of(key), g, ins.async, ins.count);
      } else {  // all_gather: the updated slices of every bucket, after the optimizer
        for (auto& [k, s] : buckets.shards()) gather(-1, *s, g, false, 1);
      }
      return;
    }
    case CommGroup::sharded: {
      ParameterShards& s = buckets.shard_of(key);
      if (ins.kind == OpKind::all_gather) {
        // offload_parameters: from the shard reload_parameters brought up
        gather(index, s, group(CommGroup::sharded), ins.async, ins.count, buckets.take_staged(key));
      } else {
        reduce_scatter(index, s, group(CommGroup::sharded), ins.async, ins.count);
      }
      return;
    }
    case CommGroup::replica: {
      const auto& g = group(CommGroup::replica);
      for (auto& [k, s] : buckets.shards()) {
        std::vector<torch::Tensor> t{s->owned().mutable_grad()};
        g.group->allreduce(t, sum())->wait();
      }
      return;
    }
    case CommGroup::expert:
    case CommGroup::expert_tensor:  // the experts' gathers and reduce-scatters (expert_parallel.hpp)
    case CommGroup::expert_block:   // (the allgather dispatcher's: refused by the trainer)
    case CommGroup::context:
    case CommGroup::context_a2a: return;  // the layers' exchanges: booked by TensorCallBook
    case CommGroup::expert_data:
      if (ins.kind != OpKind::all_reduce)
        throw std::runtime_error(fmt::format("{}: the experts' gradients are all-reduced here (no optimizer sharding "
                                             "with expert parallelism in the LibTorch backend)",
                                             describe(ins, i)));
      bucket_all_reduce(key, index, ins.async, CommGroup::expert_data);
      return;
    case CommGroup::embedding: {
      const auto& g = group(CommGroup::embedding);
      std::vector<torch::Tensor> t{embedding_gradient()};
      g.group->allreduce(t, sum())->wait();
      return;
    }
    case CommGroup::none: break;
  }
  throw std::runtime_error(fmt::format("{}: a collective without a group", describe(ins, i)));
}

// A gradient bucket: summed, then averaged over the data-parallel replicas. An experts'
// bucket is summed over the expert-data group: each expert's gradient already holds its
// expert group's tokens (the exchange brought them), so it too is averaged over dp.
void Impl::bucket_all_reduce(const BucketKey& key, int index, bool async, CommGroup kind) {
  std::vector<torch::Tensor>& params = (kind == CommGroup::expert_data ? buckets.experts() : buckets.dense()).at(key);
  std::vector<torch::Tensor> grads;
  for (torch::Tensor& prm : params) {
    if (!prm.grad().defined()) prm.mutable_grad() = torch::zeros_like(prm);
    grads.push_back(prm.grad().reshape(-1));
  }
  // grad_reduce_in_fp32: the bucket travels and is summed in fp32 (a no-op in fp32 runs).
  std::vector<torch::Tensor> flat{torch::cat(grads)};
  if (job.parallel.grad_reduce_in_fp32) flat[0] = flat[0].to(torch::kFloat);
  auto work = group(kind).group->allreduce(flat, sum());
  start(index, work, [params, flat, n = dp]() mutable {
    torch::NoGradGuard no_grad;
    std::int64_t offset = 0;
    for (torch::Tensor& prm : params) {
      prm.mutable_grad().copy_(flat[0].narrow(0, offset, prm.numel()).view_as(prm) / n);
      offset += prm.numel();
    }
  }, async);
}

// Sequence parallelism: the replicated parameters used on sequence shards (the LayerNorms,
// the row-parallel biases, the position table: the layer plan's shard_gradient_params)
// hold their shard's gradient; the program sums them over the tensor group once every
// gradient bucket is reduced. Each rank sums what it holds: the whole gradient, or its
// owned slice (ZeRO-1, sharded), the same slice on every rank of its tensor group.
void Impl::sum_sequence_parallel_gradients(const Instruction& ins, std::size_t i) {
  if (sequence_parallel.empty() || !model->shard.tensor)
    throw std::runtime_error(fmt::format("{}: a tensor-group gradient sum without sequence parallelism or QK-norm",
                                         describe(ins, i)));
  torch::NoGradGuard no_grad;
  // Views of the gradients (or owned slices) to sum.
  std::vector<torch::Tensor> grads = buckets.gradients_of(
      [&](const torch::Tensor& prm) { return sequence_parallel.count(prm.unsafeGetTensorImpl()) > 0; });
  if (grads.empty()) return;
  std::vector<torch::Tensor> flat_parts;
  for (const torch::Tensor& g : grads) flat_parts.push_back(g.reshape(-1));
  torch::Tensor flat = torch::cat(flat_parts);
  model->shard.tensor->sum_gradients(flat);
  std::int64_t offset = 0;
  for (torch::Tensor& g : grads) {
    g.copy_(flat.narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

// What this rank sums with the other copy of the tied embedding: the whole gradient,
// or the owned slice of it when the optimizer state is sharded.
torch::Tensor Impl::embedding_gradient() {
  if (!wte.defined()) throw std::runtime_error("embedding all-reduce on a rank without a tied embedding copy");
  if (!buckets.sharded()) {
    if (!wte.grad().defined()) wte.mutable_grad() = torch::zeros_like(wte);
    return wte.mutable_grad();
  }
  const std::vector<torch::Tensor> slice =
      buckets.gradients_of([&](const torch::Tensor& prm) { return prm.unsafeGetTensorImpl() == wte.unsafeGetTensorImpl(); });
  if (slice.empty()) throw std::runtime_error("the tied embedding is in no gradient bucket");
  return slice.front();
}

namespace {

// The columns [first, last) of each of `calls` near-equal pieces of a row of `length`:
// a sharded instruction of count n is n collective calls of about a n-th of its bytes
// each, as the program (and the simulator) pays them.
std::vector<std::pair<std::int64_t, std::int64_t>> pieces(std::int64_t length, int calls) {
  const std::int64_t n = std::max<std::int64_t>(1, std::min<std::int64_t>(calls, std::max<std::int64_t>(length, 1)));
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (std::int64_t i = 0; i < n; ++i) out.emplace_back(length * i / n, length * (i + 1) / n);
  return out;
}

}  // namespace

// Gloo in LibTorch 1.13 has no reduce-scatter: an all-reduce of the packed gradients,
// keeping this rank's row, under the instruction's name; `calls` all-reduces of column
// pieces. A process group runs its work in order, so the last call's completion is all.
void Impl::reduce_scatter(int index, ParameterShards& s, const Communicator& g, bool async, int calls) {
  const torch::Tensor packed =
      job.parallel.grad_reduce_in_fp32 ? s.pack_gradients().to(torch::kFloat) : s.pack_gradients();
  for (const torch::Tensor& prm : s.params()) const_cast<torch::Tensor&>(prm).mutable_grad() = torch::Tensor();
  auto parts = std::make_shared<std::vector<torch::Tensor>>();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (const auto& [first, last] : pieces(packed.size(1), calls)) {
    std::vector<torch::Tensor> piece{packed.narrow(1, first, last - first).contiguous()};
    works.push_back(g.group->allreduce(piece, sum()));
    parts->push_back(piece[0]);
  }
  ParameterShards* shard = &s;
  start(index, works.back(), [shard, parts, works] {
    for (const auto& w : works) w->wait();
    std::vector<torch::Tensor> rows;
    for (const torch::Tensor& p : *parts) rows.push_back(p.select(0, shard->index()));
    shard->owned().mutable_grad().add_(torch::cat(rows));
  }, async);
}

void Impl::gather(int index, ParameterShards& s, const Communicator& g, bool async, int calls,
                  const torch::Tensor& source) {
  const torch::Tensor owned = (source.defined() ? source : s.owned().detach()).contiguous();
  auto packed = std::make_shared<torch::Tensor>(torch::empty({s.degree(), owned.numel()}, owned.options()));
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (const auto& [first, last] : pieces(owned.numel(), calls)) {
    std::vector<std::vector<torch::Tensor>> outputs(1);  // each rank's row, these columns
    for (int k = 0; k < s.degree(); ++k) outputs[0].push_back(packed->select(0, k).narrow(0, first, last - first));
    std::vector<torch::Tensor> inputs{owned.narrow(0, first, last - first)};
    works.push_back(g.group->allgather(outputs, inputs));
  }
  ParameterShards* shard = &s;
  // The parameters' storage comes back only once the gathered rows are here: a
  // prefetched layer holds one copy of its weights in flight, not two.
  auto done = [shard, packed, works] {
    for (const auto& w : works) w->wait();
    shard->materialise();
    shard->unpack_parameters(*packed);  // the outputs are its rows
  };
  if (index < 0) {
    done();
  } else {
    start(index, works.back(), done, async);
  }
}

// Sharded data parallelism: a layer's parameters go once its compute is over.
void Impl::release_after(const Instruction& ins) {
  if (!sharded || ins.chunk == v) return;
  buckets.release({ins.chunk, ins.layer});
}

}  // namespace partune::backend
