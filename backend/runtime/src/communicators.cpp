// The rank's process groups (communicators.hpp).
#include "partune/backend/communicators.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/cuda.h>

#include <fmt/format.h>

#include "nccl_group.hpp"
#include "partune/backend/watchdog.hpp"

namespace partune::backend {

namespace {

// ---- The rendezvous.

using Clock = std::chrono::steady_clock;
using Store = c10::intrusive_ptr<c10d::TCPStore>;

std::vector<std::uint8_t> bytes(const std::string& s) { return std::vector<std::uint8_t>(s.begin(), s.end()); }
std::string text(const std::vector<std::uint8_t>& b) { return std::string(b.begin(), b.end()); }
std::string joined_key(int rank) { return fmt::format("partune/rendezvous/joined/{}", rank); }

// The first line of an exception's message (LibTorch appends backtraces).
std::string first_line(const std::exception& e) {
  std::string s = e.what();
  s = s.substr(0, s.find('\n'));
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

// Whether a listening socket on this machine holds `port`: binding it (IPv4 and IPv6
// wildcards, SO_REUSEADDR as the store does) fails with EADDRINUSE.
bool port_in_use(int port) {
  for (const int family : {AF_INET, AF_INET6}) {
    const int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = 0;
    if (family == AF_INET) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(static_cast<std::uint16_t>(port));
      a.sin6_addr = in6addr_any;
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    const int err = errno;
    ::close(fd);
    if (rc != 0 && err == EADDRINUSE) return true;
  }
  return false;
}

// Writes `why` under partune/failed unless a cause is there already; acknowledged by a
// round trip before the caller throws (a TCPStore set is not). Never throws.
void tell_the_others(c10d::TCPStore& store, const std::string& why) {
  try {
    if (!store.check({Watchdog::failed_key()})) store.set(Watchdog::failed_key(), bytes(why));
    store.check({Watchdog::failed_key()});
  } catch (const std::exception&) {
  }
}

std::string world_size_mismatch(int rank, int mine, const std::string& host, int theirs) {
  return fmt::format("rank {} was started with WORLD_SIZE={} but {} with WORLD_SIZE={}: every rank needs the same "
                     "WORLD_SIZE",
                     rank, mine, host, theirs);
}

// The hosting rank: checks the port, starts the server, writes its world size, and waits
// until every other rank has written its own (or one has failed, or time is up).
Store host_rendezvous(const RankEnvironment& env, std::chrono::milliseconds limit) {
  const std::string where = fmt::format("{}:{}", env.master_addr, env.master_port);
  if (port_in_use(env.master_port))
    throw std::runtime_error(fmt::format("rank {}: cannot host the rendezvous store: MASTER_PORT={} is already in use "
                                         "on this machine by another program",
                                         env.rank, env.master_port));
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = true;
  so.waitWorkers = false;
  so.timeout = limit;
  Store store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("rank {}: cannot host the rendezvous store on port {} (MASTER_PORT): {}",
                                         env.rank, env.master_port, first_line(e)));
  }
  store->set(rendezvous_world_size_key(), bytes(std::to_string(env.world_size)));
  const auto deadline = Clock::now() + limit;
  for (;;) {
    if (store->check({Watchdog::failed_key()})) throw std::runtime_error(text(store->get(Watchdog::failed_key())));
    std::string missing;
    for (int r = 0; r < env.world_size; ++r)
      if (r != env.rank && !store->check({joined_key(r)})) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
    if (missing.empty()) break;
    if (Clock::now() >= deadline) {
      const std::string why = fmt::format(
          "rank{} {} did not join the rendezvous at {} within {} s (not started, or started with another MASTER_ADDR, "
          "MASTER_PORT or WORLD_SIZE)",
          missing.find(',') == std::string::npos ? "" : "s", missing, where, env.rendezvous_timeout_s);
      tell_the_others(*store, why);
      throw std::runtime_error(why);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int r = 0; r < env.world_size; ++r) {
    if (r == env.rank) continue;
    const int theirs = std::stoi(text(store->get(joined_key(r))));
    if (theirs != env.world_size) {
      const std::string why = world_size_mismatch(r, theirs, fmt::format("rank {}", env.rank), env.world_size);
      tell_the_others(*store, why);
      throw std::runtime_error(why);
    }
  }
  return store;
}

// Any other rank: connects and reads the host's world size, on a thread of its own so
// that nothing (a program on the port that accepts and never answers, say) holds this
// rank past the limit.
Store reach_rendezvous(const RankEnvironment& env, std::chrono::milliseconds limit, int& host_world_size) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = false;
  so.waitWorkers = false;
  so.timeout = limit;
  const std::string addr = env.master_addr;
  auto task = std::make_shared<std::packaged_task<std::pair<Store, int>()>>([so, addr] {
    Store store = c10::make_intrusive<c10d::TCPStore>(addr, so);
    const int world = std::stoi(text(store->get(rendezvous_world_size_key())));
    return std::make_pair(store, world);
  });
  std::future<std::pair<Store, int>> result = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  std::string cause = "no rendezvous store answered there (is another program using MASTER_PORT, or did " +
                      env.store_host_description() + " not start?)";
  if (result.wait_for(limit + std::chrono::seconds(1)) == std::future_status::ready) {
    try {
      auto [store, world] = result.get();
      host_world_size = world;
      return store;
    } catch (const std::exception& e) {
      cause += ": " + first_line(e);
    }
  }
  throw std::runtime_error(fmt::format("rank {}: could not reach {} at {}:{} within {} s: {}", env.rank,
                                       env.store_host_description(), env.master_addr, env.master_port,
                                       env.rendezvous_timeout_s, cause));
}

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
                     int rank, std::chrono::milliseconds timeout, CommBackendKind kind = CommBackendKind::gloo) {
  Communicator c;
  c.members = std::move(members);
  c.index = static_cast<int>(std::find(c.members.begin(), c.members.end(), rank) - c.members.begin());
  if (c.size() <= 1) return c;
  // The key names the members, so the groups of one kind (one per tensor group, ...)
  // rendezvous separately.
  std::string key = name;
  for (int m : c.members) key += fmt::format("-{}", m);
  const auto prefixed = c10::make_intrusive<c10d::PrefixStore>(key, store);
  if (kind == CommBackendKind::nccl) {
    c.group = nccl_group(prefixed, c.index, c.size(), timeout);
    return c;
  }
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(gloo_device());
  c.group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, c.index, c.size(), options);
  return c;
}

}  // namespace

Store join_rendezvous(const RankEnvironment& env, std::chrono::milliseconds operation_timeout,
                      const std::string& local_failure) {
  const std::chrono::milliseconds limit(std::int64_t{1000} * env.rendezvous_timeout_s);
  if (env.hosts_store()) {
    if (!local_failure.empty()) throw std::runtime_error(local_failure);
    Store store = host_rendezvous(env, limit);
    store->setTimeout(operation_timeout);
    return store;
  }
  int host_world_size = 0;
  Store store;
  try {
    store = reach_rendezvous(env, limit, host_world_size);
  } catch (const std::runtime_error&) {
    if (!local_failure.empty()) throw std::runtime_error(local_failure);  // this rank's own reason comes first
    throw;
  }
  const std::string host = env.store_host_description();
  if (host_world_size != env.world_size) {
    const std::string why = world_size_mismatch(env.rank, env.world_size, host, host_world_size);
    tell_the_others(*store, why);
    throw std::runtime_error(why);
  }
  if (!local_failure.empty()) {
    tell_the_others(*store, fmt::format("rank {}: {}", env.rank, local_failure));
    throw std::runtime_error(local_failure);
  }
  store->set(joined_key(env.rank), bytes(std::to_string(env.world_size)));
  store->setTimeout(operation_timeout);
  return store;
}

const char* to_string(CommBackendKind k) { return k == CommBackendKind::nccl ? "nccl" : "gloo"; }

CommBackendKind comm_backend_for(const torch::Device& device, int local_world_size) {
  if (!device.is_cuda()) return CommBackendKind::gloo;
  if (const char* forced = std::getenv("PARTUNE_COMM_BACKEND"); forced && *forced) {
    const std::string f = forced;
    if (f == "nccl") return CommBackendKind::nccl;
    if (f == "gloo") return CommBackendKind::gloo;
    throw std::runtime_error(fmt::format("PARTUNE_COMM_BACKEND={}: expected nccl or gloo", f));
  }
  const bool own_gpu = local_world_size <= static_cast<int>(torch::cuda::device_count());
  return own_gpu && nccl_available() ? CommBackendKind::nccl : CommBackendKind::gloo;
}

Communicators::Communicators(const Job& job, int rank, c10::intrusive_ptr<c10d::Store> store,
                             std::chrono::milliseconds timeout, const torch::Device& device, int local_world_size)
    : rank_(rank), backend_(comm_backend_for(device, local_world_size)) {
  staged_ = device.is_cuda() && backend_ == CommBackendKind::gloo;
  if (backend_ == CommBackendKind::nccl && !nccl_available())
    throw std::runtime_error("PARTUNE_COMM_BACKEND=nccl: this LibTorch was built without NCCL");
  std::vector<int> all(static_cast<std::size_t>(job.world_size()));
  for (int r = 0; r < job.world_size(); ++r) all[static_cast<std::size_t>(r)] = r;
  // The world group carries the run's own bookkeeping (CPU tensors: step rows, events,
  // barriers), so it is Gloo whatever the device; with NCCL a second world group carries
  // the pipeline transfers.
  world_ = connect(store, "world", all, rank, timeout);
  transfers_ = backend_ == CommBackendKind::nccl ? connect(store, "transfers", all, rank, timeout, backend_) : world_;
  for (CommGroup kind : {CommGroup::tensor, CommGroup::data, CommGroup::sharded, CommGroup::replica,
                         CommGroup::embedding, CommGroup::expert, CommGroup::expert_data, CommGroup::expert_tensor,
                         CommGroup::context, CommGroup::context_a2a}) {
    const bool experts = job.model.is_moe() && job.parallel.expert_parallel_degree > 1;
    if ((kind == CommGroup::expert || kind == CommGroup::expert_data || kind == CommGroup::expert_tensor) && !experts)
      continue;  // (comm_group_members divides by the expert degree)
    if (kind == CommGroup::expert_tensor && job.expert_tensor_degree() == job.parallel.tensor_parallel_degree)
      continue;  // the tensor group (MoE parallel folding gives the experts one of their own)
    if ((kind == CommGroup::context || kind == CommGroup::context_a2a) && job.parallel.context_parallel_degree <= 1)
      continue;
    // Tensor groups come ordered by tensor coordinate (Placement::group), which is also
    // rank order: a rank grows with each coordinate.
    groups_[static_cast<std::size_t>(kind)] =
        connect(store, to_string(kind), comm_group_members(job, rank, kind), rank, timeout, backend_);
  }
}

}  // namespace partune::backend
