#include "world.hpp"

#include <xbt/log.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <map>
#include <set>
#include <tuple>
#include <stdexcept>
#include <string>

#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/units.hpp"
#include "collective_exec.hpp"
#include "platform.hpp"

namespace partune::sim {

namespace {

int group_index(CommGroup g) { return static_cast<int>(g); }


}  // namespace

bool tensor_groups_are_symmetric(const Job& job) {
  // Members of a tensor-parallel group run the same program; when the group sits in one
  // node, its rank 0 stands for all: its collectives go up and down its own NVSwitch port,
  // and its network and PCIe transfers carry the bytes of the members that share its NIC
  // or PCIe switch (they move identical amounts at the same moments).
  const int tp = job.parallel.tensor_parallel_degree;
  if (tp <= 1) return false;
  const Placement p(job.parallel.placement_strategy, job.data_parallel_degree(), job.parallel.pipeline_parallel_degree,
                    tp);
  return group_span(p, Axis::tensor, job.cluster.instance.gpus_per_node).nodes == 1 &&
         p.stride(Axis::tensor) * tp <= job.cluster.instance.gpus_per_node;
}

int replica_cluster_size(const Job& job, std::string* why_not) {
  auto no = [&](const char* reason) {
    if (why_not) *why_not = reason;
    return 0;
  };
  const int dp = job.data_parallel_degree(), world = job.world_size();
  const int sdp = job.parallel.sharded_data_parallel_degree;
  if (dp <= 1) return no("there is one data-parallel replica");
  const Placement p(job.parallel.placement_strategy, dp, job.parallel.pipeline_parallel_degree,
                    job.parallel.tensor_parallel_degree);
  const int G = job.cluster.instance.gpus_per_node;
  // The replicas that share nodes with replica 0, and those sharing nodes with them, ...
  std::vector<bool> in(dp, false);
  in[0] = true;
  for (bool grew = true; grew;) {
    grew = false;
    for (int r = 0; r < world; ++r) {
      if (!in[p.coords(r).data]) continue;
      const int first = r / G * G;
      for (int q = first; q < std::min(world, first + G); ++q)
        if (!in[p.coords(q).data]) in[p.coords(q).data] = true, grew = true;
    }
  }
  int size = 0;
  while (size < dp && in[size]) ++size;
  for (int d = size; d < dp; ++d)
    if (in[d]) return no("the replicas sharing nodes with replica 0 are not a leading block");
  if (size == dp) return no("every replica shares nodes with the others");
  if (dp % size != 0) return no("the replicas do not split into equal blocks of nodes");
  if (sdp > 1 && size % sdp != 0) return no("sharded groups would span simulated and mirrored replicas");
  // Exactness: a data-parallel group's members inside the block sit on one node, so every
  // network successor lies outside it and its mirror loads the same links.
  for (int r = 0; r < world; ++r) {
    if (p.coords(r).data >= size) continue;
    const std::vector<int> group = p.group(r, Axis::data);
    for (int d = 1; d < size; ++d)
      if (group[d] / G != group[0] / G) return no("a data-parallel group spans nodes inside the replica block");
  }
  return size;
}

bool replicas_are_symmetric(const Job& job, std::string* why_not) {
  return replica_cluster_size(job, why_not) > 0;
}

CollectiveAlgorithm GroupView::algorithm(OpKind op, const ParallelConfig& pc) const {
  switch (kind) {
    case CommGroup::data:
    case CommGroup::replica: return pc.data_parallel_collective;
    case CommGroup::sharded:
      // SMDDP offers an all-to-all AllGather only; reduce-scatter stays a ring.
      if (op == OpKind::reduce_scatter && pc.sharded_collective == CollectiveAlgorithm::all_to_all)
        return CollectiveAlgorithm::ring;
      return pc.sharded_collective;
    default: return CollectiveAlgorithm::ring;
  }
}

World::World(const Job& job, const SimOptions& options)
    : job_(job),
      options_(options),
      placement_(job.parallel.placement_strategy, job.data_parallel_degree(),
                 job.parallel.pipeline_parallel_degree, job.parallel.tensor_parallel_degree) {
  // Ranks sharing a node's cores slow each other down: every one of them must run.
  const bool symmetry = options.use_symmetry && !job.cluster.instance.ranks_share_host_compute();
  const int block = symmetry ? replica_cluster_size(job) : 0;
  tensor_symmetric_ = symmetry && tensor_groups_are_symmetric(job);
  symmetric_ = block > 0 || tensor_symmetric_;
  slot_of_rank_.assign(job.world_size(), -1);
  for (int r = 0; r < job.world_size(); ++r)
    if ((block == 0 || placement_.coords(r).data < block) && (!tensor_symmetric_ || placement_.coords(r).tensor == 0)) {
      slot_of_rank_[r] = static_cast<int>(simulated_.size());
      simulated_.push_back(r);
    }
  ProgramOptions po;
  po.granularity = options.granularity;
  programs_.reserve(simulated_.size());
  for (int r : simulated_) programs_.push_back(build_program(job, r, po));

  const double b = job.microbatch_size();
  stored_checkpointed_ = stored_layer_bytes(job, b);
  stored_full_ = full_layer_bytes(job, b);
}

void World::compute(const RankState& rs, double seconds) {
  if (rs.compute_host == rs.host) {
    s4u::this_actor::execute(seconds * kHostSpeed);
    return;
  }
  // On the node's pooled cores: never faster than one core alone.
  s4u::this_actor::exec_init(seconds * kHostSpeed)->set_host(rs.compute_host)->set_bound(kHostSpeed)->start()->wait();
}

void World::record(const RankState& rs, int stream, const Instruction& in, double start, double end) {
  ++activities_;
  if (!options_.record_events) return;
  TraceEvent e;
  e.rank = rs.rank;
  e.stream = stream;
  e.kind = in.kind;
  e.group = in.group;
  e.microbatch = in.microbatch;
  e.chunk = in.chunk;
  e.layer = in.layer;
  e.start = start;
  e.end = end;
  events_.push_back(e);
}

s4u::Mailbox* World::p2p_mailbox(int from, int to, OpKind kind, bool head_hop) {
  // One FIFO channel per (sender, receiver, kind); the hop to and from a head on stage 0
  // (lm_head_stage: first, instructions tagged with the head's chunk) has its own.
  const bool activation = kind == OpKind::send_activation || kind == OpKind::recv_activation;
  const char* tag = activation ? (head_hop ? ">ha>" : ">a>") : (head_hop ? ">hg>" : ">g>");
  return s4u::Mailbox::by_name(std::to_string(from) + tag + std::to_string(to));
}

void World::execute_collective(RankState& rs, CommGroup group, CollectiveRequest& req) {
  const Instruction& in = *req.instruction;
  const GroupView& gv = rs.groups[group_index(group)];
  const long seq = rs.sequence[group_index(group)]++;
  s4u::BarrierPtr barrier;
  if (gv.simulated_members > 1) {
    auto key = std::make_tuple(group_index(group), gv.id, seq);
    auto it = barriers_.find(key);
    if (it == barriers_.end())
      it = barriers_.emplace(key, std::make_pair(s4u::Barrier::create(gv.simulated_members), 0)).first;
    barrier = it->second.first;
    barrier->wait();  // a collective starts when every member has called it
  }
  req.start = s4u::Engine::get_clock();
  const CollectiveKind kind = in.kind == OpKind::all_reduce   ? CollectiveKind::all_reduce
                              : in.kind == OpKind::all_gather ? CollectiveKind::all_gather
                                                              : CollectiveKind::reduce_scatter;
  const CollectiveTraffic t = collective_traffic(kind, gv.algorithm(in.kind, job_.parallel), in.bytes, gv.span,
                                                 job_.cluster.instance);
  activities_ += send_collective_phases(rs.host, gv.intra_successor, gv.net_successor, t, in.count, rs.nic_share);
  if (barrier) {
    barrier->wait();  // the slowest member decides when the collective ends
    auto key = std::make_tuple(group_index(group), gv.id, seq);
    auto it = barriers_.find(key);
    if (it != barriers_.end() && ++it->second.second == gv.simulated_members) barriers_.erase(it);
  }
  req.end = s4u::Engine::get_clock();
  record(rs, 2 + group_index(group), in, req.start, req.end);
  req.done->release();
}

void World::run_stream(RankState& rs, CommGroup group) {
  Stream& st = rs.streams[group_index(group)];
  for (;;) {
    st.items->acquire();
    CollectiveRequest* req = st.queue.front();
    st.queue.pop_front();
    if (!req->instruction) return;
    st.busy = true;
    execute_collective(rs, group, *req);
    st.busy = false;
  }
}

void World::run_program(RankState& rs) {
  const std::vector<Instruction>& ops = rs.program->ops;
  std::vector<s4u::CommPtr> comms(ops.size());
  std::vector<std::unique_ptr<CollectiveRequest>> requests(ops.size());
  const InstanceType& inst = job_.cluster.instance;
  const double net_latency = inst.nic.latency;
  const double intra_latency = job_.cluster.instance.intra_node.latency;
  static int token = 0;
  auto exposed_slot = [&](CommGroup g) -> double& {
    switch (g) {
      case CommGroup::tensor: return rs.exposed.tensor;
      case CommGroup::sharded: return rs.exposed.sharded;
      default: return rs.exposed.data;
    }
  };
  auto memory = [&](double delta) {
    rs.memory_live += delta;
    rs.memory_peak = std::max(rs.memory_peak, rs.memory_static + rs.memory_live);
  };
  const int stage = rs.coords.pipeline, chunks = job_.parallel.virtual_stages;
  const bool head_first = job_.lm_head_on_first_stage();
  const bool head_stage_rank = stage == job_.lm_head_stage();
  const int layers_per_chunk = job_.layers_per_chunk(stage);
  // A head on stage 0 runs as instructions of its own chunk (chunk = virtual_stages).
  auto head_hop = [&](const Instruction& in) { return head_first && in.chunk == chunks; };
  // What a compute instruction's layers keep for backward: each chunk's first
  // checkpointed_layers_in_chunk layers are checkpointed, the others keep everything.
  auto stored_bytes = [&](const Instruction& in) {
    const int ckpt = job_.checkpointed_layers_in_chunk(stage, in.chunk);
    if (in.layer >= 0) return in.layer < ckpt ? stored_checkpointed_ : stored_full_;
    if (in.layers == 0) return 0.0;  // the head alone
    return ckpt * stored_checkpointed_ + (layers_per_chunk - ckpt) * stored_full_;
  };
  // Recomputing a checkpointed layer materialises what it did not keep.
  const double working = stage_memory(job_, stage).activation_working;
  // Offloaded activations leave the device when their copy completes (checked between
  // instructions); a reload brings them back. Keyed by (micro-batch, chunk).
  using CopyKey = std::tuple<int, int, int>;  // micro-batch, chunk, layer (-1: whole chunk)
  std::map<CopyKey, int> offload_pending;     // -> instruction index
  std::set<CopyKey> offloaded;
  auto release_finished_offloads = [&] {
    for (auto it = offload_pending.begin(); it != offload_pending.end();) {
      if (comms[it->second] && comms[it->second]->test()) {
        memory(-ops[it->second].bytes);
        offloaded.insert(it->first);
        it = offload_pending.erase(it);
      } else {
        ++it;
      }
    }
  };

  // A gradient bucket's flat buffer (a data-parallel all-reduce or reduce-scatter, a
  // sharded reduce-scatter) lives from its issue until it completes: the backend copies
  // the result out at the first instruction boundary after completion (or at the wait).
  // Keyed by instruction index -> bytes.
  std::map<int, double> buckets_live;
  auto is_bucket = [](const Instruction& in) {
    return in.async && (in.kind == OpKind::all_reduce || in.kind == OpKind::reduce_scatter) &&
           (in.group == CommGroup::data || in.group == CommGroup::sharded);
  };
  auto release_finished_buckets = [&] {
    const double now = s4u::Engine::get_clock();
    for (auto it = buckets_live.begin(); it != buckets_live.end();) {
      const CollectiveRequest* r = requests[it->first].get();
      if (r && r->end >= 0 && r->end <= now) {
        memory(-it->second);
        it = buckets_live.erase(it);
      } else {
        ++it;
      }
    }
  };

  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Instruction& in = ops[i];
    if (!offload_pending.empty()) release_finished_offloads();
    if (!buckets_live.empty()) release_finished_buckets();
    const double start = s4u::Engine::get_clock();
    switch (in.kind) {
      case OpKind::forward:
      case OpKind::recompute:
      case OpKind::backward:
      case OpKind::optimizer_step: {
        const double t0 = s4u::Engine::get_clock();
        compute(rs, in.seconds);
        const double t1 = s4u::Engine::get_clock();
        rs.compute_busy += in.seconds;
        // GPU-driven collectives that ran beside these kernels held SMs and HBM
        // bandwidth: the kernels lose (1 - compute_overlap) of the time they overlapped,
        // and a collective still running during that extra time slows it in turn.
        double from = t0, to = t1;
        for (int round = 0;; ++round) {
          double stall = 0, still_running = 0;  // still_running: sum of (1 - overlap) of those not done
          for (CollectiveRequest* r : rs.in_flight) {
            if (r->start < 0) continue;
            const double until = r->end >= 0 ? std::min(r->end, to) : to;
            const double overlapped = until - std::max(r->start, from);
            if (overlapped <= 0) continue;
            const double owed = (1.0 - r->compute_overlap) * overlapped;
            stall += owed;
            exposed_slot(r->instruction->group) += owed;
            if (r->end < 0 || r->end > to) still_running += 1.0 - r->compute_overlap;
          }
          if (stall < 1e-9) break;
          if (round >= 4 && still_running > 0 && still_running < 1) {
            // The rest of the geometric series in one step: collectives still running keep
            // slowing the stall by the same factor (exact while they last; they usually do).
            const double tail = stall / (1.0 - still_running);
            for (CollectiveRequest* r : rs.in_flight)
              if (r->start >= 0 && (r->end < 0 || r->end > to))
                exposed_slot(r->instruction->group) += (tail - stall) * (1.0 - r->compute_overlap) / still_running;
            compute(rs, tail);
            ++activities_;
            break;
          }
          from = s4u::Engine::get_clock();
          compute(rs, stall);
          to = s4u::Engine::get_clock();
          ++activities_;
          if (round >= 64) break;
        }
        rs.in_flight.erase(std::remove_if(rs.in_flight.begin(), rs.in_flight.end(),
                                          [&](CollectiveRequest* r) { return r->end >= 0 && r->end <= to; }),
                           rs.in_flight.end());
        // Activations: what a layer keeps stays from its forward to its backward; the LM
        // head's logits live on the last model chunk only (its last layer), or with a head
        // on stage 0 from the head's forward to its backward.
        if (in.kind == OpKind::forward || in.kind == OpKind::backward) {
          const bool head = head_stage_rank &&
                            (head_first ? head_hop(in)
                                        : in.chunk == chunks - 1 && (in.layer < 0 || in.layer == layers_per_chunk - 1));
          const double bytes = stored_bytes(in) + (head ? logits_ : 0);
          memory(in.kind == OpKind::forward ? bytes : -bytes);
        }
        if (in.kind == OpKind::recompute && working > 0) {
          rs.memory_peak = std::max(rs.memory_peak, rs.memory_static + rs.memory_live + working);
        }
        break;
      }
      case OpKind::send_activation:
      case OpKind::send_gradient:
        comms[i] = p2p_mailbox(rs.rank, in.peer, in.kind, head_hop(in))
                       ->put_async(&token, static_cast<uint64_t>(in.bytes * (node_of(in.peer) == rs.node ? 1.0
                                                                                                          : rs.nic_share)));
        if (!in.async) comms[i]->wait();
        break;
      case OpKind::recv_activation:
      case OpKind::recv_gradient: {
        p2p_mailbox(in.peer, rs.rank, in.kind, head_hop(in))->get<int>();
        s4u::this_actor::sleep_for(node_of(in.peer) == rs.node ? intra_latency : net_latency);
        rs.exposed.pipeline += s4u::Engine::get_clock() - start;
        break;
      }
      case OpKind::all_reduce:
      case OpKind::all_gather:
      case OpKind::reduce_scatter: {
        auto req = std::make_unique<CollectiveRequest>();
        req->instruction = &in;
        req->index = static_cast<int>(i);
        req->async = in.async;
        req->done = s4u::Semaphore::create(0);
        const CollectiveAlgorithm algo = rs.groups[group_index(in.group)].algorithm(in.kind, job_.parallel);
        req->compute_overlap = algo == CollectiveAlgorithm::all_to_all ? inst.all_to_all.compute_overlap
                               : algo == CollectiveAlgorithm::tree     ? inst.tree.compute_overlap
                                                                       : inst.ring.compute_overlap;
        if (is_bucket(in)) {
          memory(in.bytes);
          buckets_live[static_cast<int>(i)] = in.bytes;
        }
        Stream& st = rs.streams[group_index(in.group)];
        if (!in.async && st.queue.empty() && !st.busy && rs.groups[group_index(in.group)].simulated_members == 1) {
          // Nothing is queued on this communicator and no other member must rendezvous:
          // the program actor runs the collective itself (same flows, same order),
          // sparing two hand-offs per collective.
          execute_collective(rs, in.group, *req);
          exposed_slot(in.group) += s4u::Engine::get_clock() - start;
        } else {
          st.queue.push_back(req.get());
          st.items->release();
          if (in.async) rs.in_flight.push_back(req.get());
          if (!in.async) {
            req->done->acquire();
            exposed_slot(in.group) += s4u::Engine::get_clock() - start;
          }
        }
        requests[i] = std::move(req);
        break;
      }
      case OpKind::offload:
        comms[i] = s4u::Comm::sendto_async(rs.host, rs.cpu, static_cast<uint64_t>(in.bytes * rs.pcie_share));
        offload_pending[CopyKey{in.microbatch, in.chunk, in.layer}] = static_cast<int>(i);
        break;
      case OpKind::reload: {
        // The device buffer is allocated when the copy starts; if the offload has not
        // finished, the activations never left.
        const CopyKey key{in.microbatch, in.chunk, in.layer};
        if (offloaded.erase(key)) memory(in.bytes);
        else offload_pending.erase(key);
        comms[i] = s4u::Comm::sendto_async(rs.cpu, rs.host, static_cast<uint64_t>(in.bytes * rs.pcie_share));
        break;
      }
      case OpKind::wait: {
        const Instruction& awaited = ops[in.wait_for];
        if (comms[in.wait_for]) {
          comms[in.wait_for]->wait();
          const double blocked = s4u::Engine::get_clock() - start;
          if (awaited.kind == OpKind::offload) {
            const CopyKey key{awaited.microbatch, awaited.chunk, awaited.layer};
            if (offload_pending.erase(key)) {
              memory(-awaited.bytes);
              offloaded.insert(key);
            }
          }
          if (awaited.kind == OpKind::offload || awaited.kind == OpKind::reload) rs.exposed.offload += blocked;
          else rs.exposed.pipeline += blocked;
          record(rs, 1, awaited, start, s4u::Engine::get_clock());
          comms[in.wait_for] = nullptr;
        } else if (requests[in.wait_for]) {
          requests[in.wait_for]->done->acquire();
          exposed_slot(awaited.group) += s4u::Engine::get_clock() - start;
          if (auto b = buckets_live.find(in.wait_for); b != buckets_live.end()) {
            memory(-b->second);
            buckets_live.erase(b);
          }
          CollectiveRequest* done = requests[in.wait_for].get();
          rs.in_flight.erase(std::remove(rs.in_flight.begin(), rs.in_flight.end(), done), rs.in_flight.end());
          requests[in.wait_for].reset();
        }
        break;
      }
    }
    // Async work is recorded where it completes (stream actors, or the wait above).
    if (!in.async && in.kind != OpKind::wait) record(rs, 0, in, start, s4u::Engine::get_clock());
  }
  rs.end_time = s4u::Engine::get_clock();
  for (auto& st : rs.streams) {
    if (!st.items) continue;
    static CollectiveRequest stop;
    st.queue.push_back(&stop);
    st.items->release();
  }
}

SimResult World::run() {
  const auto wall_start = std::chrono::steady_clock::now();
  int argc = 1;
  char name[] = "partune";
  char* argv[] = {name, nullptr};
  xbt_log_control_set("root.thresh:critical");
  s4u::Engine engine(&argc, argv);
  // Pure max-min sharing with no TCP corrections: link shares must be the model's, and
  // latencies are added explicitly by the collectives (links carry none).
  s4u::Engine::set_config("network/model:CM02");
  s4u::Engine::set_config("network/TCP-gamma:0");
  s4u::Engine::set_config("network/crosstraffic:0");
  s4u::Engine::set_config("contexts/stack-size:128");

  // Static memory per stage (weights, gradients, optimizer state, buffers) and the
  // transient parts, from the cost model; activations are tracked as they come and go.
  std::vector<MemoryBreakdown> stage_mem;
  for (int s = 0; s < job_.parallel.pipeline_parallel_degree; ++s) stage_mem.push_back(stage_memory(job_, s));
  logits_ = logits_bytes_per_microbatch(job_);

  Platform platform(job_, simulated_, symmetric_);
  ranks_.reserve(simulated_.size());
  for (std::size_t i = 0; i < simulated_.size(); ++i) {
    auto rs = std::make_unique<RankState>();
    rs->rank = simulated_[i];
    rs->node = node_of(rs->rank);
    rs->coords = placement_.coords(rs->rank);
    rs->host = platform.gpu(rs->rank);
    rs->compute_host = platform.compute_host(rs->rank);
    rs->cpu = platform.cpu(rs->node);
    if (tensor_symmetric_) {
      // The unsimulated members of this rank's tensor group that share its NIC or PCIe
      // switch move the same bytes at the same moments: carry them on this rank's flows.
      const InstanceType& inst = job_.cluster.instance;
      const int G = inst.gpus_per_node;
      const int my_gpu = rs->rank % G;
      for (int m : placement_.group(rs->rank, Axis::tensor)) {
        if (m == rs->rank) continue;
        const int gpu = m % G;
        if (gpu / inst.gpus_per_nic() == my_gpu / inst.gpus_per_nic()) rs->nic_share += 1;
        if (gpu / inst.gpus_per_pcie_switch == my_gpu / inst.gpus_per_pcie_switch) rs->pcie_share += 1;
      }
    }
    rs->program = &programs_[i];
    const MemoryBreakdown& m = stage_mem[rs->coords.pipeline];
    // communication_buffers (the gradient buckets) are tracked as the buckets come and go.
    rs->memory_static = m.parameters + m.gradients + m.optimizer_states + m.gathered_parameters + m.reserved;
    rs->memory_peak = rs->memory_static;
    for (CommGroup g : {CommGroup::tensor, CommGroup::data, CommGroup::sharded, CommGroup::replica, CommGroup::embedding}) {
      if (g == CommGroup::sharded && job_.parallel.sharded_data_parallel_degree <= 1) continue;
      if (g == CommGroup::replica && (job_.parallel.sharded_data_parallel_degree <= 1 ||
                                      job_.data_parallel_degree() <= job_.parallel.sharded_data_parallel_degree))
        continue;
      const std::vector<int> members = comm_group_members(job_, rs->rank, g);
      if (members.size() <= 1) continue;
      GroupView& gv = rs->groups[group_index(g)];
      gv.kind = g;
      gv.id = members.front();
      platform.connect_group(rs->rank, members, gv.span, gv.intra_successor, gv.net_successor,
                             gv.simulated_members);
      rs->streams[group_index(g)].items = s4u::Semaphore::create(0);
    }
    ranks_.push_back(std::move(rs));
  }
  // Pipeline neighbours.
  for (auto& rs : ranks_) {
    for (const Instruction& in : rs->program->ops)
      if (in.peer >= 0) platform.connect_pair(rs->rank, in.peer);
  }
  platform.seal();

  for (auto& rsp : ranks_) {
    RankState* rs = rsp.get();
    s4u::Actor::create("rank" + std::to_string(rs->rank), rs->host, [this, rs] { run_program(*rs); });
    for (CommGroup g : {CommGroup::tensor, CommGroup::data, CommGroup::sharded, CommGroup::replica, CommGroup::embedding})
      if (rs->streams[group_index(g)].items)
        s4u::Actor::create(std::string("rank") + std::to_string(rs->rank) + "-" + to_string(g), rs->host,
                           [this, rs, g] { run_stream(*rs, g); });
  }
  engine.run();

  SimResult out;
  out.symmetric = symmetric_;
  double step = 0;
  for (auto& rs : ranks_) step = std::max(step, rs->end_time);
  const int p = job_.parallel.pipeline_parallel_degree;
  out.stage_utilisation.assign(p, 0.0);
  std::vector<int> per_stage(p, 0);
  double busy_sum = 0, peak = 0;
  const RankState* critical = ranks_.front().get();
  for (auto& rs : ranks_) {
    RankResult rr;
    rr.rank = rs->rank;
    rr.stage = rs->coords.pipeline;
    rr.end_time = rs->end_time;
    rr.compute_busy = rs->compute_busy;
    rr.exposed = rs->exposed;
    rr.peak_memory = rs->memory_peak;
    out.ranks.push_back(rr);
    out.stage_utilisation[rr.stage] += rs->compute_busy / step;
    ++per_stage[rr.stage];
    busy_sum += rs->compute_busy;
    peak = std::max(peak, rs->memory_peak);
    // The critical rank finishes last (the busiest among those that do).
    if (rs->end_time > critical->end_time + 1e-12 ||
        (std::fabs(rs->end_time - critical->end_time) <= 1e-12 && rs->compute_busy > critical->compute_busy))
      critical = rs.get();
  }
  for (int s = 0; s < p; ++s)
    if (per_stage[s]) out.stage_utilisation[s] /= per_stage[s];
  out.bubble_fraction = 1.0 - busy_sum / ranks_.size() / step;
  out.exposed = critical->exposed;

  // Headline numbers with the estimator's definitions, on the simulated step time.
  Estimate& e = out.metrics;
  const double B = job_.training.global_batch, N = job_.world_size();
  e.step_time = step;
  e.samples_per_s = B / step;
  e.tokens_per_s = e.samples_per_s * job_.model.seq_len;
  e.model_flops = model_flops_per_step(job_.model, B);
  e.hardware_flops = hardware_flops_per_step(job_.model, B, job_.parallel.activation_checkpointing,
                                             job_.checkpointed_fraction());
  e.tflops_per_gpu = e.model_flops / (step * N) / units::tera;
  e.hw_tflops_per_gpu = e.hardware_flops / (step * N) / units::tera;
  e.mfu = e.model_flops / (step * N * job_.cluster.instance.gpu.peak_flops(job_.training.precision));
  e.memory = peak_memory(job_);
  e.memory_capacity = job_.cluster.instance.gpu.hbm_bytes;
  e.fits = peak <= e.memory_capacity;
  if (!e.fits)
    e.not_fit_reason = "a rank peaks at " + std::to_string(peak / units::GiB).substr(0, 5) + " GiB of " +
                       std::to_string(e.memory_capacity / units::GiB).substr(0, 5) + " GiB HBM";
  StepBreakdown& br = e.breakdown;
  br.compute = critical->compute_busy;
  br.tensor_parallel_comm = critical->exposed.tensor;
  br.data_parallel_exposed = critical->exposed.data;
  br.sharded_exposed = critical->exposed.sharded;
  br.offload_exposed = critical->exposed.offload;
  br.pipeline_p2p = 0;
  br.pipeline_bubble = std::max(0.0, step - br.compute - br.tensor_parallel_comm - br.data_parallel_exposed -
                                         br.sharded_exposed - br.offload_exposed);
  out.events = std::move(events_);
  out.activities = activities_;
  out.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return out;
}

}  // namespace partune::sim
