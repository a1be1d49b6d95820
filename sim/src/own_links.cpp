// Communicators on their own links: collectives timed in closed form instead of run as
// flows (GroupView::on_own_links). A communicator inside one NVLink level whose members'
// NVSwitch ports carry nothing else (no other communicator with members beside them, no
// pipeline hop between them) starts each collective when its last member calls it, and
// its flows, one per port and direction, would each run at the port's bandwidth: the
// collective takes its cost on idle links (collective_cost), for every member alike. The
// tensor-parallel groups of a job whose other groups span nodes are so; their flows, and
// the stream actors that ran their async collectives, were most of a large simulation's
// activities (docs/performance.md §1).
#include "world.hpp"

#include <algorithm>

#include "platform.hpp"

namespace partune::sim {

namespace {

// Communicators whose programs leave no async collective of theirs outstanding when the
// next one of theirs is issued: their streams never hold two, so the closed form need
// not queue one behind another. By communicator kind, over the simulated programs.
std::vector<bool> one_at_a_time(const std::vector<std::unique_ptr<RankState>>& ranks) {
  std::vector<bool> ok(kCommGroupCount, true);
  for (const auto& rs : ranks) {
    std::vector<int> outstanding(kCommGroupCount, -1);
    const std::vector<Instruction>& ops = rs->program->ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Instruction& in = ops[i];
      if (in.kind == OpKind::wait) {
        for (int& o : outstanding)
          if (o == in.wait_for) o = -1;
        continue;
      }
      if (in.group == CommGroup::none || in.peer >= 0) continue;
      int& o = outstanding[group_index(in.group)];
      if (o >= 0) ok[group_index(in.group)] = false;
      if (in.async) o = static_cast<int>(i);
    }
  }
  return ok;
}

}  // namespace

void World::mark_own_links(const Platform& platform) {
  if (!options_.closed_form_collectives) return;
  std::vector<int> users(static_cast<std::size_t>(job_.world_size()), 0);  // traffic over each rank's port
  for (const auto& rs : ranks_) {
    for (const GroupView& gv : rs->groups)
      if (gv.to.intra_successor) ++users[rs->rank];
    for (const Instruction& in : rs->program->ops)
      if (in.peer >= 0 && platform.nvlink_domain(in.peer) == platform.nvlink_domain(rs->rank)) {
        users[rs->rank] += 2;
        users[in.peer] += 2;
      }
  }
  const std::vector<bool> queue_free = one_at_a_time(ranks_);
  for (const auto& rs : ranks_)
    for (GroupView& gv : rs->groups) {
      if (!gv.to.intra_successor || gv.to.net_successor || gv.span.nodes != 1) continue;
      if (!queue_free[group_index(gv.kind)]) continue;
      bool alone = true;
      for (int m : comm_group_members(job_, rs->rank, gv.kind))
        if (slot_of_rank_[m] >= 0 && users[m] != 1) alone = false;
      gv.on_own_links = alone;
    }
}

// The collective's cost on idle links (collective.hpp): what its flows take alone on the
// members' ports (the estimator's figure; test_collective_agreement ties the two).
double World::own_links_seconds(const GroupView& gv, const Instruction& in) const {
  return phases_cost(program_collective_phases(job_, gv.kind, in.kind, in.bytes, gv.span), gv.span,
                     job_.cluster.instance)
             .total() *
         in.count;
}

// Counts `req` in; true for the last member to call the collective (its meeting rearmed),
// which then starts the requests of those that called before it. Without a meeting (one
// simulated member) every call is the last.
bool World::last_to_arrive(Meetings* m, CollectiveRequest& req) {
  if (!m) return true;
  if (++m->arrived < m->members) {
    m->waiting.push_back(&req);
    return false;
  }
  m->arrived = 0;
  return true;
}

// Blocking: the members that call it first wait at the gate; the last one starts it when
// every member is ready (a member that called it with its kernels still to run is ready
// when they end), sleeps to its end for all and lets them go (one timer, and one simcall
// a member).
void World::run_on_own_links(RankState& rs, CommGroup group, CollectiveRequest& req) {
  GroupView& gv = rs.groups[group_index(group)];
  Meetings* m = gv.meetings;
  const double now = s4u::Engine::get_clock();
  if (req.ready < now) req.ready = now;
  if (!last_to_arrive(m, req)) {
    m->gate->wait();
  } else {
    double& free_at = m ? m->free_at : gv.own_links_free_at;
    double start = std::max(req.ready, free_at);
    if (m) {
      for (const CollectiveRequest* r : m->waiting) start = std::max(start, r->ready);
      for (CollectiveRequest* r : m->waiting) r->mark_started(start);
      m->waiting.clear();
    }
    req.mark_started(start);
    free_at = start + own_links_seconds(gv, *req.instruction);
    const double until_end = free_at - now;
    if (until_end > 0) s4u::this_actor::sleep_for(until_end);
    if (m) m->gate->wait();  // the others have waited there since they called it
  }
  req.mark_ended();
  record(rs, 2 + group_index(group), *req.instruction, req.start, req.end);
  if (req.done) req.done->release();
}

// Async: nothing runs it. When its last member calls it, every member's request gets its
// start and end (start_on_own_links); a program that waits for it before then blocks
// until that moment, and after it sleeps until the end (RankProgramRunner::wait_collective).
// Every member calls a given collective async or every member blocking (the programs of a
// communicator's members issue the same collectives), so the gate's count holds.
void World::arrive_on_own_links(RankState& rs, CommGroup group, CollectiveRequest& req) {
  GroupView& gv = rs.groups[group_index(group)];
  req.on_own_links = true;
  req.owner = &rs;
  req.seconds = own_links_seconds(gv, *req.instruction);
  Meetings* m = gv.meetings;
  const double now = s4u::Engine::get_clock();
  if (!last_to_arrive(m, req)) return;
  // After the communicator's collective before it (its stream's order).
  double& free_at = m ? m->free_at : gv.own_links_free_at;
  const double start = std::max(now, free_at);
  free_at = start + req.seconds;
  if (m) {
    for (CollectiveRequest* r : m->waiting) start_on_own_links(*r, start);
    m->waiting.clear();
  }
  start_on_own_links(req, start);
}

void World::start_on_own_links(CollectiveRequest& req, double start) {
  req.start = start;
  req.end = start + req.seconds;
  if (req.observer) req.observer->collective_started(req);
  record(*req.owner, 2 + group_index(req.instruction->group), *req.instruction, req.start, req.end);
  if (req.blocked) req.done->release();
}

}  // namespace partune::sim
