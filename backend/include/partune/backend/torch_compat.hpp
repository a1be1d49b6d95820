#pragma once
// The differences between the two LibTorch versions the backend builds against, in one
// place: Debian's 1.13 (CPU only; CI and the developers' machines) and 2.x (CUDA, NCCL;
// the GPU machine, scripts/device-build.sh). Everything else in backend/ and kernels/ is
// written to the API both share.
//
// - Process groups: in 1.13 ProcessGroupGloo / ProcessGroupNCCL derive from
//   c10d::ProcessGroup; from 2.0 they are c10d::Backend implementations that a
//   c10d::ProcessGroup wraps. The collective calls the backend makes (allreduce, allgather,
//   send, recv, alltoall_base, barrier) have the same signatures on both classes, so the
//   backend holds the implementation directly: CommBackend.
// - c10::Allocator gained a pure virtual copy_data (2.3); memory_accounting.cpp defines it
//   without `override`, which both versions accept.
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

namespace partune::backend {

#if TORCH_VERSION_MAJOR >= 2
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif
using CommBackendPtr = c10::intrusive_ptr<CommBackend>;

}  // namespace partune::backend
