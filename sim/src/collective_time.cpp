// simulate_collectives(): one idle platform, the cases one after another, in a forked
// child (SimGrid keeps one engine per process).
#include "partune/sim/collective_time.hpp"

#include <simgrid/s4u.hpp>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xbt/log.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "collective_exec.hpp"
#include "partune/costmodel/job.hpp"
#include "platform.hpp"

namespace partune::sim {

namespace s4u = simgrid::s4u;

namespace {

struct Member {
  int rank = 0;
  s4u::Host* intra_successor = nullptr;
  s4u::Host* net_successor = nullptr;
  double nic_share = 1;  // GPUs on its NIC per member of this group on it
};

void check_case(const CollectiveCase& c, const InstanceType& inst) {
  const GroupSpan& s = c.span;
  if (s.size < 1 || s.nodes < 1 || s.per_node < 1 || s.size != s.nodes * s.per_node ||
      inst.gpus_per_node % s.per_node != 0)
    throw std::invalid_argument("simulate_collectives: span {" + std::to_string(s.size) + ", " +
                                std::to_string(s.nodes) + ", " + std::to_string(s.per_node) +
                                "} is not per_node members on each of its nodes, per_node dividing " +
                                std::to_string(inst.gpus_per_node));
}

// The group's ranks: local GPUs 0, G/g, 2G/g, ... of its first span.nodes nodes.
std::vector<int> group_ranks(const GroupSpan& span, int gpus_per_node) {
  std::vector<int> ranks;
  const int stride = gpus_per_node / span.per_node;
  for (int node = 0; node < span.nodes; ++node)
    for (int i = 0; i < span.per_node; ++i) ranks.push_back(node * gpus_per_node + i * stride);
  return ranks;
}

// The sibling groups fill the node, so a network port carries as many flows as it has
// GPUs behind it; each simulated member stands for the siblings beside it on its port.
double nic_share(int local_gpu, const std::vector<int>& ranks, const InstanceType& inst) {
  const int G = inst.gpus_per_node;
  auto nic = [&](int gpu) { return network_port_of(inst, gpu); };
  int gpus = 0, members = 0;
  for (int l = 0; l < G; ++l) gpus += nic(l) == nic(local_gpu) ? 1 : 0;
  for (int r : ranks) members += r < G && nic(r) == nic(local_gpu) ? 1 : 0;
  return static_cast<double>(gpus) / members;
}

// Each member's successors on the platform (the simulator's own rule, connect_group).
std::vector<Member> connect_members(Platform& platform, const std::vector<int>& ranks, const GroupSpan& expected,
                                    const InstanceType& inst) {
  std::vector<Member> members;
  for (int r : ranks) {
    Member m;
    m.rank = r;
    GroupSpan span;
    int simulated = 0;
    platform.connect_group(r, ranks, span, m.intra_successor, m.net_successor, simulated);
    if (span.size != expected.size || span.nodes != expected.nodes || span.per_node != expected.per_node)
      throw std::logic_error("simulate_collectives: the platform sees another span than the case's");
    m.nic_share = nic_share(r % inst.gpus_per_node, ranks, inst);
    members.push_back(m);
  }
  return members;
}

std::vector<double> run_cases(const InstanceType& inst, const std::vector<CollectiveCase>& cases) {
  int argc = 1;
  char name[] = "partune-collective";
  char* argv[] = {name, nullptr};
  xbt_log_control_set("root.thresh:critical");
  s4u::Engine engine(&argc, argv);
  configure_engine(0);

  const int G = inst.gpus_per_node;
  Job job;
  job.cluster.instance = inst;
  job.cluster.nodes = 1;
  std::vector<std::vector<int>> groups;
  std::vector<int> all;
  for (const CollectiveCase& c : cases) {
    groups.push_back(group_ranks(c.span, G));
    all.insert(all.end(), groups.back().begin(), groups.back().end());
    job.cluster.nodes = std::max(job.cluster.nodes, c.span.nodes);
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  Platform platform(job, all, /*mirrors=*/false);
  std::vector<std::vector<Member>> members(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) members[i] = connect_members(platform, groups[i], cases[i].span, inst);
  platform.seal();

  std::vector<double> times(cases.size(), 0.0);
  s4u::Actor::create("driver", platform.gpu(all.front()), [&] {
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const CollectiveCase& c = cases[i];
      const CollectiveTraffic traffic = collective_traffic(c.kind, c.algorithm, c.bytes, c.span, inst);
      const double start = s4u::Engine::get_clock();
      std::vector<s4u::ActorPtr> actors;
      for (const Member& m : members[i])
        actors.push_back(s4u::Actor::create("member" + std::to_string(m.rank), platform.gpu(m.rank), [m, &traffic] {
          send_collective_phases(s4u::this_actor::get_host(), PhaseTargets{m.intra_successor, m.net_successor},
                                 traffic, 1.0, m.nic_share);
          if (traffic.latency > 0) s4u::this_actor::sleep_for(traffic.latency);
        }));
      for (auto& a : actors) a->join();
      times[i] = s4u::Engine::get_clock() - start;
    }
  });
  engine.run();
  return times;
}

bool write_all(int fd, const char* data, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

std::vector<double> simulate_collectives(const InstanceType& instance, const std::vector<CollectiveCase>& cases) {
  for (const CollectiveCase& c : cases) check_case(c, instance);
  if (cases.empty()) return {};
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("simulate_collectives: pipe: ") + std::strerror(errno));
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("simulate_collectives: fork: ") + std::strerror(errno));
  if (pid == 0) {
    // The child dies with its parent (as simulate_each's do).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(4);
    ::close(fds[0]);
    int status = 0;
    try {
      const std::vector<double> times = run_cases(instance, cases);
      status = write_all(fds[1], reinterpret_cast<const char*>(times.data()), times.size() * sizeof(double)) ? 0 : 3;
    } catch (const std::exception& e) {
      const std::string message = std::string("E") + e.what();
      write_all(fds[1], message.data(), message.size());
      status = 2;
    }
    ::close(fds[1]);
    ::_exit(status);
  }
  ::close(fds[1]);
  std::string data;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 2 && !data.empty() && data[0] == 'E')
    throw std::runtime_error("simulate_collectives: " + data.substr(1));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || data.size() != cases.size() * sizeof(double))
    throw std::runtime_error("simulate_collectives: the simulation process failed (status " +
                             std::to_string(status) + ")");
  std::vector<double> times(cases.size());
  std::memcpy(times.data(), data.data(), data.size());
  return times;
}

double simulate_collective(CollectiveKind kind, CollectiveAlgorithm algorithm, double bytes, const GroupSpan& span,
                           const InstanceType& instance) {
  return simulate_collectives(instance, {CollectiveCase{kind, algorithm, bytes, span}}).front();
}

}  // namespace partune::sim
