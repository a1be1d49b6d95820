#pragma once
// The one count of a model's parameters, read from the layer plans (layer_plan.hpp:
// each op's `params` on one tensor-parallel rank, split as Megatron-LM splits them:
// column-parallel weights and biases, row-parallel weights and the vocabulary table over
// the tensor group; norms, row-parallel biases, the router and learned positions whole on
// every rank; a layer with experts holding experts / expert degree of them). Per rank for
// a job, per stage (memory, the estimator, the programs, the partitioner), and for the
// whole model at tensor degree 1 (reports, the backend's scaling rule). Also the bytes a
// parameter keeps for training, by precision and optimizer.
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/layer_plan.hpp"

namespace partune {

// --- The whole model: every parameter once (the plans at tensor and expert degree 1).
// One layer without (moe false) or with experts.
double layer_parameters(const ModelSpec& m, bool moe);
// The token table (vocab x hidden) and, with learned positions, the position table.
double embedding_parameters(const ModelSpec& m);
// The final norm and, when not tied to the embedding, the LM head's projection.
double head_parameters(const ModelSpec& m);
double total_parameters(const ModelSpec& m);
// What one token runs through: in a layer with experts the router and experts_per_token
// of its experts (Mixtral 8x7B: 12.9B of 46.7B); total_parameters for a dense model.
double active_parameters(const ModelSpec& m);
// Of those, the weights a token's forward multiplies: all but the embedding table's
// lookup (a tied table counts once, as the LM head's projection). OpenAI's "active
// parameters" (gpt-oss-120b: 5.1B) count this; Qwen's and DeepSeek's count
// active_parameters.
double active_compute_parameters(const ModelSpec& m);

// --- One rank of a job (its tensor and expert degrees), before data-parallel sharding.
struct RankParameters {
  double dense_layer = 0;
  // A layer with experts, its experts / expert degree experts included; the dense
  // layer's for a dense model.
  double moe_layer = 0;
  double moe_layer_experts = 0;  // of moe_layer, the experts' (reduced over the expert-data group)
  double embedding = 0;          // the token table's vocabulary shard, the positions whole
  double head = 0;               // the final norm whole, an untied projection's shard; the MTP layers'
  double head_experts = 0;       // of head, the MTP layers' experts (reduced over the expert-data group)
  // The LM head projection's weight on a rank (the logits GEMM's k x n), which a tied
  // model holds in the embedding: the copy a last stage keeps of a tied embedding (or of
  // the embedding multi-token prediction shares there, Job::tied_embedding_copies).
  double head_projection = 0;
  // The tensors those parameters come in (LayerPlan::parameter_tensors).
  int dense_layer_tensors = 0, moe_layer_tensors = 0, embedding_tensors = 0, head_tensors = 0;
  double layer(bool moe) const { return moe ? moe_layer : dense_layer; }
};
// From plans built for one configuration (`moe`: the dense plan again for a dense model).
RankParameters rank_parameters(const LayerPlan& dense, const LayerPlan& moe, const LayerPlan& embedding,
                               const LayerPlan& head);
RankParameters rank_parameters(const Job& job);  // the plans at plan_config(job)

// Parameters one GPU of `stage` holds: its layers, the embedding on stage 0, the head on
// the head's stage (with the head on the last stage and tied embeddings, pipeline > 1,
// the last stage keeps its own copy of the token table, as Megatron does).
double stage_parameter_count(const Job& job, const RankParameters& rank, int stage);
double stage_parameter_count(const Job& job, int stage);
// Of those, the parameters the stage's optimizer steps on one rank: the dense ones' share
// under optimizer sharding, the experts' under theirs (Job::optimizer_shard_fraction,
// expert_optimizer_shard_fraction).
double stage_optimizer_parameters(const Job& job, const RankParameters& rank, int stage);
// The parameter tensors those come in (a tied copy of the table: one more).
int stage_parameter_tensors(const Job& job, const RankParameters& rank, int stage);
// Of those, the experts' (the stage's layers with experts x moe_layer_experts, and the MTP
// layers' on the head's stage).
double stage_expert_parameter_count(const Job& job, const RankParameters& rank, int stage);
double stage_expert_parameter_count(const Job& job, int stage);

// --- Bytes a parameter keeps for training. Mixed precision keeps 16-bit weights and
// gradients plus fp32 master weights; Adam adds two fp32 moments, SGD one momentum
// (mixed Adam: 2 + 2 + 12 = 16; mixed SGD: 2 + 2 + 8; fp32 Adam: 4 + 4 + 8; fp32 SGD:
// 4 + 4 + 4). `moment_bytes`: a moment element's (TrainingConfig::moment_bytes: 2 for
// Megatron's bf16 moments, mixed Adam then 2 + 2 + 8 = 12).
struct ParameterBytes {
  double weights = 0, gradients = 0, optimizer = 0;
  double total() const { return weights + gradients + optimizer; }
};
ParameterBytes parameter_bytes(Precision precision, Optimizer optimizer, double moment_bytes = 4.0);
// The job's: its precision and optimizer, with fp32 gradients under grad_reduce_in_fp32
// (Megatron's 18 bytes a parameter for mixed Adam).
ParameterBytes parameter_bytes(const Job& job);

}  // namespace partune
