// The program builder's end of step: what each gradient bucket holds (layers, embedding,
// head), the data-parallel, expert and embedding reductions, and the optimizer step with
// its host copies. program_builder_class.hpp has the class.
#include "program_builder_class.hpp"

namespace partune::detail {

double ProgramBuilder::head_params(int chunk) const {
  if (head_first_) return first_model_stage(chunk) ? rank_.head : 0.0;
  if (!last_model_stage(chunk)) return 0.0;
  return rank_.head + (job_.tied_embedding_copies() ? rank_.head_projection : 0.0);
}

double ProgramBuilder::extra_params(int chunk, int layer) const {
  const BucketExtras extras = bucket_extras(job_, stage_, chunk, layer);
  return (extras.embedding ? embedding_params(chunk) : 0.0) + (extras.head ? head_params(chunk) : 0.0);
}

double ProgramBuilder::extra_expert_bytes(int chunk, int layer) const {
  if (ep_ <= 1 || rank_.head_experts <= 0 || !holds_head(chunk)) return 0.0;
  return bucket_extras(job_, stage_, chunk, layer).head ? rank_.head_experts * gb_ : 0.0;
}

void ProgramBuilder::extra_buckets(int chunk) {
  const double experts = extra_expert_bytes(chunk, 0);
  start_async(gradient_bucket(CommGroup::data, extra_gradient_bytes(chunk, 0) - experts, chunk, 0));
  if (experts > 0 && edp_ > 1) start_async(gradient_bucket(CommGroup::expert_data, experts, chunk, 0));
}

bool ProgramBuilder::tied_copies() const {
  return job_.tied_embedding_copies() && (stage_ == 0 || stage_ == p_ - 1);
}

double ProgramBuilder::owned_fraction() const {
  if (sharded_) return 1.0 / sdp_;
  return pc_.shard_optimizer_state ? 1.0 / dp_ : 1.0;
}

void ProgramBuilder::finish_step() {
  // Every gradient bucket, send and copy completes before the optimizer runs.
  while (!outstanding_.empty()) wait(outstanding_.front());
  double params = 0, experts = 0;  // experts: reduced over the expert-data group
  for (int c = 0; c < v_; ++c) {
    const LayerMix mix = job_.chunk_mix(stage_, c, 0, layers(c));
    params += (mix.dense * layer_param_bytes_[0] + mix.moe * layer_param_bytes_[1]) / gb_ + embedding_params(c) +
              head_params(c);
    experts += mix.moe * expert_param_bytes_[1] / gb_ + (holds_head(c) ? rank_.head_experts : 0.0);
  }
  // (= stage_parameter_count(job, stage): the memory model's count.)
  if (sharded_ && dp_ > sdp_) {
    push(collective(OpKind::all_reduce, CommGroup::replica, params / sdp_ * gb_, 1, -1, 0, -1));
  }
  // Sequence parallelism: the replicated parameters used on sequence shards (the plans'
  // shard_gradient_params) hold their shard's gradient, summed over the tensor group
  // once every bucket is reduced (Megatron's _allreduce_layernorm_grads). The one
  // tensor collective without a micro-batch.
  double shard_params = 0;
  for (int c = 0; c < v_; ++c) {
    const LayerMix mix = job_.chunk_mix(stage_, c, 0, layers(c));
    shard_params += mix.dense * shard_gradient_.layer + mix.moe * shard_gradient_.moe_layer +
                    (first_model_stage(c) ? shard_gradient_.embedding : 0.0) +
                    (holds_head(c) ? shard_gradient_.head : 0.0);
  }
  if (shard_params > 0)
    push(collective(OpKind::all_reduce, CommGroup::tensor, shard_params * gb_ * owned_fraction(), 1, -1, 0, -1));
  if (tied_copies()) {
    // The tied embedding lives on both pipeline ends (embedding_params / head_params);
    // their gradients are summed before either updates, so the copies stay equal.
    const double bytes = rank_.head_projection * gb_ * owned_fraction();  // the token table's gradient shard
    push(collective(OpKind::all_reduce, CommGroup::embedding, bytes, 1, -1, 0, -1));
  }
  const double local =
      (params - experts) * job_.optimizer_shard_fraction() + experts * job_.expert_optimizer_shard_fraction();
  const TrainingConfig& t = job_.training;
  if (pc_.offload_optimizer) {
    // ZeRO-Offload: the gradient shard goes to the host, the host steps, and the updated
    // 16-bit shard comes back (it stays there with offload_parameters: gathered from it).
    push(copy_of(OpKind::offload_gradients, local * gb_));
    push(compute(OpKind::optimizer_step, -1, 0, -1, 0,
                 host_optimizer_time(job_.cluster.instance, t, local, gb_)));
    if (!pc_.offload_parameters) push(copy_of(OpKind::reload_parameters, local * eb_));
  } else {
    push(compute(OpKind::optimizer_step, -1, 0, -1, 0,
                 optimizer_time(job_.cluster.instance.gpu, t, local,
                                stage_parameter_tensors(job_, rank_, stage_), gb_)));
  }
  if (!sharded_ && pc_.shard_optimizer_state && dp_ > 1) {
    // Each rank updated its slice; gather the new weights back.
    const double gathered = ep_ > 1 ? params - experts : params;
    push(collective(OpKind::all_gather, CommGroup::data, gathered * eb_, 1, -1, 0, -1));
    if (ep_ > 1 && edp_ > 1) push(collective(OpKind::all_gather, CommGroup::expert_data, experts * eb_, 1, -1, 0, -1));
  }
}

}  // namespace partune::detail
