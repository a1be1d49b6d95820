#include "world.hpp"

#include <xbt/log.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/fit_hint.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/units.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "collective_exec.hpp"
#include "platform.hpp"
#include "rank_program.hpp"

namespace partune::sim {

namespace {

// The communicators a rank may belong to, each with its own stream actor.
constexpr CommGroup kCommunicators[] = {CommGroup::tensor,    CommGroup::data,      CommGroup::sharded,
                                        CommGroup::replica,   CommGroup::embedding, CommGroup::expert,
                                        CommGroup::expert_data, CommGroup::context, CommGroup::context_a2a,
                                        CommGroup::expert_tensor, CommGroup::expert_block};

// Collectives between drops of a rank's arrived collective flows (World::execute_collective):
// a mailbox holds at most this many collectives' flows.
constexpr long kClearEvery = 16;

}  // namespace

World::World(const Job& job, const SimOptions& options)
    : job_(job),
      options_(options),
      placement_(job.parallel.placement_strategy, job.data_context_degree(),
                 job.parallel.pipeline_parallel_degree, job.parallel.tensor_parallel_degree),
      costs_(job) {
  const Folding folding = simulation_folding(job, options);
  const int block = folding.replica_block;
  tensor_symmetric_ = folding.tensor;
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
  for (int r : simulated_) programs_.push_back(build_program(costs_, r, po));

  const LayerPlan &dense = costs_.layer(false), &moe = costs_.layer(true);
  stored_checkpointed_ = stored_layer_bytes_by_kind(job, dense, moe);
  stored_full_ = full_layer_bytes_by_kind(job, dense, moe);
  weight_held_ = weight_gradient_bytes_by_kind(job, dense, moe);
  logits_ = logits_bytes(costs_.head());
  for (int s = 0; s < job.parallel.pipeline_parallel_degree; ++s) stage_memory_.push_back(partune::stage_memory(costs_, s));
}

void World::compute(const RankState& rs, double seconds) {
  seconds = rs.kernel_seconds(seconds);  // a slow GPU (SimOptions::slowdowns)
  if (rs.kernels_alone()) {
    // The GPU's host runs this rank's kernels alone, one instruction at a time: a sleep
    // of their time is what an execution at its speed would take, in one simcall
    // instead of two (start, wait). docs/performance.md §1, step 9.
    if (seconds > 0) s4u::this_actor::sleep_for(seconds);
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
  e.count = in.count;
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
  if (gv.on_own_links) {
    run_on_own_links(rs, group, req);
    return;
  }
  const long seq = rs.sequence[group_index(group)]++;
  if (gv.meetings) {
    // The earlier collectives' flows into this rank have all arrived (their members met
    // at their ends) and none of this one's can have started (they meet here first), so
    // they can be dropped: every kClearEvery collectives, when some have arrived (one
    // simcall). A mailbox holds at most kClearEvery collectives' flows.
    if (seq % kClearEvery == 0 && gv.mailbox->ready()) gv.mailbox->clear();
    gv.meetings->gate->wait();  // a collective starts when every member has called it
  }
  req.mark_started();
  const CollectiveTraffic t = phases_traffic(program_collective_phases(job_, group, in.kind, in.bytes, gv.span));
  activities_ += send_collective_phases(rs.host, gv.to, t, in.count, rs.nic_share);
  // The slowest member decides when the collective ends, its latency after that: the
  // last member to arrive waits it out for all (one timer, not one a member).
  const double latency = t.latency * in.count;
  if (gv.meetings) gv.meetings->end.arrive(latency);
  else if (latency > 0) s4u::this_actor::sleep_for(latency);
  req.mark_ended();
  record(rs, 2 + group_index(group), in, req.start, req.end);
  if (req.done) req.done->release();
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

SimResult World::run() {
  const auto wall_start = std::chrono::steady_clock::now();
  int argc = 1;
  char name[] = "partune";
  char* argv[] = {name, nullptr};
  xbt_log_control_set("root.thresh:critical");
  s4u::Engine engine(&argc, argv);
  configure_engine(simulated_.size());

  Platform platform(job_, simulated_, symmetric_);
  make_ranks(platform);
  // Pipeline neighbours.
  for (auto& rs : ranks_) {
    for (const Instruction& in : rs->program->ops)
      if (in.peer >= 0) platform.connect_pair(rs->rank, in.peer);
  }
  platform.seal();
  mark_own_links(platform);
  start_actors();
  engine.run();
  runners_.clear();  // their semaphores and flows go while the engine still exists
  meetings_.clear();  // as the barriers and semaphores of the communicators

  SimResult out = collect_results();
  out.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return out;
}

World::~World() = default;

void World::make_ranks(Platform& platform) {
  // Static memory per stage (weights, gradients, optimizer state, buffers) and the
  // transient parts, from the cost model (stage_memory_); activations are tracked as they
  // come and go.
  const std::vector<double> slow = slowdown_factors(job_, options_.slowdowns);
  ranks_.reserve(simulated_.size());
  for (std::size_t i = 0; i < simulated_.size(); ++i) {
    auto rs = std::make_unique<RankState>();
    rs->rank = simulated_[i];
    rs->node = node_of(rs->rank);
    rs->coords = placement_.coords(rs->rank);
    rs->host = platform.gpu(rs->rank);
    rs->compute_host = platform.compute_host(rs->rank);
    rs->slowdown = slow[static_cast<std::size_t>(rs->rank)];
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
    const MemoryBreakdown& m = stage_memory_[rs->coords.pipeline];
    // communication_buffers (the gradient buckets) are tracked as the buckets come and go.
    rs->memory_static = m.parameters + m.gradients + m.optimizer_states + m.gathered_parameters + m.reserved;
    rs->memory_peak = rs->memory_static;
    make_rank_groups(platform, *rs);
    ranks_.push_back(std::move(rs));
  }
}

// The communicators of a rank with more than one member, each with its stream.
void World::make_rank_groups(Platform& platform, RankState& rs) {
  const int sdp = job_.parallel.sharded_data_parallel_degree;
  for (CommGroup g : kCommunicators) {
    if (g == CommGroup::sharded && sdp <= 1) continue;
    if (g == CommGroup::replica && (sdp <= 1 || job_.data_context_degree() <= sdp)) continue;
    const int ep = job_.parallel.expert_parallel_degree;
    if ((g == CommGroup::expert || g == CommGroup::expert_data || g == CommGroup::expert_tensor ||
         g == CommGroup::expert_block) &&
        (ep <= 1 || !job_.model.is_moe()))
      continue;
    const std::vector<int> members = comm_group_members(job_, rs.rank, g);
    if (members.size() <= 1) continue;
    GroupView& gv = rs.groups[group_index(g)];
    gv.kind = g;
    gv.id = members.front();
    platform.connect_group(rs.rank, members, gv.span, gv.to.intra_successor, gv.to.net_successor,
                           gv.simulated_members);
    gv.mailbox = collective_mailbox(rs.rank, g);
    if (const int peer = platform.rank_of(gv.to.intra_successor); peer >= 0)
      gv.to.intra_mailbox = collective_mailbox(peer, g);
    if (const int peer = platform.rank_of(gv.to.net_successor); peer >= 0) gv.to.net_mailbox = collective_mailbox(peer, g);
    if (gv.simulated_members > 1) {
      std::unique_ptr<Meetings>& m = meetings_[{group_index(g), gv.id}];
      if (!m) m = std::make_unique<Meetings>(gv.simulated_members);
      gv.meetings = m.get();
    }
  }
}

s4u::Mailbox* World::collective_mailbox(int rank, CommGroup group) {
  return s4u::Mailbox::by_name("c" + std::to_string(rank) + "." + to_string(group));
}

// A communicator's stream actor, started the first time a collective must wait in its
// queue (an async one, or one behind it): communicators whose collectives are all
// blocking, as tensor-parallel ones are, never have one.
void World::start_stream(RankState& rs, CommGroup group) {
  Stream& st = rs.streams[group_index(group)];
  st.items = s4u::Semaphore::create(0);
  s4u::Actor::create(std::string("rank") + std::to_string(rs.rank) + "-" + to_string(group), rs.host,
                     [this, &rs, group] { run_stream(rs, group); });
}

void World::start_actors() {
  for (auto& rsp : ranks_) {
    RankState* rs = rsp.get();
    runners_.push_back(std::make_unique<RankProgramRunner>(*this, *rs));
    RankProgramRunner* runner = runners_.back().get();
    s4u::ActorPtr actor = s4u::Actor::create("rank" + std::to_string(rs->rank), rs->host, [runner] { runner->run(); });
    // The program actor receives its collective mailboxes' flows eagerly: they start at
    // once, as host-to-host flows do (collective_exec.hpp).
    for (const GroupView& gv : rs->groups)
      if (gv.mailbox) gv.mailbox->set_receiver(actor);
  }
}

SimResult World::collect_results() {
  SimResult out;
  out.symmetric = symmetric_;
  double step = 0;
  for (auto& rs : ranks_) step = std::max(step, rs->end_time);
  const int p = job_.parallel.pipeline_parallel_degree;
  out.stage_utilisation.assign(p, 0.0);
  std::vector<int> per_stage(p, 0);
  double peak = 0;
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
    peak = std::max(peak, rs->memory_peak);
    // The critical rank finishes last (the busiest among those that do).
    if (rs->end_time > critical->end_time + 1e-12 ||
        (std::fabs(rs->end_time - critical->end_time) <= 1e-12 && rs->compute_busy > critical->compute_busy))
      critical = rs.get();
  }
  for (int s = 0; s < p; ++s)
    if (per_stage[s]) out.stage_utilisation[s] /= per_stage[s];
  // Idle time no exposed collective explains is waiting on pipeline neighbours; with one
  // stage there are none.
  if (p > 1)
    for (auto& rs : ranks_) {
      const ExposedComm& x = rs->exposed;
      const double waits = step - rs->compute_busy - x.tensor - x.data - x.sharded - x.offload;
      out.bubble_fraction += std::max(0.0, waits) / step / static_cast<double>(ranks_.size());
    }
  out.exposed = critical->exposed;

  // Headline numbers with the estimator's definitions, on the simulated step time.
  const MemoryFit memory = estimate_memory(costs_);
  out.estimated = estimate(costs_, memory);
  StepMetrics& e = out.metrics;
  e = headline_metrics(costs_, step);
  e.memory = memory.memory;
  e.memory_capacity = job_.cluster.instance.gpu.hbm_bytes;
  e.fits = peak <= e.memory_capacity;
  if (!e.fits)
    e.not_fit_reason = fmt::format("a rank peaks at {:.1f} GiB of {:.1f} GiB HBM; {}", peak / units::GiB,
                                   e.memory_capacity / units::GiB, fit_hint(job_, e.memory));
  StepBreakdown& br = e.breakdown;
  br.compute = critical->compute_busy;
  br.context_parallel_comm = critical->exposed.context;
  br.expert_parallel_comm = critical->exposed.expert;
  br.tensor_parallel_comm = std::max(0.0, critical->exposed.tensor - br.context_parallel_comm - br.expert_parallel_comm);
  br.data_parallel_exposed = critical->exposed.data;
  br.sharded_exposed = critical->exposed.sharded;
  br.offload_exposed = critical->exposed.offload;
  br.pipeline_p2p = 0;
  br.pipeline_bubble = std::max(0.0, step - br.compute - br.layer_comm() - br.data_parallel_exposed -
                                         br.sharded_exposed - br.offload_exposed);
  out.events = std::move(events_);
  out.activities = activities_;
  return out;
}

}  // namespace partune::sim
