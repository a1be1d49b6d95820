// Mixtures of experts and expert parallelism: the Mixtral preset's parameter counts and
// FLOPs per token against the published size and the closed form written out here; a
// small model's layers, parameters, programs and collectives worked out by hand; the
// job rules of expert parallelism.
#include <catch2/catch.hpp>

#include <string>

#include "job_fixtures.hpp"
#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using partune::testing::make_model;

namespace {

// 4 layers of hidden 256 (GPT block: biases, LayerNorm), experts in layers 0 and 2
// (moe_every 2): 4 experts of 512, 2 per token.
ModelSpec small_moe() {
  ModelSpec m = make_model(4, 256, 4, 1024, 1000, 128);
  m.experts = 4;
  m.experts_per_token = 2;
  m.moe_every = 2;
  m.expert_ffn_hidden = 512;
  return m;
}

// On one p4d node: 8 GPUs of data parallelism, one sequence each.
Job small_moe_job(int expert_degree) {
  Job j = partune::testing::p4d_job("gpt2-small", 1, 8);
  j.model = small_moe();
  j.parallel.expert_parallel_degree = expert_degree;
  return j;
}

int count(const RankProgram& p, OpKind kind, CommGroup group) {
  int n = 0;
  for (const Instruction& in : p.ops)
    if (in.kind == kind && in.group == group) n += in.count;
  return n;
}

}  // namespace

TEST_CASE("Mixtral 8x7B has its published parameter counts", "[model][moe]") {
  const ModelSpec m = load_model("mixtral-8x7b");
  // 46.7B in all (the Hugging Face checkpoint: 46,702,792,704), 12.9B active per token.
  CHECK(total_parameters(m) == Approx(46.7e9).epsilon(0.01));
  CHECK(total_parameters(m) == 46'702'792'704.0);
  CHECK(active_parameters(m) == Approx(12.9e9).epsilon(0.01));
}

TEST_CASE("Mixtral 8x7B's FLOPs per token equal the closed form", "[model][moe][flops]") {
  const ModelSpec m = load_model("mixtral-8x7b");
  const double h = 4096, kv = 8 * 128, s = 4096, fe = 14336, V = 32000, E = 8, k = 2, L = 32;
  // Per token and layer, forward: 2 FLOPs per weight of Q, K, V, the projection, the
  // router and the two chosen SwiGLU experts (three matrices each), plus Q K^T and the
  // context (4 s h); the logits 2 h V once; backward twice the forward.
  const double layer = 2 * (h * (h + 2 * kv) + h * h) + 2 * h * E + 2 * k * 3 * h * fe + 4 * s * h;
  const double closed = 3 * (L * layer + 2 * h * V);
  CHECK(model_flops_per_step(m, 1) / s == Approx(closed).epsilon(1e-12));
  CHECK(closed == Approx(8.2934e10).epsilon(1e-4));
  // The capacity padding is not the model's work: cf 1.25 leaves the count as it is.
  ModelSpec padded = m;
  padded.capacity_factor = 1.25;
  CHECK(model_flops_per_step(padded, 1) == model_flops_per_step(m, 1));
}

TEST_CASE("moe_every places the experts in every k-th layer", "[model][moe]") {
  const ModelSpec m = small_moe();
  CHECK(m.is_moe_layer(0));
  CHECK_FALSE(m.is_moe_layer(1));
  CHECK(m.is_moe_layer(2));
  CHECK(m.moe_layers_in(0, 4) == 2);
  CHECK(m.moe_layers_in(1, 2) == 1);  // layers 1, 2
  CHECK(m.moe_layers_in(3, 1) == 0);
  // h = 256: attention 4h^2 + 4h, two LayerNorms 4h; a dense MLP 2 h 1024 + 1024 + h;
  // an expert 2 h 512 + 512 + h; the router h x 4.
  const double attention = 4.0 * 256 * 256 + 8 * 256, dense = 2.0 * 256 * 1024 + 1024 + 256;
  const double expert = 2.0 * 256 * 512 + 512 + 256, router = 256 * 4;
  const double embedding = 1000.0 * 256 + 128 * 256, head = 2 * 256;
  CHECK(total_parameters(m) == 2 * (attention + dense) + 2 * (attention + router + 4 * expert) + embedding + head);
  CHECK(active_parameters(m) == 2 * (attention + dense) + 2 * (attention + router + 2 * expert) + embedding + head);
}

TEST_CASE("expert parallelism divides the experts over the expert group", "[memory][moe]") {
  const Job j = small_moe_job(4);
  partune::testing::require_valid(j);
  const double attention = 4.0 * 256 * 256 + 8 * 256, dense = 2.0 * 256 * 1024 + 1024 + 256;
  const double expert = 2.0 * 256 * 512 + 512 + 256, router = 256 * 4;
  // One expert of each MoE layer on a rank (4 experts / 4).
  CHECK(stage_expert_parameter_count(j, 0) == 2 * expert);
  CHECK(stage_parameter_count(j, 0) ==
        2 * (attention + dense) + 2 * (attention + router + expert) + 1000.0 * 256 + 128 * 256 + 2 * 256);
  // The plan of a layer with experts holds the same, and says which are experts'.
  const LayerPlan plan = moe_layer_plan(j.model, plan_config(j));
  CHECK(plan.params() == attention + router + expert);
  CHECK(plan.expert_params() == expert);
  // ZeRO-1: the experts' optimizer slice is over the expert-data group (8 / 4 = 2 ranks).
  Job zero1 = j;
  zero1.parallel.shard_optimizer_state = true;
  CHECK(zero1.expert_data_parallel_degree() == 2);
  const double shared = stage_parameter_count(j, 0) - 2 * expert;
  CHECK(stage_memory(zero1, 0).optimizer_states == Approx((shared / 8 + 2 * expert / 2) * 12.0));
}

TEST_CASE("a layer with experts on one tensor rank: the router and fc2's biases whole", "[plan][moe]") {
  // Tensor degree 2, expert degree 1 (Megatron-LM's split): the attention as a dense
  // layer's (QKV 3h^2 + 3h and the projection h^2 split, its bias h and the two layer
  // norms 4h whole), the router h x 4 whole on every tensor rank, and each of the 4
  // experts split as a dense MLP (fc1 h 512 + 512 and fc2 512 h over the group, fc2's
  // bias h whole).
  const ModelSpec m = small_moe();
  PlanConfig c;
  c.tensor_degree = 2;
  const double h = 256;
  const double attention = (4 * h * h + 3 * h) / 2 + h + 4 * h, router = h * 4;
  const double expert = (2 * h * 512 + 512) / 2 + h;
  const LayerPlan plan = moe_layer_plan(m, c);
  CHECK(plan.params() == attention + router + 4 * expert);
  CHECK(plan.expert_params() == 4 * expert);
  // Expert degree 4 as well: one expert on a rank.
  c.expert_degree = 4;
  CHECK(moe_layer_plan(m, c).params() == attention + router + expert);
}

TEST_CASE("a layer with experts dispatches and combines over the expert group", "[plan][moe]") {
  const Job j = small_moe_job(4);
  const LayerPlan plan = moe_layer_plan(j.model, plan_config(j));
  REQUIRE(plan.find(PlanOpRole::dispatch));
  REQUIRE(plan.find(PlanOpRole::combine));
  // Each sends its tokens' copies: 2 experts x 128 tokens x 256 x 2 bytes.
  CHECK(plan.op(PlanOpRole::dispatch).comm_bytes == 2.0 * 128 * 256 * 2);
  // The experts' GEMMs: 1 expert of 256 routed rows (all of the rank's copies).
  const PlanOp& fc1 = plan.op(PlanOpRole::expert_fc1);
  CHECK(fc1.batch == 1);
  CHECK(fc1.m == 256);
  CHECK(fc1.flops == 2.0 * 256 * 256 * 512);
  int forward = 0, backward = 0;
  for (const TensorCollective& c : tensor_collectives(plan, PlanPass::forward))
    if (c.kind == CollectiveKind::all_to_all && c.group == PlanGroup::expert) forward += c.count;
  for (const TensorCollective& c : tensor_collectives(plan, PlanPass::backward))
    if (c.kind == CollectiveKind::all_to_all && c.group == PlanGroup::expert) backward += c.count;
  CHECK(forward == 2);
  CHECK(backward == 2);
  CHECK(tensor_collectives(plan, PlanPass::recompute, Checkpointing::full).size() == 2);
  CHECK(tensor_collectives(plan, PlanPass::recompute, Checkpointing::selective).empty());
  // Without an expert group there is nothing to exchange.
  CHECK_FALSE(moe_layer_plan(j.model, plan_config(small_moe_job(1))).find(PlanOpRole::dispatch));
  CHECK_THROWS_AS(moe_layer_plan(j.model, plan_config(small_moe_job(1))).op(PlanOpRole::dispatch), std::logic_error);
}

TEST_CASE("an all-to-all sends (n - 1) / n of its buffer, inside a node or across", "[collective][moe]") {
  const InstanceType inst = load_instance_type("p4d.24xlarge");
  const double S = 64e6, intra = inst.intra_node.bw * inst.intra_node.efficiency;
  const double launch = inst.ring.launch_latency;
  // 8 on one node: 7/8 of S over NVSwitch, NCCL's send/receive pairs one LL step: its base
  // 6.6 us and 0.6 us a step (NCCL 2.30, MB26 §2.1) beside the link's 0.2 us.
  const GroupSpan node{8, 1, 8};
  CHECK(collective_cost(CollectiveKind::all_to_all, CollectiveAlgorithm::ring, S, node, inst).total() ==
        Approx(7.0 / 8 * S / intra + 6.6e-6 + 0.6e-6 + 0.2e-6 + launch));
  // 16 over two nodes: 7/16 over NVSwitch and 8/16 through the GPU's NIC share at once.
  const GroupSpan two{16, 2, 8};
  const double net = inst.node_net_bw() / 8 * inst.ring.net_efficiency;
  // Across nodes the pairs' Simple rendezvous: base 8.4 us, two network steps of 14 + 67 us.
  CHECK(collective_cost(CollectiveKind::all_to_all, CollectiveAlgorithm::ring, S, two, inst).total() ==
        Approx(std::max(7.0 / 16 * S / intra, 8.0 / 16 * S / net) + 8.4e-6 + 2 * (14e-6 + 67e-6) + launch));
}

TEST_CASE("the programs exchange tokens per layer with experts and reduce experts apart", "[program][moe]") {
  const Job j = small_moe_job(4);
  ProgramOptions po;
  po.granularity = Granularity::layer;
  const RankProgram p = build_program(j, 0, po);
  // Layers 0 and 2 have experts: 2 all-to-alls forward and 2 backward each.
  CHECK(count(p, OpKind::all_to_all, CommGroup::expert) == 8);
  CHECK(count(p, OpKind::all_to_all, CommGroup::tensor) == 0);
  // Each of them reduces its one expert over the 2 ranks holding the same expert.
  CHECK(count(p, OpKind::all_reduce, CommGroup::expert_data) == 2);
  for (const Instruction& in : p.ops)
    if (in.group == CommGroup::expert_data) CHECK(in.bytes == (2.0 * 256 * 512 + 512 + 256) * 2);
  // Megatron's groups: 4 consecutive data-parallel ranks; the same expert rank in each.
  CHECK(comm_group_members(j, 0, CommGroup::expert) == std::vector<int>{0, 1, 2, 3});
  CHECK(comm_group_members(j, 5, CommGroup::expert) == std::vector<int>{4, 5, 6, 7});
  CHECK(comm_group_members(j, 1, CommGroup::expert_data) == std::vector<int>{1, 5});
  // The chunk-granularity program exchanges as much.
  po.granularity = Granularity::chunk;
  CHECK(count(build_program(j, 0, po), OpKind::all_to_all, CommGroup::expert) == 8);
}

TEST_CASE("expert parallelism's job rules name the key", "[job][moe]") {
  Job j = small_moe_job(3);
  CHECK(check_job(j).key == "parallel.expert_parallel_degree");  // 3 divides neither 8 nor 4
  j.parallel.expert_parallel_degree = 8;
  CHECK(check_job(j).key == "parallel.expert_parallel_degree");  // 8 does not divide 4 experts
  j = partune::testing::p4d_job("gpt2-small", 1, 8);
  j.parallel.expert_parallel_degree = 2;
  CHECK(check_job(j).reason.find("no experts") != std::string::npos);
  j = small_moe_job(2);
  j.parallel.sharded_data_parallel_degree = 2;
  CHECK(check_job(j).key == "parallel.sharded_data_parallel_degree");
}
