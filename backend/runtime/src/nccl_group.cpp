// NCCL process groups (nccl_group.hpp).
#include "nccl_group.hpp"

#include <stdexcept>

#ifdef PARTUNE_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace partune::backend {

#ifdef PARTUNE_WITH_NCCL
bool nccl_available() { return true; }

CommBackendPtr nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                          std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#else
bool nccl_available() { return false; }

CommBackendPtr nccl_group(const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds) {
  throw std::runtime_error("this LibTorch was built without NCCL: the CUDA ranks connect over Gloo");
}
#endif

}  // namespace partune::backend
