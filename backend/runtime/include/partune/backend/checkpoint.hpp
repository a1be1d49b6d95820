#pragma once
// Sharded, atomic checkpoints (`partune run --save DIR`, `--resume DIR`).
//
//   DIR/latest                  "step-<N>\n": the checkpoint to resume from
//   DIR/step-<N>/meta.json      {"format", "version", "step", "world_size", "layout"}
//   DIR/step-<N>/rank-<R>.pt    rank R's shard (torch::serialize::OutputArchive)
//   DIR/.partial-step-<N>/      a save in progress (never read)
//   DIR/.replaced-step-<N>/     step-<N> being replaced by a new save of the same step
//
// A save: every rank writes its shard into .partial-step-<N> (write_rank_shard), the
// ranks barrier, one rank commits (commit_checkpoint): meta.json, the directory renamed
// to step-<N>, then `latest` replaced by a rename. Each file is written to a temporary
// name, fsynced and renamed, and the directory fsynced, so a crash at any point leaves
// `latest` naming a complete checkpoint: the previous one until the final rename of
// `latest`, the new one after it. Only the checkpoint `latest` names and the one before
// it are kept. What a save interrupted by a crash leaves behind (a partial directory,
// temporary files) is never read, and is removed at the next start
// (remove_interrupted_save_leftovers, checkpoint_directory.hpp).
//
// Errors: std::runtime_error naming the path and what is wrong.
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <torch/serialize/archive.h>

#include "partune/backend/checkpoint_directory.hpp"

namespace partune::backend {

// Writes rank `rank`'s shard of step `step` into DIR/.partial-step-<step>/rank-<rank>.pt:
// `fill` puts the rank's tensors (parameters, optimizer state, ...) into the archive.
// Creates DIR when needed.
void write_rank_shard(const std::string& dir, int step, int rank,
                      const std::function<void(torch::serialize::OutputArchive&)>& fill);

// Completes the save of step `step` once every rank wrote its shard (the caller
// barriers first; one rank calls this): checks that the world_size shards exist, writes
// meta.json with `layout` (the caller's description of how the model is split: degrees,
// stages, ...), renames the partial directory to step-<step> (an existing step-<step> is
// moved away first), points `latest` at it, and deletes the checkpoints older than the
// previous one (and abandoned partial saves of earlier steps).
void commit_checkpoint(const std::string& dir, int step, int world_size, const nlohmann::json& layout);

// Reads rank `rank`'s shard of checkpoint `step`: `load` takes the rank's tensors from the
// archive. Throws when the checkpoint has no shard for that rank (it was saved by fewer
// ranks) or the shard cannot be read.
void read_rank_shard(const std::string& dir, int step, int rank,
                     const std::function<void(torch::serialize::InputArchive&)>& load);

}  // namespace partune::backend
