#include "partune/search/space.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/search/knobs.hpp"

namespace partune::search {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool is_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

// Llama 3's stages (Dubey et al. 2024, sec. 3.3.2: "we reduce one Transformer layer each
// from the first and the last stages"): `chunks` model chunks of layers + 2 split evenly,
// the first and the last one layer short, the embedding and the head in their place.
// Empty where the layers split evenly without it, or layers + 2 do not.
std::vector<int> ends_short(int layers, int chunks) {
  if (chunks < 2 || layers % chunks == 0 || (layers + 2) % chunks != 0) return {};
  std::vector<int> out(chunks, (layers + 2) / chunks);
  --out.front(), --out.back();
  return out;
}

// Megatron-Core's split with the embedding and the loss counted as a layer each
// (LayerSplit::embedding_and_loss): ceil((layers + 2) / chunks) a chunk, the first one
// layer short, the last with what is left. Empty where the layers or layers + 2 divide
// (even, ends_short) or too little is left for the last chunk.
std::vector<int> embedding_and_loss(int layers, int chunks) {
  if (chunks < 2 || layers % chunks == 0 || (layers + 2) % chunks == 0) return {};
  const int per_chunk = (layers + 2 + chunks - 1) / chunks;
  const int last = layers - (per_chunk - 1) - (chunks - 2) * per_chunk;
  if (last < 0) return {};
  std::vector<int> out(chunks, per_chunk);
  out.front() = per_chunk - 1, out.back() = last;
  return out;
}

// A split of `layers` over `chunks` model chunks where they do not divide evenly: Llama 3's
// (ends_short) where it exists, else the chunks as even as they go, the first and the
// last (beside the embedding and the head) among the shorter ones. Empty where the layers
// divide evenly or are fewer than the chunks.
std::vector<int> uneven_split(int layers, int chunks) {
  if (std::vector<int> llama = ends_short(layers, chunks); !llama.empty()) return llama;
  if (chunks < 2 || layers < chunks || layers % chunks == 0) return {};
  std::vector<int> out(chunks, layers / chunks);
  for (int extra = layers % chunks, k = 1; extra > 0; --extra, ++k) ++out[static_cast<std::size_t>(k % chunks)];
  return out;
}

template <class T>
std::vector<T> or_default(const std::vector<T>& given, std::vector<T> fallback) {
  return given.empty() ? fallback : given;
}

}  // namespace

std::vector<int> split_layers(LayerSplit split, int layers, int chunks) {
  switch (split) {
    case LayerSplit::even: return {};
    case LayerSplit::ends_short: return ends_short(layers, chunks);
    case LayerSplit::embedding_and_loss: return embedding_and_loss(layers, chunks);
    case LayerSplit::uneven: return uneven_split(layers, chunks);
  }
  return {};
}

void restrict_space(SearchSpace& space, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument("'" + assignment + "': a restriction looks like key=value or key=v1,v2");
  const Knob& k = knob(assignment.substr(0, eq));
  const std::vector<std::string> values = split(assignment.substr(eq + 1), ',');
  if (values.empty()) throw std::invalid_argument(std::string(k.key) + ": no value given");
  k.restrict(space, values);
}

SearchSpace requested_space(const Job& base, const std::string& origin, const std::vector<std::string>& fix) {
  SearchSpace space;
  for (const std::string& f : base.search_restrictions) {
    try {
      restrict_space(space, f);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError(origin, "search", e.what());
    }
  }
  for (const std::string& f : fix) {
    try {
      restrict_space(space, f);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError("--fix", f, e.what());
    }
  }
  opt_in_from_job(space, base);
  return space;
}

void opt_in_from_job(SearchSpace& space, const Job& base) {
  const ParallelConfig& pc = base.parallel;
  if (pc.offload_optimizer && space.offload_optimizer.empty()) space.offload_optimizer = {false, true};
  if (pc.offload_parameters && space.offload_parameters.empty()) space.offload_parameters = {false, true};
  if (pc.shard_gradients && space.shard_gradients.empty()) space.shard_gradients = {false, true};
}

void pin_from_job(SearchSpace& space, const Job& base, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) knob(key).pin(space, base);
}

void apply(const Point& p, Job& job) {
  for (const Knob& k : knobs()) k.apply(p, job);
  // Layout settings of the base job belong to its own degrees; a point starts uniform
  // (the partitioner may set stages later).
  job.parallel.stage_layers.clear();
  job.parallel.pipeline_layout.clear();  // (a layout string gave the base job's stage_layers)
  job.parallel.lm_head_stage = LmHeadStage::last;
  job.training.gradient_accumulation = 1;
  job.parallel.stage_layers = split_layers(p.layer_split, job.model.layers, p.pipeline * p.virtual_stages);
}

Job make_job(const Job& base, const Point& point) {
  Job job = base;
  apply(point, job);
  return job;
}

namespace {

// The walk over the space: degrees, then batch split and schedule, then placement, then
// the memory and kernel knobs; each complete point is checked by the job rules.
class Enumerator {
 public:
  // `uneven`: also the pipeline degrees that split the layers only unevenly (uneven_split).
  Enumerator(const Job& base, const SearchSpace& space, const std::function<void(const Point&)>& visit, bool uneven)
      : base_(base), space_(space), visit_(visit), scratch_(base), uneven_(uneven) {
    // FlashAttention is tried where the job may run it: 16-bit (or fp8) training, or an
    // instance whose kernel takes fp32 (the CPU profiles).
    const bool half = mixed_precision(base.training.precision) || base.cluster.instance.gpu.attention.flash_fp32;
    ckpts_ = or_default(space.checkpointing, {Checkpointing::none, Checkpointing::selective, Checkpointing::full});
    offloads_ = or_default(space.offload_activations, {false, true});
    opt_shards_ = or_default(space.shard_optimizer_state, {false, true});
    grad_shards_ = or_default(space.shard_gradients, {false});
    for (bool o : or_default(space.offload_optimizer, {false}))
      for (bool p : or_default(space.offload_parameters, {false}))
        if (!p || o) state_offloads_.emplace_back(o, p);  // parameters go with the optimizer
    flashes_ = or_default(space.flash_attention, half ? std::vector<bool>{false, true} : std::vector<bool>{false});
    algos_ = or_default(space.sharded_collectives, {CollectiveAlgorithm::ring, CollectiveAlgorithm::all_to_all});
    comms_ = or_default(space.context_comms, {ContextComm::p2p, ContextComm::a2a});
    const auto& every = PlacementOrder::all();
    placements_ = or_default(space.placements, std::vector<PlacementOrder>(every.begin(), every.end()));
  }

  // Legal points visited so far with evenly split layers or Llama 3's.
  long legal_even() const { return legal_even_; }

  EnumerationStats run() {
    const ModelSpec& m = base_.model;
    // Tensor groups up to the NVLink level: a node, or an NVLink domain of several.
    const int world = base_.world_size(), G = base_.cluster.instance.fabric_gpus();
    std::vector<int> pp_all, tp_all;
    // Degrees that split the layers, or split them with the ends short (Llama 3, Megatron).
    for (int d = 1; d <= std::min(world, m.layers + 2); ++d)
      if (world % d == 0 && (m.layers % d == 0 || layer_splits(d).front() != LayerSplit::even)) pp_all.push_back(d);
    for (int t = 1; t <= G; t *= 2)
      if (m.heads % t == 0 && m.ffn_hidden % t == 0) tp_all.push_back(t);
    for (int pp : or_default(space_.pipeline_degrees, pp_all))
      for (int tp : or_default(space_.tensor_degrees, tp_all)) {
        ++stats_.considered;
        if (world % (pp * tp) != 0) {
          ++stats_.invalid;
          continue;
        }
        const int axis = world / (pp * tp);  // data x context ranks
        for (int cp : or_default(space_.context_degrees, context_degrees(axis))) {
          if (axis % cp != 0) {
            ++stats_.considered, ++stats_.invalid;
            continue;
          }
          for (ContextComm comm : cp > 1 ? comms_ : std::vector<ContextComm>{comms_.front()})
            degrees(pp, tp, cp, comm, axis);
        }
      }
    return stats_;
  }

 private:
  // Distinct placements: the ones that give the same strides on every axis with more
  // than one member produce the same groups.
  std::vector<PlacementOrder> distinct_placements(int dp, int pp, int tp) {
    std::vector<PlacementOrder> placements;
    std::set<std::tuple<int, int, int>> seen;
    for (PlacementOrder order : placements_) {
      const Placement pl(order, dp, pp, tp);
      const auto key = std::make_tuple(dp > 1 ? pl.stride(Axis::data) : 0, pp > 1 ? pl.stride(Axis::pipeline) : 0,
                                       tp > 1 ? pl.stride(Axis::tensor) : 0);
      if (seen.insert(key).second) placements.push_back(order);
      else ++stats_.duplicates;
    }
    return placements;
  }

  std::vector<std::pair<PipelineSchedule, int>> schedules(int pp) const {
    std::vector<std::pair<PipelineSchedule, int>> out;
    const auto kinds = or_default(space_.schedules, pp > 1 ? std::vector<PipelineSchedule>{PipelineSchedule::gpipe,
                                                                                           PipelineSchedule::one_f_one_b,
                                                                                           PipelineSchedule::zb_h1,
                                                                                           PipelineSchedule::zbv}
                                                           : std::vector<PipelineSchedule>{PipelineSchedule::one_f_one_b});
    for (PipelineSchedule sc : kinds) {
      // A V runs two chunks a stage, whatever virtual_stages the space lists.
      const auto vs = v_shaped(sc) ? std::vector<int>{2}
                                   : or_default(space_.virtual_stages, sc == PipelineSchedule::one_f_one_b && pp > 1
                                                                           ? std::vector<int>{1, 2, 4}
                                                                           : std::vector<int>{1});
      for (int v : vs) out.push_back({sc, v});
    }
    return out;
  }

  // The splits of the layers over `chunks` this walk tries: even where they divide (or
  // where nothing else applies: the job rules then refuse it); else Llama 3's or
  // Megatron's, or with uneven_ the chunks as even as they go, but for a split the first
  // walk visited already.
  std::vector<LayerSplit> layer_splits(int chunks) const {
    const int L = base_.model.layers;
    if (chunks < 2 || L % chunks == 0) return {LayerSplit::even};
    if (uneven_) {
      const std::vector<int> split = uneven_split(L, chunks);
      if (split.empty()) return {LayerSplit::even};
      if (split == split_layers(LayerSplit::embedding_and_loss, L, chunks)) return {};
      return {LayerSplit::uneven};
    }
    for (LayerSplit s : {LayerSplit::ends_short, LayerSplit::embedding_and_loss})
      if (!split_layers(s, L, chunks).empty()) return {s};
    return {LayerSplit::even};
  }

  // Context parallelism's default degrees: 1, and the powers of two dividing the data
  // axis that split a sequence into 2 cp chunks of whole tokens, kMinContextTokens or
  // more on each rank.
  std::vector<int> context_degrees(int axis) const {
    std::vector<int> out{1};
    const int s = base_.model.seq_len;
    for (int c = 2; c <= axis && s / c >= kMinContextTokens; c *= 2)
      if (axis % c == 0 && s % (2 * c) == 0) out.push_back(c);
    return out;
  }

  // Expert groups of `etp` x ep ranks drawn from a stage's `grid` tensor x data x context
  // ranks (check_experts: etp x ep divides the grid), ep dividing the experts; with etp =
  // tp they are data-parallel ranks. A dense model: none.
  std::vector<int> expert_degrees(int grid, int etp) const {
    const int experts = base_.model.experts;
    std::vector<int> out;
    for (int d = 1; d <= grid / etp; ++d)
      if (grid % (etp * d) == 0 && (d == 1 || (experts > 0 && experts % d == 0))) out.push_back(d);
    return out;
  }

  // The experts' tensor degrees: the tensor degree and, with experts, 1 (MoE parallel folding).
  std::vector<int> expert_tensor_degrees(int tp) const {
    const bool fold = base_.model.experts > 0 && tp > 1;
    return or_default(space_.expert_tensor_degrees, fold ? std::vector<int>{tp, 1} : std::vector<int>{tp});
  }

  // `axis` = data x context ranks: sharded groups are made of them, expert groups of them
  // and the tensor ranks, the batch splits over the axis / cp data-parallel replicas.
  void degrees(int pp, int tp, int cp, ContextComm comm, int axis) {
    const int B = base_.training.global_batch, dp = axis / cp;
    std::vector<int> sdp_all, b_all;
    for (int d = 1; d <= axis; ++d)
      if (axis % d == 0 && (is_power_of_two(d) || d == axis)) sdp_all.push_back(d);
    for (int b = 1; b <= B; b *= 2)
      if (B % (static_cast<long>(dp) * b) == 0) b_all.push_back(b);
    const std::vector<PlacementOrder> placements = distinct_placements(axis, pp, tp);
    for (int sdp : or_default(space_.sharded_degrees, sdp_all))
      for (int etp : expert_tensor_degrees(tp))
      for (int ep : or_default(space_.expert_degrees, expert_degrees(tp * axis, etp)))
      for (int b : or_default(space_.microbatch_sizes, b_all)) {
        // (check_job's rules: a folded expert layout needs expert parallelism.)
        if (B % (static_cast<long>(dp) * b) != 0 || (sdp > 1 && ep > 1) || (etp != tp && ep == 1)) {
          ++stats_.considered, ++stats_.invalid;
          continue;
        }
        Point p;
        p.pipeline = pp, p.tensor = tp, p.sharded = sdp, p.expert = ep, p.microbatch_size = b;
        p.expert_tensor = etp;
        p.context = cp, p.context_comm = comm;
        p.microbatches = B / (dp * b);
        for (const auto& [sched, v] : schedules(pp))
          for (LayerSplit split : layer_splits(pp * v)) {
            p.layer_split = split;
            for (PlacementOrder placement : placements) {
              p.schedule = sched, p.virtual_stages = v, p.placement = placement;
              memory_knobs(p, axis);
            }
          }
      }
  }

  // `dp`: the data axis (optimizer-state sharding splits over data x context ranks).
  void memory_knobs(Point p, int dp) {
    const int layers_per_stage = base_.model.layers / p.pipeline;
    // Sequence parallelism splits over the tensor-parallel group: only with one.
    const auto sps = or_default(space_.sequence_parallel,
                                p.tensor > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false});
    // Folded experts with tensor parallelism need sequence parallelism (Megatron-Core's layout).
    const bool folded = p.expert_tensor != p.tensor && p.tensor > 1;
    for (Checkpointing ck : ckpts_)
      for (int ck_layers : ck == Checkpointing::none
                               ? std::vector<int>{-1}
                               : or_default(space_.checkpointed_layers, layers_per_stage >= 2
                                                                            ? std::vector<int>{-1, layers_per_stage / 2}
                                                                            : std::vector<int>{-1}))
        for (bool off : offloads_) {
          if (off && ck == Checkpointing::none) continue;  // offload moves checkpoints
          for (bool zero1 : opt_shards_)
          for (bool zero2 : grad_shards_) {
            if (zero1 && (p.sharded > 1 || dp == 1)) continue;  // sharded DP already shards it
            if (zero2 && !zero1) continue;                       // gradients go with the optimizer state
            p.shard_gradients = zero2;
            for (bool fa : flashes_)
              for (bool sp : sps)
                for (CollectiveAlgorithm algo : algos_)
                  for (const auto& [opt_off, param_off] : state_offloads_) {
                    if (p.sharded == 1 && algo != algos_.front()) continue;  // no sharded collectives
                    if (param_off && p.sharded == 1) continue;               // a shard to keep on the host
                    if (folded && !sp) continue;                             // Megatron-Core's layout
                    p.checkpointing = ck, p.checkpointed_layers = ck_layers, p.offload = off;
                    p.shard_optimizer = zero1, p.flash = fa, p.sequence_parallel = sp, p.sharded_collective = algo;
                    p.offload_optimizer = opt_off, p.offload_parameters = param_off;
                    check_and_visit(p);
                  }
          }
        }
  }

  void check_and_visit(const Point& p) {
    ++stats_.considered;
    apply(p, scratch_);
    if (check_job(scratch_)) {
      ++stats_.invalid;
      return;
    }
    ++stats_.legal;
    if (p.layer_split == LayerSplit::even || p.layer_split == LayerSplit::ends_short) ++legal_even_;
    visit_(p);
  }

  const Job& base_;
  const SearchSpace& space_;
  const std::function<void(const Point&)>& visit_;
  Job scratch_;
  bool uneven_ = false;
  EnumerationStats stats_;
  long legal_even_ = 0;  // legal points whose layers split evenly or as Llama 3's
  std::vector<Checkpointing> ckpts_;
  std::vector<bool> offloads_, opt_shards_, grad_shards_, flashes_;
  std::vector<std::pair<bool, bool>> state_offloads_;  // (offload_optimizer, offload_parameters)
  std::vector<CollectiveAlgorithm> algos_;
  std::vector<ContextComm> comms_;
  std::vector<PlacementOrder> placements_;
};

}  // namespace

EnumerationStats enumerate(const Job& base, const SearchSpace& space,
                           const std::function<void(const Point&)>& visit) {
  Enumerator first(base, space, visit, false);
  const EnumerationStats even = first.run();
  if (first.legal_even() > 0) return even;
  // No even split of the layers (nor Llama 3's) gives a legal layout (a batch of 2^k
  // sequences on 72 GPUs needs a pipeline degree of 9 or 18, which 48 layers do not
  // divide): the uneven ones too.
  EnumerationStats uneven = Enumerator(base, space, visit, true).run();
  uneven.considered += even.considered;
  uneven.invalid += even.invalid;
  uneven.duplicates += even.duplicates;
  uneven.legal += even.legal;
  return uneven;
}

std::string describe(const Job& job) {
  std::string s;
  for (const Knob& k : knobs()) s += k.describe(job);
  // The layout the partitioner may choose (not a knob of the space).
  const ParallelConfig& pc = job.parallel;
  const int chunks = pc.pipeline_parallel_degree * pc.virtual_stages;
  const std::vector<int>& sl = pc.stage_layers;
  if (!sl.empty() && sl == ends_short(job.model.layers, chunks)) s += " ends-1";
  else if (!sl.empty() && sl == embedding_and_loss(job.model.layers, chunks))
    s += fmt::format(" ends-1/{}", sl.front() + 1 - sl.back());
  else if (!pc.stage_layers.empty()) s += fmt::format(" stages[{}]", fmt::join(pc.stage_layers, ","));
  if (pc.lm_head_stage == LmHeadStage::first) s += " head-on-stage0";
  return s;
}

namespace {

// describe()'s tokens in the order it writes them: (token, meaning).
const std::vector<std::pair<const char*, const char*>>& legend() {
  static const std::vector<std::pair<const char*, const char*>> table = {
      {"ppP tpT dpD", "pipeline, tensor and data-parallel degrees (P x T x D x C = the GPUs, C the context degree "
                      "below, 1 when absent; D counts the replicas of the batch)"},
      {"cpC(comm)", "context parallelism: each sequence split over C ranks, exchanging keys and values by comm "
                    "(p2p ring, a2a all-to-alls, allgather)"},
      {"sdpS(coll)", "sharded data parallelism (ZeRO-3/FSDP) over S of the D x C data and context ranks (so S may "
                     "exceed D: dp1 cp2 sdp2), its all-gathers and reduce-scatters by the collective coll (ring, "
                     "all_to_all, ...)"},
      {"epE", "expert parallelism: the experts split over E of the D x C data and context ranks (with etpX, E x X "
              "of the T x D x C tensor, data and context ranks)"},
      {"etpX", "MoE parallel folding: the experts' own tensor degree X (shown where it is not T; Megatron-Core's "
               "expert_tensor_parallel_size)"},
      {"mbMxS", "M micro-batches of S sequences each, per data-parallel replica and step"},
      {"gpipe", "pipeline schedule: every forward pass, then every backward pass"},
      {"1f1b", "pipeline schedule: one forward, one backward (1F1B)"},
      {"1f1b-vN", "interleaved 1F1B: N model chunks (virtual stages) per GPU"},
      {"zb-h1", "zero-bubble pipeline schedule ZB-H1: weight gradients deferred into the drain's bubble"},
      {"zbv, dualpipev", "V-shaped zero-bubble schedules: two model chunks per GPU, the first stage holding both ends"},
      {"DPT, PDT, ...", "placement: the order of the data (D), pipeline (P) and tensor (T) axes over global ranks, "
                        "slowest first; the last letter's groups are consecutive ranks (inside a node)"},
      {"ckpt-selective", "activation checkpointing: attention's score part recomputed in backward"},
      {"ckpt-full", "activation checkpointing: each layer's forward recomputed in backward"},
      {"ckpt-op", "activation checkpointing, torchtitan's op-level policy: every other matmul and the element-wise ops "
                  "recomputed"},
      {"ckpt-dots", "activation checkpointing, JAX's checkpoint_dots (MaxText's minimal): the element-wise ops "
                    "recomputed"},
      {"(N/stage)", "checkpointing on the first N layers of each stage only (else all of them)"},
      {"offload", "checkpointed activations kept in host memory"},
      {"offload-opt", "optimizer state and master weights in host memory (ZeRO-Offload)"},
      {"offload-params", "the parameter shard in host memory too"},
      {"zero1", "optimizer state sharded over the data-parallel ranks (ZeRO stage 1)"},
      {"zero2", "gradients sharded too, reduce-scattered every micro-batch (ZeRO stage 2)"},
      {"flash", "FlashAttention"},
      {"sp", "sequence parallelism: norms, dropouts and residuals split over the tensor-parallel group"},
      {"ends-1", "Llama 3's stages: the first and the last model chunk one layer short (layers + 2 split evenly)"},
      {"ends-1/N", "Megatron's split, the embedding and the loss counted as a layer each: ceil((layers + 2) / chunks) "
                   "layers a chunk, the first chunk one short, the last N short (61 layers over 32 chunks: 1, 2 x 30, 0)"},
      {"stages[a,b,..]", "layers of each pipeline stage, as the automated partitioner split them (else even)"},
      {"head-on-stage0", "the LM head on the first pipeline stage (beside the tied embedding)"},
  };
  return table;
}

}  // namespace

std::string describe_legend() {
  constexpr std::size_t kIndent = 19, kWidth = 100;  // meanings wrapped at word breaks
  std::string s = "Notation of a configuration (search, sweep --search):\n";
  for (const auto& [token, meaning] : legend()) {
    std::string line = fmt::format("  {:<16} ", token);
    std::istringstream words(meaning);
    for (std::string w; words >> w;) {
      if (line.size() + 1 + w.size() > kWidth && line.size() > kIndent) {
        s += line + "\n";
        line = std::string(kIndent, ' ');
      } else if (line.size() > kIndent) {
        line += ' ';
      }
      line += w;
    }
    s += line + "\n";
  }
  return s;
}

std::string describe_legend_line() {
  return "  notation: ppP tpT dpD degrees (cpC: context); mbMxS M micro-batches of S sequences; gpipe, 1f1b, 1f1b-vN, zb-h1, "
         "zbv schedules (N virtual stages);\n  DPT etc. axis order over ranks, slowest first; ckpt-* checkpointing; zero1 sharded "
         "optimizer state; flash FlashAttention;\n  sp sequence parallelism (the whole legend: partune search --help)\n";
}

bool matches(const Job& job, const std::vector<std::string>& filters) {
  for (const std::string& f : filters) {
    SearchSpace probe;
    restrict_space(probe, f);  // validates the key and values
    for (const Knob& k : knobs())
      if (!k.allows(probe, job)) return false;
  }
  return true;
}

void check_filters(const std::vector<std::string>& filters, const std::string& option) {
  for (const std::string& f : filters) {
    SearchSpace probe;
    try {
      restrict_space(probe, f);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError(option, f, e.what());
    }
  }
}

}  // namespace partune::search
