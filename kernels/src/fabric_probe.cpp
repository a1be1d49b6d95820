// A libfabric probe: the API EFA is reached through on AWS (tcp or shm on this machine).
// Two reliable-datagram (FI_EP_RDM) endpoints, each with its own fabric, domain, address
// vector and completion queue, each driven by its own thread, ping-pong messages of a
// few sizes. The first provider fi_getinfo offers that completes the exchange is the one
// measured (efa first when present); the others' failures go into the note. No provider
// at all is a result, not an error.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_internal.hpp"

#ifdef PARTUNE_HAVE_LIBFABRIC
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#endif

namespace partune::kernels::detail {

#ifdef PARTUNE_HAVE_LIBFABRIC

std::string libfabric_version() {
  const uint32_t v = fi_version();
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

namespace {

void check(int rc, const char* call) {
  if (rc < 0) throw std::runtime_error(std::string(call) + ": " + fi_strerror(-rc));
}

// One endpoint with everything it needs, owned by one thread after setup.
struct Endpoint {
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_cq* cq = nullptr;
  fid_av* av = nullptr;
  fid_ep* ep = nullptr;
  fid_mr* mr = nullptr;
  void* desc = nullptr;
  std::vector<char> buffer;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  fi_context2 send_context{}, recv_context{};
  bool send_done = false, recv_done = false;

  Endpoint(fi_info* info, std::size_t bytes, uint64_t key) : buffer(bytes, 1) {
    check(fi_fabric(info->fabric_attr, &fabric, nullptr), "fi_fabric");
    check(fi_domain(fabric, info, &domain, nullptr), "fi_domain");
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.size = 64;
    check(fi_cq_open(domain, &cq_attr, &cq, nullptr), "fi_cq_open");
    fi_av_attr av_attr{};
    av_attr.type = info->domain_attr->av_type == FI_AV_UNSPEC ? FI_AV_TABLE : info->domain_attr->av_type;
    check(fi_av_open(domain, &av_attr, &av, nullptr), "fi_av_open");
    check(fi_endpoint(domain, info, &ep, nullptr), "fi_endpoint");
    check(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
    check(fi_ep_bind(ep, &av->fid, 0), "fi_ep_bind(av)");
    check(fi_enable(ep), "fi_enable");
    // Providers that DMA from user memory (efa, verbs) need it registered.
    if (info->domain_attr->mr_mode & FI_MR_LOCAL) {
      check(fi_mr_reg(domain, buffer.data(), buffer.size(), FI_SEND | FI_RECV, 0, key, 0, &mr, nullptr), "fi_mr_reg");
      if (info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        check(fi_mr_bind(mr, &ep->fid, 0), "fi_mr_bind");
        check(fi_mr_enable(mr), "fi_mr_enable");
      }
      desc = fi_mr_desc(mr);
    }
  }
  ~Endpoint() {
    for (fid* f : {ep ? &ep->fid : nullptr, mr ? &mr->fid : nullptr, av ? &av->fid : nullptr, cq ? &cq->fid : nullptr,
                   domain ? &domain->fid : nullptr, fabric ? &fabric->fid : nullptr})
      if (f) fi_close(f);
  }
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  std::vector<char> name() const {
    std::vector<char> addr(256);
    size_t len = addr.size();
    check(fi_getname(&ep->fid, addr.data(), &len), "fi_getname");
    addr.resize(len);
    return addr;
  }
  void connect(const std::vector<char>& peer_name) {
    if (fi_av_insert(av, peer_name.data(), 1, &peer, 0, nullptr) != 1)
      throw std::runtime_error("fi_av_insert: the peer's address was not accepted");
  }

  void post_recv(std::size_t bytes) {
    recv_done = false;
    ssize_t rc;
    while ((rc = fi_recv(ep, buffer.data(), bytes, desc, peer, &recv_context)) == -FI_EAGAIN) progress();
    check(static_cast<int>(rc), "fi_recv");
  }
  void post_send(std::size_t bytes) {
    send_done = false;
    ssize_t rc;
    while ((rc = fi_send(ep, buffer.data(), bytes, desc, peer, &send_context)) == -FI_EAGAIN) progress();
    check(static_cast<int>(rc), "fi_send");
  }
  // Reads completions until `flag` is set; a peer that stopped answering is an error.
  void wait(const bool& flag) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!flag) {
      progress();
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no completion within 10 s");
    }
  }
  void progress() {
    fi_cq_entry entry{};
    const ssize_t rc = fi_cq_read(cq, &entry, 1);
    if (rc == 1) {
      if (entry.op_context == &send_context) send_done = true;
      if (entry.op_context == &recv_context) recv_done = true;
    } else if (rc == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(cq, &err, 0);
      throw std::runtime_error(std::string("completion error: ") + fi_strerror(err.err));
    } else if (rc != -FI_EAGAIN) {
      check(static_cast<int>(rc), "fi_cq_read");
    }
  }
};

long pingpong_repetitions(double bytes, double target_seconds) {
  // About target/3 seconds per batch at an assumed 1 GB/s and 20 us per round trip.
  const double per_round_trip = 20e-6 + 2.0 * bytes / 1e9;
  return std::clamp(static_cast<long>(target_seconds / 3.0 / per_round_trip), 3L, 2000L);
}

// Both endpoints' threads make the same sequence of calls: 1 warm-up and 3 batches per size.
FabricProbe measure(fi_info* info, const std::vector<double>& sizes, double target_seconds) {
  std::size_t largest = 8;
  std::vector<double> usable;
  for (double s : sizes)
    if (s <= static_cast<double>(info->ep_attr->max_msg_size)) {
      usable.push_back(s);
      largest = std::max(largest, static_cast<std::size_t>(s));
    }
  Endpoint a(info, largest, 1), b(info, largest, 2);
  a.connect(b.name());
  b.connect(a.name());
  FabricProbe probe;
  std::string peer_error;
  std::thread responder([&] {
    try {
      for (double s : usable) {
        const auto bytes = static_cast<std::size_t>(s);
        const long rounds = 1 + 3 * pingpong_repetitions(s, target_seconds);
        b.post_recv(bytes);
        for (long i = 0; i < rounds; ++i) {
          b.wait(b.recv_done);
          if (i + 1 < rounds) b.post_recv(bytes);
          b.post_send(bytes);
          b.wait(b.send_done);
        }
      }
    } catch (const std::exception& e) {
      peer_error = e.what();
    }
  });
  try {
    for (double s : usable) {
      const auto bytes = static_cast<std::size_t>(s);
      const long reps = pingpong_repetitions(s, target_seconds);
      auto round_trip = [&] {
        a.post_recv(bytes);
        a.post_send(bytes);
        a.wait(a.send_done);
        a.wait(a.recv_done);
      };
      round_trip();
      double best = 1e300;
      for (int batch = 0; batch < 3; ++batch) {
        const auto t0 = std::chrono::steady_clock::now();
        for (long i = 0; i < reps; ++i) round_trip();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
      }
      probe.pingpong.push_back({"send_recv", s, best / 2});
    }
  } catch (const std::exception& e) {
    responder.join();
    throw std::runtime_error(std::string(e.what()) + (peer_error.empty() ? "" : "; peer: " + peer_error));
  }
  responder.join();
  if (!peer_error.empty()) throw std::runtime_error("peer: " + peer_error);
  probe.ok = true;
  probe.provider = info->fabric_attr->prov_name ? info->fabric_attr->prov_name : "?";
  probe.fabric = info->fabric_attr->name ? info->fabric_attr->name : "?";
  probe.endpoint_type = "FI_EP_RDM";
  return probe;
}

}  // namespace

FabricProbe probe_libfabric(const std::vector<double>& sizes, double target_seconds) {
  fi_info* hints = fi_allocinfo();
  hints->caps = FI_MSG;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;  // every operation passes a fi_context2 of its own
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  fi_info* list = nullptr;
  const int rc = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  FabricProbe probe;
  if (rc != 0 || !list) {
    probe.note = std::string("fi_getinfo(FI_EP_RDM, FI_MSG) found no provider: ") + fi_strerror(-rc);
    return probe;
  }
  // Candidates: the first entry of each provider, efa first (the point of the probe on AWS).
  std::vector<fi_info*> candidates;
  std::vector<std::string> seen;
  for (fi_info* i = list; i; i = i->next) {
    const std::string prov = i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "";
    if (std::find(seen.begin(), seen.end(), prov) != seen.end()) continue;
    seen.push_back(prov);
    candidates.push_back(i);
  }
  std::stable_partition(candidates.begin(), candidates.end(), [](fi_info* i) {
    return i->fabric_attr->prov_name && std::strncmp(i->fabric_attr->prov_name, "efa", 3) == 0;
  });
  std::string failures;
  for (fi_info* info : candidates) {
    try {
      probe = measure(info, sizes, target_seconds);
      break;
    } catch (const std::exception& e) {
      failures += (failures.empty() ? "" : "; ") + std::string(info->fabric_attr->prov_name) + ": " + e.what();
    }
  }
  std::string offered;
  for (const auto& s : seen) offered += (offered.empty() ? "" : ", ") + s;
  probe.note = "providers offering FI_EP_RDM: " + offered + (failures.empty() ? "" : "; failed: " + failures);
  fi_freeinfo(list);
  return probe;
}

#else

std::string libfabric_version() { return "none (built without libfabric: pkg-config libfabric not found)"; }

FabricProbe probe_libfabric(const std::vector<double>&, double) {
  FabricProbe probe;
  probe.note = "this build has no libfabric (install libfabric-dev and reconfigure)";
  return probe;
}

#endif

}  // namespace partune::kernels::detail
