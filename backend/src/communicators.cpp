// The rank's process groups (communicators.hpp).
#include "partune/backend/communicators.hpp"

#include <algorithm>
#include <cstdlib>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <fmt/format.h>

namespace partune::backend {

namespace {

// Gloo over loopback when every rank is local, else over the address the host name
// resolves to (Gloo's default device).
std::shared_ptr<::gloo::transport::Device> gloo_device() {
  static std::shared_ptr<::gloo::transport::Device> device = [] {
    const char* addr = std::getenv("MASTER_ADDR");
    const std::string host = addr && *addr ? addr : "127.0.0.1";
    if (host == "127.0.0.1" || host == "localhost") return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
    return c10d::ProcessGroupGloo::createDefaultDevice();
  }();
  return device;
}

Communicator connect(const c10::intrusive_ptr<c10d::Store>& store, const std::string& name, std::vector<int> members,
                     int rank, std::chrono::milliseconds timeout) {
  Communicator c;
  c.members = std::move(members);
  c.index = static_cast<int>(std::find(c.members.begin(), c.members.end(), rank) - c.members.begin());
  if (c.size() <= 1) return c;
  // The key names the members, so the groups of one kind (one per tensor group, ...)
  // rendezvous separately.
  std::string key = name;
  for (int m : c.members) key += fmt::format("-{}", m);
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(gloo_device());
  c.group = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(key, store), c.index,
                                                       c.size(), options);
  return c;
}

}  // namespace

Communicators::Communicators(const Job& job, int rank, c10::intrusive_ptr<c10d::Store> store,
                             std::chrono::milliseconds timeout)
    : rank_(rank) {
  std::vector<int> all(static_cast<std::size_t>(job.world_size()));
  for (int r = 0; r < job.world_size(); ++r) all[static_cast<std::size_t>(r)] = r;
  world_ = connect(store, "world", all, rank, timeout);
  for (CommGroup kind : {CommGroup::tensor, CommGroup::data, CommGroup::sharded, CommGroup::replica,
                         CommGroup::embedding}) {
    // Tensor groups come ordered by tensor coordinate (Placement::group), which is also
    // rank order: a rank grows with each coordinate.
    groups_[static_cast<std::size_t>(kind)] =
        connect(store, to_string(kind), comm_group_members(job, rank, kind), rank, timeout);
  }
}

}  // namespace partune::backend
