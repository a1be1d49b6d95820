#pragma once
// The search space: every knob the autotuner may turn, each a list of allowed values.
// An empty list means "every legal value" for that knob; a pinned knob has one value.
#include <functional>
#include <string>
#include <vector>

#include "partune/costmodel/job.hpp"

namespace partune::search {

// Context parallelism's default degrees keep at least this many tokens of a sequence on
// a rank (shorter sequences are not split).
inline constexpr int kMinContextTokens = 4096;

struct SearchSpace {
  std::vector<int> pipeline_degrees;
  std::vector<int> tensor_degrees;
  std::vector<int> sharded_degrees;       // sharded_data_parallel_degree
  std::vector<int> expert_degrees;        // expert_parallel_degree (mixtures of experts)
  // expert_tensor_parallel_degree (MoE parallel folding): default the tensor degree and,
  // for a model with experts and a tensor degree above 1, 1 (Megatron-Core's folding:
  // the experts whole on each rank, their groups drawn from the tensor x data ranks).
  std::vector<int> expert_tensor_degrees;
  // context_parallel_degree: default 1 and, for long sequences, the powers of two that
  // leave each context rank at least kMinContextTokens tokens; cp_comm_type: p2p and a2a.
  std::vector<int> context_degrees;
  std::vector<ContextComm> context_comms;
  std::vector<int> microbatch_sizes;      // sequences per micro-batch
  std::vector<PipelineSchedule> schedules;
  std::vector<int> virtual_stages;
  std::vector<PlacementOrder> placements;
  std::vector<Checkpointing> checkpointing;
  std::vector<bool> offload_activations;
  std::vector<bool> shard_optimizer_state;
  // Gradient sharding (ZeRO-2) on top of shard_optimizer_state: tried only on request
  // (default false), like state offload: it trades data-parallel traffic under gradient
  // accumulation for memory (and with one micro-batch a step it saves memory at no cost).
  std::vector<bool> shard_gradients;
  // State offload (ZeRO-Offload / FSDP CPU offload) is tried only on request (default
  // false): it trades step time for memory, so it is a way to fit, listed explicitly.
  std::vector<bool> offload_optimizer;
  std::vector<bool> offload_parameters;
  std::vector<bool> flash_attention;
  std::vector<bool> sequence_parallel;    // default: both where tensor degree > 1, else false
  std::vector<CollectiveAlgorithm> sharded_collectives;
  // Layers per stage that are checkpointed, when checkpointing is on: -1 = all; the
  // default also tries half of each stage's layers (less recompute where memory allows).
  std::vector<int> checkpointed_layers;
};

// Restricts one knob: "key=value" or "key=v1,v2" with the job file's key names (the
// table of knobs.hpp). Throws std::invalid_argument naming the key and the reason.
void restrict_space(SearchSpace& space, const std::string& assignment);

// The space a search of `base` is asked for: the job file's own search: restrictions, then
// each of `fix` (--fix). A bad one throws a ScenarioError naming where it came from: the
// job file `origin` and its search: section, or --fix and the restriction.
SearchSpace requested_space(const Job& base, const std::string& origin, const std::vector<std::string>& fix = {});

// Turns a job's own settings into pins: the keys listed in `pinned_keys` keep the base
// job's value (used for knobs the job file fixes explicitly).
void pin_from_job(SearchSpace& space, const Job& base, const std::vector<std::string>& pinned_keys);

// The knobs the search leaves off unless asked (offload_optimizer, offload_parameters,
// shard_gradients: they trade step time or traffic for memory) are tried beside off when
// the job file turns them on (`parallel.offload_optimizer: true`), unless restricted by a
// search: section or --fix. requested_space applies it; so does a sweep's search.
void opt_in_from_job(SearchSpace& space, const Job& base);

// How a point's layers split over its pipeline x virtual_stages model chunks.
enum class LayerSplit : unsigned char {
  even,        // alike: the layers divide over the chunks
  // Llama 3's stages where layers + 2 divide (Dubey et al. 2024, sec. 3.3.2): the first
  // and the last chunk one layer short, the embedding and the head in their place.
  ends_short,
  // Megatron-Core's, the embedding and the loss counted as a layer each where neither
  // the layers nor layers + 2 divide (account_for_embedding_in_pipeline_split and
  // account_for_loss_in_pipeline_split; DeepSeek-V3's layout "Et|(tt|)*30L"):
  // ceil((layers + 2) / chunks) a chunk, the first one layer short, the last holding what
  // is left beside the loss. 61 layers over 32 chunks: [1, 2 x 30, 0].
  embedding_and_loss,
  // As even as they go, the ends among the shorter (uneven_split): tried only where no
  // even split and no Llama 3 split gives a legal layout.
  uneven,
};

// The stage_layers of `split` for `layers` over `chunks` model chunks: empty for even and
// where the split does not apply (the layers divide, or the rule gives no layout).
std::vector<int> split_layers(LayerSplit split, int layers, int chunks);

// One point of the space: the knobs that vary, applied to a base job (model, cluster,
// batch, precision and optimizer stay the base's). Plain data, so millions fit in memory.
struct Point {
  int pipeline = 1, tensor = 1, sharded = 1, expert = 1, context = 1;
  // The experts' tensor degree; 0 or the tensor degree are written to the job as 0 (unset).
  int expert_tensor = 0;
  ContextComm context_comm = ContextComm::p2p;
  int microbatch_size = 1, microbatches = 1, virtual_stages = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  PlacementOrder placement;
  Checkpointing checkpointing = Checkpointing::none;
  bool offload = false, shard_optimizer = false, shard_gradients = false, flash = false, sequence_parallel = false;
  bool offload_optimizer = false, offload_parameters = false;
  CollectiveAlgorithm sharded_collective = CollectiveAlgorithm::ring;
  int checkpointed_layers = -1;
  // How the layers split over the pipeline x virtual_stages chunks (stage_layers).
  LayerSplit layer_split = LayerSplit::even;
};

// Writes the point's knobs into `job` (a copy of the base).
void apply(const Point& point, Job& job);
Job make_job(const Job& base, const Point& point);

struct EnumerationStats {
  long considered = 0;   // combinations looked at
  long invalid = 0;      // rejected by the job rules (degrees, divisibility, layers)
  long duplicates = 0;   // placements giving the same communication groups as another
  long legal = 0;
};
// Calls `visit` for every legal, distinct point, in a deterministic order: evenly split
// layers, Llama 3's ends one layer short and Megatron's embedding-and-loss split (LayerSplit).
// Where no point with evenly split layers or Llama 3's is legal, the pipeline degrees that
// split the layers unevenly (as even as they go) are tried too.
EnumerationStats enumerate(const Job& base, const SearchSpace& space,
                           const std::function<void(const Point&)>& visit);

// A short stable description of a candidate's parallel configuration.
std::string describe(const Job& job);
// What describe()'s notation means, one token a line ("  mbMxS  M micro-batches of S
// sequences..."), for --help and the docs; and the same in one line for under a table.
std::string describe_legend();
std::string describe_legend_line();
// Whether `job` matches "key=value[,value...]" filters (for --explain); unknown keys throw.
bool matches(const Job& job, const std::vector<std::string>& filters);
// Checks filters as matches() reads them, before a (long) search: a bad one throws a
// ScenarioError naming `option` (e.g. "--explain") and the filter.
void check_filters(const std::vector<std::string>& filters, const std::string& option);

}  // namespace partune::search
