// AtomicFile (costmodel/atomic_file.hpp), the way every output file is written: whole or
// not at all, through symbolic links, never over a device or a directory, and every
// message names the path the user gave.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "partune/costmodel/atomic_file.hpp"
#include "scratch_dir.hpp"

using namespace partune;
using partune::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The message of the OutputError `make` throws, and whether it marks a bad path.
template <class F>
std::pair<std::string, bool> output_error(F make) {
  try {
    make();
  } catch (const OutputError& e) {
    return {e.what(), e.bad_path()};
  }
  FAIL("no OutputError thrown");
  return {};
}

}  // namespace

TEST_CASE("AtomicFile: the target appears whole at commit, and nothing else is left", "[atomic_file]") {
  ScratchDir dir("partune-atomic");
  const fs::path target = dir.path / "out.yaml";
  {
    AtomicFile f(target.string());
    CHECK(fs::path(f.temp_path()).parent_path() == dir.path);
    f.write("kind: ");
    f.write("job\n");
    CHECK_FALSE(fs::exists(target));
    f.commit();
  }
  CHECK(slurp(target) == "kind: job\n");
  CHECK(dir.entries() == 1);
  struct stat st {};
  REQUIRE(::stat(target.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
}

TEST_CASE("AtomicFile: abandoned before commit, the old file is untouched and no temporary is left", "[atomic_file]") {
  ScratchDir dir("partune-atomic");
  const fs::path target = dir.path / "out.yaml";
  std::ofstream(target) << "old\n";
  ::chmod(target.c_str(), 0600);
  {
    AtomicFile f(target.string());
    f.write("new, half written");
  }
  CHECK(slurp(target) == "old\n");
  CHECK(dir.entries() == 1);
  // A replaced file keeps its permissions.
  write_file_atomically(target.string(), "new\n");
  struct stat st {};
  REQUIRE(::stat(target.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(slurp(target) == "new\n");
}

TEST_CASE("AtomicFile: a symbolic link is written through, the link stays", "[atomic_file]") {
  ScratchDir dir("partune-atomic");
  fs::create_directory(dir.path / "real");
  const fs::path real = dir.path / "real" / "job.yaml";
  std::ofstream(real) << "old\n";
  const fs::path link = dir.path / "link.yaml";
  fs::create_symlink("real/job.yaml", link);  // relative, as `ln -s` makes them
  write_file_atomically(link.string(), "new\n");
  CHECK(fs::is_symlink(link));
  CHECK(slurp(real) == "new\n");
  CHECK(std::distance(fs::directory_iterator(dir.path / "real"), fs::directory_iterator()) == 1);
  // A dangling link creates the file it points to.
  const fs::path dangling = dir.path / "dangling.yaml";
  fs::create_symlink(dir.path / "real" / "new.yaml", dangling);
  write_file_atomically(dangling.string(), "created\n");
  CHECK(fs::is_symlink(dangling));
  CHECK(slurp(dir.path / "real" / "new.yaml") == "created\n");
}

TEST_CASE("AtomicFile: a directory, a device or a missing folder is refused at once, naming the user's path",
          "[atomic_file]") {
  ScratchDir dir("partune-atomic");
  SECTION("a directory") {
    const auto [msg, bad] = output_error([&] { AtomicFile f(dir.path.string()); });
    CHECK(msg == dir.path.string() + ": is a directory");
    CHECK(bad);
  }
  SECTION("a device, also through a symbolic link") {
    const fs::path link = dir.path / "null.yaml";
    fs::create_symlink("/dev/null", link);
    const auto [msg, bad] = output_error([&] { AtomicFile f(link.string()); });
    CHECK(msg.rfind(link.string() + ": is not a regular file", 0) == 0);
    CHECK(bad);
    CHECK(fs::is_symlink(link));
    CHECK(dir.entries() == 1);
  }
  SECTION("a missing folder") {
    const std::string path = (dir.path / "no-such-dir" / "out.yaml").string();
    const auto [msg, bad] = output_error([&] { AtomicFile f(path); });
    CHECK(msg.rfind(path + ": folder '", 0) == 0);
    CHECK(msg.find("does not exist") != std::string::npos);
    CHECK(bad);
  }
}

// A full disk: the temporary file's descriptor is swapped for /dev/full, where every write
// fails with ENOSPC, as on a full file system.
TEST_CASE("AtomicFile: a write that fails leaves the target untouched and names it", "[atomic_file]") {
  ScratchDir dir("partune-atomic");
  const fs::path target = dir.path / "big.yaml";
  std::ofstream(target) << "old\n";
  std::string msg;
  {
    AtomicFile f(target.string());
    const int full = ::open("/dev/full", O_WRONLY);
    REQUIRE(full >= 0);
    int fd = -1;
    for (int i = 0; i < 1024 && fd < 0; ++i) {
      // The descriptor AtomicFile holds: the one open on its temporary file.
      const std::string proc = "/proc/self/fd/" + std::to_string(i);
      std::error_code ec;
      if (fs::read_symlink(proc, ec) == fs::path(f.temp_path())) fd = i;
    }
    REQUIRE(fd >= 0);
    REQUIRE(::dup2(full, fd) == fd);
    ::close(full);
    try {
      f.write(std::string(1 << 16, 'x'));
      f.commit();
    } catch (const OutputError& e) {
      msg = e.what();
      CHECK_FALSE(e.bad_path());
    }
  }
  CHECK(msg == target.string() + ": cannot write: No space left on device");
  CHECK(slurp(target) == "old\n");
  CHECK(dir.entries() == 1);
}
