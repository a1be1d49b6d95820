#pragma once
// Private to sim/: one simulation's shared state (lives in the child process).
#include <simgrid/s4u.hpp>

#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/job_costs.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/sim/simulator.hpp"
#include "collective_exec.hpp"
#include "rendezvous.hpp"

namespace partune::sim {

namespace s4u = simgrid::s4u;

inline constexpr double kHostSpeed = 1e9;  // flop/s: compute instructions are sized in seconds

inline int group_index(CommGroup g) { return static_cast<int>(g); }

// Where blocked time and slow-down caused by a communicator are booked: `data` and
// `replica` (and the embedding group) as data-parallel time.
inline double& exposed_slot(ExposedComm& exposed, CommGroup g) {
  switch (g) {
    case CommGroup::tensor:
    case CommGroup::expert:
    case CommGroup::expert_tensor:
    case CommGroup::expert_block:
    case CommGroup::context:
    case CommGroup::context_a2a: return exposed.tensor;  // inside the layers, as tensor collectives
    case CommGroup::sharded: return exposed.sharded;
    default: return exposed.data;
  }
}

// Books `t` seconds blocked on (or slowed by) a communicator of kind `g`: in its slot, and
// the context and expert groups' also in their own (parts of the in-layer `tensor`).
inline void book_exposed(ExposedComm& exposed, CommGroup g, double t) {
  exposed_slot(exposed, g) += t;
  if (g == CommGroup::context || g == CommGroup::context_a2a) exposed.context += t;
  if (g == CommGroup::expert || g == CommGroup::expert_tensor || g == CommGroup::expert_block) exposed.expert += t;
}

// One communicator as seen from one simulated rank.
struct GroupView {
  CommGroup kind = CommGroup::none;
  int id = -1;                  // smallest member rank: names the group
  GroupSpan span;               // over the full group (symmetry or not)
  int simulated_members = 1;    // members that are actors in this simulation
  // Successors: the next member on its NVLink level, the next node's member (or this
  // rank's mirrors), with their collective mailboxes when they are simulated.
  PhaseTargets to;
  s4u::Mailbox* mailbox = nullptr;  // where this rank's predecessors' flows arrive
  struct Meetings* meetings = nullptr;  // shared by the group's simulated members
  // Inside one NVLink level, and no other traffic crosses its members' NVSwitch ports:
  // its collectives are timed in closed form instead of run as flows (World::mark_own_links).
  bool on_own_links = false;
  // Closed form, a group with no other simulated member: when its last collective ends.
  double own_links_free_at = 0;
};

struct CollectiveRequest;

// Where the members of one communicator meet. Run as flows, a collective starts when
// every member has called it (`gate`, one simcall a member) and ends when the slowest
// member's flows have arrived (`end`). Timed in closed form (on its own links), the
// members that arrive first wait at `gate`; the last one starts their requests, sleeps
// the collective's time for all and lets them go (one timer a collective). All are
// reusable at once: no member can reach the next collective before every member has
// left this one.
struct Meetings {
  explicit Meetings(int members)
      : members(members), gate(s4u::Barrier::create(static_cast<unsigned>(members))), end(members) {}
  int members;
  s4u::BarrierPtr gate;
  Rendezvous end;
  int arrived = 0;                             // closed form: members that have called it
  std::vector<CollectiveRequest*> waiting;     // closed form: their requests
  // Closed form: when the communicator's last collective ends. NCCL runs one
  // communicator's collectives one after another on its stream, so the next starts then
  // at the earliest (two async ones issued together share no time).
  double free_at = 0;
};

class Platform;
class RankProgramRunner;

// Told, on the actor that runs an async collective, when it starts running (every member
// has arrived) and when it ends: the program's completion callbacks.
class CollectiveObserver {
 public:
  virtual void collective_started(CollectiveRequest& req) = 0;
  virtual void collective_ended(CollectiveRequest& req) = 0;

 protected:
  ~CollectiveObserver() = default;
};

// A collective handed from the program actor to a communicator's stream actor.
struct CollectiveRequest {
  const Instruction* instruction = nullptr;  // nullptr: stop the stream
  int index = -1;
  bool async = false;
  s4u::SemaphorePtr done;
  double start = -1, end = -1;   // simulated interval once it runs
  double compute_overlap = 1.0;   // fraction of its time that may hide under kernels
  CollectiveObserver* observer = nullptr;  // async collectives: the issuing program
  // An async collective on its own links (World::arrive_on_own_links): no stream runs it;
  // its program waits for `done` only while it has not started (`blocked`).
  bool on_own_links = false;
  bool blocked = false;
  double seconds = 0;                 // its time once started
  const struct RankState* owner = nullptr;
  // A blocking one on its own links: when its member is ready to start it, if later than
  // its call (the member's kernels before it still to run: run_compute_then_collective).
  double ready = -1;

  void mark_started() { mark_started(s4u::Engine::get_clock()); }
  void mark_started(double at) {
    start = at;
    if (observer) observer->collective_started(*this);
  }
  void mark_ended() {
    end = s4u::Engine::get_clock();
    if (observer) observer->collective_ended(*this);
  }
};

struct Stream {
  std::deque<CollectiveRequest*> queue;
  s4u::SemaphorePtr items;  // null until the stream's actor is started (World::start_stream)
  bool busy = false;  // the stream actor is running a collective
};

struct RankState {
  int rank = 0;
  int node = 0;
  double nic_share = 1, pcie_share = 1;  // tensor symmetry: members this rank carries
  RankCoords coords;
  s4u::Host* host = nullptr;
  s4u::Host* compute_host = nullptr;  // == host, or the node's shared cores
  double slowdown = 1;                // its kernels' time factor (SimOptions::slowdowns)
  // Its kernels run alone on the GPU's host (World::compute sleeps their time), not on the
  // node's shared cores; and how long `seconds` of them take on this GPU.
  bool kernels_alone() const { return compute_host == host; }
  double kernel_seconds(double seconds) const { return seconds * slowdown; }
  s4u::Host* cpu = nullptr;   // the node's host memory (offload target)
  const RankProgram* program = nullptr;
  GroupView groups[kCommGroupCount];  // indexed by CommGroup
  Stream streams[kCommGroupCount];
  long sequence[kCommGroupCount] = {};
  // Results
  double compute_busy = 0;       // kernel time (without slow-downs)
  ExposedComm exposed;
  double end_time = 0;
  double memory_static = 0, memory_peak = 0;
};

class World {
 public:
  World(const Job& job, const SimOptions& options);
  ~World();
  SimResult run();

  // Called by the actors.
  void start_stream(RankState& rs, CommGroup group);
  void run_stream(RankState& rs, CommGroup group);
  void execute_collective(RankState& rs, CommGroup group, CollectiveRequest& req);
  // Collectives of a communicator on its own links (GroupView::on_own_links, own_links.cpp):
  // a blocking one returns when it has ended (it starts when every member is ready: at its
  // call, or at the request's `ready`); an async one returns at once, and its request says
  // when it starts and ends once every member has called it.
  void run_on_own_links(RankState& rs, CommGroup group, CollectiveRequest& req);
  void arrive_on_own_links(RankState& rs, CommGroup group, CollectiveRequest& req);
  // Runs `seconds` of the rank's kernels on its compute host.
  void compute(const RankState& rs, double seconds);
  void record(const RankState& rs, int stream, const Instruction& in, double start, double end);
  void count_activity() { ++activities_; }
  s4u::Mailbox* p2p_mailbox(int from, int to, OpKind kind, bool head_hop);
  int node_of(int rank) const { return rank / job_.cluster.instance.gpus_per_node; }
  const Job& job() const { return job_; }
  // Memory per layer and micro-batch, from the cost model: what a checkpointed layer
  // and a layer that is not checkpointed keep for backward, what a split backward's W
  // still needs; the logits of a micro-batch; each stage's memory.
  const LayerKindBytes& stored_checkpointed() const { return stored_checkpointed_; }
  const LayerKindBytes& stored_full() const { return stored_full_; }
  const LayerKindBytes& weight_held() const { return weight_held_; }
  double logits() const { return logits_; }
  const MemoryBreakdown& stage_memory(int stage) const { return stage_memory_[stage]; }

 private:
  void make_ranks(Platform& platform);
  void make_rank_groups(Platform& platform, RankState& rs);
  void mark_own_links(const Platform& platform);
  double own_links_seconds(const GroupView& gv, const Instruction& in) const;
  void start_on_own_links(CollectiveRequest& req, double start);
  static bool last_to_arrive(Meetings* meetings, CollectiveRequest& req);
  static s4u::Mailbox* collective_mailbox(int rank, CommGroup group);
  void start_actors();
  SimResult collect_results();

  const Job& job_;
  SimOptions options_;
  Placement placement_;
  JobCosts costs_;  // the job's costs, built once: the programs, the memory and the estimate read them
  bool symmetric_ = false;
  bool tensor_symmetric_ = false;
  std::vector<int> simulated_;           // ranks with actors
  std::vector<RankProgram> programs_;
  std::vector<std::unique_ptr<RankState>> ranks_;
  std::vector<std::unique_ptr<RankProgramRunner>> runners_;  // the program actors' state
  std::vector<int> slot_of_rank_;        // rank -> index in ranks_, -1 if not simulated
  // The meeting places of the communicators with more than one simulated member, by
  // (communicator, smallest member); looked up while the ranks are made, then reached
  // through GroupView::meetings.
  std::map<std::pair<int, int>, std::unique_ptr<Meetings>> meetings_;
  std::vector<TraceEvent> events_;
  long activities_ = 0;
  LayerKindBytes stored_checkpointed_, stored_full_, weight_held_;  // per micro-batch, by the layer's kind
  double logits_ = 0;
  std::vector<MemoryBreakdown> stage_memory_;  // per stage
};

}  // namespace partune::sim
