#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "scenario_errors.hpp"

using namespace partune;
using partune::testing::expect_scenario_error;

namespace {

const std::string kOrigin = "inline-job.yaml";

// A valid job: GPT-2 small on one p4d node, tp 2 -> dp 4, b = 64 / 4 = 16.
std::string job_yaml(const std::string& parallel_extra = "", const std::string& training_extra = "",
                     const std::string& model = "gpt2-small", int nodes = 1, int global_batch = 64) {
  return "kind: job\n"
         "name: inline\n"
         "model: " + model + "\n"
         "cluster:\n"
         "  instance_type: p4d.24xlarge\n"
         "  nodes: " + std::to_string(nodes) + "\n"
         "training:\n"
         "  global_batch: " + std::to_string(global_batch) + "\n"
         "  precision: fp16\n" + training_extra +
         "parallel:\n"
         "  tensor_parallel_degree: 2\n" + parallel_extra;
}

}  // namespace

TEST_CASE("a valid inline job parses into the fields it gives", "[scenario]") {
  const Job j = parse_job(job_yaml("  microbatches: 2\n  placement_strategy: spread\n"), kOrigin);
  CHECK(j.name == "inline");
  CHECK(j.model.name == "gpt2-small");
  CHECK(j.model.layers == 12);
  CHECK(j.cluster.nodes == 1);
  CHECK(j.world_size() == 8);
  CHECK(j.training.global_batch == 64);
  CHECK(j.parallel.tensor_parallel_degree == 2);
  CHECK(j.parallel.pipeline_parallel_degree == 1);  // default
  CHECK(j.parallel.microbatches == 2);
  CHECK(j.parallel.placement_strategy == PlacementOrder::parse("TPD"));
  CHECK(j.data_parallel_degree() == 4);
  CHECK(j.microbatch_size() == 8);
}

TEST_CASE("presets carry the published hardware and model numbers", "[scenario]") {
  SECTION("p4d.24xlarge: 8 x A100-40GB, 312 TF fp16, 4 x 100 Gbps EFA") {
    const InstanceType it = load_instance_type("p4d.24xlarge");
    CHECK(it.gpus_per_node == 8);
    CHECK(it.gpu.peak_flops_fp16 == Approx(312e12));
    CHECK(it.gpu.peak_flops_bf16 == Approx(312e12));
    CHECK(it.gpu.hbm_bytes == Approx(40.0 * 1024 * 1024 * 1024));
    CHECK(it.gpu.hbm_bw == Approx(1555e9));
    CHECK(it.nics_per_node == 4);
    CHECK(it.nic.bw == Approx(100e9 / 8));  // Gbit/s -> bytes/s
    CHECK(it.intra_node.bw == Approx(300e9));
  }
  SECTION("gpt3-175b: 96 layers, d_model 12288, 96 heads (Brown et al. Table 2.1)") {
    const ModelSpec m = load_model("gpt3-175b");
    CHECK(m.layers == 96);
    CHECK(m.hidden == 12288);
    CHECK(m.heads == 96);
    CHECK(m.kv_heads == 96);
    CHECK(m.ffn_hidden == 4 * 12288);  // defaulted to 4h
    CHECK(m.seq_len == 2048);
  }
}

TEST_CASE("scenario errors name the file, the key and the reason", "[scenario]") {
  SECTION("unknown key") {
    const ScenarioError e = expect_scenario_error([] {
      parse_job(job_yaml("  tensor_paralel_degree: 4\n"), kOrigin);
    });
    CHECK(e.key() == "parallel.tensor_paralel_degree");
    CHECK(e.file() == kOrigin);
    CHECK_THAT(e.what(), Catch::Contains(kOrigin));
    CHECK_THAT(e.what(), Catch::Contains("tensor_paralel_degree"));
    CHECK_THAT(e.reason(), Catch::Contains("unknown key"));
  }
  SECTION("unknown top-level key") {
    const ScenarioError e = expect_scenario_error([] { parse_job(job_yaml() + "paralel:\n  microbatches: 2\n", kOrigin); });
    CHECK(e.key() == "paralel");
  }
  SECTION("wrong type") {
    const std::string text = "kind: job\nmodel: gpt2-small\ncluster:\n  instance_type: p4d.24xlarge\n"
                             "training:\n  global_batch: 64\nparallel:\n  tensor_parallel_degree: eight\n";
    const ScenarioError e = expect_scenario_error([&] { parse_job(text, kOrigin); });
    CHECK(e.key() == "parallel.tensor_parallel_degree");
    CHECK_THAT(e.what(), Catch::Contains("eight"));
    CHECK_THAT(e.what(), Catch::Contains(kOrigin));
  }
  SECTION("wrong type for a boolean") {
    const ScenarioError e = expect_scenario_error([] { parse_job(job_yaml("  flash_attention: maybe\n"), kOrigin); });
    CHECK(e.key() == "parallel.flash_attention");
  }
  SECTION("pipeline x tensor does not divide the GPU count") {
    const ScenarioError e = expect_scenario_error([] { parse_job(job_yaml("  pipeline_parallel_degree: 3\n"), kOrigin); });
    CHECK_THAT(e.key(), Catch::StartsWith("parallel"));
    CHECK_THAT(e.reason(), Catch::Contains("does not divide"));
    CHECK_THAT(e.reason(), Catch::Contains("8"));  // the GPU count
  }
  SECTION("tensor parallel larger than a node") {
    // 2 nodes = 16 GPUs; tp 16 divides the GPUs but spans two nodes.
    const std::string text = job_yaml("", "", "gpt2-small", 2) ;
    const ScenarioError e = expect_scenario_error([&] { parse_job(text, kOrigin, {"tensor_parallel_degree=16"}); });
    CHECK(e.key() == "parallel.tensor_parallel_degree");
    CHECK_THAT(e.reason(), Catch::Contains("node"));
  }
  SECTION("global batch not divisible by data-parallel degree x micro-batches") {
    // dp 4 x microbatches 3 = 12 does not divide 64.
    const ScenarioError e = expect_scenario_error([] { parse_job(job_yaml("  microbatches: 3\n"), kOrigin); });
    CHECK(e.key() == "training.global_batch");
    CHECK_THAT(e.reason(), Catch::Contains("64"));
  }
  SECTION("unknown model preset") {
    const ScenarioError e = expect_scenario_error([] { parse_job(job_yaml("", "", "gpt9-1t"), kOrigin); });
    CHECK(e.key() == "model");
    CHECK_THAT(e.what(), Catch::Contains("gpt9-1t"));
    CHECK_THAT(e.reason(), Catch::Contains("gpt2-small"));  // lists the known presets
  }
  SECTION("unknown instance type preset") {
    const std::string text = "model: gpt2-small\ncluster:\n  instance_type: p9.huge\ntraining:\n  global_batch: 8\n";
    const ScenarioError e = expect_scenario_error([&] { parse_job(text, kOrigin); });
    CHECK(e.key() == "cluster.instance_type");
    CHECK_THAT(e.what(), Catch::Contains("p9.huge"));
  }
  SECTION("unknown placement string") {
    const ScenarioError e = expect_scenario_error([] { parse_job(job_yaml("  placement_strategy: DPX\n"), kOrigin); });
    CHECK(e.key() == "parallel.placement_strategy");
    CHECK_THAT(e.what(), Catch::Contains("DPX"));
  }
  SECTION("data_parallel_degree given but inconsistent with GPUs / (pp x tp)") {
    const ScenarioError e = expect_scenario_error([] { parse_job(job_yaml("  data_parallel_degree: 8\n"), kOrigin); });
    CHECK(e.key() == "parallel.data_parallel_degree");
    CHECK_THAT(e.reason(), Catch::Contains("4"));  // the derived value
  }
  SECTION("unknown enum choice") {
    const ScenarioError e = expect_scenario_error([] { parse_job(job_yaml("", "  optimizer: adamw\n"), kOrigin); });
    CHECK(e.key() == "training.optimizer");
    CHECK_THAT(e.reason(), Catch::Contains("adamw"));
    CHECK_THAT(e.reason(), Catch::Contains("sgd"));  // lists the choices
  }
  SECTION("missing required section") {
    const ScenarioError e = expect_scenario_error([] {
      parse_job("model: gpt2-small\ncluster:\n  instance_type: p4d.24xlarge\n", kOrigin);
    });
    CHECK(e.key() == "training");
  }
  SECTION("invalid YAML") {
    const ScenarioError e = expect_scenario_error([] { parse_job("model: [unclosed\n", kOrigin); });
    CHECK(e.file() == kOrigin);
    CHECK_THAT(e.reason(), Catch::Contains("invalid YAML"));
  }
  SECTION("a job that is not a mapping") {
    const ScenarioError e = expect_scenario_error([] { parse_job("- a\n- b\n", kOrigin); });
    CHECK(e.file() == kOrigin);
  }
}

TEST_CASE("a consistent data_parallel_degree is accepted", "[scenario]") {
  const Job j = parse_job(job_yaml("  data_parallel_degree: 4\n"), kOrigin);
  CHECK(j.data_parallel_degree() == 4);
}

TEST_CASE("overrides (CLI --set) apply before the job is checked", "[scenario]") {
  SECTION("bare parallel key") {
    const Job j = parse_job(job_yaml(), kOrigin, {"tensor_parallel_degree=4"});
    CHECK(j.parallel.tensor_parallel_degree == 4);
    CHECK(j.data_parallel_degree() == 2);
  }
  SECTION("bare training and cluster keys go to their sections") {
    const Job j = parse_job(job_yaml(), kOrigin, {"global_batch=128", "nodes=2", "precision=bf16"});
    CHECK(j.training.global_batch == 128);
    CHECK(j.training.precision == Precision::bf16);
    CHECK(j.cluster.nodes == 2);
    CHECK(j.world_size() == 16);
  }
  SECTION("dotted keys, including a key of a preset model") {
    const Job j = parse_job(job_yaml(), kOrigin,
                            {"parallel.activation_checkpointing=full", "model.seq_len=2048"});
    CHECK(j.parallel.activation_checkpointing == Checkpointing::full);
    CHECK(j.model.seq_len == 2048);
    CHECK(j.model.layers == 12);  // the rest of the preset is kept
  }
  SECTION("an override can make a bad file good") {
    const Job j = parse_job(job_yaml("  microbatches: 3\n"), kOrigin, {"microbatches=4"});
    CHECK(j.parallel.microbatches == 4);
  }
  SECTION("later overrides win") {
    const Job j = parse_job(job_yaml(), kOrigin, {"tensor_parallel_degree=4", "tensor_parallel_degree=1"});
    CHECK(j.parallel.tensor_parallel_degree == 1);
  }
  SECTION("bad overrides are errors") {
    CHECK(expect_scenario_error([] { parse_job(job_yaml(), kOrigin, {"tensor_parallel_degree=eight"}); }).key() ==
          "parallel.tensor_parallel_degree");
    CHECK(expect_scenario_error([] { parse_job(job_yaml(), kOrigin, {"tensor_paralel_degree=4"}); }).key() ==
          "parallel.tensor_paralel_degree");
    CHECK(expect_scenario_error([] { parse_job(job_yaml(), kOrigin, {"tensor_parallel_degree=3"}); }).key() ==
          "parallel");
    const ScenarioError no_eq = expect_scenario_error([] { parse_job(job_yaml(), kOrigin, {"tensor_parallel_degree"}); });
    CHECK_THAT(no_eq.what(), Catch::Contains(kOrigin));
    CHECK_THAT(no_eq.reason(), Catch::Contains("key=value"));
    const ScenarioError section = expect_scenario_error([] { parse_job(job_yaml(), kOrigin, {"optimizer_state.foo=1"}); });
    CHECK_THAT(section.reason(), Catch::Contains("parallel"));
  }
}

namespace {
// A file under the system temp folder holding `text`, removed when the test ends (also
// when a failed check unwinds it).
struct TempFile {
  std::string path;
  TempFile(const std::string& name, const std::string& text)
      : path((std::filesystem::temp_directory_path() / ("partune-test-" + name)).string()) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::filesystem::remove(path); }
};
}  // namespace

TEST_CASE("a bad placement is one error naming the file, the key and the value", "[scenario]") {
  const std::string reason = "'DDP' is not a placement: use cluster, spread or a permutation of D, P, T";
  SECTION("in a job file") {
    const TempFile file("bad-placement.yaml", job_yaml("  placement_strategy: DDP\n"));
    const ScenarioError e = expect_scenario_error([&] { load_job(file.path); });
    CHECK(e.file() == file.path);
    CHECK(e.key() == "parallel.placement_strategy");
    CHECK(e.reason() == reason);
    CHECK(std::string(e.what()) == file.path + ": parallel.placement_strategy: " + reason);
  }
  SECTION("in an override") {
    const ScenarioError e = expect_scenario_error([] { parse_job(job_yaml(), kOrigin, {"placement_strategy=DDP"}); });
    CHECK(e.key() == "parallel.placement_strategy");
    CHECK(e.reason() == reason);
  }
  SECTION("a good one is parsed once into its order") {
    CHECK(parse_job(job_yaml(), kOrigin).parallel.placement_strategy.name() == "DPT");  // default: cluster
    CHECK(parse_job(job_yaml("  placement_strategy: pdt\n"), kOrigin).parallel.placement_strategy.name() == "PDT");
  }
}

TEST_CASE("load_job reads a file the way parse_job reads the same text", "[scenario]") {
  const std::string text = job_yaml("  microbatches: 2\n");
  const TempFile file("same.yaml", text);
  const Job a = parse_job(text, file.path), b = load_job(file.path);
  CHECK(a.parallel.tensor_parallel_degree == b.parallel.tensor_parallel_degree);
  CHECK(a.parallel.microbatches == b.parallel.microbatches);
  CHECK(a.training.global_batch == b.training.global_batch);
  CHECK(a.model.layers == b.model.layers);
}

// Regression: a duplicated key was once accepted, with parse_job keeping the first value
// and load_job the last. YAML 1.2 requires unique keys.
TEST_CASE("a key given twice in one mapping is an error", "[scenario]") {
  const std::string text = job_yaml("  microbatches: 2\n  tensor_parallel_degree: 4\n");
  SECTION("parse_job") {
    const ScenarioError e = expect_scenario_error([&] { parse_job(text, kOrigin); });
    CHECK(e.key() == "parallel.tensor_parallel_degree");
  }
  SECTION("load_job") {
    const TempFile file("dup-key.yaml", text);
    const ScenarioError e = expect_scenario_error([&] { load_job(file.path); });
    CHECK(e.key() == "parallel.tensor_parallel_degree");
  }
}

// Regression: parse_job once skipped YAML merge keys that load_job applied.
TEST_CASE("parse_job applies YAML merge keys like load_job", "[scenario]") {
  const std::string text =
      "model: gpt2-small\n"
      "cluster:\n  instance_type: p4d.24xlarge\n  nodes: 1\n"
      "training:\n  global_batch: 64\n"
      "parallel:\n  <<: {tensor_parallel_degree: 2, microbatches: 2}\n  microbatches: 4\n";
  const TempFile file("merge-key.yaml", text);
  const Job from_file = load_job(file.path);
  CHECK(from_file.parallel.tensor_parallel_degree == 2);
  CHECK(from_file.parallel.microbatches == 4);  // the mapping's own key wins over the merge
  const Job inline_job = parse_job(text, kOrigin);
  CHECK(inline_job.parallel.tensor_parallel_degree == 2);
  CHECK(inline_job.parallel.microbatches == 4);
}

TEST_CASE("a cluster names an instance type and a node count, not an instance type alone", "[scenario]") {
  const std::string head = "model: gpt2-small\ntraining: {global_batch: 8}\n";
  SECTION("an instance type preset where a cluster belongs") {
    const ScenarioError e = expect_scenario_error([&] { parse_job(head + "cluster: p4d.24xlarge\n", kOrigin); });
    CHECK(e.key() == "cluster");
    CHECK_THAT(e.reason(), Catch::Contains("instance_type: p4d.24xlarge"));
  }
  SECTION("base: an instance type") {
    const ScenarioError e =
        expect_scenario_error([&] { parse_job(head + "cluster: {base: p4d.24xlarge, nodes: 1}\n", kOrigin); });
    CHECK(e.key() == "cluster");
  }
  SECTION("the right way") {
    const Job j = parse_job(head + "cluster: {instance_type: p4d.24xlarge, nodes: 1}\n", kOrigin);
    CHECK(j.world_size() == 8);
  }
}

TEST_CASE("instance-type quantities that cannot be negative are rejected", "[scenario]") {
  const std::pair<const char*, const char*> cases[] = {
      {"gpu: {kernel_overhead_us: -1}", "instance_type.gpu.kernel_overhead_us"},
      {"gpu: {reserved_GiB: -1}", "instance_type.gpu.reserved_GiB"},
      {"gpu: {peak_tflops: {bf16: -1}}", "instance_type.gpu.peak_tflops.bf16"},
      {"host: {memory_GiB: -1}", "instance_type.host.memory_GiB"},
  };
  for (const auto& [override_text, key] : cases) {
    INFO(override_text);
    const std::string yaml = std::string("model: gpt2-small\ntraining: {global_batch: 8}\ncluster:\n  nodes: 1\n") +
                             "  instance_type: {base: p4d.24xlarge, " + override_text + "}\n";
    const ScenarioError e = expect_scenario_error([&] { parse_job(yaml, kOrigin); });
    CHECK(e.key() == std::string("cluster.") + key);
    CHECK_THAT(e.reason(), Catch::Contains("must be in [0, 1e+09]"));
  }
}

TEST_CASE("host.all_busy_speed is a fraction and needs host.cores", "[scenario]") {
  auto yaml = [](const std::string& host) {
    return std::string("model: gpt2-small\ntraining: {global_batch: 8}\ncluster:\n  nodes: 1\n") +
           "  instance_type: {base: p4d.24xlarge, host: " + host + "}\n";
  };
  CHECK(parse_job(yaml("{cores: 96, all_busy_speed: 0.7}"), kOrigin).cluster.instance.host_all_busy_speed == 0.7);
  CHECK(parse_job(yaml("{cores: 96}"), kOrigin).cluster.instance.host_all_busy_speed == 1.0);
  for (const char* host : {"{cores: 96, all_busy_speed: 1.5}", "{cores: 96, all_busy_speed: 0}"}) {
    INFO(host);
    const ScenarioError e = expect_scenario_error([&] { parse_job(yaml(host), kOrigin); });
    CHECK(e.key() == "cluster.instance_type.host.all_busy_speed");
  }
  const ScenarioError e = expect_scenario_error([&] { parse_job(yaml("{cores: 0, all_busy_speed: 0.5}"), kOrigin); });
  CHECK(e.key() == "cluster.instance_type.host.all_busy_speed");
  CHECK_THAT(e.reason(), Catch::Contains("host.cores"));
}
