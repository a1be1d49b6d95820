#include "partune/costmodel/nccl_tuner.hpp"

#include <algorithm>

#include "partune/costmodel/units.hpp"

namespace partune {

namespace {

// Indices: protocol LL, LL128, Simple; node count 1, 2, 4 or more (NCCL's N1 / N2 / N4).
constexpr int kLL = 0, kLL128 = 1, kSimple = 2;

// µs, NCCL 2.30 ncclTunerConstantsDefaults (MB26 §2.1), the same on every GPU generation.
constexpr double kBaseLatency[2][3] = {{6.6, 14.0, 8.4},   // ring
                                       {6.8, 14.0, 8.4}};  // tree
constexpr double kNvlinkHop[2][3] = {{0.6, 1.9, 3.4},      // ring
                                     {0.6, 1.25, 4.0}};    // tree
constexpr double kNetHop[2][3] = {{2.7, 4.0, 14.0},        // ring
                                  {5.0, 8.5, 14.0}};       // tree
constexpr double kNvlsNvlinkHop = 25.0;                    // NVLS, Simple

// GB/s by node count. Hopper and Blackwell: MB26 §2.1 (NCCL 2.30). Ampere: NCCL's
// tuning.cc rows for compute capability 8.0 as the project recalls them (unchanged since
// NCCL 2.12); MB26 quotes only Hopper's and Blackwell's [assumed].
struct ArchCaps {
  double ll_max[3];             // llMaxBws
  double ring_ll128_per_ch[3];  // perChMaxRingLL128Bws
  double tree_ll128_per_ch[3];  // perChMaxTreeLL128Bws
  double tree_per_ch[3];        // perChMaxTreeBws
};
constexpr ArchCaps kAmpere = {{87.7, 22.5, 19.0}, {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {24.0, 23.6, 17.8}};
constexpr ArchCaps kHopper = {{141.0, 45.0, 35.0}, {36.7, 36.7, 36.7}, {36.7, 36.7, 29.0}, {38.7, 41.4, 36.0}};
constexpr ArchCaps kBlackwell = {{282.0, 90.0, 70.0}, {40.0, 40.0, 40.0}, {55.6, 31.67, 20.0}, {70.0, 42.8, 24.0}};

const ArchCaps& caps(NcclArch arch) {
  switch (arch) {
    case NcclArch::hopper: return kHopper;
    case NcclArch::blackwell: return kBlackwell;
    default: return kAmpere;
  }
}

int protocol_index(NcclProtocol p) { return p == NcclProtocol::ll ? kLL : p == NcclProtocol::ll128 ? kLL128 : kSimple; }

double min_cap(double a, double b) { return a <= 0 ? b : std::min(a, b); }

}  // namespace

std::optional<NcclProtocolModel> nccl_protocol_model(NcclArch arch, NcclAlgorithm algorithm,
                                                     NcclProtocol protocol, int nodes, int per_node,
                                                     int channels) {
  if (arch == NcclArch::none || protocol == NcclProtocol::automatic) return std::nullopt;
  const int p = protocol_index(protocol);
  const int size = nodes <= 1 ? 0 : nodes == 2 ? 1 : 2;
  const ArchCaps& c = caps(arch);
  const double ch = std::max(1, channels);
  const double gbs = units::giga;
  NcclProtocolModel m;
  if (algorithm == NcclAlgorithm::nvls) {  // Simple only; its rate is the fabric's measured one
    if (p != kSimple) return std::nullopt;
    m.intra_hop = kNvlsNvlinkHop * units::us;
    return m;
  }
  const int a = algorithm == NcclAlgorithm::ring ? 0 : 1;
  m.base_latency = kBaseLatency[a][p] * units::us;
  m.intra_hop = kNvlinkHop[a][p] * units::us;
  m.net_hop = kNetHop[a][p] * units::us;
  if (algorithm == NcclAlgorithm::ring) {
    if (p == kLL) m.bandwidth_factor = 0.5, m.bus_bw_cap = c.ll_max[size] * gbs;
    if (p == kLL128) {
      m.bandwidth_factor = per_node < 2 ? 0.7 : 0.92;
      m.bus_bw_cap = ch * c.ring_ll128_per_ch[size] * gbs;
    }
    return m;
  }
  // Tree (all-reduce): x 0.92 and the per-channel cap, then the protocol's own.
  m.bandwidth_factor = 0.92;
  m.bus_bw_cap = ch * c.tree_per_ch[size] * gbs;
  if (p == kLL) m.bandwidth_factor *= 1.0 / 3.8, m.bus_bw_cap = min_cap(m.bus_bw_cap, c.ll_max[size] * gbs);
  if (p == kLL128) {
    m.bandwidth_factor *= nodes <= 1 ? 7.0 / 9.0 : 120.0 / 128.0;
    m.bus_bw_cap = min_cap(m.bus_bw_cap, ch * c.tree_ll128_per_ch[size] * gbs);
  }
  return m;
}

double nccl_bus_bytes(NcclAlgorithm algorithm, double halves, int members, double bytes) {
  if (algorithm == NcclAlgorithm::ring) return halves * (members - 1.0) / members * bytes;
  return 2.0 * bytes;
}

}  // namespace partune
