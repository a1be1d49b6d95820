// fuzz_replay [--seconds N] FILE|FOLDER...: feeds each file (a folder's files in name
// order) to the fuzz target once, as libFuzzer would; aborts on a finding, and fails an
// input that takes longer than N seconds (10, as scripts/fuzz.sh's timeout). The
// regression test of every input the fuzzer once found (tests/fuzz/regressions/).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  double limit_s = 10;
  int first = 1;
  if (argc > 2 && std::string(argv[1]) == "--seconds") {
    limit_s = std::atof(argv[2]);
    first = 3;
  }
  for (int i = first; i < argc; ++i) {
    const fs::path given = argv[i];
    if (!fs::is_directory(given)) {
      inputs.push_back(given);
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(given))
      if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    inputs.insert(inputs.end(), files.begin(), files.end());
  }
  for (const fs::path& file : inputs) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "fuzz_replay: cannot read %s\n", file.c_str());
      return 2;
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto start = std::chrono::steady_clock::now();
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds > limit_s) {
      std::fprintf(stderr, "fuzz_replay: %s took %.1f s, more than %.1f s\n", file.c_str(), seconds, limit_s);
      return 1;
    }
  }
  std::printf("fuzz_replay: %zu inputs, no finding\n", inputs.size());
  return inputs.empty() ? 2 : 0;
}
