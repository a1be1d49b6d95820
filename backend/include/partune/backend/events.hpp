#pragma once
// One executed instruction on the timeline, named as docs/architecture.md section 2.6
// requires: the name is to_string(kind). No LibTorch here.
#include "partune/costmodel/program.hpp"

namespace partune::backend {

struct ExecutedEvent {
  int rank = 0;
  OpKind kind = OpKind::forward;
  CommGroup group = CommGroup::none;
  int microbatch = -1, chunk = 0, layer = -1;
  double start = 0, end = 0;  // wall-clock seconds since the run started
};

}  // namespace partune::backend
