// Per-rank programs (program.hpp: build_program, build_programs). The programs must add
// up the cost model correctly and keep the execution contract the simulator and the
// backend rely on: sends and receives pair up in order, every async instruction is
// awaited, collectives and gradient buckets sit where the docs say.
//
// Hand numbers for GPT-2 small (h 768, f 3072, s 1024, vocab 50257):
//   layer parameters   12 h^2 + 13 h         = 7,087,872
//   embedding          vocab h + s h         = 38,597,376 + 786,432 = 39,383,808
//   head (tied)        final norm 2 h        = 1,536
//   tied copy on the last stage (pp > 1)     = vocab h = 38,597,376
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {

// GPT-2 small (h 768, ffn 3072, vocab 50257, seq 1024; layer norms, biases, learned
// positions, tied embeddings), counted by hand, split over t tensor ranks as Megatron-LM
// splits it:
//   a layer, split: QKV 3h^2 + 3h, projection h^2, fc1 hf + f, fc2 fh
//                   = 4h^2 + 2hf + 3h + f = 7,083,264
//   a layer, whole on every rank: 2 layer norms 2 x 2h, the row-parallel biases
//                   (projection, fc2) 2h = 6h = 4,608
//   the token table V h = 38,597,376 (rows split), the positions s h = 786,432 (whole),
//   the final norm 2h = 1,536 (whole); a tied last stage's copy of the table V h / t.
constexpr double kLayerSplit = 7083264.0;
constexpr double kLayerWhole = 4608.0;
constexpr double kLayerParams = kLayerSplit + kLayerWhole;  // 7,087,872 at t = 1
constexpr double kPositions = 786432.0;
constexpr double kEmbeddingParams = 39383808.0;  // V h + s h at t = 1
constexpr double kHeadParams = 1536.0;
constexpr double kTiedCopy = 38597376.0;

// One tensor rank's share of t: a layer, the embedding, the head.
double layer_on_rank(int t) { return kLayerSplit / t + kLayerWhole; }
double embedding_on_rank(int t) { return kTiedCopy / t + kPositions; }

struct Shape {
  std::string name;
  int nodes = 1, pp = 1, tp = 1, micro = 1, v = 1, ga = 1, global_batch = 0;
  PipelineSchedule sched = PipelineSchedule::one_f_one_b;
  Checkpointing ckpt = Checkpointing::none;
  bool offload = false, shard_optimizer = false;
  int sdp = 1;
};

Job make_job(const Shape& s) {
  Job j = p4d_job("gpt2-small", s.nodes, s.global_batch);
  j.parallel.pipeline_parallel_degree = s.pp;
  j.parallel.tensor_parallel_degree = s.tp;
  j.parallel.microbatches = s.micro;
  j.parallel.virtual_stages = s.v;
  j.parallel.pipeline = s.sched;
  j.parallel.activation_checkpointing = s.ckpt;
  j.parallel.offload_activations = s.offload;
  j.parallel.shard_optimizer_state = s.shard_optimizer;
  j.parallel.sharded_data_parallel_degree = s.sdp;
  j.training.gradient_accumulation = s.ga;
  return j;
}

// The jobs most tests run over. dp = 8 nodes / (pp tp).
std::vector<Shape> shapes() {
  std::vector<Shape> out;
  Shape a;  // 1 node: pp 2 x tp 2 x dp 2, 1F1B, b = 16 / (2 x 4) = 2
  a.name = "pp2 tp2 dp2 1F1B";
  a.pp = 2, a.tp = 2, a.micro = 4, a.global_batch = 16;
  out.push_back(a);
  Shape b = a;  // interleaved, 2 chunks of 3 layers per rank
  b.name = "pp2 tp2 dp2 interleaved v2";
  b.v = 2;
  out.push_back(b);
  Shape c = a;  // GPipe
  c.name = "pp2 tp2 dp2 GPipe";
  c.sched = PipelineSchedule::gpipe;
  out.push_back(c);
  Shape d;  // pp 4 x tp 2 x dp 1, v 3 (one layer per chunk), two accumulation passes
  d.name = "pp4 tp2 dp1 interleaved v3 ga2";
  d.pp = 4, d.tp = 2, d.micro = 8, d.v = 3, d.ga = 2, d.global_batch = 16;
  out.push_back(d);
  Shape e;  // pp 2 x tp 1 x dp 4, full checkpointing offloaded to host
  e.name = "pp2 tp1 dp4 full ckpt offload";
  e.pp = 2, e.tp = 1, e.micro = 4, e.global_batch = 16;
  e.ckpt = Checkpointing::full, e.offload = true;
  out.push_back(e);
  Shape f;  // 2 nodes: pp 4 x tp 2 x dp 2, selective checkpointing, sharded optimizer state
  f.name = "2 nodes pp4 tp2 dp2 selective, sharded optimizer";
  f.nodes = 2, f.pp = 4, f.tp = 2, f.micro = 4, f.global_batch = 8;
  f.ckpt = Checkpointing::selective, f.shard_optimizer = true;
  out.push_back(f);
  Shape g;  // pp 3 x tp 1 on 3 nodes: dp 8
  g.name = "3 nodes pp3 tp1 dp8 full ckpt";
  g.nodes = 3, g.pp = 3, g.tp = 1, g.micro = 3, g.global_batch = 24;
  g.ckpt = Checkpointing::full;
  out.push_back(g);
  return out;
}

int model_stage(const RankProgram& prog, int chunk, int p) { return chunk * p + prog.coords.pipeline; }

bool is_bucket(const Instruction& in) {
  return in.group == CommGroup::data && (in.kind == OpKind::all_reduce || in.kind == OpKind::reduce_scatter);
}

int optimizer_index(const RankProgram& prog) {
  for (int i = 0; i < static_cast<int>(prog.ops.size()); ++i)
    if (prog.ops[i].kind == OpKind::optimizer_step) return i;
  return -1;
}

}  // namespace

TEST_CASE("hand parameter counts of GPT-2 small", "[program]") {
  // The constants the bucket tests below use, against the model's own counts.
  const Job j = p4d_job("gpt2-small", 1, 8);
  CHECK(j.model.ffn_hidden == 3072);
  CHECK(layer_parameters(j.model, false) == kLayerParams);
  CHECK(embedding_parameters(j.model) == kEmbeddingParams);
  CHECK(head_parameters(j.model) == kHeadParams);
  CHECK(static_cast<double>(j.model.vocab) * j.model.hidden == kTiedCopy);
  CHECK(kTiedCopy + kPositions == kEmbeddingParams);
  // One rank of 2, 4, 8: the norms and row-parallel biases whole, the rest split.
  for (const int t : {2, 4, 8}) {
    Job tp = j;
    tp.parallel.tensor_parallel_degree = t;
    const RankParameters r = rank_parameters(tp);
    CHECK(r.dense_layer == layer_on_rank(t));
    CHECK(r.embedding == embedding_on_rank(t));
    CHECK(r.head == kHeadParams);
    CHECK(r.head_projection == Approx(kTiedCopy / t).epsilon(1e-15));
  }
}

TEST_CASE("sends and receives pair up in program order", "[program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    for (const Shape& s : shapes()) {
      const Job job = make_job(s);
      require_valid(job);
      INFO(s.name << (gran == Granularity::layer ? " (layer)" : " (chunk)"));
      const auto progs = build_programs(job, {gran});
      REQUIRE(progs.size() == static_cast<std::size_t>(job.world_size()));
      const int p = s.pp, P = s.pp * s.v, M = s.micro * s.ga;
      const Placement place(job.parallel.placement_strategy, job.data_parallel_degree(), p, s.tp);
      const double bytes = (job.training.global_batch / (job.data_parallel_degree() * M)) * 1024.0 * 768 * 2 / s.tp;
      // (from, to) -> sequence of (micro-batch, the model stage the payload leaves)
      using Seq = std::vector<std::pair<int, int>>;
      std::map<std::pair<int, int>, Seq> act_sent, act_recv, grad_sent, grad_recv;
      for (const RankProgram& prog : progs) {
        const int r = prog.rank;
        CHECK(prog.coords == place.coords(r));
        int sends = 0, recvs = 0;
        for (const Instruction& in : prog.ops) {
          const int ms = model_stage(prog, in.chunk, p);
          switch (in.kind) {
            case OpKind::send_activation:
              act_sent[{r, in.peer}].push_back({in.microbatch, ms});
              break;
            case OpKind::recv_activation:
              act_recv[{in.peer, r}].push_back({in.microbatch, ms - 1});
              break;
            case OpKind::send_gradient:
              grad_sent[{r, in.peer}].push_back({in.microbatch, ms});
              break;
            case OpKind::recv_gradient:
              grad_recv[{in.peer, r}].push_back({in.microbatch, ms + 1});
              break;
            default: continue;
          }
          CHECK(in.bytes == Approx(bytes).epsilon(1e-12));
          // The peer is the same tensor/data slot on the neighbouring stage.
          const RankCoords pc = place.coords(in.peer);
          CHECK(pc.data == prog.coords.data);
          CHECK(pc.tensor == prog.coords.tensor);
          const bool towards_next = in.kind == OpKind::send_activation || in.kind == OpKind::recv_gradient;
          CHECK(pc.pipeline == (prog.coords.pipeline + (towards_next ? 1 : p - 1)) % p);
          // Nothing leaves the model's ends.
          if (in.kind == OpKind::send_activation || in.kind == OpKind::recv_gradient) CHECK(ms < P - 1);
          if (in.kind == OpKind::recv_activation || in.kind == OpKind::send_gradient) CHECK(ms > 0);
          (in.kind == OpKind::send_activation || in.kind == OpKind::send_gradient ? sends : recvs)++;
        }
        // Each chunk that is not the model's last sends M activations and receives M
        // gradients; each that is not the first does the reverse.
        int not_last = 0, not_first = 0;
        for (int c = 0; c < s.v; ++c) {
          not_last += model_stage(prog, c, p) < P - 1;
          not_first += model_stage(prog, c, p) > 0;
        }
        CHECK(sends == M * (not_last + not_first));
        CHECK(recvs == M * (not_last + not_first));
      }
      CHECK(act_sent == act_recv);
      CHECK(grad_sent == grad_recv);
      if (p > 1) CHECK_FALSE(act_sent.empty());
    }
  }
}

TEST_CASE("every async instruction is awaited once, later, before the optimizer step", "[program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    for (const Shape& s : shapes()) {
      const Job job = make_job(s);
      INFO(s.name << (gran == Granularity::layer ? " (layer)" : " (chunk)"));
      for (const RankProgram& prog : build_programs(job, {gran})) {
        const auto& ops = prog.ops;
        const int opt = optimizer_index(prog);
        REQUIRE(opt >= 0);
        std::map<int, int> awaited;  // async index -> wait index
        for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
          if (ops[i].kind != OpKind::wait) continue;
          const int w = ops[i].wait_for;
          REQUIRE(w >= 0);
          REQUIRE(w < i);
          CHECK(ops[w].async);
          CHECK(ops[w].kind != OpKind::wait);
          CHECK(awaited.count(w) == 0);
          awaited[w] = i;
        }
        int asyncs = 0;
        for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
          if (!ops[i].async) continue;
          ++asyncs;
          INFO("rank " << prog.rank << " op " << i << " " << to_string(ops[i].kind));
          REQUIRE(awaited.count(i) == 1);
          CHECK(awaited[i] < opt);
          // Compute never runs asynchronously; receives block.
          CHECK_FALSE(is_compute(ops[i].kind));
          CHECK(ops[i].kind != OpKind::recv_activation);
          CHECK(ops[i].kind != OpKind::recv_gradient);
        }
        CHECK(asyncs == static_cast<int>(awaited.size()));
      }
    }
  }
}

TEST_CASE("the optimizer step ends the program", "[program]") {
  for (const Shape& s : shapes()) {
    const Job job = make_job(s);
    INFO(s.name);
    for (const RankProgram& prog : build_programs(job)) {
      int steps = 0;
      for (const Instruction& in : prog.ops) steps += in.kind == OpKind::optimizer_step;
      CHECK(steps == 1);
      const int opt = optimizer_index(prog);
      const int n = static_cast<int>(prog.ops.size());
      if (s.shard_optimizer && job.data_parallel_degree() > 1) {
        // Each rank updated its slice of the state; the new weights are gathered after.
        REQUIRE(opt == n - 2);
        const Instruction& ag = prog.ops.back();
        CHECK(ag.kind == OpKind::all_gather);
        CHECK(ag.group == CommGroup::data);
        CHECK_FALSE(ag.async);
      } else {
        CHECK(opt == n - 1);
      }
      CHECK(prog.ops[opt].seconds > 0);
    }
  }
}

TEST_CASE("compute seconds add up the cost model's layer and head times", "[program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    for (const Shape& s : shapes()) {
      const Job job = make_job(s);
      INFO(s.name << (gran == Granularity::layer ? " (layer)" : " (chunk)"));
      const int dp = 8 * s.nodes / (s.pp * s.tp);
      REQUIRE(job.data_parallel_degree() == dp);
      const double b = static_cast<double>(s.global_batch) / (dp * s.micro * s.ga);
      const GpuProfile& gpu = job.cluster.instance.gpu;
      const LayerTime lt = layer_time(gpu, job.model, Precision::fp16, b, s.tp, false);
      const HeadTime ht = head_time(gpu, job.model, Precision::fp16, b, s.tp);
      const double M = s.micro * s.ga, L = 12.0 / s.pp;
      for (const RankProgram& prog : build_programs(job, {gran})) {
        const int st = prog.coords.pipeline;
        double fwd = 0, bwd = 0, rec = 0;
        int fwd_ops = 0;
        for (const Instruction& in : prog.ops) {
          if (in.kind == OpKind::forward) fwd += in.seconds, ++fwd_ops;
          if (in.kind == OpKind::backward) bwd += in.seconds;
          if (in.kind == OpKind::recompute) rec += in.seconds;
          if (!is_compute(in.kind)) CHECK(in.seconds == 0);
        }
        INFO("rank " << prog.rank << " stage " << st);
        const double head_f = (st == 0 ? ht.embedding_fwd : 0) + (st == s.pp - 1 ? ht.logits_fwd : 0);
        const double head_b = (st == 0 ? ht.embedding_bwd : 0) + (st == s.pp - 1 ? ht.logits_bwd : 0);
        CHECK(fwd == Approx(M * (L * lt.forward() + head_f)).epsilon(1e-9));
        CHECK(bwd == Approx(M * (L * lt.backward() + head_b)).epsilon(1e-9));
        const double per_layer_recompute =
            s.ckpt == Checkpointing::full ? lt.forward() : s.ckpt == Checkpointing::selective ? lt.attention_fwd : 0.0;
        CHECK(rec == Approx(M * L * per_layer_recompute).epsilon(1e-9));
        // One forward per (micro-batch, chunk), or per layer.
        CHECK(fwd_ops == (gran == Granularity::layer ? M * L : M * s.v));
      }
    }
  }
}

// Megatron's rule, written out by hand: per micro-batch and layer two all-reduces forward
// (g after the attention and the MLP) and two backward (f before them), two more per fully
// recomputed layer; the vocabulary-parallel embedding's g forward on the first stage; on
// the head's stage the head's f backward and the cross-entropy's three fp32 all-reduces of
// b*s values (maximum, sum of exponentials, target logit) forward.
TEST_CASE("tensor-parallel all-reduces follow Megatron's f/g rule on every stage", "[program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    for (const Shape& s : shapes()) {
      const Job job = make_job(s);
      INFO(s.name << (gran == Granularity::layer ? " (layer)" : " (chunk)"));
      const int dp = 8 * s.nodes / (s.pp * s.tp);
      const double b = static_cast<double>(s.global_batch) / (dp * s.micro * s.ga);
      const int M = s.micro * s.ga, L = 12 / s.pp;
      for (const RankProgram& prog : build_programs(job, {gran})) {
        int activation = 0, loss = 0, instructions = 0;
        for (const Instruction& in : prog.ops) {
          if (in.group != CommGroup::tensor) continue;
          REQUIRE(in.kind == OpKind::all_reduce);
          CHECK_FALSE(in.async);  // on the critical path, between dependent GEMMs
          if (in.bytes == Approx(b * 1024 * 768 * 2).epsilon(1e-12)) activation += in.count;  // b s h fp16
          else if (in.bytes == Approx(b * 1024 * 4).epsilon(1e-12)) loss += in.count;        // b s fp32
          else FAIL("a tensor all-reduce of " << in.bytes << " bytes");
          ++instructions;
        }
        const int stage = prog.coords.pipeline;
        INFO("rank " << prog.rank << " stage " << stage);
        if (s.tp == 1) {
          CHECK(instructions == 0);
          continue;
        }
        const bool first = stage == 0, head = stage == s.pp - 1;
        const int recomputed = s.ckpt == Checkpointing::full ? 2 * L : 0;
        CHECK(activation == M * (4 * L + recomputed + (first ? 1 : 0) + (head ? 1 : 0)));
        CHECK(loss == M * (head ? 3 : 0));
      }
    }
  }
}

TEST_CASE("data-parallel gradient buckets ride the last backward of each chunk", "[program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    for (const Shape& s : shapes()) {
      const Job job = make_job(s);
      INFO(s.name << (gran == Granularity::layer ? " (layer)" : " (chunk)"));
      const int dp = job.data_parallel_degree();
      const int lpc = 12 / (s.pp * s.v);
      for (const RankProgram& prog : build_programs(job, {gran})) {
        const auto& ops = prog.ops;
        const int st = prog.coords.pipeline;
        INFO("rank " << prog.rank << " stage " << st);
        const int opt = optimizer_index(prog);
        // The last micro-batch that runs backward for each chunk.
        std::map<int, int> last_mb;
        for (const Instruction& in : ops)
          if (in.kind == OpKind::backward) last_mb[in.chunk] = in.microbatch;
        double bucket_bytes = 0;
        std::map<int, std::set<int>> layers_of_chunk;
        int last_compute = -1;
        for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
          const Instruction& in = ops[i];
          if (is_compute(in.kind)) last_compute = i;
          if (!is_bucket(in) || i > opt) continue;
          CHECK(in.kind == (s.shard_optimizer ? OpKind::reduce_scatter : OpKind::all_reduce));
          CHECK(in.async);  // overlapped with the layers below
          REQUIRE(last_compute >= 0);
          const Instruction& before = ops[last_compute];
          CHECK(before.kind == OpKind::backward);
          CHECK(before.chunk == in.chunk);
          CHECK(before.microbatch == last_mb[in.chunk]);
          CHECK(before.layer == in.layer);  // one bucket per layer, right after its backward
          CHECK(layers_of_chunk[in.chunk].insert(in.layer).second);
          bucket_bytes += in.bytes;
        }
        if (dp == 1) {
          CHECK(layers_of_chunk.empty());
          continue;
        }
        for (int c = 0; c < s.v; ++c) CHECK(layers_of_chunk[c].size() == static_cast<std::size_t>(lpc));
        // All of the stage's gradients on one tensor rank, in fp16.
        double params = 12.0 / s.pp * layer_on_rank(s.tp);
        if (st == 0) params += embedding_on_rank(s.tp);
        if (st == s.pp - 1) params += kHeadParams + (s.pp > 1 ? kTiedCopy / s.tp : 0.0);
        CHECK(bucket_bytes == Approx(params * 2).epsilon(1e-12));
      }
    }
  }
}

TEST_CASE("gradient accumulation runs the schedule once per pass", "[program]") {
  Shape s;
  s.pp = 2, s.tp = 2, s.micro = 4, s.global_batch = 32;
  const Job one = make_job(s);
  s.ga = 2;
  const Job two = make_job(s);
  require_valid(one);
  require_valid(two);
  for (int r = 0; r < 8; ++r) {
    const RankProgram p1 = build_program(one, r), p2 = build_program(two, r);
    auto forwards = [](const RankProgram& p) {
      std::map<int, int> per_mb;
      for (const Instruction& in : p.ops)
        if (in.kind == OpKind::forward) ++per_mb[in.microbatch];
      return per_mb;
    };
    const auto f1 = forwards(p1), f2 = forwards(p2);
    CHECK(f1.size() == 4);
    CHECK(f2.size() == 8);  // micro-batches 0..7: pass 2 continues the numbering
    for (int mb = 0; mb < 8; ++mb) CHECK(f2.count(mb) == 1);
    // Half the micro-batch size per pass (b = 32 / (2 x 4 x 2) = 2 vs 4): the data
    // buckets are sent once per step either way.
    int buckets1 = 0, buckets2 = 0;
    for (const Instruction& in : p1.ops) buckets1 += is_bucket(in);
    for (const Instruction& in : p2.ops) buckets2 += is_bucket(in);
    CHECK(buckets1 == 6);
    CHECK(buckets2 == 6);
  }
}

TEST_CASE("layer granularity: one compute instruction per layer, in model order", "[program]") {
  for (const Shape& s : shapes()) {
    const Job job = make_job(s);
    INFO(s.name);
    const int lpc = 12 / (s.pp * s.v);
    for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
      for (const RankProgram& prog : build_programs(job, {gran})) {
        // (kind, micro-batch, chunk) -> the layers in program order
        std::map<std::tuple<OpKind, int, int>, std::vector<int>> seen;
        for (const Instruction& in : prog.ops) {
          if (!is_compute(in.kind) || in.kind == OpKind::optimizer_step) continue;
          if (in.layer >= 0) {
            CHECK(in.layers == 1);
            CHECK(in.layer < lpc);
          } else {
            CHECK(in.layers == lpc);
          }
          seen[{in.kind, in.microbatch, in.chunk}].push_back(in.layer);
        }
        std::vector<int> up(lpc), down(lpc);
        for (int l = 0; l < lpc; ++l) up[l] = l, down[l] = lpc - 1 - l;
        for (const auto& [key, layers] : seen) {
          const OpKind kind = std::get<0>(key);
          INFO("rank " << prog.rank << " " << to_string(kind) << " mb " << std::get<1>(key) << " chunk "
                       << std::get<2>(key));
          if (gran == Granularity::layer) {
            CHECK(layers == (kind == OpKind::forward ? up : down));
          } else if (layers == std::vector<int>{-1}) {
            // whole chunk
          } else {
            // Chunk granularity goes per layer only where gradient buckets need it.
            CHECK(kind != OpKind::forward);
            CHECK(layers == down);
          }
        }
      }
    }
  }
}

TEST_CASE("activation offload: each forward offloads, each backward waits for its reload", "[program]") {
  Shape s;
  s.pp = 2, s.tp = 1, s.micro = 4, s.global_batch = 16, s.ckpt = Checkpointing::full, s.offload = true;
  const Job job = make_job(s);
  require_valid(job);
  // Full checkpointing keeps each layer's input: 2 s b h bytes in fp16, b = 16 / (4 x 4) = 1.
  const double per_chunk = 6 * 2.0 * 1024 * 1 * 768;
  for (const RankProgram& prog : build_programs(job)) {
    const auto& ops = prog.ops;
    int offloads = 0, reloads = 0;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Instruction& in = ops[i];
      if (in.kind == OpKind::offload || in.kind == OpKind::reload) {
        CHECK(in.async);
        CHECK(in.bytes == Approx(per_chunk).epsilon(1e-12));
        (in.kind == OpKind::offload ? offloads : reloads)++;
      }
      if (in.kind == OpKind::backward && (in.layer == -1 || in.layer == 5)) {
        // Before the first backward kernel of a (micro-batch, chunk) (its recompute aside),
        // the reload of that (micro-batch, chunk) was awaited.
        bool found = false;
        for (int j = i - 1; j >= 0 && !(is_compute(ops[j].kind) && ops[j].kind != OpKind::recompute); --j)
          if (ops[j].kind == OpKind::wait && ops[ops[j].wait_for].kind == OpKind::reload &&
              ops[ops[j].wait_for].microbatch == in.microbatch && ops[ops[j].wait_for].chunk == in.chunk)
            found = true;
        INFO("rank " << prog.rank << " backward mb " << in.microbatch);
        CHECK(found);
      }
    }
    CHECK(offloads == 4);
    CHECK(reloads == 4);
  }
}

namespace {
Shape sharded_shape(int pp, int sdp, Checkpointing ckpt) {
  Shape s;
  s.name = "sharded";
  s.pp = pp, s.tp = 1, s.micro = 2, s.global_batch = 16 / pp * 2, s.sdp = sdp, s.ckpt = ckpt;
  return s;
}
}  // namespace

TEST_CASE("sharded data parallel: gather before forward and backward, reduce-scatter after", "[program]") {
  struct Case { int pp, sdp; Checkpointing ckpt; };
  for (const Case c : {Case{1, 4, Checkpointing::none}, Case{1, 8, Checkpointing::full},
                       Case{2, 2, Checkpointing::selective}}) {
    const Shape s = sharded_shape(c.pp, c.sdp, c.ckpt);
    const Job job = make_job(s);
    require_valid(job);
    const int dp = 8 / c.pp, lpc = 12 / c.pp;
    INFO("pp " << c.pp << " sdp " << c.sdp << " dp " << dp);
    const double layer_bytes = kLayerParams * 2;  // tp 1, fp16
    for (const RankProgram& prog : build_programs(job)) {  // chunk granularity is overridden
      const auto& ops = prog.ops;
      const int st = prog.coords.pipeline;
      INFO("rank " << prog.rank);
      int gathers = 0, scatters = 0;
      std::set<int> open_gathers;  // issued, not yet awaited
      std::set<int> ready;         // gathered and awaited since the previous layer's compute
      for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
        const Instruction& in = ops[i];
        if (in.kind == OpKind::all_gather && in.group == CommGroup::sharded) {
          ++gathers;
          CHECK(in.async);
          // output: the layer's gather units (SMP leaves the tensors under 1e6
          // elements whole: the projection, the norms and biases, 593,664 elements;
          // the layers next to the embedding and head carry those too, one call more)
          CHECK(in.bytes * in.count >= (kLayerParams - 593664.0) * 2 * (1 - 1e-12));
          open_gathers.insert(i);
        }
        if (in.kind == OpKind::wait && open_gathers.erase(in.wait_for)) ready.insert(ops[in.wait_for].layer);
        if (in.kind == OpKind::forward || (in.kind == OpKind::recompute) ||
            (in.kind == OpKind::backward && !(i > 0 && ops[i - 1].kind == OpKind::recompute))) {
          // The first compute of a layer finds its weights gathered.
          CHECK(in.layer >= 0);
          CHECK(ready.count(in.layer) == 1);
          ready.clear();
        }
        if (in.kind == OpKind::backward) {
          // Its gradient shard leaves right after, asynchronously.
          REQUIRE(i + 1 < static_cast<int>(ops.size()));
          const Instruction& rs = ops[i + 1];
          CHECK(rs.kind == OpKind::reduce_scatter);
          CHECK(rs.group == CommGroup::sharded);
          CHECK(rs.layer == in.layer);
          CHECK(rs.microbatch == in.microbatch);
          CHECK(rs.async);
          CHECK(rs.bytes * rs.count >= layer_bytes * (1 - 1e-12));
        }
        if (in.kind == OpKind::reduce_scatter) ++scatters;
        // No plain data-parallel buckets under sharding.
        CHECK_FALSE(is_bucket(in));
      }
      CHECK(open_gathers.empty());
      CHECK(gathers == 2 * s.micro * lpc);
      CHECK(scatters == s.micro * lpc);
      // Replicas of each shard all-reduce it once at the end (dp > sdp only).
      double params = lpc * kLayerParams;
      if (st == 0) params += kEmbeddingParams;
      if (st == c.pp - 1) params += kHeadParams + (c.pp > 1 ? kTiedCopy : 0.0);
      int replica = 0;
      for (const Instruction& in : ops)
        if (in.group == CommGroup::replica) {
          ++replica;
          CHECK(in.kind == OpKind::all_reduce);
          CHECK(in.bytes == Approx(params / c.sdp * 2).epsilon(1e-12));
        }
      CHECK(replica == (dp > c.sdp ? 1 : 0));
    }
  }
}

TEST_CASE("sharded data parallel also gathers and reduces the embedding and head", "[program]") {
  // estimator.cpp charges, per micro-batch, two all-gathers and one reduce-scatter of the
  // embedding + head weights under sharded data parallelism ("gathered and reduced the same
  // way" as the layers), and memory.cpp shards them (parameters / sdp). The program only
  // moves the transformer layers, so the embedding and head gradients are never
  // synchronised within a sharded group and the simulator under-counts the traffic.
  // FSDP gathers every parameter (SMP and ZeRO-3 leave the small ones whole).
  const Shape s = sharded_shape(1, 8, Checkpointing::none);
  Job job = make_job(s);
  job.parallel.sharding_flavor = ShardingFlavor::fsdp;
  const RankProgram prog = build_program(job, 0);
  double gathered = 0, scattered = 0;
  for (const Instruction& in : prog.ops) {
    if (in.group != CommGroup::sharded) continue;
    if (in.kind == OpKind::all_gather) gathered += in.bytes * in.count;
    if (in.kind == OpKind::reduce_scatter) scattered += in.bytes * in.count;
  }
  const double stage_bytes = (12 * kLayerParams + kEmbeddingParams + kHeadParams) * 2;
  CHECK(scattered == Approx(s.micro * stage_bytes).epsilon(1e-9));
  CHECK(gathered == Approx(2 * s.micro * stage_bytes).epsilon(1e-9));
}

// Sequence parallelism: the parameters replicated over the tensor group and used on the
// sequence shard hold the shard's gradient; one tensor all-reduce a step, after every
// data-parallel bucket and before the optimizer, sums them. Counted by hand for GPT-2
// small (h 768, s 1024) on pipeline 2 (6 layers a stage), fp16 (2 bytes):
//   a layer: 2 layer norms x (weight + bias) 2h + the 2 row-parallel biases (attention
//            projection, fc2) h each = 6h = 4,608
//   stage 0: 6 layers + the position table s h (added to the shard after the embedding's
//            reduce-scatter) = 27,648 + 786,432 = 814,080 -> 1,628,160 bytes
//   stage 1: 6 layers + the final norm 2h = 27,648 + 1,536 = 29,184 -> 58,368 bytes
// With optimizer-state sharding over dp 2 each rank sums its half.
TEST_CASE("sequence parallelism: one tensor all-reduce of the replicated gradients before the optimizer",
          "[program][sequence]") {
  Shape s;  // 1 node: pp 2 x tp 2 x dp 2
  s.pp = 2, s.tp = 2, s.micro = 4, s.global_batch = 16;
  for (const bool shard_optimizer : {false, true}) {
    s.shard_optimizer = shard_optimizer;
    for (const bool sp : {false, true}) {
      Job job = make_job(s);
      job.parallel.sequence_parallel = sp;
      INFO((sp ? "sequence parallel" : "no sequence parallelism") << (shard_optimizer ? ", sharded optimizer" : ""));
      for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
        for (const RankProgram& prog : build_programs(job, {gran})) {
          INFO("rank " << prog.rank << " stage " << prog.coords.pipeline);
          std::vector<int> sums;
          int last_bucket = -1;
          for (int i = 0; i < static_cast<int>(prog.ops.size()); ++i) {
            const Instruction& in = prog.ops[i];
            if (in.group == CommGroup::tensor && in.microbatch < 0) sums.push_back(i);
            if (is_bucket(in) || (in.kind == OpKind::wait && is_bucket(prog.ops[in.wait_for]))) last_bucket = i;
          }
          if (!sp) {
            CHECK(sums.empty());
            continue;
          }
          REQUIRE(sums.size() == 1);
          const Instruction& sum = prog.ops[sums[0]];
          CHECK(sum.kind == OpKind::all_reduce);
          CHECK_FALSE(sum.async);
          CHECK(sum.count == 1);
          const double bytes = prog.coords.pipeline == 0 ? 1628160.0 : 58368.0;
          CHECK(sum.bytes == Approx(shard_optimizer ? bytes / 2 : bytes).epsilon(1e-12));
          CHECK(sums[0] > last_bucket);
          CHECK(sums[0] < optimizer_index(prog));
        }
      }
    }
  }
}

TEST_CASE("gradient buckets carry the embedding and head where Megatron's stages hold them", "[program]") {
  // GPT-2 small (12 layers) on pipeline 2 x virtual 2: 3 layers per chunk; model stages
  // 0..3 are (stage 0, chunk 0), (stage 1, chunk 0), (stage 0, chunk 1), (stage 1, chunk 1).
  Job job = p4d_job("gpt2-small", 1, 64);
  job.parallel.pipeline_parallel_degree = 2;
  job.parallel.virtual_stages = 2;
  job.parallel.pipeline = PipelineSchedule::one_f_one_b;
  job.parallel.microbatches = 4;
  require_valid(job);
  int embeddings = 0, heads = 0;
  for (int stage = 0; stage < 2; ++stage)
    for (int chunk = 0; chunk < 2; ++chunk)
      for (int layer = 0; layer < 3; ++layer) {
        const BucketExtras e = bucket_extras(job, stage, chunk, layer);
        embeddings += e.embedding, heads += e.head;
        CHECK(e.embedding == (stage == 0 && chunk == 0 && layer == 0));  // first model stage, layer 0
        CHECK(e.head == (stage == 1 && chunk == 1 && layer == 2));       // last model stage, last layer
      }
  CHECK(embeddings == 1);
  CHECK(heads == 1);
  job.parallel.lm_head_stage = LmHeadStage::first;  // the head joins layer 0 of stage 0
  CHECK(bucket_extras(job, 0, 0, 0).head);
  CHECK(bucket_extras(job, 0, 0, 0).embedding);
  CHECK_FALSE(bucket_extras(job, 1, 1, 2).head);
}
