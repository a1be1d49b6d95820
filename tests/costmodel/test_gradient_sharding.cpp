// Gradient sharding (parallel.shard_gradients, ZeRO-2) in the per-rank programs: every
// micro-batch's backward reduce-scatters its gradient buckets into the rank's slice
// (DeepSpeed stage 2 reduces each micro-step's gradients as backward produces them), where
// ZeRO-1 accumulates whole gradients and reduce-scatters once, after the step's last
// micro-batch. The bytes a step sends per micro-batch are the stage's whole gradient,
// counted by hand for GPT-2 small (test_program.cpp's counts).
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <tuple>

#include "job_fixtures.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/program_text.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {

// GPT-2 small by hand (test_program.cpp): a layer 12h^2 + 13h = 7,087,872 parameters; the
// embedding V h + s h = 39,383,808; the final norm 2h = 1,536; the last stage's tied copy
// of the token table V h = 38,597,376.
constexpr double kLayer = 7087872.0, kEmbedding = 39383808.0, kNorm = 1536.0, kTiedCopy = 38597376.0;

bool is_bucket(const Instruction& in) {
  return in.group == CommGroup::data && (in.kind == OpKind::all_reduce || in.kind == OpKind::reduce_scatter);
}

// pp 2 x dp 4 on one node, 4 micro-batches a pass, two accumulation passes.
Job zero_job(bool shard_gradients) {
  Job j = p4d_job("gpt2-small", 1, 32);
  j.parallel.pipeline_parallel_degree = 2;
  j.parallel.microbatches = 4;
  j.parallel.pipeline = PipelineSchedule::one_f_one_b;
  j.training.gradient_accumulation = 2;
  j.parallel.shard_optimizer_state = true;
  j.parallel.shard_gradients = shard_gradients;
  require_valid(j);
  return j;
}

}  // namespace

TEST_CASE("ZeRO-2: every micro-batch's backward reduce-scatters each layer's bucket", "[program][zero2]") {
  const Job job = zero_job(true);
  for (const RankProgram& prog : build_programs(job, {Granularity::chunk})) {
    const int stage = prog.coords.pipeline;
    INFO("rank " << prog.rank << " stage " << stage);
    std::map<int, double> bytes_of_microbatch;
    std::set<std::tuple<int, int>> layers;  // (micro-batch, layer)
    int last_backward = -1, last_backward_layer = -1;
    for (const Instruction& in : prog.ops) {
      if (in.kind == OpKind::backward) last_backward = in.microbatch, last_backward_layer = in.layer;
      if (!is_bucket(in)) continue;
      CHECK(in.kind == OpKind::reduce_scatter);
      CHECK(in.async);
      CHECK(in.layer == last_backward_layer);  // right after that micro-batch's layer backward
      CHECK(layers.insert({last_backward, in.layer}).second);
      bytes_of_microbatch[last_backward] += in.bytes;
    }
    // 8 micro-batches (4 a pass, 2 passes), 6 layers a stage, one bucket each.
    CHECK(bytes_of_microbatch.size() == 8);
    CHECK(layers.size() == 8 * 6);
    // Each carries the stage's whole gradient in fp16: its 6 layers, the embedding on
    // stage 0, the final norm and the tied copy on stage 1.
    const double params = 6 * kLayer + (stage == 0 ? kEmbedding : kNorm + kTiedCopy);
    for (const auto& [mb, bytes] : bytes_of_microbatch) CHECK(bytes == Approx(2 * params).epsilon(1e-12));
  }
}

TEST_CASE("ZeRO-2 and ZeRO-1 differ only in when buckets travel", "[program][zero2]") {
  const std::vector<RankProgram> one = build_programs(zero_job(false)), two = build_programs(zero_job(true));
  REQUIRE(one.size() == two.size());
  for (std::size_t r = 0; r < one.size(); ++r) {
    int buckets_one = 0, buckets_two = 0, compute_one = 0, compute_two = 0;
    for (const Instruction& in : one[r].ops) buckets_one += is_bucket(in), compute_one += is_compute(in.kind);
    for (const Instruction& in : two[r].ops) buckets_two += is_bucket(in), compute_two += is_compute(in.kind);
    CHECK(buckets_one == 6);      // once a step, after the last micro-batch
    CHECK(buckets_two == 8 * 6);  // every micro-batch
    // The same work; ZeRO-2 runs every backward layer by layer (to issue its buckets).
    CHECK(compute_two >= compute_one);
  }
  // One micro-batch a step: the same program (the one backward syncs either way).
  Job a = p4d_job("gpt2-small", 1, 8), b = a;
  a.parallel.shard_optimizer_state = b.parallel.shard_optimizer_state = true;
  b.parallel.shard_gradients = true;
  require_valid(a);
  require_valid(b);
  CHECK(program_text(build_program(a, 3)) == program_text(build_program(b, 3)));
}

TEST_CASE("shard_gradients is refused without the optimizer state's sharding or with sharded DP", "[zero2]") {
  auto message = [](const std::string& parallel) {
    try {
      parse_job("model: gpt2-small\ncluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
                "training: {global_batch: 8}\nparallel: " + parallel + "\n",
                "job.yaml");
    } catch (const ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_THAT(message("{shard_gradients: true}"),
             Catch::Contains("parallel.shard_gradients") && Catch::Contains("turn on shard_optimizer_state"));
  CHECK_THAT(message("{shard_gradients: true, shard_optimizer_state: true, sharded_data_parallel_degree: 8}"),
             Catch::Contains("parallel.shard_gradients") && Catch::Contains("already keeps"));
  CHECK(message("{shard_gradients: true, shard_optimizer_state: true}") == "accepted");
}
