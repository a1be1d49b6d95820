// Uneven interleaved stages (parallel.stage_layers with pp x virtual_stages entries, one
// per model chunk): loading and checks, the layout, and the programs' layers per chunk,
// against hand numbers. Llama 3 ran 126 layers on 16 stages this way: every chunk one
// layer but the first (the embedding alone) and the last (the head alone).
//
// GPT-2 small cut to 8 layers, pp 2 x virtual_stages 2 (model chunk k on stage k mod 2 as
// its chunk k / 2); its hand numbers are in gpt2_small_hand.hpp.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "gpt2_small_hand.hpp"
#include "job_fixtures.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/program_text.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using namespace partune::testing::gpt2_small;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {


// GPT-2 small with 8 layers on one p4d node: pp 2 x v 2 -> dp 4, 4 micro-batches of 1.
Job chunk_job(std::vector<int> chunk_layers) {
  Job j = p4d_job("gpt2-small", 1, 16);
  j.model.layers = 8;
  j.parallel.pipeline_parallel_degree = 2;
  j.parallel.virtual_stages = 2;
  j.parallel.pipeline = PipelineSchedule::one_f_one_b;
  j.parallel.microbatches = 4;
  j.parallel.stage_layers = std::move(chunk_layers);
  return j;
}

std::string yaml(const std::string& parallel_extra) {
  return "model: gpt2-small\n"
         "cluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
         "training: {global_batch: 16, precision: fp16}\n"
         "parallel:\n"
         "  pipeline_parallel_degree: 2\n"
         "  virtual_stages: 2\n"
         "  pipeline: interleaved\n"
         "  microbatches: 4\n" +
         parallel_extra;
}

std::string error_key(const std::string& text) { return partune::testing::scenario_error_key(text, "chunks.yaml"); }

}  // namespace

TEST_CASE("chunk lists: model chunk k is chunk k / pp of stage k mod pp", "[uneven][chunks]") {
  // [3, 2, 4, 3] of GPT-2 small's 12 layers: model chunk 0 (stage 0) layers 0-2, chunk 1
  // (stage 1) 3-4, chunk 2 (stage 0, its chunk 1) 5-8, chunk 3 (stage 1, its chunk 1) 9-11.
  const Job j = parse_job(yaml("  stage_layers: [3, 2, 4, 3]\n"), "chunks.yaml");
  CHECK(j.layers_in_chunk(0, 0) == 3);
  CHECK(j.layers_in_chunk(1, 0) == 2);
  CHECK(j.layers_in_chunk(0, 1) == 4);
  CHECK(j.layers_in_chunk(1, 1) == 3);
  CHECK(j.layers_on_stage(0) == 7);
  CHECK(j.layers_on_stage(1) == 5);
  CHECK(j.global_layer(0, 0, 2) == 2);
  CHECK(j.global_layer(1, 0, 0) == 3);
  CHECK(j.global_layer(0, 1, 0) == 5);
  CHECK(j.global_layer(0, 1, 3) == 8);
  CHECK(j.global_layer(1, 1, 0) == 9);
  // Checkpointing K layers of a stage takes its first ones in chunk order: 5 of stage 0's
  // 7 are chunk 0's 3 and 2 of chunk 1's 4.
  Job k = j;
  k.parallel.activation_checkpointing = Checkpointing::full;
  k.parallel.checkpointed_layers = 5;
  CHECK(k.checkpointed_layers_in_chunk(0, 0) == 3);
  CHECK(k.checkpointed_layers_in_chunk(0, 1) == 2);
  CHECK(k.checkpointed_layers_in_chunk(1, 1) == 3);
  // The ends may hold no layer (the embedding alone, the head alone).
  const Job ends = parse_job(yaml("  stage_layers: [0, 6, 6, 0]\n"), "chunks.yaml");
  CHECK(ends.layers_on_stage(0) == 6);
  CHECK(ends.layers_on_stage(1) == 6);
  CHECK(ends.global_layer(1, 0, 0) == 0);
  CHECK(ends.global_layer(0, 1, 5) == 11);
}

TEST_CASE("chunk lists: errors name parallel.stage_layers", "[uneven][chunks][scenario]") {
  CHECK(error_key(yaml("  stage_layers: [6, 6]\n")) == "parallel.stage_layers");           // pp x v entries
  CHECK(error_key(yaml("  stage_layers: [3, 0, 6, 3]\n")) == "parallel.stage_layers");     // a middle chunk empty
  CHECK(error_key(yaml("  stage_layers: [3, 3, 3, 2]\n")) == "parallel.stage_layers");     // sum = layers
  CHECK(error_key(yaml("  stage_layers: [-1, 6, 6, 1]\n")) == "parallel.stage_layers");
  CHECK(error_key(yaml("  stage_layers: [0, 6, 6, 0]\n  sharded_data_parallel_degree: 2\n")) ==
        "parallel.stage_layers");
  CHECK(error_key(yaml("  stage_layers: [0, 6, 6, 0]\n  activation_checkpointing: full\n"
                       "  offload_activations: true\n")) == "parallel.stage_layers");
  // Without virtual stages a stage may not be empty.
  CHECK(error_key("model: gpt2-small\ncluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
                  "training: {global_batch: 16, precision: fp16}\n"
                  "parallel: {pipeline_parallel_degree: 2, microbatches: 4, stage_layers: [0, 12]}\n") ==
        "parallel.stage_layers");
  CHECK(error_key(yaml("  stage_layers: [3, 3, 3, 3]\n")) == "(no error)");
  CHECK(error_key(yaml("  stage_layers: [3, 3, 3, 3]\n  sharded_data_parallel_degree: 2\n")) == "(no error)");
}

TEST_CASE("chunk lists of equal chunks build the uniform interleaved programs", "[uneven][chunks][program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    Job uniform = chunk_job({});
    require_valid(uniform);
    const Job listed = chunk_job({2, 2, 2, 2});
    require_valid(listed);
    CHECK(programs_text(build_programs(listed, {gran})) == programs_text(build_programs(uniform, {gran})));
  }
}

TEST_CASE("chunk lists: programs run each chunk's own layers, empty ends their embedding or head",
          "[uneven][chunks][program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    for (const std::vector<int>& split : {std::vector<int>{1, 3, 3, 1}, std::vector<int>{0, 4, 4, 0}}) {
      const Job j = chunk_job(split);
      require_valid(j);
      INFO("chunks " << split[0] << "," << split[1] << "," << split[2] << "," << split[3]
                     << (gran == Granularity::layer ? " layer" : " chunk"));
      const GpuProfile& gpu = j.cluster.instance.gpu;
      const LayerTime lt = layer_time(gpu, j.model, Precision::fp16, 1, 1, false);
      const HeadTime ht = head_time(gpu, j.model, Precision::fp16, 1, 1);
      for (const RankProgram& prog : build_programs(j, {gran})) {
        const int st = prog.coords.pipeline;
        const int L = split[st] + split[2 + st];  // the stage's two chunks
        INFO("rank " << prog.rank << " stage " << st);
        double fwd = 0, bwd = 0, bucket_bytes = 0;
        std::map<int, double> chunk_forward;  // chunk -> forward seconds
        for (const Instruction& in : prog.ops) {
          if (in.kind == OpKind::forward) fwd += in.seconds, chunk_forward[in.chunk] += in.seconds;
          if (in.kind == OpKind::backward) bwd += in.seconds;
          if ((in.kind == OpKind::forward || in.kind == OpKind::backward) && in.layer < 0)
            CHECK(in.layers == split[in.chunk * 2 + st]);
          if (in.group == CommGroup::data && in.kind == OpKind::all_reduce) bucket_bytes += in.bytes;
        }
        const double head_f = st == 0 ? ht.embedding_fwd : ht.logits_fwd;
        const double head_b = st == 0 ? ht.embedding_bwd : ht.logits_bwd;
        CHECK(fwd == Approx(4 * (L * lt.forward() + head_f)).epsilon(1e-12));
        CHECK(bwd == Approx(4 * (L * lt.backward() + head_b)).epsilon(1e-12));
        // The embedding runs in model chunk 0 (stage 0's chunk 0), the head in model chunk
        // 3 (stage 1's chunk 1): with [0, 4, 4, 0] they are all those chunks do.
        const int end_chunk = st == 0 ? 0 : 1;
        CHECK(chunk_forward[end_chunk] == Approx(4 * (split[end_chunk * 2 + st] * lt.forward() + head_f)).epsilon(1e-12));
        // The buckets (dp 4, fp16) carry every parameter of the stage once.
        const double params = st == 0 ? L * kLayerParams + kEmbeddingParams : L * kLayerParams + kHeadParams + kTiedCopy;
        CHECK(bucket_bytes == Approx(2 * params).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("chunk lists: sends and receives pair up, empty ends included", "[uneven][chunks][program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    const Job j = chunk_job({0, 4, 4, 0});
    require_valid(j);
    std::map<std::tuple<int, int, bool>, std::vector<int>> sent, received;  // (from, to, activation)
    for (const RankProgram& prog : build_programs(j, {gran})) {
      for (const Instruction& in : prog.ops) {
        if (in.kind == OpKind::send_activation) sent[{prog.rank, in.peer, true}].push_back(in.microbatch);
        if (in.kind == OpKind::send_gradient) sent[{prog.rank, in.peer, false}].push_back(in.microbatch);
        if (in.kind == OpKind::recv_activation) received[{in.peer, prog.rank, true}].push_back(in.microbatch);
        if (in.kind == OpKind::recv_gradient) received[{in.peer, prog.rank, false}].push_back(in.microbatch);
      }
    }
    CHECK(sent == received);
    // Three chunk boundaries x 4 replicas x 4 micro-batches, each way: 48 sends a way.
    std::size_t activations = 0;
    for (const auto& [key, mbs] : sent)
      if (std::get<2>(key)) activations += mbs.size();
    CHECK(activations == 3 * 4 * 4u);
  }
}

// Llama 3's stages (ends a layer short) differ only at the first and the last chunk, so the
// memory figure looks at one middle stage (Job::uniform_middle_stages). Against every
// stage looked at one by one (stage_memory): the same peak, whichever schedule; and a
// middle stage is what holds it when the ends are short enough.
TEST_CASE("Llama 3's stages: the peak over every stage, read from one middle stage", "[uneven][chunks][memory]") {
  struct Layout {
    int pp, v;
    PipelineSchedule schedule;
    std::vector<int> chunks;
  };
  // GPT-2 small cut to 14 layers on 16 GPUs: 16 chunks of 1 with empty ends, 8 of 2 with
  // ends of 1, 4 of 4 with ends of 3.
  std::vector<int> sixteen(16, 1), eight(8, 2), four(4, 4);
  sixteen.front() = sixteen.back() = 0;
  eight.front() = eight.back() = 1;
  four.front() = four.back() = 3;
  const Layout layouts[] = {{8, 2, PipelineSchedule::one_f_one_b, sixteen}, {4, 2, PipelineSchedule::one_f_one_b, eight},
                            {8, 1, PipelineSchedule::one_f_one_b, eight},   {8, 1, PipelineSchedule::gpipe, eight},
                            {8, 1, PipelineSchedule::zb_h1, eight},         {4, 1, PipelineSchedule::one_f_one_b, four},
                            {4, 2, PipelineSchedule::zbv, eight}};
  for (const Layout& l : layouts) {
    Job j = p4d_job("gpt2-small", 2, 64);
    j.model.layers = 14;
    j.parallel.pipeline_parallel_degree = l.pp;
    j.parallel.virtual_stages = l.v;
    j.parallel.pipeline = l.schedule;
    j.parallel.microbatches = 16;
    j.parallel.stage_layers = l.chunks;
    INFO("pp " << l.pp << " v " << l.v << " " << to_string(l.schedule));
    require_valid(j);
    CHECK(j.uniform_middle_stages());
    double largest = 0;
    int at = -1;
    for (int s = 0; s < l.pp; ++s) {
      const double total = stage_memory(j, s).total();
      if (total > largest) largest = total, at = s;
    }
    const MemoryBreakdown peak = peak_memory(j);
    CHECK(peak.total() == Approx(largest).epsilon(1e-12));
    CHECK(peak.stage == at);
  }
  // A list whose middle chunks differ is not uniform: every stage is looked at.
  Job uneven = chunk_job({1, 3, 3, 1});
  CHECK(uneven.uniform_middle_stages());
  uneven.parallel.stage_layers = {2, 3, 2, 1};
  CHECK_FALSE(uneven.uniform_middle_stages());
}
