#pragma once
// A scratch directory under /tmp, removed with its contents when the test ends (also when
// a failed check unwinds it) (partune_test_support).
#include <cstddef>
#include <filesystem>
#include <string>

namespace partune::testing {

struct ScratchDir {
  // /tmp/<prefix>-XXXXXX, made by mkdtemp (the test fails when it cannot be made).
  explicit ScratchDir(const std::string& prefix = "partune-test");
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // How many entries the directory holds (not recursive).
  std::size_t entries() const;

  std::filesystem::path path;
};

}  // namespace partune::testing
