// Context parallelism (issue 30): the job keys and their rules, the groups (Megatron's
// order tp-cp-dp: a context group is consecutive members of the data axis, gradients are
// reduced over data x context), and the layer plan on a context rank (s / cp tokens, its
// share of the attention pairs, the exchanges by cp_comm_type) against closed forms
// written out here for LLaMA-3 70B at 128k tokens.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/activation_memory.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;
using partune::testing::scenario_error_key;

namespace {

// LLaMA-3 70B at 128k tokens on `nodes` p5 nodes, tensor 8 with sequence parallelism and
// FlashAttention, one sequence a micro-batch.
std::string long_job(int nodes, int cp, const std::string& comm = "p2p", const std::string& extra = "") {
  return "kind: job\nname: t\nmodel: {base: llama-3-70b, seq_len: 131072}\n"
         "cluster: {instance_type: p5.48xlarge, nodes: " +
         std::to_string(nodes) +
         "}\ntraining: {global_batch: 16, precision: bf16}\n"
         "parallel: {tensor_parallel_degree: 8, sequence_parallel: true, flash_attention: true, "
         "microbatches: " +
         std::to_string(16 / (nodes * 8 / 8 / cp)) + ", context_parallel_degree: " + std::to_string(cp) +
         ", cp_comm_type: " + comm + extra + "}\n";
}

Job load(int nodes, int cp, const std::string& comm = "p2p", const std::string& extra = "") {
  return parse_job(long_job(nodes, cp, comm, extra), "long.yaml");
}

int count(const std::vector<TensorCollective>& cs, CollectiveKind kind, PlanGroup group) {
  int n = 0;
  for (const TensorCollective& c : cs)
    if (c.kind == kind && c.group == group) n += c.count;
  return n;
}

const TensorCollective& only(const std::vector<TensorCollective>& cs, CollectiveKind kind, PlanGroup group) {
  const TensorCollective* found = nullptr;
  for (const TensorCollective& c : cs)
    if (c.kind == kind && c.group == group) {
      REQUIRE(found == nullptr);
      found = &c;
    }
  REQUIRE(found != nullptr);
  return *found;
}

}  // namespace

TEST_CASE("context parallelism: the degrees split the data axis, the batch splits over data alone",
          "[context][job]") {
  // 4 p5 nodes = 32 GPUs, tensor 8: a data axis of 4 = context 2 x data 2.
  const Job j = load(4, 2);
  CHECK(j.data_context_degree() == 4);
  CHECK(j.data_parallel_degree() == 2);
  CHECK(j.microbatch_size() == 1);  // 16 sequences / (data 2 x 8 micro-batches)
  // ZeRO-1 shards the optimizer state over data x context (Megatron's data-parallel group
  // with context): a quarter each.
  Job zero1 = j;
  zero1.parallel.shard_optimizer_state = true;
  CHECK(zero1.optimizer_shard_fraction() == 0.25);
}

TEST_CASE("context groups are consecutive ranks of the data axis, gradients go over data x context",
          "[context][groups]") {
  const Job j = load(4, 2);
  // Tensor ranks fastest (0-7 on node 0), then context, then data: written out by hand.
  CHECK(comm_group_members(j, 0, CommGroup::tensor) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(comm_group_members(j, 0, CommGroup::context) == std::vector<int>{0, 8});
  CHECK(comm_group_members(j, 19, CommGroup::context) == std::vector<int>{19, 27});
  CHECK(comm_group_members(j, 3, CommGroup::data) == std::vector<int>{3, 11, 19, 27});
  // Without context parallelism a rank is its own context group.
  const Job plain = load(4, 1);
  CHECK(comm_group_members(plain, 0, CommGroup::context) == std::vector<int>{0});
}

TEST_CASE("context parallelism's rules name the key", "[context][job][bad-input]") {
  // 3 does not divide the data axis of 4.
  CHECK(scenario_error_key(long_job(4, 3), "f.yaml") == "parallel.context_parallel_degree");
  // 131072 tokens do not split into 2 x 3 chunks either; 100 tokens not into 2 x 8.
  const std::string short_seq =
      "kind: job\nname: t\nmodel: {base: llama-3-70b, seq_len: 100}\n"
      "cluster: {instance_type: p5.48xlarge, nodes: 8}\ntraining: {global_batch: 8, precision: bf16}\n"
      "parallel: {tensor_parallel_degree: 8, context_parallel_degree: 8}\n";
  CHECK(scenario_error_key(short_seq, "f.yaml") == "parallel.context_parallel_degree");
  // a2a splits a tensor rank's 8 query and 1 key/value heads over the context ranks.
  CHECK(scenario_error_key(long_job(4, 2, "a2a"), "f.yaml") == "parallel.cp_comm_type");
  // a2a+p2p wants its a2a sub-group's size; the size is a2a+p2p's alone.
  CHECK(scenario_error_key(long_job(4, 2, "a2a+p2p"), "f.yaml") == "parallel.context_a2a_degree");
  CHECK(scenario_error_key(long_job(4, 2, "p2p", ", context_a2a_degree: 2"), "f.yaml") ==
        "parallel.context_a2a_degree");
  CHECK(scenario_error_key(long_job(4, 2, "ring"), "f.yaml") == "parallel.cp_comm_type");
  CHECK(scenario_error_key(long_job(4, 2, "allgather"), "f.yaml") == "(no error)");
}

TEST_CASE("a context rank's layer: s / cp tokens, its share of the pairs, activations / cp", "[context][plan]") {
  const Job one = load(4, 1), four = load(4, 4);
  const LayerPlan p1 = transformer_layer_plan(one.model, plan_config(one));
  const LayerPlan p4 = transformer_layer_plan(four.model, plan_config(four));
  // Every GEMM and the core do a quarter of the work.
  CHECK(p4.gemm_flops() == Approx(p1.gemm_flops() / 4).epsilon(1e-12));
  CHECK(p4.attention_flops() == Approx(p1.attention_flops() / 4).epsilon(1e-12));
  // The core on a rank of tensor 8 and context 4: 8 heads of 128, its 32768 queries
  // against all 131072 keys, Q K^T and the context: 2 x 2 x 32768 x 131072 x 8 x 128.
  CHECK(p4.op(PlanOpRole::attention).flops == Approx(4.0 * 32768 * 131072 * 8 * 128).epsilon(1e-12));
  // Activations per layer (Korthikanti with sequence parallelism and FlashAttention, for
  // LLaMA: RMSNorm, SwiGLU, grouped-query, no dropout), bf16, b = 1, s = 131072 / cp
  // tokens on the rank, t = 8: (s / t) (12 h + 4 kv + 6 f) bytes: the two norms' and two
  // column GEMMs' inputs 8 h, Q K V 2 (h + 2 kv), the projection's input 2 h, SwiGLU's 6 f.
  const double h = 8192, kv = 1024, f = 28672, t = 8;
  for (int cp : {1, 2, 4, 8}) {
    const Job j = load(8, cp);
    const double s = 131072.0 / cp;
    INFO("cp " << cp);
    CHECK(full_layer_bytes(j, 1) == Approx(s / t * (12 * h + 4 * kv + 6 * f)).epsilon(1e-12));
  }
}

TEST_CASE("p2p passes keys and values around the ring beside the core, allgather blocks, a2a swaps splits",
          "[context][plan][collectives]") {
  // Tensor 8, context 4: 32768 tokens a rank; a tensor rank's keys and values are
  // 2 x 8 heads x 128 / 8 = 256 elements a token, 2 bytes each.
  const double T = 32768, kv_bytes = T * 256 * 2;
  const Job p2p = load(8, 4);
  const LayerPlan lp = transformer_layer_plan(p2p.model, plan_config(p2p));
  const auto fwd = tensor_collectives(lp, PlanPass::forward), bwd = tensor_collectives(lp, PlanPass::backward);
  const TensorCollective& ag = only(fwd, CollectiveKind::all_gather, PlanGroup::context);
  CHECK(ag.bytes == 4 * kv_bytes);  // S: the context group's keys and values
  CHECK(ag.overlapped);
  CHECK(count(fwd, CollectiveKind::reduce_scatter, PlanGroup::context) == 0);
  CHECK(only(bwd, CollectiveKind::all_gather, PlanGroup::context).overlapped);
  CHECK(only(bwd, CollectiveKind::reduce_scatter, PlanGroup::context).bytes == 4 * kv_bytes);

  const Job gathered = load(8, 4, "allgather");
  const LayerPlan lg = transformer_layer_plan(gathered.model, plan_config(gathered));
  CHECK_FALSE(only(tensor_collectives(lg, PlanPass::forward), CollectiveKind::all_gather, PlanGroup::context).overlapped);

  // a2a (LLaMA-2 70B has 64 key/value heads, as many as queries): tensor 8, context 2,
  // 65536 tokens a rank; Q, K and V go out (3 x 8 heads x 128 a token), the context
  // comes back (8 heads x 128), once forward and once backward each.
  const std::string a2a_job =
      "kind: job\nname: t\nmodel: {base: llama-2-70b, seq_len: 131072, kv_heads: 64, attention: mha}\n"
      "cluster: {instance_type: p5.48xlarge, nodes: 2}\ntraining: {global_batch: 1, precision: bf16}\n"
      "parallel: {tensor_parallel_degree: 8, flash_attention: true, context_parallel_degree: 2, cp_comm_type: a2a}\n";
  const Job a2a = parse_job(a2a_job, "a2a.yaml");
  const LayerPlan la = transformer_layer_plan(a2a.model, plan_config(a2a));
  for (PlanPass pass : {PlanPass::forward, PlanPass::backward}) {
    const auto cs = tensor_collectives(la, pass);
    CHECK(count(cs, CollectiveKind::all_to_all, PlanGroup::context) == 2);
  }
  CHECK(la.op(PlanOpRole::context_in).comm_bytes == 65536.0 * 3 * 1024 * 2);
  CHECK(la.op(PlanOpRole::context_out).comm_bytes == 65536.0 * 1024 * 2);
}

TEST_CASE("the programs run the context group's collectives around every layer's core", "[context][program]") {
  const Job j = load(4, 2);
  const RankProgram prog = build_program(j, 0);
  int gathers = 0, scatters = 0, awaited = 0;
  for (const Instruction& in : prog.ops) {
    if (in.group != CommGroup::context) continue;
    if (in.kind == OpKind::all_gather) gathers += in.count;
    if (in.kind == OpKind::reduce_scatter) scatters += in.count;
    awaited += in.async;  // beside the compute, then awaited
  }
  // 80 layers x 8 micro-batches: one gather forward, one gather and one reduce-scatter
  // backward; selective checkpointing is off, so no recompute repeats them.
  CHECK(gathers == 2 * 80 * 8);
  CHECK(scatters == 80 * 8);
  CHECK(awaited > 0);
}

TEST_CASE("context parallelism survives the scenario writer", "[context][writer]") {
  const Job j = load(4, 2, "allgather");
  const Job back = parse_job(job_yaml(j, "test"), "written.yaml");
  CHECK(back.parallel.context_parallel_degree == 2);
  CHECK(back.parallel.cp_comm_type == ContextComm::allgather);
}

namespace {

// LLaMA-3 8B at 32k tokens on 2 p5 nodes, tensor 4: a data axis of 4 = context 4, split
// as a2a 2 x p2p 2.
Job hierarchical() {
  return parse_job("kind: job\nname: t\nmodel: {base: llama-3-8b, seq_len: 32768}\n"
                   "cluster: {instance_type: p5.48xlarge, nodes: 2}\ntraining: {global_batch: 4, precision: bf16}\n"
                   "parallel: {tensor_parallel_degree: 4, flash_attention: true, microbatches: 4, "
                   "context_parallel_degree: 4, cp_comm_type: a2a+p2p, context_a2a_degree: 2}\n",
                   "h.yaml");
}

}  // namespace

TEST_CASE("a2a+p2p: a2a inside runs of 2 context ranks, p2p around the ring of their like members",
          "[context][groups][plan]") {
  const Job j = hierarchical();
  // The data axis of rank 0 is 0, 4, 8, 12 (tensor ranks fastest): written out by hand.
  CHECK(comm_group_members(j, 0, CommGroup::context_a2a) == std::vector<int>{0, 4});
  CHECK(comm_group_members(j, 0, CommGroup::context) == std::vector<int>{0, 8});
  CHECK(comm_group_members(j, 4, CommGroup::context) == std::vector<int>{4, 12});
  CHECK(comm_group_members(j, 9, CommGroup::context_a2a) == std::vector<int>{9, 13});
  // 8192 tokens a rank; a tensor rank of 4 has 8 query heads and 2 key/value heads of
  // 128. The a2a sends Q, K and V (8 + 2 + 2 heads x 128 a token); the ring carries the
  // keys and values the rank holds after it: 4 heads / 2 of the sub-group's 2 x 8192
  // tokens, the same 2 x 2 x 128 elements a token of its own, for 2 sub-groups.
  const LayerPlan lp = transformer_layer_plan(j.model, plan_config(j));
  const double T = 8192;
  CHECK(lp.op(PlanOpRole::context_in).comm_bytes == T * (8 + 2 + 2) * 128 * 2);
  CHECK(lp.op(PlanOpRole::context_in).context_sub_group);
  CHECK(lp.op(PlanOpRole::context_ring).comm_bytes == 2 * T * 4 * 128 * 2);
  CHECK(lp.op(PlanOpRole::context_out).comm_bytes == T * 8 * 128 * 2);
  const auto bwd = tensor_collectives(lp, PlanPass::backward);
  CHECK(count(bwd, CollectiveKind::all_to_all, PlanGroup::context_a2a) == 2);
  CHECK(count(bwd, CollectiveKind::all_gather, PlanGroup::context) == 1);
  CHECK(count(bwd, CollectiveKind::reduce_scatter, PlanGroup::context) == 1);
  CHECK(parse_job(job_yaml(j, "test"), "w.yaml").parallel.context_a2a_degree == 2);
}
