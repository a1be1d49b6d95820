#include "rank_program.hpp"

#include <string>

#include "partune/costmodel/activation_memory.hpp"
#include "partune/costmodel/memory.hpp"

namespace partune::sim {

namespace {

double now() { return s4u::Engine::get_clock(); }

// Receives flagged posted_early after compute instruction `i` (before the next compute):
// what RankProgramRunner::post_early_receives posts when `i` starts.
bool posts_early_receives(const std::vector<Instruction>& ops, std::size_t i) {
  for (std::size_t j = i + 1; j < ops.size() && !is_compute(ops[j].kind); ++j)
    if (ops[j].posted_early) return true;
  return false;
}

// Instructions run together with the next one (RankProgramRunner::Fusion). A compute
// and the blocking collective after it: the collective is timed in closed form, the
// kernels are a sleep on the GPU's own host, and nothing the rank issued asynchronously
// that could slow its kernels or change its memory (a collective, an offload, a reload) is
// outstanding. Pipeline sends and receives in flight do neither. A receive before such a
// compute that posts no early receives: its latency is slept with those kernels (posted
// early receives must start at the compute's start, hence the condition).
std::vector<char> plan_fusions(const RankState& rs) {
  using F = RankProgramRunner::Fusion;
  const std::vector<Instruction>& ops = rs.program->ops;
  std::vector<char> fused(ops.size(), F::none);
  if (!rs.kernels_alone()) return fused;
  std::vector<char> outstanding(ops.size(), 0);
  int count = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Instruction& in = ops[i];
    if (in.kind == OpKind::wait) {
      if (outstanding[in.wait_for]) --count;
      outstanding[in.wait_for] = 0;
    } else if (in.async && (is_collective(in.kind) || in.kind == OpKind::offload || in.kind == OpKind::reload)) {
      outstanding[i] = 1;
      ++count;
    }
    if (count > 0 || !is_compute(in.kind) || i + 1 == ops.size()) continue;
    const Instruction& next = ops[i + 1];
    if (!is_collective(next.kind) || next.async || MemoryTrack::is_bucket(next) ||
        !rs.groups[group_index(next.group)].on_own_links)
      continue;
    fused[i] = F::compute_then_collective;
    const OpKind before = i > 0 ? ops[i - 1].kind : OpKind::wait;
    const bool after_receive = before == OpKind::recv_activation || before == OpKind::recv_gradient;
    if (after_receive && !posts_early_receives(ops, i)) fused[i - 1] = F::latency_into_next;
  }
  return fused;
}

MemoryTrack make_memory_track(const World& world, const RankState& rs) {
  ActivationSizes sizes;
  sizes.stored_checkpointed = world.stored_checkpointed();
  sizes.stored_full = world.stored_full();
  sizes.logits = world.logits();
  sizes.working = world.stage_memory(rs.coords.pipeline).activation_working;
  sizes.weight_held = world.weight_held();
  return MemoryTrack(world.job(), rs.coords.pipeline, rs.memory_static, sizes);
}

}  // namespace

RankProgramRunner::RankProgramRunner(World& world, RankState& rs)
    : world_(world),
      rs_(rs),
      ops_(rs.program->ops),
      head_first_(world.job().lm_head_on_first_stage()),
      chunks_(world.job().parallel.virtual_stages),
      comms_(ops_.size()),
      copies_done_(ops_.size()),
      offloads_(rs.host, "rank" + std::to_string(rs.rank) + "-offload",
                [this](int index) {
                  memory_.offload_completed(index, ops_[index]);
                  copies_done_[index]->release();
                }),
      requests_(ops_.size()),
      memory_(make_memory_track(world, rs)),
      fused_(plan_fusions(rs)) {}

void RankProgramRunner::run() {
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const Instruction& in = ops_[i];
    const int index = static_cast<int>(i);
    memory_.at_instruction_boundary();
    const double start = now() + latency_owed_;  // a receive's latency, slept with these kernels
    latency_owed_ = 0;
    if (fused_[i] == Fusion::compute_then_collective) {
      run_compute_then_collective(index, start);
      ++i;  // the collective ran too
      continue;
    }
    switch (in.kind) {
      case OpKind::forward:
      case OpKind::recompute:
      case OpKind::backward:
      case OpKind::backward_weight:
      case OpKind::optimizer_step:
        post_early_receives(index);
        run_compute(in);
        break;
      case OpKind::send_activation:
      case OpKind::send_gradient: run_send(index, in); break;
      case OpKind::recv_activation:
      case OpKind::recv_gradient: run_recv(index, in, start); break;
      case OpKind::all_reduce:
      case OpKind::all_gather:
      case OpKind::reduce_scatter:
      case OpKind::all_to_all: run_collective(index, in, start); break;
      case OpKind::offload: run_offload(index, in); break;
      case OpKind::reload: run_reload(index, in); break;
      case OpKind::offload_gradients:
      case OpKind::reload_parameters: run_state_copy(in, start); break;
      case OpKind::wait: run_wait(in, start); break;
    }
    // Async work is recorded where it completes (stream actors, or its wait).
    if (!in.async && in.kind != OpKind::wait) world_.record(rs_, 0, in, start, now() + latency_owed_);
  }
  rs_.end_time = now();
  rs_.memory_peak = memory_.peak();
  stop_streams();
  offloads_.stop();
}

void RankProgramRunner::run_compute(const Instruction& in) {
  const double t0 = now();
  world_.compute(rs_, in.seconds);
  const double t1 = now();
  rs_.compute_busy += in.seconds;
  pay_compute_slowdown(running_, t0, t1, rs_.exposed, [this](double seconds) {
    world_.compute(rs_, seconds);
    world_.count_activity();
  });
  running_.drop_ended();
  memory_.compute_done(in);
}

// The kernels of `index`, then the blocking collective after it, in one wait: the rank
// tells its communicator when its kernels will end, and its meeting starts the collective
// when the last member's have (World::run_on_own_links); what the two instructions would
// have recorded, one after the other, is recorded from those times. One simcall instead of
// two: the kernels' sleep is folded into the wait for the collective.
void RankProgramRunner::run_compute_then_collective(int index, double start) {
  const Instruction& compute = ops_[index];
  const Instruction& coll = ops_[index + 1];
  post_early_receives(index);
  const double kernels = rs_.kernel_seconds(compute.seconds);
  const double ready = kernels > 0 ? start + kernels : start;
  rs_.compute_busy += compute.seconds;
  memory_.compute_done(compute);
  world_.record(rs_, 0, compute, start, ready);
  memory_.at_instruction_boundary();
  CollectiveRequest req;
  req.instruction = &coll;
  req.index = index + 1;
  req.ready = ready;
  world_.run_on_own_links(rs_, coll.group, req);
  book_exposed(rs_.exposed, coll.group, now() - ready);
  world_.record(rs_, 0, coll, ready, now());
}

void RankProgramRunner::run_send(int index, const Instruction& in) {
  static int token = 0;  // the payload is only its size
  const double bytes = in.bytes * (world_.node_of(in.peer) == rs_.node ? 1.0 : rs_.nic_share);
  comms_[index] = world_.p2p_mailbox(rs_.rank, in.peer, in.kind, head_hop(in))
                      ->put_async(&token, static_cast<uint64_t>(bytes));
  if (!in.async) {
    comms_[index]->wait();
    comms_[index] = nullptr;  // a finished flow holds no memory across the step
  }
}

void RankProgramRunner::post_early_receives(int index) {
  for (std::size_t j = static_cast<std::size_t>(index) + 1; j < ops_.size() && !is_compute(ops_[j].kind); ++j) {
    const Instruction& in = ops_[j];
    if (!in.posted_early || comms_[j]) continue;
    comms_[j] = world_.p2p_mailbox(in.peer, rs_.rank, in.kind, head_hop(in))->get_async<int>(&received_);
  }
}

// The bytes move while the receiver waits (or, posted early, while the compute ahead of
// it ran); only the receiver pays the latency, and an early receive whose bytes had
// arrived pays none.
void RankProgramRunner::run_recv(int index, const Instruction& in, double start) {
  if (comms_[index]) {
    comms_[index]->wait();
    comms_[index] = nullptr;
    if (now() <= start) return;
  } else {
    world_.p2p_mailbox(in.peer, rs_.rank, in.kind, head_hop(in))->get<int>();
  }
  const InstanceType& inst = world_.job().cluster.instance;
  const double latency = world_.node_of(in.peer) == rs_.node ? inst.intra_node.latency : inst.nic.latency;
  if (fused_[index] == Fusion::latency_into_next) latency_owed_ = latency;
  else s4u::this_actor::sleep_for(latency);
  rs_.exposed.pipeline += now() + latency_owed_ - start;
}

void RankProgramRunner::run_collective(int index, const Instruction& in, double start) {
  CollectiveRequest inline_req;
  inline_req.instruction = &in;
  inline_req.index = index;
  // The fraction of its time that may hide under kernels: the profile of the algorithm
  // its communicator runs (collective.hpp), as the estimator reads it.
  inline_req.compute_overlap =
      collective_profile(world_.job().cluster.instance, collective_algorithm(world_.job().parallel, in.group, in.kind))
          .compute_overlap;
  if (MemoryTrack::is_bucket(in)) memory_.bucket_issued(index, in.bytes * in.count);
  Stream& st = rs_.streams[group_index(in.group)];
  if (in.async && rs_.groups[group_index(in.group)].on_own_links) {
    // Timed in closed form, it needs no stream: it starts when its last member calls it.
    auto req = std::make_unique<CollectiveRequest>(inline_req);
    req->async = true;
    req->observer = this;
    world_.arrive_on_own_links(rs_, in.group, *req);
    requests_[index] = std::move(req);
  } else if (!in.async && st.queue.empty() && !st.busy) {
    // A blocking collective with nothing queued ahead of it on its communicator: the
    // program actor runs it itself (same rendezvous, flows and order), sparing two
    // hand-offs per collective, and nobody waits on its `done`.
    world_.execute_collective(rs_, in.group, inline_req);
    book_exposed(rs_.exposed, in.group, now() - start);
  } else {
    auto req = std::make_unique<CollectiveRequest>(inline_req);
    req->async = in.async;
    req->done = s4u::Semaphore::create(0);
    if (in.async) req->observer = this;
    if (!st.items) world_.start_stream(rs_, in.group);
    st.queue.push_back(req.get());
    st.items->release();
    if (!in.async) {
      req->done->acquire();
      book_exposed(rs_.exposed, in.group, now() - start);
    } else {
      requests_[index] = std::move(req);  // a `wait` ends it; a blocking one is over
    }
  }
}

void RankProgramRunner::collective_ended(CollectiveRequest& req) {
  running_.ended(req);
  if (MemoryTrack::is_bucket(*req.instruction)) memory_.bucket_completed(req.index);
}

// The copy runs from the program; a completion actor waits for it and reports it, so
// the activations leave the device at the program's next instruction boundary.
void RankProgramRunner::run_offload(int index, const Instruction& in) {
  s4u::CommPtr copy = s4u::Comm::sendto_async(rs_.host, rs_.cpu, static_cast<uint64_t>(in.bytes * rs_.pcie_share));
  comms_[index] = copy;
  memory_.offload_issued(index, in);
  copies_done_[index] = s4u::Semaphore::create(0);
  offloads_.watch(std::move(copy), index);
}

void RankProgramRunner::run_reload(int index, const Instruction& in) {
  memory_.reload_started(in);
  comms_[index] = s4u::Comm::sendto_async(rs_.cpu, rs_.host, static_cast<uint64_t>(in.bytes * rs_.pcie_share));
}

// offload_optimizer / offload_parameters: a blocking copy of states over the rank's
// PCIe share; the program waits for it (exposed as offload time).
void RankProgramRunner::run_state_copy(const Instruction& in, double start) {
  const auto bytes = static_cast<uint64_t>(in.bytes * rs_.pcie_share);
  if (bytes == 0) return;
  if (in.kind == OpKind::offload_gradients) s4u::Comm::sendto(rs_.host, rs_.cpu, bytes);
  else s4u::Comm::sendto(rs_.cpu, rs_.host, bytes);
  rs_.exposed.offload += now() - start;
}

void RankProgramRunner::run_wait(const Instruction& in, double start) {
  if (comms_[in.wait_for]) wait_copy_or_send(in, start);
  else if (requests_[in.wait_for]) wait_collective(in, start);
}

void RankProgramRunner::wait_copy_or_send(const Instruction& in, double start) {
  const int w = in.wait_for;
  const Instruction& awaited = ops_[w];
  if (awaited.kind == OpKind::offload) {
    copies_done_[w]->acquire();  // its completion actor owns the wait on the flow
    copies_done_[w] = nullptr;
    memory_.offload_awaited(awaited);
  } else {
    comms_[w]->wait();
  }
  const double blocked = now() - start;
  if (awaited.kind == OpKind::offload || awaited.kind == OpKind::reload) rs_.exposed.offload += blocked;
  else rs_.exposed.pipeline += blocked;
  world_.record(rs_, 1, awaited, start, now());
  comms_[w] = nullptr;
}

void RankProgramRunner::wait_collective(const Instruction& in, double start) {
  const int w = in.wait_for;
  CollectiveRequest& req = *requests_[w];
  if (!req.on_own_links) {
    req.done->acquire();
  } else {
    if (req.start < 0) {  // not every member has called it yet: its last one wakes this one
      req.done = s4u::Semaphore::create(0);
      req.blocked = true;
      req.done->acquire();
    }
    if (req.end > now()) s4u::this_actor::sleep_for(req.end - now());
  }
  book_exposed(rs_.exposed, ops_[w].group, now() - start);
  memory_.bucket_awaited(w);
  running_.forget(w);
  requests_[w].reset();
}

void RankProgramRunner::stop_streams() {
  static CollectiveRequest stop;  // no instruction: the stream returns
  for (Stream& st : rs_.streams) {
    if (!st.items) continue;
    st.queue.push_back(&stop);
    st.items->release();
  }
}

}  // namespace partune::sim
