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
// - FP8: at::_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype,
//   use_fast_accum) -> Tensor and the float8 dtypes from 2.5 (2.1-2.4 returned amax too);
//   without it (1.13) fp8 jobs are refused on CUDA by name (compute_device.cpp).
// - torch::optim::Optimizer keys its state by the TensorImpl's address as text in 1.13 and
//   as the pointer from 2.x: multi_tensor_adam.cpp takes the key type from the map.
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define PARTUNE_HAVE_SCALED_MM 1
#endif

namespace partune::backend {

#if TORCH_VERSION_MAJOR >= 2
using CommBackend = c10d::Backend;
#else
using CommBackend = c10d::ProcessGroup;
#endif
using CommBackendPtr = c10::intrusive_ptr<CommBackend>;

}  // namespace partune::backend
