// A rank's gradient buckets (gradient_buckets.hpp).
#include "partune/backend/gradient_buckets.hpp"

#include <algorithm>

#include "partune/costmodel/program_builder.hpp"

namespace partune::backend {

GradientBuckets::GradientBuckets(const Job& job, int stage, GPTModelImpl& model)
    : tied_embedding_resident_(model.shard.embedding && model.shard.head && job.model.tied_embeddings) {
  const bool expert_buckets = job.model.is_moe() && job.parallel.expert_parallel_degree > 1;
  for (int c = 0; c < job.parallel.virtual_stages; ++c) {
    const int layers = job.layers_in_chunk(stage, c);  // 0: the embedding or head alone
    for (int l = 0; l < std::max(1, layers); ++l) {    // a chunk without layers: bucket 0, its extras
      const int layer = job.global_layer(stage, c, l);
      std::vector<torch::Tensor> params = layers > 0 ? model.layer_parameters(layer) : std::vector<torch::Tensor>{};
      if (layers > 0 && expert_buckets) {
        // The experts' gradients go over the expert-data group, in a bucket of their own.
        std::vector<torch::Tensor> experts = model.layer_expert_parameters(layer);
        std::set<const void*> theirs;
        for (const torch::Tensor& e : experts) theirs.insert(e.unsafeGetTensorImpl());
        params.erase(std::remove_if(params.begin(), params.end(),
                                    [&](const torch::Tensor& p) { return theirs.count(p.unsafeGetTensorImpl()) > 0; }),
                     params.end());
        if (!experts.empty()) experts_[{c, l}] = std::move(experts);
      }
      auto add = [&](const std::vector<torch::Tensor>& extra) { params.insert(params.end(), extra.begin(), extra.end()); };
      const BucketExtras extras = bucket_extras(job, stage, c, l);
      if (extras.embedding) add(model.embedding_parameters());
      if (extras.head) add(model.head_parameters());
      dense_[{c, l}] = std::move(params);
    }
  }
}

std::vector<torch::Tensor> GradientBuckets::shard(int degree, int index, bool release_after_use) {
  std::vector<torch::Tensor> owned;
  for (auto& [key, ps] : dense_) {
    shards_[key] = std::make_unique<ParameterShards>(ps, degree, index);
    owned.push_back(shards_[key]->owned());
  }
  if (release_after_use) {
    // The tied embedding, used by the embedding and the head of the same rank, stays
    // gathered for the whole step (its bucket cannot be freed between the two uses).
    for (auto& [key, s] : shards_) {
      if (tied_embedding_resident_ && key == BucketKey{0, 0}) resident_.insert(key);
      else s->release();
    }
  }
  return owned;
}

void GradientBuckets::release(const BucketKey& key) {
  if (!resident_.count(key)) shards_.at(key)->release();
}

void GradientBuckets::release_all() {
  for (auto& [key, s] : shards_) s->release();
}

void GradientBuckets::stage_for_gather(const BucketKey& key) {
  torch::NoGradGuard no_grad;
  staged_[key] = shards_.at(key)->owned().detach().clone();
}

torch::Tensor GradientBuckets::take_staged(const BucketKey& key) {
  torch::Tensor source;
  if (auto st = staged_.find(key); st != staged_.end()) {
    source = st->second;
    staged_.erase(st);
  }
  return source;
}

std::vector<torch::Tensor> GradientBuckets::gradients_of(const std::function<bool(const torch::Tensor&)>& chosen) {
  std::vector<torch::Tensor> grads;
  if (shards_.empty()) {
    for (auto& [key, params] : dense_)
      for (torch::Tensor& prm : params)
        if (chosen(prm)) {
          if (!prm.grad().defined()) prm.mutable_grad() = torch::zeros_like(prm);
          grads.push_back(prm.mutable_grad());
        }
    return grads;
  }
  for (auto& [key, s] : shards_)
    for (std::size_t j = 0; j < s->params().size(); ++j)
      if (chosen(s->params()[j])) {
        const auto [offset, length] = s->owned_segment(j);
        grads.push_back(s->owned().mutable_grad().narrow(0, offset, length));
      }
  return grads;
}

void GradientBuckets::zero_sharded_gradients() {
  torch::NoGradGuard no_grad;
  for (auto& [key, s] : shards_) {
    s->owned().mutable_grad().zero_();
    for (const torch::Tensor& prm : s->params()) const_cast<torch::Tensor&>(prm).mutable_grad() = torch::Tensor();
  }
}

}  // namespace partune::backend
