#pragma once
// NCCL's tuning model, as NCCL 2.30's src/graph/tuning.cc states it (MB26 §2.1: its
// ncclTunerConstantsDefaults and per-channel caps). For one algorithm and one protocol it
// gives the latency NCCL predicts (a base per call plus a hardware latency per step, on
// NVLink or on the network) and how the protocol scales and caps the algorithm's bus
// bandwidth. collective.cpp lays it over its phases (the fabric's measured rates and each
// link's own latency) and keeps the fastest protocol, as NCCL's tuner does when NCCL_PROTO
// is unset.
//
// Protocols: LL sends 8 bytes of data with 8 of flags (half the bandwidth, the shortest
// steps), LL128 120 of every 128 bytes, Simple whole buffers behind a fence (full
// bandwidth, the longest steps). NVLS (NVLink SHARP) runs Simple only.
#include <optional>

#include "partune/costmodel/hardware.hpp"

namespace partune {

enum class NcclAlgorithm { ring, tree, nvls };

struct NcclProtocolModel {
  double base_latency = 0;      // s, once a call
  double intra_hop = 0;         // s, each step over NVLink (NCCL's hwLat[NVLINK])
  double net_hop = 0;           // s, each step across the network (hwLat[NET])
  double bandwidth_factor = 1;  // of the algorithm's Simple bandwidth
  double bus_bw_cap = 0;        // bytes/s of NCCL's bus bandwidth at most; 0: none
};

// The model of `protocol` for `algorithm` on a group of `nodes` nodes with `per_node`
// members each, on `channels` channels; std::nullopt where NCCL does not run the pair
// (NVLS with LL or LL128) or `arch` is none. `all_reduce`: the tree's refinements are
// NCCL's all-reduce's (a tree runs nothing else here).
std::optional<NcclProtocolModel> nccl_protocol_model(NcclArch arch, NcclAlgorithm algorithm,
                                                     NcclProtocol protocol, int nodes, int per_node,
                                                     int channels);

// NCCL's bus bandwidth convention: the bytes a call's bus bandwidth is counted over, for a
// buffer of `bytes` (ring: what nccl-tests' busbw counts, halves x (n - 1) / n of it; tree
// and NVLS: twice the buffer, NCCL's ratio 0.5 between algorithm and bus bandwidth).
double nccl_bus_bytes(NcclAlgorithm algorithm, double halves, int members, double bytes);

}  // namespace partune
