// Megatron-Core's layout of a mixture of experts on the backend (`partune run`, processes
// over Gloo) against the one-process run of the same job: sequence parallelism around the
// experts (each rank routes its own sequence shard, the experts' tensor group gathers the
// dispatched rows and reduce-scatters the results) and MoE parallel folding
// (expert_tensor_parallel_degree 1 under tensor parallelism 2: the expert groups drawn from
// the tensor x data ranks, each expert whole on its rank). Every step's loss, and every
// parameter each rank holds after the last step, within 1e-4 of the one-process run's.
//
// tiny-moe.yaml (capacity factor experts / k: no token is ever dropped, so any split of
// the tokens gives the one-process numbers): hidden 64, 4 heads over 2 key/value heads of
// 16, 4 SwiGLU experts of 64, vocabulary 256. Where each rank's part of a parameter lies
// is written out from Megatron's orders: rank = tensor + t x data (tensor fastest); on the
// expert grid the stage's flattened index f = rank splits as expert-tensor rank f % etp,
// expert rank (f / etp) % ep (etp-ep-edp), the expert rank holding experts
// [rank E/ep, (rank + 1) E/ep), the expert-tensor rank its slice of each expert's width.
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <torch/torch.h>

#include "partune/backend/checkpoint.hpp"
#include "partune/backend/checkpoint_directory.hpp"

#undef CHECK
#include <catch2/catch.hpp>

#include "multirank_runs.hpp"

using namespace partune::backend;

namespace {

const std::string kJob = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-moe.yaml";
constexpr int kSteps = 4;
const std::string kFourRanks = "--set 'instance_type={base: local-cpu, gpus_per_node: 4}' ";
const std::string kSgd = "--set optimizer=sgd";
const std::string kDeepSeek = "--set model.shared_expert_ffn_hidden=96 --set model.first_dense_layers=1";

using Params = std::map<std::string, torch::Tensor>;

Params saved_parameters(const std::string& dir, int rank) {
  const std::optional<int> step = latest_checkpoint_step(dir);
  REQUIRE(step.has_value());
  Params out;
  read_rank_shard(dir, *step, rank, [&](torch::serialize::InputArchive& archive) {
    for (const std::string& key : archive.keys())
      if (key.rfind("param.", 0) == 0) archive.read(key, out[key.substr(6)]);
  });
  return out;
}

struct ScratchDir {
  std::string path;
  explicit ScratchDir(const std::string& what)
      : path((std::filesystem::temp_directory_path() /
              ("partune-moe-folding-" + what + "-" + std::to_string(::getpid()))).string()) {
    std::filesystem::remove_all(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

torch::Tensor span(const torch::Tensor& w, int dim, std::int64_t begin, std::int64_t n) { return w.narrow(dim, begin, n); }

// SwiGLU's fc1 rows [gate | up] of width f each: the r-th of n slices of both, along `dim`.
torch::Tensor gated_rows(const torch::Tensor& w, int dim, std::int64_t f, int n, int r) {
  return torch::cat({span(w, dim, r * f / n, f / n), span(w, dim, f + r * f / n, f / n)}, dim);
}

// A rank's place: its tensor rank of t, and on the expert grid its expert rank of ep and
// expert-tensor rank of etp.
struct Place {
  int t = 1, tensor = 0, ep = 1, expert = 0, etp = 1, expert_tensor = 0;
};
Place place_of(int rank, int t, int ep, int etp) {
  return {t, rank % t, ep, (rank / etp) % ep, etp, rank % etp};
}

// The part of the whole model's `name` that a rank at `p` holds.
torch::Tensor expected_part(const std::string& name, const torch::Tensor& w, const Place& p) {
  const std::int64_t h = 64, d = 16, q_heads = 4 / p.t, kv_heads = 2 / p.t, kv = 2 * d, experts = 4, fe = 64;
  const std::int64_t local = experts / p.ep, first = p.expert * local;
  if (ends_with(name, "experts.fc1")) return gated_rows(span(w, 0, first, local), 1, fe, p.etp, p.expert_tensor);
  if (ends_with(name, "experts.fc2")) return span(span(w, 0, first, local), 2, p.expert_tensor * fe / p.etp, fe / p.etp);
  if (ends_with(name, "experts.shared_fc1")) return gated_rows(w, 0, w.size(0) / 2, p.t, p.tensor);
  if (ends_with(name, "experts.shared_fc2")) return span(w, 1, p.tensor * w.size(1) / p.t, w.size(1) / p.t);
  if (ends_with(name, "qkv.weight"))
    return torch::cat({span(w, 0, p.tensor * q_heads * d, q_heads * d), span(w, 0, h + p.tensor * kv_heads * d, kv_heads * d),
                       span(w, 0, h + kv + p.tensor * kv_heads * d, kv_heads * d)});
  if (ends_with(name, "mlp.fc1.weight")) return gated_rows(w, 0, w.size(0) / 2, p.t, p.tensor);
  if (ends_with(name, "proj.weight") || ends_with(name, "mlp.fc2.weight"))
    return span(w, 1, p.tensor * w.size(1) / p.t, w.size(1) / p.t);
  if (name == "wte" || name == "lm_head.weight") return span(w, 0, p.tensor * w.size(0) / p.t, w.size(0) / p.t);
  return w;  // the norms and the router, whole on every rank
}

struct Reference {
  std::vector<double> losses;
  Params parameters;
};

// The one-process run of the job with `common` (what the runs compared with it share: the
// model's changes, the optimizer), saved after its last step.
const Reference& reference(const std::string& common) {
  static std::map<std::string, Reference> cache;
  auto it = cache.find(common);
  if (it != cache.end()) return it->second;
  ScratchDir dir("reference");
  Reference r;
  r.losses = partune::test::run_job(kJob, partune::test::kOneProcess + common + " --save " + dir.path, kSteps).losses;
  r.parameters = saved_parameters(dir.path, 0);
  return cache.emplace(common, std::move(r)).first->second;
}

// The layout `args` over `world` ranks (tensor degree t, expert degree ep, expert-tensor
// degree etp, one pipeline stage) against the one-process run with `common`.
void check_layout(const std::string& args, const std::string& common, int world, int t, int ep, int etp) {
  const Reference& ref = reference(common);
  ScratchDir dir("layout");
  const partune::test::Run run = partune::test::run_job(kJob, args + " " + common + " --save " + dir.path, kSteps);
  INFO("partune run " << args << " " << common);
  CHECK(run.doc.at("world_size").get<int>() == world);
  REQUIRE(run.losses.size() == ref.losses.size());
  double loss_difference = 0, parameter_difference = 0;
  for (int i = 0; i < kSteps; ++i) {
    INFO("step " << i + 1 << ": " << run.losses[i] << " vs single process " << ref.losses[i]);
    CHECK(std::abs(run.losses[i] - ref.losses[i]) <= 1e-4 * std::abs(ref.losses[i]));
    loss_difference = std::max(loss_difference, std::abs(run.losses[i] - ref.losses[i]));
  }
  CHECK(run.losses.back() < run.losses.front() - 0.05);  // training moved
  std::map<std::string, int> holders;                      // every parameter is held somewhere
  for (int rank = 0; rank < world; ++rank)
    for (const auto& [name, value] : saved_parameters(dir.path, rank)) {
      INFO("rank " << rank << ": " << name);
      REQUIRE(ref.parameters.count(name) == 1);
      const torch::Tensor expected = expected_part(name, ref.parameters.at(name), place_of(rank, t, ep, etp));
      REQUIRE(value.sizes() == expected.sizes());
      const double difference = (value - expected).abs().max().item<double>();
      INFO("largest difference " << difference);
      CHECK(difference <= 1e-4);
      parameter_difference = std::max(parameter_difference, difference);
      ++holders[name];
    }
  CHECK(holders.size() == ref.parameters.size());
  std::printf("%s %s: largest loss difference %.3g, largest parameter difference %.3g\n", args.c_str(), common.c_str(),
              loss_difference, parameter_difference);
}

}  // namespace

// Adam's step hardly depends on its gradient's scale; SGD's (lr 0.1) is the gradient
// itself, so its parameters check the gradients too.
TEST_CASE("moe folding: expert tensor 1 under tensor 2 and data 2, expert groups of 4 (sequence parallel)",
          "[backend][multirank][moe]") {
  const std::string layout = kFourRanks + "--set tensor_parallel_degree=2 --set sequence_parallel=true "
                                          "--set expert_parallel_degree=4 --set expert_tensor_parallel_degree=1";
  check_layout(layout, "", 4, 2, 4, 1);
  check_layout(layout, kSgd, 4, 2, 4, 1);
}

TEST_CASE("moe folding: expert tensor 1 under tensor 2, expert groups of 2 (sequence parallel)",
          "[backend][multirank][moe]") {
  const std::string layout = "--set tensor_parallel_degree=2 --set sequence_parallel=true "
                             "--set expert_parallel_degree=2 --set expert_tensor_parallel_degree=1";
  check_layout(layout, "", 2, 2, 2, 1);
  check_layout(layout, kSgd, 2, 2, 2, 1);
}

TEST_CASE("moe folding: shared experts and a dense first layer, expert tensor 1 under tensor 2",
          "[backend][multirank][moe]") {
  check_layout("--set tensor_parallel_degree=2 --set sequence_parallel=true --set expert_parallel_degree=2 "
               "--set expert_tensor_parallel_degree=1",
               kDeepSeek, 2, 2, 2, 1);
}

TEST_CASE("moe sequence parallel: experts split over tensor 2, expert groups of 2 over data 2",
          "[backend][multirank][moe]") {
  check_layout(kFourRanks + "--set tensor_parallel_degree=2 --set sequence_parallel=true --set expert_parallel_degree=2",
               "", 4, 2, 2, 2);
}

// Folding the other way: no tensor parallelism, each expert split over an expert-tensor
// group of 2 data-parallel ranks (the expert grid over 4 data ranks: etp 2 x ep 2).
TEST_CASE("moe folding: expert tensor 2 over data 4 without tensor parallelism, expert groups of 2",
          "[backend][multirank][moe]") {
  const std::string layout = kFourRanks + "--set expert_parallel_degree=2 --set expert_tensor_parallel_degree=2";
  check_layout(layout, "", 4, 1, 2, 2);
  check_layout(layout, kSgd, 4, 1, 2, 2);
}

// Folding beside pipeline parallelism (1F1B, the expert grid drawn per stage) and with full
// recomputation (the recomputed forward exchanges again): the losses, with SGD.
TEST_CASE("moe folding: expert tensor 1 under tensor 2 with pipeline 2, and with full recomputation",
          "[backend][multirank][moe]") {
  const std::string folded = kFourRanks + "--set tensor_parallel_degree=2 --set sequence_parallel=true "
                                          "--set expert_tensor_parallel_degree=1 ";
  partune::test::check_equivalent(kJob, folded + "--set pipeline_parallel_degree=2 --set expert_parallel_degree=2", 4,
                                  kSgd, kSteps);
  partune::test::check_equivalent(kJob, folded + "--set expert_parallel_degree=4 --set activation_checkpointing=full", 4,
                                  kSgd, kSteps);
}
