// The corpus report (issue 49, item 3): its summary arithmetic against hand-computed
// figures, how a row is classified, and what every corpus row must carry.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "partune/costmodel/corpus.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;

namespace {

RowResult row(const std::string& table, double error_pct, const std::string& gpu, const std::string& kind,
              bool fits = true) {
  RowResult r;
  r.table = table;
  r.row = table + std::to_string(error_pct);
  r.published = 100;
  r.predicted = 100 + error_pct;
  r.error_pct = error_pct;
  r.gpu = gpu;
  r.parallel_kind = kind;
  r.fits = fits;
  return r;
}

Job job(const std::string& instance, int nodes, const std::string& model, const std::string& parallel) {
  return parse_job("model: " + model + "\ncluster: {instance_type: " + instance + ", nodes: " +
                       std::to_string(nodes) + "}\ntraining: {global_batch: 1024}\nparallel: " + parallel + "\n",
                   "corpus-test.yaml");
}

}  // namespace

TEST_CASE("the corpus summary: MAPE, median, signed error and shares within bounds", "[corpus]") {
  ReproduceResult r;
  r.rows = {row("a", +5, "A100", "data"), row("a", -12, "A100", "tensor-pipeline"),
            row("b", +30, "H100", "moe", false), row("b", -2, "H100", "data"), row("c", +16, "B200", "data")};
  const CorpusSummary c = summarize_corpus(r);
  CHECK(c.all.rows == 5);
  CHECK(c.all.mape_pct == Approx((5 + 12 + 30 + 2 + 16) / 5.0));      // 13
  CHECK(c.all.median_abs_pct == Approx(12));                          // 2 5 [12] 16 30
  CHECK(c.all.mean_signed_pct == Approx((5 - 12 + 30 - 2 + 16) / 5.0));  // 7.4
  CHECK(c.all.within10 == Approx(2 / 5.0));                           // 5, 2
  CHECK(c.all.within15 == Approx(3 / 5.0));                           // and 12
  CHECK(c.all.within20 == Approx(4 / 5.0));                           // and 16
  CHECK(c.all.not_fit == 1);
  REQUIRE(c.by_source.size() == 3);
  CHECK(c.by_source[0].first == "a");
  CHECK(c.by_source[0].second.mape_pct == Approx(8.5));
  CHECK(c.by_source[0].second.median_abs_pct == Approx(8.5));  // even count: the mean of the middle two
  CHECK(c.by_source[1].second.mean_signed_pct == Approx(14));
  REQUIRE(c.by_gpu.size() == 3);
  CHECK(c.by_gpu[2].first == "B200");
  REQUIRE(c.by_kind.size() == 3);
  CHECK(c.by_kind[0].first == "data");
  CHECK(c.by_kind[0].second.rows == 3);
}

TEST_CASE("a corpus row's GPU generation and parallel kind come from its job", "[corpus]") {
  CHECK(gpu_generation(job("p4d.24xlarge", 1, "gpt2-small", "{}")) == "A100");
  CHECK(gpu_generation(job("p5.48xlarge", 1, "gpt2-small", "{}")) == "H100");
  CHECK(gpu_generation(job("p5e.48xlarge", 1, "gpt2-small", "{}")) == "H200");
  CHECK(gpu_generation(job("p6e-gb200.36xlarge", 2, "gpt2-small", "{}")) == "GB200");
  CHECK(parallel_kind(job("p5.48xlarge", 1, "gpt2-small", "{}")) == ParallelKind::data);
  CHECK(parallel_kind(job("p5.48xlarge", 1, "gpt2-small", "{shard_optimizer_state: true}")) == ParallelKind::data);
  CHECK(parallel_kind(job("p5.48xlarge", 1, "gpt2-small", "{tensor_parallel_degree: 2}")) ==
        ParallelKind::tensor_pipeline);
  CHECK(parallel_kind(job("p5.48xlarge", 1, "gpt2-small", "{sharded_data_parallel_degree: 8}")) ==
        ParallelKind::sharded_data);
  CHECK(parallel_kind(job("p5.48xlarge", 2, "llama-3-8b", "{tensor_parallel_degree: 2, context_parallel_degree: 2}")) ==
        ParallelKind::context);
  CHECK(parallel_kind(job("p5.48xlarge", 1, "mixtral-8x7b", "{tensor_parallel_degree: 2, expert_parallel_degree: 4}")) ==
        ParallelKind::moe);
}

namespace {

std::vector<Table> corpus() { return load_tables({std::string(PARTUNE_SOURCE_DIR) + "/scenarios/corpus"}); }

}  // namespace

TEST_CASE("the corpus: 100+ rows from 10+ sources, each row citing its figure", "[corpus]") {
  const std::vector<Table> tables = corpus();
  std::size_t rows = 0;
  std::set<std::string> gpus;
  for (const Table& t : tables) {
    INFO(t.file);
    CHECK(!t.source.empty());
    for (const TableRow& r : t.rows) {
      INFO(r.name);
      ++rows;
      CHECK(!r.source.empty());  // where the figure is
      CHECK(!r.note.empty());    // the figure as published, and the arithmetic to `published`
      // Every row runs its instance type's own profile: no stack picked for a row.
      CHECK(r.job.cluster.instance.collective_stack.empty());
      CHECK(r.metric != Metric::speedup);
      gpus.insert(gpu_generation(r.job));
    }
  }
  CHECK(tables.size() >= 10);
  CHECK(rows >= 100);
  // The generations the issue names, where published.
  for (const char* g : {"A100", "H100", "H200", "B200", "GB200"}) CHECK(gpus.count(g) == 1);
}

TEST_CASE("the corpus's accuracy does not regress (estimator)", "[corpus]") {
  const ReproduceResult r = reproduce(corpus(), [](const Job& j) { return estimate(j); });
  const CorpusSummary c = summarize_corpus(r);
  INFO("corpus MAPE " << c.all.mape_pct << "%, signed " << c.all.mean_signed_pct << "%, within 15% "
                      << 100 * c.all.within15 << "%, predicted not to fit " << c.all.not_fit);
  // The goal: MAPE <= 10%, >= 70% of rows within 15%, mean signed error within 3%,
  // no run that ran predicted not to fit. Not reached: these bound the last measured values
  // (docs/corpus.md, 2026-11-29 after DualPipe's all-to-all overlap on DeepSeek-V3's row
  // (moe_a2a_overlap), -30.8% -> +2.4%: 26.2%, 44% within 15%, signed +21.1%; before it, after
  // DeepEP's exchange and bf16 moments there, -53.0% -> -30.8%: 26.4%, 44% within 15%, signed
  // +20.9% (the row's error, negative, shrank: the mean signed error rose); after FSDP2's copies on torchtitan's rows: 26.5%, 44%
  // within 15%, signed +20.8%; after issue 52's Megatron-Core token dispatcher: 26.7%, 44%
  // within 15%, signed +21.0%, 4 not fit; its rows of the MoE Parallel Folding paper went
  // from 26.4% to 9.8%, MegaScale-MoE's Megatron-LM rows from 18.6% to 106%. Before it,
  // after issue 51's NCCL tuner model and the stacks' per-matmul
  // checkpointing, torchtitan's op and MaxText's dots: 25.4%, 39% within 15%, signed +16.0%,
  // 5 rows predicted not to fit (16 before the checkpointing); 25.9%, 39%, +15.1% before the
  // tuner model, which moved
  // the signed error up by pricing collectives as NCCL's protocols run them: faster for the
  // mid-size tensor and expert collectives of rows already too fast), to catch a
  // regression; none is a row's own. The signed bound was 11.7 before the overlap, which
  // moved MLPerf v3.0 from +3% to +14% while bringing v3.1-v5.0 closer (docs/gpu-step.md).
  CHECK(c.all.mape_pct <= 26.25);
  CHECK(c.all.within15 >= 0.4375);
  CHECK(std::abs(c.all.mean_signed_pct) <= 21.15);
  CHECK(c.all.not_fit <= 4);
}
