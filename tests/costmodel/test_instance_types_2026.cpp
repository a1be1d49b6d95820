// The machines of 2026 (issue 31, instance types): p5en.48xlarge is p5e's H200 node with
// EFA v3 and a Gen5 host, written as `base: p5e.48xlarge` plus what differs;
// p6-b200.48xlarge is 8 B200s on NVLink 5 with EFA v4. Their numbers against the reference
// figures they cite (written out here), and `base:` chains in files (a cycle is refused).
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "job_fixtures.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/units.hpp"

using namespace partune;

TEST_CASE("p5en is p5e's H200 node with 16 x 200 Gb/s of EFA v3 and a Gen5 host", "[hardware][2026]") {
  const InstanceType e = load_instance_type("p5e.48xlarge"), en = load_instance_type("p5en.48xlarge");
  CHECK(en.name == "p5en.48xlarge");
  // The GPU and NVSwitch come from p5e through base:.
  CHECK(en.gpu.name == e.gpu.name);
  CHECK(en.gpu.peak_flops_bf16 == e.gpu.peak_flops_bf16);
  CHECK(en.gpu.hbm_bytes == e.gpu.hbm_bytes);
  CHECK(en.intra_node.bw == e.intra_node.bw);
  // What differs: EFA v3 (3,200 Gb/s in 16 NICs), a network step 6.6 us beyond NCCL's own
  // (assumed as p6-b200's, the same aws-ofi-nccl latency class), the Gen5 host's 51 GB/s.
  CHECK(en.nics_per_node == 16);
  CHECK(en.nics_per_node * en.nic.bw == Approx(3200e9 / 8).epsilon(1e-12));
  CHECK(en.nic.latency == Approx(6.6e-6).epsilon(1e-12));
  CHECK(en.pcie_bw == Approx(51e9).epsilon(1e-12));
  CHECK(e.nics_per_node == 32);
}

TEST_CASE("p6-b200: Blackwell's peaks, HBM and NVLink 5 as cited", "[hardware][2026]") {
  const InstanceType b = load_instance_type("p6-b200.48xlarge");
  CHECK(b.gpus_per_node == 8);
  CHECK(b.gpu.peak_flops_bf16 == Approx(2250e12).epsilon(1e-12));
  CHECK(b.gpu.peak_flops_fp8 == Approx(4500e12).epsilon(1e-12));
  CHECK(b.gpu.hbm_bytes == Approx(167.6 * units::GiB).epsilon(1e-12));  // 180 GB
  CHECK(b.gpu.hbm_bw == Approx(8000e9).epsilon(1e-12));
  CHECK(b.intra_node.bw == Approx(900e9).epsilon(1e-12));
  CHECK(b.nics_per_node * b.nic.bw == Approx(3200e9 / 8).epsilon(1e-12));  // 8 x 400 Gb/s
  // The same LLaMA-3 70B job steps faster on B200s than on H100s.
  Job job = load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/llama-3-70b-p5-16.yaml");
  const double h100 = estimate(job).step_time;
  job.cluster.instance = b;
  CHECK(estimate(job).step_time < h100);
}

TEST_CASE("a base: chain of files is followed, a cycle refused", "[scenario][base]") {
  const auto dir = std::filesystem::temp_directory_path() / ("partune-base-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto write = [&](const char* name, const std::string& text) { std::ofstream(dir / name) << text; };
  write("a.yaml", "kind: instance_type\nbase: b.yaml\nname: a\n");
  write("b.yaml", "base: a.yaml\nname: b\n");
  try {
    load_instance_type((dir / "a.yaml").string());
    FAIL("a cycle of base: files loads");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "base");
    CHECK_THAT(std::string(e.what()), Catch::Contains("a chain of more than 8 base: files"));
  }
  write("c.yaml", "kind: instance_type\nbase: p5.48xlarge\nname: c\ngpus_per_node: 4\n");
  write("d.yaml", "base: c.yaml\nname: d\n");
  const InstanceType d = load_instance_type((dir / "d.yaml").string());
  CHECK(d.name == "d");
  CHECK(d.gpus_per_node == 4);
  CHECK(d.gpu.peak_flops_bf16 == load_instance_type("p5.48xlarge").gpu.peak_flops_bf16);
  std::filesystem::remove_all(dir);
}
