// MoE parallel folding and Megatron-Core's token dispatcher (expert_grid.hpp, moe_plan.cpp):
// the expert grid's groups, the dispatched bytes and the experts' GEMM shapes, written
// out by hand for Qwen3-30B-A3B (hidden 2048, 128 experts of 768, top-8, SwiGLU) on two
// p5 nodes; and the job rules.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;

namespace {

// 16 GPUs, pipeline 1, placement DPT: rank = 2 x data + tensor, so the stage's flattened
// tensor-fastest index of a rank is the rank itself.
Job qwen30(const std::string& parallel) {
  return parse_job("kind: job\nname: t\nmodel: {base: qwen3-30b-a3b, seq_len: 4096}\n"
                   "cluster: {instance_type: p5.48xlarge, nodes: 2}\n"
                   "training: {global_batch: 8, precision: bf16}\n"
                   "parallel: {tensor_parallel_degree: 2, flash_attention: true, " +
                       parallel + "}\n",
                   "folding.yaml");
}

}  // namespace

TEST_CASE("the expert grid: expert-tensor ranks fastest, then expert ranks, then expert-data ranks", "[moe][folding]") {
  const Job ep4 = qwen30("sequence_parallel: true, expert_parallel_degree: 4, expert_tensor_parallel_degree: 1");
  CHECK(ep4.expert_data_parallel_degree() == 4);  // 16 / (1 x 4)
  CHECK(comm_group_members(ep4, 5, CommGroup::expert) == std::vector<int>{4, 5, 6, 7});
  CHECK(comm_group_members(ep4, 5, CommGroup::expert_data) == std::vector<int>{1, 5, 9, 13});
  CHECK(comm_group_members(ep4, 5, CommGroup::expert_tensor) == std::vector<int>{5});
  const Job etp2 = qwen30("sequence_parallel: true, expert_parallel_degree: 4, expert_tensor_parallel_degree: 2");
  CHECK(etp2.expert_data_parallel_degree() == 2);  // 16 / (2 x 4)
  CHECK(comm_group_members(etp2, 5, CommGroup::expert_tensor) == std::vector<int>{4, 5});
  CHECK(comm_group_members(etp2, 5, CommGroup::expert) == std::vector<int>{1, 3, 5, 7});
  CHECK(comm_group_members(etp2, 5, CommGroup::expert_data) == std::vector<int>{5, 13});
  // Megatron's default (the experts take the tensor degree): ep consecutive data-parallel
  // ranks of one tensor index, as before folding existed.
  const Job plain = qwen30("sequence_parallel: true, expert_parallel_degree: 4");
  CHECK(plain.expert_tensor_degree() == 2);
  CHECK(comm_group_members(plain, 5, CommGroup::expert) == std::vector<int>{1, 3, 5, 7});
  CHECK(comm_group_members(plain, 5, CommGroup::expert_data) == std::vector<int>{5, 13});
}

TEST_CASE("Megatron's dispatcher sends a rank's sequence shard, the experts' tensor group gathers it", "[moe][folding]") {
  // One sequence of 4096 tokens a micro-batch; tensor 2 with sequence parallelism: 2048
  // tokens a rank, 8 copies each: R = 16384 rows of 2048 bf16 elements = 64 MiB.
  const double R = 8.0 * 2048, row_bytes = 2048 * 2;
  const Job etp1 = qwen30("sequence_parallel: true, expert_parallel_degree: 4, expert_tensor_parallel_degree: 1");
  const LayerPlan p1 = moe_layer_plan(etp1.model, plan_config(etp1));
  CHECK(p1.op(PlanOpRole::dispatch).comm_bytes == R * row_bytes);
  CHECK(p1.op(PlanOpRole::combine).comm_bytes == R * row_bytes);
  CHECK(p1.find(PlanOpRole::expert_gather) == nullptr);  // one expert-tensor rank
  CHECK(p1.find(PlanOpRole::mlp_in) == nullptr);         // no shared experts: no tensor edge
  // 128 / 4 = 32 experts a rank, 16384 / 32 = 512 rows each, whole (2 x 768 columns).
  CHECK(p1.op(PlanOpRole::expert_fc1).batch == 32);
  CHECK(p1.op(PlanOpRole::expert_fc1).m == 512);
  CHECK(p1.op(PlanOpRole::expert_fc1).n == 1536);
  CHECK(p1.op(PlanOpRole::unpermute).stored == 0);  // the probabilities are applied in the experts
  const Job etp2 = qwen30("sequence_parallel: true, expert_parallel_degree: 4, expert_tensor_parallel_degree: 2");
  const LayerPlan p2 = moe_layer_plan(etp2.model, plan_config(etp2));
  CHECK(p2.op(PlanOpRole::expert_gather).comm_bytes == 2 * R * row_bytes);
  CHECK(p2.op(PlanOpRole::expert_fc1).m == 1024);  // two ranks' rows, half the width
  CHECK(p2.op(PlanOpRole::expert_fc1).n == 768);
  // Forward: all-to-all, all-gather (expert tensor), reduce-scatter (expert tensor), all-to-all.
  const auto fwd = tensor_collectives(p2, PlanPass::forward);
  std::vector<std::pair<CollectiveKind, PlanGroup>> kinds;
  for (const TensorCollective& c : fwd)
    if (c.group != PlanGroup::tensor) kinds.emplace_back(c.kind, c.group);
  CHECK(kinds == std::vector<std::pair<CollectiveKind, PlanGroup>>{
                     {CollectiveKind::all_to_all, PlanGroup::expert},
                     {CollectiveKind::all_gather, PlanGroup::expert_tensor},
                     {CollectiveKind::reduce_scatter, PlanGroup::expert_tensor},
                     {CollectiveKind::all_to_all, PlanGroup::expert}});
  // Without sequence parallelism every tensor rank routes the whole micro-batch (partune's
  // backend's dispatcher): twice the rows, and the unpermutation keeps the results.
  const Job whole = qwen30("expert_parallel_degree: 4");
  const LayerPlan pw = moe_layer_plan(whole.model, plan_config(whole));
  CHECK(pw.op(PlanOpRole::dispatch).comm_bytes == 2 * R * row_bytes);
  CHECK(pw.op(PlanOpRole::unpermute).stored == 2 * (2 * R) * 2048);
}

TEST_CASE("expert_tensor_parallel_degree: the job rules name the key", "[moe][folding]") {
  auto refusal = [](const std::string& parallel) {
    try {
      qwen30(parallel);
    } catch (const ScenarioError& e) {
      return e.key() + ": " + e.reason();
    }
    return std::string("accepted");
  };
  CHECK_THAT(refusal("expert_parallel_degree: 4, expert_tensor_parallel_degree: 1"),
             Catch::StartsWith("parallel.expert_tensor_parallel_degree") && Catch::Contains("sequence_parallel"));
  CHECK_THAT(refusal("sequence_parallel: true, expert_parallel_degree: 8, expert_tensor_parallel_degree: 4"),
             Catch::StartsWith("parallel.expert_tensor_parallel_degree") && Catch::Contains("does not divide"));
  CHECK_THAT(refusal("sequence_parallel: true, expert_tensor_parallel_degree: 1"),
             Catch::StartsWith("parallel.expert_tensor_parallel_degree") && Catch::Contains("expert_parallel_degree"));
  CHECK(refusal("sequence_parallel: true, expert_parallel_degree: 16, expert_tensor_parallel_degree: 1") == "accepted");
}

TEST_CASE("Megatron's allgather dispatcher gathers the expert block's tokens and reduce-scatters the results", "[moe][folding]") {
  // Expert tensor 1 x expert 4: blocks of 4 ranks, each gathering 4 x 2048 tokens of 2048
  // bf16 elements (32 MiB) and keeping the 16384 rows of its 32 experts (512 each).
  const Job j = qwen30("sequence_parallel: true, expert_parallel_degree: 4, expert_tensor_parallel_degree: 1, "
                       "moe_token_dispatcher: allgather");
  const LayerPlan p = moe_layer_plan(j.model, plan_config(j));
  CHECK(p.op(PlanOpRole::token_gather).comm_bytes == 4.0 * 2048 * 2048 * 2);
  CHECK(p.op(PlanOpRole::token_scatter).comm_bytes == 4.0 * 2048 * 2048 * 2);
  CHECK(p.find(PlanOpRole::dispatch) == nullptr);
  CHECK(p.op(PlanOpRole::expert_fc1).m == 512);
  std::vector<std::pair<CollectiveKind, PlanGroup>> fwd, bwd;
  for (const TensorCollective& c : tensor_collectives(p, PlanPass::forward))
    if (c.group != PlanGroup::tensor) fwd.emplace_back(c.kind, c.group);
  for (const TensorCollective& c : tensor_collectives(p, PlanPass::backward))
    if (c.group != PlanGroup::tensor) bwd.emplace_back(c.kind, c.group);
  using V = std::vector<std::pair<CollectiveKind, PlanGroup>>;
  CHECK(fwd == V{{CollectiveKind::all_gather, PlanGroup::expert_block}, {CollectiveKind::reduce_scatter, PlanGroup::expert_block}});
  CHECK(bwd == V{{CollectiveKind::all_gather, PlanGroup::expert_block}, {CollectiveKind::reduce_scatter, PlanGroup::expert_block}});
  CHECK(comm_group_members(j, 5, CommGroup::expert_block) == std::vector<int>{4, 5, 6, 7});
  try {
    qwen30("expert_parallel_degree: 4, moe_token_dispatcher: allgather");
    FAIL("allgather without sequence parallelism was accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "parallel.moe_token_dispatcher");
  }
}

TEST_CASE("the unpermutation keeps the weighted rows in an eager stack, nothing in a fused one", "[moe][folding]") {
  const std::string layout = "sequence_parallel: true, expert_parallel_degree: 4, expert_tensor_parallel_degree: 1";
  Job fused = qwen30(layout), eager = qwen30(layout);
  eager.training.kernel_fusion = KernelFusion::eager;
  CHECK(moe_layer_plan(fused.model, plan_config(fused)).op(PlanOpRole::unpermute).stored == 0);
  CHECK(moe_layer_plan(eager.model, plan_config(eager)).op(PlanOpRole::unpermute).stored == 2.0 * 16384 * 2048);
}

TEST_CASE("moe_a2a_overlap: the experts' exchanges run beside the layer's kernels", "[moe][overlap]") {
  const std::string layout = "sequence_parallel: true, expert_parallel_degree: 16, expert_tensor_parallel_degree: 1";
  const Job plain = qwen30(layout), overlapped = qwen30(layout + ", moe_a2a_overlap: true");
  for (const TensorCollective& c : tensor_collectives(moe_layer_plan(overlapped.model, plan_config(overlapped)),
                                                      PlanPass::forward))
    CHECK(c.overlapped == (c.group == PlanGroup::expert));
  for (const TensorCollective& c : tensor_collectives(moe_layer_plan(plain.model, plan_config(plain)), PlanPass::forward))
    CHECK_FALSE(c.overlapped);
  try {
    qwen30("sequence_parallel: true, moe_a2a_overlap: true");
    FAIL("moe_a2a_overlap without expert parallelism was accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "parallel.moe_a2a_overlap");
  }
}
