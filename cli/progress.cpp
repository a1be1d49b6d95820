#include "progress.hpp"

#include <cstdio>

namespace partune::cli {

void progress_bar(long done, long total, const char* what) {
  if (total <= 0) {
    std::fprintf(stderr, "\r  %ld %s", done, what);
  } else {
    const int width = 30;
    const int filled = static_cast<int>(width * done / total);
    std::fprintf(stderr, "\r  [%.*s%.*s] %ld/%ld %s", filled, "##############################", width - filled,
                 "..............................", done, total, what);
  }
  std::fflush(stderr);
}

}  // namespace partune::cli
