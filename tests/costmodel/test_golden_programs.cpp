// Golden per-rank programs: the whole program of every rank of three small jobs, as text
// (program_text.hpp), against files written once and checked by hand. A change to the
// program builder, a schedule or a byte count shows up as a diff of these files; if the
// change is meant, regenerate them and read the diff:
//
//   PARTUNE_UPDATE_GOLDEN=1 build/test_costmodel "[golden]"
//
// The jobs (tests/golden/*.yaml) share one model: GPT with 8 layers (4 for the sharded
// job), h = 512, f = 4h = 2048, s = 128, V = 1024, learned positions, tied embeddings,
// fp16 (2 bytes an element), one sequence a micro-batch. Hand numbers:
//   layer parameters      12h^2 + 13h = 3,145,728 + 6,656 = 3,152,384 -> 6,304,768 B
//   embedding             Vh + sh = 524,288 + 65,536 = 589,824           -> 1,179,648 B
//   final norm            2h = 1,024                                      -> 2,048 B
//   tied copy (pp > 1)    Vh = 524,288                                    -> 1,048,576 B
//   activation            b s h = 65,536 elements                         -> 131,072 B (/t per tensor rank)
//   loss reductions       3 all-reduces of b s fp32 values                -> 512 B each
//
// What was checked by hand in the files (2026-11-26), beside the assertions below:
// 1f1b.program.txt (pp 4 x dp 2, m 6, rank = 4d + p):
//   - warm-up: stage s runs min(p - s - 1, active - 1) = 3, 2, 1, 0 forwards before its
//     first steady forward, so 4, 3, 2, 1 forwards before its first backward; then
//     F(w+k) B(k) and a cool-down of w backwards;
//   - send/recv pairing: each send_activation of stage s to rank r + 1 is the next
//     recv_activation of r + 1 from r with the same micro-batch and 131,072 B, and each
//     send_gradient back likewise; one send of a kind to a peer outstanding at a time
//     (the previous one's wait comes first);
//   - gradient buckets: only the last backward (mb 5) runs per layer, each layer's
//     all_reduce on `data` right after its backward, async: 6,304,768 B, layer 0 of
//     stage 0 + the embedding = 7,484,416 B, layer 1 of stage 3 + final norm + tied copy
//     = 6,304,768 + 2,048 + 1,048,576 = 7,355,392 B; every async instruction awaited
//     before the step's end; stages 0 and 3 all-reduce the tied copy (1,048,576 B) on
//     `embedding`, then the optimizer step.
// interleaved.program.txt (pp 2 x v 2 x tp 2, m 4, full checkpointing, rank = 2p + t):
//   - chunk order: Megatron's k -> (mb, chunk) = (floor(k / pv) p + k mod p,
//     floor(k / p) mod v): stage 0 forwards (0,0) (1,0) (0,1) (1,1) (2,0) (3,0) (2,1)
//     (3,1), backwards with the last chunk first (0,1) (1,1) (0,0) (1,0) (2,1) (3,1)
//     (2,0) (3,0); warm-up (p - s - 1) 2 + (v - 1) p = 4 on stage 0, 2 on stage 1;
//   - p2p: chunk 0 of stage 1 sends to chunk 1 of stage 0 (the wrap-around), 65,536 B
//     (b s h e / t); model stage 0 (stage 0 chunk 0) receives nothing, model stage 3
//     (stage 1 chunk 1) sends nothing forward;
//   - tensor all-reduces of 131,072 B: forward 2 a layer (g) = 4 a chunk, + 1 for the
//     embedding's g on model stage 0; recompute 4 a chunk (full checkpointing repeats the
//     forward's); backward 2 a layer (f) = 4, + 1 for the head's f on model stage 3; the
//     loss: 3 x 512 B forward on model stage 3; the tied copy: 1024 x 512 / 2 x 2 =
//     524,288 B on `embedding` at the end of both stages.
// sharded.program.txt (dp 4 in sharded groups of 2, FSDP, m 2, 4 layers, per layer):
//   - each layer's all_gather on `sharded` is started one layer ahead and awaited before
//     its forward and again before its backward (walking down from layer 3, which is
//     gathered afresh); each backward is followed by its reduce_scatter, async;
//   - bytes: a layer is one flat unit of 6,304,768 B; layer 0 carries the embedding as a
//     second call (2 x (6,304,768 + 1,179,648) / 2 = 2 x 3,742,208 B) and layer 3 the
//     final norm (2 x (6,304,768 + 2,048) / 2 = 2 x 3,153,408 B);
//   - step end: the replica all-reduce of the rank's shard, (4 x 3,152,384 + 589,824 +
//     1,024) / 2 x 2 = 13,200,384 B, then the optimizer step; no data-parallel bucket.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/program_text.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;

namespace {

std::string golden_dir() { return std::string(PARTUNE_SOURCE_DIR) + "/tests/golden/"; }

Job golden_job(const std::string& name) { return load_job(golden_dir() + name + ".yaml"); }

const char* const kRegenerate = "PARTUNE_UPDATE_GOLDEN=1 build/test_costmodel \"[golden]\"";

// The file's text: a header naming the job and how to regenerate, then every rank.
std::string golden_text(const std::string& name) {
  const Job job = golden_job(name);
  std::string out = "# The per-rank programs of tests/golden/" + name +
                    ".yaml (build_programs, chunk granularity), one line per\n"
                    "# instruction (program_text.hpp; seconds left out). Compared by\n"
                    "# tests/costmodel/test_golden_programs.cpp, which says what was checked by hand.\n"
                    "# Regenerate: " +
                    kRegenerate + "\n\n";
  return out + programs_text(build_programs(job));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Where two texts first differ, with the lines around it: what a reader needs to see
// before opening the diff.
std::string first_difference(const std::string& expected, const std::string& actual) {
  const std::vector<std::string> e = lines_of(expected), a = lines_of(actual);
  std::size_t i = 0;
  while (i < e.size() && i < a.size() && e[i] == a[i]) ++i;
  std::ostringstream out;
  out << "first difference at line " << i + 1 << " (expected " << e.size() << " lines, got " << a.size() << ")\n";
  for (std::size_t k = i >= 3 ? i - 3 : 0; k < i; ++k) out << "    " << e[k] << "\n";
  out << "  - " << (i < e.size() ? e[i] : "<end of file>") << "\n";
  out << "  + " << (i < a.size() ? a[i] : "<end of program>") << "\n";
  return out.str();
}

void check_golden(const std::string& name) {
  const std::string file = golden_dir() + name + ".program.txt";
  const std::string actual = golden_text(name);
  const char* update = std::getenv("PARTUNE_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(file, std::ios::binary) << actual;
    WARN("rewrote " << file << ": read its diff (git diff " << file << ")");
    return;
  }
  std::ifstream in(file, std::ios::binary);
  if (!in.good()) FAIL("missing " << file << "; write it with " << kRegenerate);
  std::ostringstream expected;
  expected << in.rdbuf();
  if (expected.str() == actual) return;
  const std::string written = (std::filesystem::current_path() / (name + ".program.txt.actual")).string();
  std::ofstream(written, std::ios::binary) << actual;
  FAIL_CHECK("the programs of tests/golden/" << name << ".yaml differ from " << file << "\n"
                                             << first_difference(expected.str(), actual) << "whole diff: diff -u "
                                             << file << " " << written << "\n"
                                             << "if the change is meant: " << kRegenerate
                                             << ", then check the new lines by hand");
}

// The compute steps of a rank in order: (forward?, micro-batch, chunk), one per
// (micro-batch, chunk) step (the first compute instruction of each).
using Step = std::tuple<bool, int, int>;
std::vector<Step> compute_steps(const RankProgram& prog) {
  std::vector<Step> out;
  for (const Instruction& in : prog.ops) {
    if (in.kind != OpKind::forward && in.kind != OpKind::backward) continue;
    const Step s{in.kind == OpKind::forward, in.microbatch, in.chunk};
    if (out.empty() || out.back() != s) out.push_back(s);
  }
  return out;
}

}  // namespace

TEST_CASE("golden programs: 1F1B, pipeline 4 x data 2", "[golden][program]") { check_golden("1f1b"); }

TEST_CASE("golden programs: interleaved 1F1B, pipeline 2 x 2 chunks x tensor 2", "[golden][program]") {
  check_golden("interleaved");
}

TEST_CASE("golden programs: sharded data parallel 2 x 2 replicas, FSDP", "[golden][program]") {
  check_golden("sharded");
}

TEST_CASE("golden jobs: 1F1B warm-up and send/recv pairing, counted on the programs", "[golden][program]") {
  const std::vector<RankProgram> progs = build_programs(golden_job("1f1b"));
  REQUIRE(progs.size() == 8);
  // Forwards before the first backward: the warm-up p - s - 1 and one steady forward.
  const int before_first_backward[4] = {4, 3, 2, 1};
  for (const RankProgram& prog : progs) {
    INFO("rank " << prog.rank);
    CHECK(prog.rank == 4 * prog.coords.data + prog.coords.pipeline);  // placement cluster (DPT), tp 1
    const std::vector<Step> steps = compute_steps(prog);
    REQUIRE(steps.size() == 12);  // 6 forwards, 6 backwards
    int forwards = 0;
    while (std::get<0>(steps[forwards])) ++forwards;
    CHECK(forwards == before_first_backward[prog.coords.pipeline]);
  }
  // Each (sender, receiver, kind) channel carries the same micro-batches in the same
  // order on both sides, each 131,072 bytes.
  std::map<std::tuple<int, int, bool>, std::vector<int>> sent, received;
  for (const RankProgram& prog : progs)
    for (const Instruction& in : prog.ops) {
      const bool activation = in.kind == OpKind::send_activation || in.kind == OpKind::recv_activation;
      if (in.kind == OpKind::send_activation || in.kind == OpKind::send_gradient)
        sent[{prog.rank, in.peer, activation}].push_back(in.microbatch);
      else if (in.kind == OpKind::recv_activation || in.kind == OpKind::recv_gradient)
        received[{in.peer, prog.rank, activation}].push_back(in.microbatch);
      else
        continue;
      CHECK(in.bytes == 131072.0);
    }
  CHECK(sent == received);
  CHECK(sent.size() == 12);  // 3 links a replica, both directions, 2 replicas
  for (const auto& [channel, mbs] : sent) CHECK(mbs == std::vector<int>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("golden jobs: interleaved 1F1B runs Megatron's chunk order", "[golden][program]") {
  const std::vector<RankProgram> progs = build_programs(golden_job("interleaved"));
  REQUIRE(progs.size() == 4);
  const auto F = [](int mb, int c) { return Step{true, mb, c}; };
  const auto B = [](int mb, int c) { return Step{false, mb, c}; };
  // Written out from Narayanan et al. (2021), Fig. 4's rule with p = 2, v = 2, m = 4.
  const std::vector<Step> stage0 = {F(0, 0), F(1, 0), F(0, 1), F(1, 1), F(2, 0), B(0, 1), F(3, 0), B(1, 1),
                                    F(2, 1), B(0, 0), F(3, 1), B(1, 0), B(2, 1), B(3, 1), B(2, 0), B(3, 0)};
  const std::vector<Step> stage1 = {F(0, 0), F(1, 0), F(0, 1), B(0, 1), F(1, 1), B(1, 1), F(2, 0), B(0, 0),
                                    F(3, 0), B(1, 0), F(2, 1), B(2, 1), F(3, 1), B(3, 1), B(2, 0), B(3, 0)};
  for (const RankProgram& prog : progs) {
    INFO("rank " << prog.rank);
    CHECK(compute_steps(prog) == (prog.coords.pipeline == 0 ? stage0 : stage1));
  }
}

TEST_CASE("golden jobs: sharded data parallel gathers and reduce-scatters every layer", "[golden][program]") {
  const std::vector<RankProgram> progs = build_programs(golden_job("sharded"));
  REQUIRE(progs.size() == 4);
  const double layer = 6304768.0, embedding = 1179648.0, norm = 2048.0;
  // (calls, bytes of all calls) of layer l's gather and reduce-scatter.
  const auto total = [&](int l) { return layer + (l == 0 ? embedding : 0.0) + (l == 3 ? norm : 0.0); };
  for (const RankProgram& prog : progs) {
    INFO("rank " << prog.rank);
    std::map<std::tuple<OpKind, int, int>, int> per_layer;  // (kind, mb, layer) -> instructions
    for (const Instruction& in : prog.ops) {
      if (in.group != CommGroup::sharded) continue;
      ++per_layer[{in.kind, in.microbatch, in.layer}];
      CHECK(in.async);
      CHECK(in.count == (in.layer == 0 || in.layer == 3 ? 2 : 1));
      CHECK(in.bytes * in.count == total(in.layer));
    }
    CHECK(per_layer.size() == 2 * 2 * 4);  // gathers and reduce-scatters, 2 micro-batches, 4 layers
    for (int mb = 0; mb < 2; ++mb)
      for (int l = 0; l < 4; ++l) {
        CHECK(per_layer[{OpKind::all_gather, mb, l}] == 2);  // before forward and before backward
        CHECK(per_layer[{OpKind::reduce_scatter, mb, l}] == 1);
      }
  }
}
