#pragma once
// NCCL process groups (communicators.cpp), in a file of their own: built only when the
// LibTorch found was built with NCCL and nccl.h is found (PARTUNE_WITH_NCCL; the GPU
// machine's LibTorch 2.x), else nccl_available() is false and nccl_group throws.
#include <chrono>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "partune/backend/torch_compat.hpp"

namespace partune::backend {

bool nccl_available();
CommBackendPtr nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                          std::chrono::milliseconds timeout);

}  // namespace partune::backend
