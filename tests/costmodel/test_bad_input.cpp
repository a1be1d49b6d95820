// Bad input the loader must refuse with one ScenarioError naming the file, the key and
// the reason (issue 12): alias cycles and fan-out, preset names that are not names, a
// directory as a job file, numbers out of range, and a --set that is not YAML.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "scenario_errors.hpp"

using namespace partune;
using partune::testing::expect_scenario_error;

namespace {

const std::string kOrigin = "bad-input.yaml";

// A valid job with `cluster_extra` and `model` spliced in.
std::string job(const std::string& cluster_extra, const std::string& model = "gpt2-small",
                const std::string& training_extra = "") {
  return "kind: job\nmodel: " + model + "\ncluster:\n  instance_type: p4d.24xlarge\n" + cluster_extra +
         "training:\n  global_batch: 64\n" + training_extra;
}

}  // namespace

TEST_CASE("alias cycles are refused, naming the key", "[bad-input]") {
  SECTION("a mapping that merges itself") {
    const ScenarioError e = expect_scenario_error([] { parse_job("kind: job\nmodel: &a\n  <<: *a\n", kOrigin); });
    CHECK(e.file() == kOrigin);
    CHECK(e.key() == "model");
    CHECK_THAT(e.reason(), Catch::Contains("cycle"));
  }
  SECTION("a list that contains itself") {
    const ScenarioError e = expect_scenario_error([] { parse_job("kind: job\nmodel: &a [*a]\n", kOrigin); });
    CHECK(e.key() == "model[0]");
    CHECK_THAT(e.reason(), Catch::Contains("cycle"));
  }
  SECTION("in a --set value") {
    const ScenarioError e = expect_scenario_error([] { parse_job(job("  nodes: 1\n"), kOrigin, {"model=&a [*a]"}); });
    CHECK(e.key() == "--set model=&a [*a]");
    CHECK_THAT(e.reason(), Catch::Contains("cycle"));
  }
}

TEST_CASE("aliases that fan out past the budget are refused", "[bad-input]") {
  // Six levels of ten aliases each: 10^6 values from a 600-byte text.
  std::string text = "kind: job\na0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n";
  for (int i = 1; i < 6; ++i) {
    const std::string prev = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) text += (k ? ", " : "") + prev;
    text += "]\n";
  }
  REQUIRE(text.size() < 1024);
  const ScenarioError e = expect_scenario_error([&] { parse_job(text, kOrigin); });
  CHECK(e.file() == kOrigin);
  CHECK_THAT(e.key(), Catch::StartsWith("a"));
  CHECK_THAT(e.reason(), Catch::Contains("more than 20000 values"));
}

TEST_CASE("a directory given as the job file is reported as one", "[bad-input]") {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const ScenarioError e = expect_scenario_error([&] { load_job(dir); });
  CHECK(e.file() == dir);
  CHECK_THAT(e.reason(), Catch::Contains("is a directory"));
}

TEST_CASE("preset names are checked as names before any file-system call", "[bad-input]") {
  const std::pair<std::string, std::string> cases[] = {
      {std::string(300, 'a'), "longer than 200"},
      {"\"gpt2\\x01small\"", "control characters"},
      {"\"gpt2 small\"", "not a preset name"},
      {".hidden", "not a preset name"},
      {std::string(5000, 'a') + "/x.yaml", "longer than 4096"},
  };
  for (const auto& [name, reason] : cases) {
    INFO(name.substr(0, 40));
    const ScenarioError e = expect_scenario_error([&] { parse_job(job("  nodes: 1\n", name), kOrigin); });
    CHECK(e.file() == kOrigin);
    CHECK(e.key() == "model");
    CHECK_THAT(e.reason(), Catch::Contains(reason));
  }
  SECTION("from the command line") {
    const ScenarioError e = expect_scenario_error([] { load_instance_type(std::string(100000, 'x')); });
    CHECK(e.key() == "instance_type");
    const ScenarioError m = expect_scenario_error([] { load_model(std::string("gpt2\n")); });
    CHECK(m.key() == "model");
  }
  SECTION("a long path that looks like one is an error, not a file-system exception") {
    const ScenarioError e =
        expect_scenario_error([] { parse_job(job("  nodes: 1\n", std::string(3000, 'a') + "/" + std::string(300, 'b') + ".yaml"), kOrigin); });
    CHECK(e.key() == "model");
  }
}

TEST_CASE("numbers out of range are refused with the range in the message", "[bad-input]") {
  struct Case {
    std::string text, key, range;
  };
  const Case cases[] = {
      // 536870913 x 8 GPUs overflows an int (it gave data-parallel degree -9217728).
      {job("  nodes: 536870913\n"), "cluster.nodes", "[1, 65536]"},
      {job("  nodes: 1000000000\n"), "cluster.nodes", "[1, 65536]"},
      {job("  nodes: 1\n  oversubscription: 1e308\n"), "cluster.oversubscription", "[1, 1000]"},
      {job("  nodes: 1\n  oversubscription: .nan\n"), "cluster.oversubscription", "expected a number"},
      {job("  nodes: 1\n", "{base: gpt2-small, layers: 2000000000}"), "model.layers", "[1, 32767]"},
      {job("  nodes: 1\n", "{base: gpt2-small, seq_len: 1e30}"), "model.seq_len", "expected an integer"},
      {job("  nodes: 1\n", "gpt2-small", "  gradient_accumulation: 5000\n"), "training.gradient_accumulation",
       "[1, 4096]"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const ScenarioError e = expect_scenario_error([&] { parse_job(c.text, kOrigin); });
    CHECK(e.file() == kOrigin);
    CHECK(e.key() == c.key);
    CHECK_THAT(e.reason(), Catch::Contains(c.range));
  }
  SECTION("instance-type quantities cannot reach infinity") {
    const std::string text =
        "kind: job\nmodel: gpt2-small\ncluster:\n  nodes: 1\n"
        "  instance_type: {base: p4d.24xlarge, gpu: {peak_tflops: {fp16: 1e308}}}\ntraining: {global_batch: 64}\n";
    const ScenarioError e = expect_scenario_error([&] { parse_job(text, kOrigin); });
    CHECK(e.key() == "cluster.instance_type.gpu.peak_tflops.fp16");
    CHECK_THAT(e.reason(), Catch::Contains("(0, 1e+09]"));
  }
}

TEST_CASE("the largest cluster the ranges allow counts its GPUs without overflow", "[bad-input]") {
  // 65536 nodes x 1024 GPUs = 2^26 = 67108864 ranks, all data parallel.
  const std::string text =
      "kind: job\nmodel: gpt2-small\ncluster:\n  nodes: 65536\n"
      "  instance_type: {base: p4d.24xlarge, gpus_per_node: 1024}\ntraining: {global_batch: 67108864}\n";
  const Job j = parse_job(text, kOrigin);
  CHECK(j.world_size() == 67108864);
  CHECK(j.data_parallel_degree() == 67108864);
  CHECK(j.microbatch_size() == 1);
}

TEST_CASE("a --set value that is not YAML names the --set", "[bad-input]") {
  const ScenarioError e = expect_scenario_error([] { parse_job(job("  nodes: 1\n"), kOrigin, {"microbatches=[1"}); });
  CHECK(e.file() == kOrigin);
  CHECK(e.key() == "--set microbatches=[1");
  CHECK_THAT(e.reason(), Catch::Contains("the value is not valid YAML"));
}

TEST_CASE("a model's kind is checked beside from_hf as without it", "[bad-input][hf]") {
  const std::string config = std::string(PARTUNE_SOURCE_DIR) + "/tests/costmodel/data/hf/llama-2-7b.json";
  const ScenarioError e = expect_scenario_error([&] {
    parse_job(job("  nodes: 1\n", "\n  kind: cluster\n  from_hf: " + config), kOrigin);
  });
  CHECK(e.key() == "model.kind");
  CHECK(std::string(e.what()).find("expected 'model'") != std::string::npos);
  // kind: model is what a model file says, and stands beside from_hf.
  CHECK(parse_job(job("  nodes: 1\n", "\n  kind: model\n  from_hf: " + config), kOrigin).model.layers == 32);
}

TEST_CASE("a collective's ctas set its compute_overlap as the SMs it leaves, both at once are refused",
          "[bad-input][collectives]") {
  const auto with = [](const std::string& ring) {
    return "kind: job\nmodel: gpt2-small\ncluster:\n  nodes: 1\n"
           "  instance_type: {base: p4d.24xlarge, gpu: {gemm: {sm_count: 132}}, collectives: {ring: " +
           ring + "}}\ntraining: {global_batch: 64}\n";
  };
  // 24 blocks of 132 SMs: the kernels beside the collective keep 108 / 132 of the GPU.
  const Job ok = parse_job(with("{ctas: 24}"), kOrigin);
  CHECK(ok.cluster.instance.ring.compute_overlap == Approx(108.0 / 132.0).epsilon(1e-12));
  // H100's 24-block NCCL kernels (p5.48xlarge's ring and tree).
  const Job p5 = parse_job("kind: job\nmodel: gpt2-small\ncluster: {instance_type: p5.48xlarge, nodes: 1}\n"
                           "training: {global_batch: 64}\n",
                           kOrigin);
  CHECK(p5.cluster.instance.ring.compute_overlap == Approx(1.0 - 24.0 / 132.0).epsilon(1e-12));
  CHECK(p5.cluster.instance.tree.compute_overlap == Approx(1.0 - 24.0 / 132.0).epsilon(1e-12));

  const ScenarioError both = expect_scenario_error([&] { parse_job(with("{ctas: 24, compute_overlap: 0.5}"), kOrigin); });
  CHECK(both.key() == "cluster.instance_type.collectives.ring.ctas");
  CHECK_THAT(both.reason(), Catch::Contains("not both"));
  const ScenarioError many = expect_scenario_error([&] { parse_job(with("{ctas: 200}"), kOrigin); });
  CHECK(many.key() == "cluster.instance_type.collectives.ring.ctas");
  CHECK_THAT(many.reason(), Catch::Contains("132"));
}
