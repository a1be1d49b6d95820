#pragma once
// What the launcher reads and tidies in a checkpoint directory before any rank starts
// (the layout of checkpoint.hpp). No LibTorch in this header: the CLI includes it.
//
// Errors: std::runtime_error naming the path and what is wrong.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace partune::backend {

// The step `latest` names; nullopt when DIR or DIR/latest does not exist. Partial saves are
// never considered. Throws when `latest` is malformed or names a checkpoint that is not
// there.
std::optional<int> latest_checkpoint_step(const std::string& dir);

// The checkpoint's meta.json (with "step", "world_size", "layout").
nlohmann::json read_checkpoint_meta(const std::string& dir, int step);

// Removes what an interrupted save left in DIR (nothing when DIR does not exist):
// partial saves (.partial-step-<N>), half-deleted old checkpoints (.deleting-*), temporary
// files (.<name>.tmp-<pid>), and a .replaced-step-<N> whose step-<N> exists; a
// .replaced-step-<N> without its step-<N> is the only copy of that checkpoint and is
// renamed back to step-<N>. Returns the names removed or restored, for a note on stderr.
// Call it before any rank starts: a save in progress would lose its partial files.
std::vector<std::string> remove_interrupted_save_leftovers(const std::string& dir);

}  // namespace partune::backend
