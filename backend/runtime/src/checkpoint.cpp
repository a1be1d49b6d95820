// Sharded, atomic checkpoints (checkpoint.hpp). POSIX calls for the durability steps
// (fsync of files and directories, rename), std::filesystem for the rest.
#include "partune/backend/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

namespace partune::backend {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "partune-checkpoint";
constexpr int kVersion = 1;

std::string step_name(int step) { return fmt::format("step-{}", step); }
fs::path step_path(const fs::path& dir, int step) { return dir / step_name(step); }
fs::path partial_path(const fs::path& dir, int step) { return dir / (".partial-" + step_name(step)); }
fs::path replaced_path(const fs::path& dir, int step) { return dir / (".replaced-" + step_name(step)); }
std::string shard_name(int rank) { return fmt::format("rank-{}.pt", rank); }

// "step-12" -> 12 (after `prefix`); nullopt for anything else.
std::optional<int> parse_step(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoi(digits);
}

[[noreturn]] void fail(const fs::path& path, const std::string& what) {
  throw std::runtime_error(fmt::format("checkpoint {}: {}", path.string(), what));
}

void fsync_path(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) fail(path, fmt::format("cannot open to sync: {}", std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail(path, fmt::format("fsync failed: {}", std::strerror(err)));
}

void rename_path(const fs::path& from, const fs::path& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail(from, fmt::format("cannot rename to {}: {}", to.string(), std::strerror(errno)));
}

// A temporary name beside `path`, unique per process (ranks may share a directory).
fs::path temporary_beside(const fs::path& path) {
  return path.parent_path() / fmt::format(".{}.tmp-{}", path.filename().string(), ::getpid());
}

// Writes `content` to `path` so that a reader sees the old file or the new one, never a
// torn one, also after a power loss: temporary file, fsync, rename, fsync the directory.
void write_file_atomically(const fs::path& path, const std::string& content) {
  const fs::path tmp = temporary_beside(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(tmp, fmt::format("cannot create: {}", std::strerror(errno)));
  for (std::size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      fail(tmp, fmt::format("write failed: {}", std::strerror(err)));
    }
    done += static_cast<std::size_t>(n);
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail(tmp, fmt::format("fsync failed: {}", std::strerror(err)));
  rename_path(tmp, path);
  fsync_path(path.parent_path(), true);
}

void remove_tree(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) fail(path, fmt::format("cannot delete: {}", ec.message()));
}

bool directory_exists(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

// The directory's entries, listed before any of them is renamed or deleted.
std::vector<fs::path> entries_of(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) out.push_back(it->path());
  if (ec) fail(dir, fmt::format("cannot list the directory: {}", ec.message()));
  return out;
}

// The directory holding checkpoint `step`: step-<step>, or .replaced-step-<step> when a
// commit replacing it stopped between its two renames (then that is the only copy).
fs::path checkpoint_path(const fs::path& dir, int step) {
  const fs::path committed = step_path(dir, step);
  if (directory_exists(committed)) return committed;
  const fs::path replaced = replaced_path(dir, step);
  if (directory_exists(replaced)) return replaced;
  fail(committed, "does not exist");
}

// The step `latest` names, without checking that it exists; nullopt when there is none.
std::optional<int> read_latest(const fs::path& dir) {
  const fs::path latest = dir / "latest";
  std::error_code ec;
  if (!fs::exists(latest, ec)) return std::nullopt;
  std::ifstream in(latest);
  if (!in) fail(latest, "cannot be read");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  const auto step = parse_step(text, "step-");
  if (!step) fail(latest, fmt::format("holds '{}', not step-<N>", text));
  return step;
}

std::string c10_message(const c10::Error& e) { return e.what_without_backtrace(); }

}  // namespace

void write_rank_shard(const std::string& dir, int step, int rank,
                      const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  if (step < 0) throw std::invalid_argument(fmt::format("checkpoint {}: step {} is negative", dir, step));
  if (rank < 0) throw std::invalid_argument(fmt::format("checkpoint {}: rank {} is negative", dir, rank));
  const fs::path partial = partial_path(dir, step);
  std::error_code ec;
  fs::create_directories(partial, ec);  // every rank may create it; an existing one is fine
  if (ec) fail(partial, fmt::format("cannot create the directory: {}", ec.message()));

  const fs::path shard = partial / shard_name(rank);
  const fs::path tmp = temporary_beside(shard);
  torch::serialize::OutputArchive archive;
  fill(archive);
  try {
    archive.save_to(tmp.string());
  } catch (const c10::Error& e) {
    fail(tmp, fmt::format("cannot write rank {}'s shard: {}", rank, c10_message(e)));
  }
  fsync_path(tmp, false);
  rename_path(tmp, shard);
  fsync_path(partial, true);
}

void commit_checkpoint(const std::string& dir_text, int step, int world_size, const nlohmann::json& layout) {
  const fs::path dir(dir_text);
  if (world_size < 1)
    throw std::invalid_argument(fmt::format("checkpoint {}: world size {} is not at least 1", dir_text, world_size));
  const fs::path partial = partial_path(dir, step);
  if (!directory_exists(partial)) fail(partial, fmt::format("does not exist: no rank wrote a shard of step {}", step));

  std::vector<std::string> missing;
  for (int r = 0; r < world_size; ++r) {
    std::error_code ec;
    if (!fs::is_regular_file(partial / shard_name(r), ec)) missing.push_back(std::to_string(r));
  }
  if (!missing.empty()) {
    std::string ranks;
    for (const auto& r : missing) ranks += (ranks.empty() ? "" : ", ") + r;
    fail(partial, fmt::format("not every rank wrote its shard of step {}: rank{} {} missing", step,
                              missing.size() == 1 ? "" : "s", ranks));
  }
  // Leftovers of an earlier attempt at this step with more ranks, or its temporary files,
  // are not part of this checkpoint.
  std::vector<std::string> expected;
  for (int r = 0; r < world_size; ++r) expected.push_back(shard_name(r));
  for (const fs::path& entry : entries_of(partial))
    if (std::find(expected.begin(), expected.end(), entry.filename().string()) == expected.end()) remove_tree(entry);

  const nlohmann::json meta = {{"format", kFormat},   {"version", kVersion}, {"step", step},
                               {"world_size", world_size}, {"layout", layout}};
  write_file_atomically(partial / "meta.json", meta.dump(2) + "\n");  // also fsyncs `partial`

  std::optional<int> previous;
  try {
    previous = read_latest(dir);
  } catch (const std::runtime_error&) {
    // A malformed `latest` names nothing to keep; it is replaced below.
  }

  // Replacing step-<step>: move the old one away first (rename cannot replace a non-empty
  // directory). Until `latest` is rewritten a reader finds it there (checkpoint_path).
  const fs::path target = step_path(dir, step);
  const fs::path replaced = replaced_path(dir, step);
  if (directory_exists(target)) {
    if (directory_exists(replaced)) remove_tree(replaced);  // stale: step-<step> is the newer copy
    rename_path(target, replaced);
  }
  rename_path(partial, target);
  fsync_path(dir, true);
  write_file_atomically(dir / "latest", step_name(step) + "\n");
  if (directory_exists(replaced)) remove_tree(replaced);

  // Keep the new checkpoint and the one `latest` named before; delete the older ones, and
  // abandoned saves of earlier steps. Renamed away before deleting, so that a crash in the
  // middle never leaves a half-deleted step-<K> that looks complete.
  for (const fs::path& entry : entries_of(dir)) {
    const std::string name = entry.filename().string();
    if (!directory_exists(entry)) continue;
    bool drop = false;
    if (const auto k = parse_step(name, "step-"))
      drop = previous && *k < *previous && *k != step;
    else if (const auto k = parse_step(name, ".replaced-step-"))
      drop = directory_exists(step_path(dir, *k)) || (previous && *k < *previous && *k != step);
    else if (const auto k = parse_step(name, ".partial-step-"))
      drop = *k < step;
    else if (name.rfind(".deleting-", 0) == 0)
      drop = true;
    if (!drop) continue;
    if (name.rfind(".deleting-", 0) == 0) {
      remove_tree(entry);
    } else {
      const fs::path doomed = dir / (".deleting-" + name);
      rename_path(entry, doomed);
      remove_tree(doomed);
    }
  }
}

std::optional<int> latest_checkpoint_step(const std::string& dir_text) {
  const fs::path dir(dir_text);
  if (!directory_exists(dir)) return std::nullopt;
  const auto step = read_latest(dir);
  if (!step) return std::nullopt;
  const fs::path where = [&] {
    try {
      return checkpoint_path(dir, *step);
    } catch (const std::runtime_error&) {
      fail(dir / "latest", fmt::format("names {}, which does not exist", step_name(*step)));
    }
  }();
  std::error_code ec;
  if (!fs::is_regular_file(where / "meta.json", ec))
    fail(dir / "latest", fmt::format("names {}, which has no meta.json", step_name(*step)));
  return step;
}

nlohmann::json read_checkpoint_meta(const std::string& dir, int step) {
  const fs::path path = checkpoint_path(dir, step) / "meta.json";
  std::ifstream in(path);
  if (!in) fail(path, "cannot be read");
  nlohmann::json meta;
  try {
    in >> meta;
  } catch (const nlohmann::json::exception& e) {
    fail(path, fmt::format("is not valid JSON: {}", e.what()));
  }
  if (!meta.is_object() || meta.value("format", std::string()) != kFormat)
    fail(path, fmt::format("is not a partune checkpoint description (no \"format\": \"{}\")", kFormat));
  if (meta.value("version", 0) != kVersion)
    fail(path, fmt::format("has version {}; this build reads version {}", meta.value("version", 0), kVersion));
  if (!meta.contains("step") || !meta["step"].is_number_integer() || meta["step"].get<int>() != step)
    fail(path, fmt::format("does not describe step {}", step));
  if (!meta.contains("world_size") || !meta["world_size"].is_number_integer() || meta["world_size"].get<int>() < 1)
    fail(path, "has no valid world_size");
  return meta;
}

std::vector<std::string> remove_interrupted_save_leftovers(const std::string& dir_text) {
  const fs::path dir(dir_text);
  std::vector<std::string> touched;
  if (!directory_exists(dir)) return touched;
  for (const fs::path& entry : entries_of(dir)) {
    const std::string name = entry.filename().string();
    const bool temporary = name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos;
    if (parse_step(name, ".partial-step-") || name.rfind(".deleting-", 0) == 0 || temporary) {
      remove_tree(entry);
      touched.push_back(name);
    } else if (const auto k = parse_step(name, ".replaced-step-")) {
      if (directory_exists(step_path(dir, *k))) {
        remove_tree(entry);  // the commit that replaced it got as far as renaming the new one in
        touched.push_back(name);
      } else {
        rename_path(entry, step_path(dir, *k));  // the only copy: a commit stopped between its renames
        touched.push_back(name + " (restored as " + step_name(*k) + ")");
      }
    }
  }
  if (!touched.empty()) fsync_path(dir, true);
  return touched;
}

void read_rank_shard(const std::string& dir, int step, int rank,
                     const std::function<void(torch::serialize::InputArchive&)>& load) {
  const int world_size = read_checkpoint_meta(dir, step)["world_size"].get<int>();
  const fs::path where = checkpoint_path(dir, step);
  if (rank < 0 || rank >= world_size)
    fail(where, fmt::format("was saved by {} rank{}; there is no shard for rank {}", world_size,
                            world_size == 1 ? "" : "s", rank));
  const fs::path shard = where / shard_name(rank);
  std::error_code ec;
  if (!fs::is_regular_file(shard, ec)) fail(shard, "is missing");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(shard.string());
  } catch (const c10::Error& e) {
    fail(shard, fmt::format("cannot be read: {}", c10_message(e)));
  }
  try {
    load(archive);
  } catch (const c10::Error& e) {
    fail(shard, fmt::format("does not hold what rank {} expects: {}", rank, c10_message(e)));
  }
}

}  // namespace partune::backend
