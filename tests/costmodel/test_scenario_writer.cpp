// The scenario writer against the loader: what instance_type_yaml and job_yaml write,
// load_instance_type and parse_job read back to the same values, field by field.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "scratch_dir.hpp"

using namespace partune;
using partune::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

InstanceType load_written(const InstanceType& it, const YamlComments& comments = {}) {
  ScratchDir dir("partune-writer");
  const fs::path file = dir.path / (it.name + ".yaml");
  std::ofstream(file) << instance_type_yaml(it, comments);
  return load_instance_type(file.string());
}

// Values in the units the file keys name (GB/s, us, GiB) do not convert exactly in
// binary: equal to 1e-12 relative.
void check_same(double got, double want) { CHECK(got == Approx(want).epsilon(1e-12).margin(1e-300)); }

void check_same(const InstanceType& a, const InstanceType& b) {
  CHECK(a.name == b.name);
  CHECK(a.gpus_per_node == b.gpus_per_node);
  CHECK(a.gpu.name == b.gpu.name);
  check_same(a.gpu.peak_flops_fp32, b.gpu.peak_flops_fp32);
  check_same(a.gpu.peak_flops_tf32, b.gpu.peak_flops_tf32);
  check_same(a.gpu.peak_flops_fp16, b.gpu.peak_flops_fp16);
  check_same(a.gpu.peak_flops_bf16, b.gpu.peak_flops_bf16);
  check_same(a.gpu.hbm_bytes, b.gpu.hbm_bytes);
  check_same(a.gpu.hbm_bw, b.gpu.hbm_bw);
  check_same(a.gpu.hbm_efficiency, b.gpu.hbm_efficiency);
  check_same(a.gpu.kernel_overhead, b.gpu.kernel_overhead);
  check_same(a.gpu.reserved_bytes, b.gpu.reserved_bytes);
  check_same(a.gpu.gemm.max_efficiency, b.gpu.gemm.max_efficiency);
  check_same(a.gpu.gemm.tile, b.gpu.gemm.tile);
  check_same(a.gpu.gemm.sm_count, b.gpu.gemm.sm_count);
  check_same(a.gpu.gemm.k_half, b.gpu.gemm.k_half);
  check_same(a.gpu.attention.flash_efficiency, b.gpu.attention.flash_efficiency);
  CHECK(a.gpu.attention.kernel == b.gpu.attention.kernel);
  check_same(a.gpu.attention.flash_seq_half, b.gpu.attention.flash_seq_half);
  check_same(a.gpu.attention.flash_head_dim_half, b.gpu.attention.flash_head_dim_half);
  for (std::size_t k = 0; k < a.gpu.attention.kernels.size(); ++k) {
    check_same(a.gpu.attention.kernels[k].max_efficiency, b.gpu.attention.kernels[k].max_efficiency);
    check_same(a.gpu.attention.kernels[k].seq_half, b.gpu.attention.kernels[k].seq_half);
    check_same(a.gpu.attention.kernels[k].head_dim_half, b.gpu.attention.kernels[k].head_dim_half);
  }
  check_same(a.gpu.attention.score_bmm_efficiency, b.gpu.attention.score_bmm_efficiency);
  check_same(a.gpu.attention.score_bytes_fwd, b.gpu.attention.score_bytes_fwd);
  check_same(a.gpu.attention.score_bytes_bwd, b.gpu.attention.score_bytes_bwd);
  CHECK(a.intra_node_fabric == b.intra_node_fabric);
  check_same(a.intra_node.bw, b.intra_node.bw);
  check_same(a.intra_node.latency, b.intra_node.latency);
  check_same(a.intra_node.efficiency, b.intra_node.efficiency);
  CHECK(a.nics_per_node == b.nics_per_node);
  check_same(a.nic.bw, b.nic.bw);
  check_same(a.nic.latency, b.nic.latency);
  check_same(a.nic.efficiency, b.nic.efficiency);
  check_same(a.pcie_bw, b.pcie_bw);
  CHECK(a.gpus_per_pcie_switch == b.gpus_per_pcie_switch);
  CHECK(a.host_cores == b.host_cores);
  check_same(a.host_all_busy_speed, b.host_all_busy_speed);
  check_same(a.host_memory_bytes, b.host_memory_bytes);
  for (auto [x, y] : {std::pair{a.ring, b.ring}, std::pair{a.tree, b.tree}, std::pair{a.all_to_all, b.all_to_all}}) {
    check_same(x.net_efficiency, y.net_efficiency);
    check_same(x.compute_overlap, y.compute_overlap);
    check_same(x.launch_latency, y.launch_latency);
  }
}

// Every field away from its default, with values that have no short decimal form.
InstanceType odd_instance() {
  InstanceType it;
  it.name = "odd-box";
  it.gpus_per_node = 3;
  it.gpu.name = "cpu-core (Some CPU @ 2.1GHz, 1 thread)";
  it.gpu.peak_flops_fp32 = 1.0 / 3.0 * 1e11;
  it.gpu.peak_flops_tf32 = 2.0 / 7.0 * 1e12;
  it.gpu.peak_flops_fp16 = 3.0 / 11.0 * 1e13;
  it.gpu.peak_flops_bf16 = 0;  // no bf16: allowed as 0
  it.gpu.hbm_bytes = 7.3 * 1073741824.0;
  it.gpu.hbm_bw = 12.345678901e9;
  it.gpu.hbm_efficiency = 0.61803398875;
  it.gpu.kernel_overhead = 3.14159e-6;
  it.gpu.reserved_bytes = 0.5 * 1073741824.0;
  it.gpu.gemm = {0.456789, 1, 1, 23.4567};
  it.gpu.attention.kernel = AttentionKernel::cudnn;
  it.gpu.attention.flash_efficiency = 0.111;
  it.gpu.attention.flash_seq_half = 987.654;
  it.gpu.attention.flash_head_dim_half = 21.5;
  it.gpu.attention.kernels[static_cast<std::size_t>(AttentionKernel::flash3)] = {0.6311, 807.25, 22.125};
  it.gpu.attention.score_bmm_efficiency = 0.2222;
  it.gpu.attention.score_bytes_fwd = 24;
  it.gpu.attention.score_bytes_bwd = 48;
  it.intra_node_fabric = "loopback";
  it.intra_node = {1.7e9, 13.7e-6, 0.93};
  it.nics_per_node = 2;
  it.nic = {3.125e9, 27.1e-6, 0.81};
  it.pcie_bw = 8.8e9;
  it.gpus_per_pcie_switch = 3;
  it.host_cores = 3;
  it.host_all_busy_speed = 0.77;
  it.host_memory_bytes = 15.6 * 1073741824.0;
  it.ring = {0.9, 0.25, 1.234e-3};
  it.tree = {0.8, 0.5, 0};
  it.all_to_all = {0.7, 0.0, 56e-6};
  return it;
}

}  // namespace

TEST_CASE("an instance type written by instance_type_yaml loads back field by field", "[scenario_writer]") {
  SECTION("every field away from its default") {
    const InstanceType it = odd_instance();
    check_same(load_written(it), it);
  }
  SECTION("every catalog instance type") {
    for (const std::string& name : list_presets("clusters")) {
      INFO(name);
      const InstanceType it = load_instance_type(name);
      check_same(load_written(it), it);
    }
  }
  SECTION("with comments on keys and a header, the values are the same") {
    YamlComments c;
    c.header = "Measured profile of a test.\n\nSecond paragraph.";
    c.keys["gpu.hbm_bw_GBps"] = "measured: copy_, 1 thread\nover 64 elements and >= 16 MiB";
    c.keys["network.nic_bw_Gbps"] = "fitted: ping-pong";
    c.keys["gpus_per_node"] = "cores";
    const std::string text = instance_type_yaml(odd_instance(), c);
    CHECK(text.rfind("# Measured profile of a test.\n#\n# Second paragraph.\n", 0) == 0);
    CHECK_THAT(text, Catch::Contains("# measured: copy_, 1 thread"));
    CHECK_THAT(text, Catch::Contains("# over 64 elements and >= 16 MiB"));
    CHECK_THAT(text, Catch::Contains("# fitted: ping-pong"));
    check_same(load_written(odd_instance(), c), odd_instance());
  }
}

TEST_CASE("a job written by job_yaml parses back to the same job", "[scenario_writer]") {
  const std::string src = std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/gpt3-175b-p4d-120.yaml";
  const Job job = load_job(src, {"pipeline_parallel_degree=8", "tensor_parallel_degree=4", "microbatches=16",
                                 "activation_checkpointing=selective", "pipeline=simple", "optimizer=sgd",
                                 "precision=bf16", "data_parallel_collective=hierarchical", "lm_head_stage=first",
                                 "stage_layers=[13, 12, 12, 12, 12, 12, 12, 11]", "flash_attention=true"});
  const Job back = parse_job(job_yaml(job, "a test"), "written.yaml");
  CHECK(back.name == job.name);
  CHECK(back.model.layers == job.model.layers);
  CHECK(back.model.hidden == job.model.hidden);
  CHECK(back.model.vocab == job.model.vocab);
  CHECK(back.cluster.instance.name == "p4d.24xlarge");
  CHECK(back.cluster.nodes == job.cluster.nodes);
  CHECK(back.training.global_batch == job.training.global_batch);
  CHECK(back.training.optimizer == Optimizer::sgd);
  CHECK(back.training.precision == Precision::bf16);
  const ParallelConfig &a = back.parallel, &b = job.parallel;
  CHECK(a.pipeline_parallel_degree == 8);
  CHECK(a.tensor_parallel_degree == 4);
  CHECK(a.microbatches == 16);
  CHECK(a.pipeline == PipelineSchedule::gpipe);
  CHECK(a.activation_checkpointing == Checkpointing::selective);
  CHECK(a.data_parallel_collective == CollectiveAlgorithm::hierarchical);
  CHECK(a.lm_head_stage == LmHeadStage::first);
  CHECK(a.stage_layers == std::vector<int>{13, 12, 12, 12, 12, 12, 12, 11});
  CHECK(a.flash_attention);
  CHECK(a.sharded_data_parallel_degree == b.sharded_data_parallel_degree);
  CHECK(a.placement_strategy == b.placement_strategy);
  CHECK(a.sharded_collective == b.sharded_collective);
}
