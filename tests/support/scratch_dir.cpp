#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <iterator>
#include <system_error>
#include <vector>

namespace partune::testing {

ScratchDir::ScratchDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  std::vector<char> buffer(tmpl.begin(), tmpl.end());
  buffer.push_back('\0');
  REQUIRE(::mkdtemp(buffer.data()) != nullptr);
  path = buffer.data();
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::size_t ScratchDir::entries() const {
  return static_cast<std::size_t>(
      std::distance(std::filesystem::directory_iterator(path), std::filesystem::directory_iterator()));
}

}  // namespace partune::testing
