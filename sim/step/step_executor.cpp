#include "sim/step/step_executor.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>

#include "sim/collectives/collectives.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/errors.hpp"
#include "sim/network/flow_network.hpp"
#include "workloads/memory_model.hpp"

namespace fleetsim {
namespace {

// Communication by what it is for, so that exposed time can be told apart (StepBreakdown):
// data-parallel gradient reductions and parameter gathers (of the data group, or of an
// expert's), a layer's collectives (of the tensor, context and expert groups), pipeline
// transfers, and optimizer offload's copies over PCIe.
enum CommKind { kDataParallelComm, kTensorComm, kPipelineComm, kHostComm, kCommKinds };

CommKind comm_kind(GroupKind group) {
  switch (group) {
    case GroupKind::data:
    case GroupKind::expert_data: return kDataParallelComm;
    case GroupKind::tensor:
    case GroupKind::context:
    case GroupKind::expert: return kTensorComm;
    case GroupKind::pipeline: return kPipelineComm;
  }
  throw ModelError(std::string("no communication kind for group ") + to_string(group));
}

struct Interval {
  SimTime begin;
  SimTime end;
};

// Total length of the overlap of two lists of disjoint intervals sorted by start.
SimTime overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  SimTime total{};
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const SimTime begin = std::max(a[i].begin, b[j].begin);
    const SimTime end = std::min(a[i].end, b[j].end);
    if (begin < end) total += end - begin;
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

// The union of possibly overlapping intervals, as disjoint intervals sorted by start.
std::vector<Interval> merged(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> disjoint;
  for (const Interval& interval : intervals) {
    if (!disjoint.empty() && interval.begin <= disjoint.back().end) {
      disjoint.back().end = std::max(disjoint.back().end, interval.end);
    } else {
      disjoint.push_back(interval);
    }
  }
  return disjoint;
}

SimTime total(const std::vector<Interval>& intervals) {
  SimTime sum{};
  for (const Interval& interval : intervals) sum += interval.end - interval.begin;
  return sum;
}

// A stage program's static structure, shared by the stage's ranks.
// One list of numbers per task, stored back to back: read in order, as replay does millions of
// times, they cost one cache line where a vector per task costs a pointer chase each.
class TaskLists {
 public:
  // lists[t] for each task t.
  explicit TaskLists(const std::vector<std::vector<std::uint32_t>>& lists) {
    begin_.reserve(lists.size() + 1);
    begin_.push_back(0);
    for (const auto& list : lists) {
      items_.insert(items_.end(), list.begin(), list.end());
      begin_.push_back(items_.size());
    }
  }
  std::span<const std::uint32_t> operator[](TaskIndex t) const {
    return {items_.data() + begin_[t], items_.data() + begin_[t + 1]};
  }

 private:
  std::vector<std::size_t> begin_;
  std::vector<std::uint32_t> items_;
};

struct ProgramIndex {
  TaskLists dependents;
  // Each stream's tasks in program order; pipeline transfers run out of order, so not listed.
  std::array<std::vector<TaskIndex>, kStreamCount> order;
  std::vector<TaskIndex> unordered;  // transfers with no dependencies
  // The streams whose head a task's end can unblock: its own and its dependents', as bits.
  std::vector<std::uint8_t> wakes;
  static_assert(kStreamCount <= 8, "a stream is a bit of a byte in `wakes`");
  std::vector<std::size_t> position;  // of each task in its stream's order
  // Of each task, the stream positions of the dependencies it has on the compute stream.
  TaskLists compute_dep_positions;
  std::vector<int> dependencies;  // of each task: how many it waits on before any has run
  std::vector<Stream> stream;     // of each task (read often: kept apart from the tasks)

  ProgramIndex(const Program& program, const GpuProfile& gpu)
      : dependents(dependents_of(program)),
        compute_dep_positions(compute_dep_positions_of(program)),
        gpu_(&gpu) {
    dependencies.resize(program.size());
    stream.resize(program.size());
    wakes.resize(program.size());
    position.resize(program.size());
    for (TaskIndex t = 0; t < program.size(); ++t) {
      const auto bit = static_cast<std::uint8_t>(1u << static_cast<int>(program[t].stream));
      wakes[t] |= bit;
      dependencies[t] = static_cast<int>(program[t].deps.size());
      stream[t] = program[t].stream;
      for (const TaskIndex d : program[t].deps) {
        wakes[d] |= bit;
      }
      if (program[t].stream != Stream::pipeline) {
        std::vector<TaskIndex>& stream = order[static_cast<int>(program[t].stream)];
        position[t] = stream.size();
        stream.push_back(t);
      } else if (program[t].deps.empty()) {
        unordered.push_back(t);
      }
    }
    // A program repeats its layers' kernels many times over: each distinct one is costed once
    // for each number of SMs held beside it.
    std::map<Kernel, std::uint32_t> distinct;
    const std::vector<TaskIndex>& compute = order[static_cast<int>(Stream::compute)];
    kernel_at_.assign(compute.size(), kNoKernel);
    for (std::size_t i = 0; i < compute.size(); ++i) {
      if (const auto* work = std::get_if<ComputeWork>(&program[compute[i]].work)) {
        const auto [at, added] =
            distinct.try_emplace(work->kernel, static_cast<std::uint32_t>(kernels_.size()));
        if (added) kernels_.push_back(work->kernel);
        kernel_at_[i] = at->second;
      }
    }
    compute_ns_before(0);
  }

  // The compute stream's kernels' durations summed in stream order while the rank's
  // collectives hold `sms_held` of the GPU's SMs: element i is the nanoseconds of the kernels
  // before position i, so a kernel's is a difference. Built the first time a count is asked
  // for (a rank meets a few: none, one collective's, two's).
  const std::vector<std::int64_t>& compute_ns_before(int sms_held) {
    const auto [at, added] = ns_before_.try_emplace(sms_held);
    if (!added) return at->second;
    std::vector<std::int64_t> ns(kernels_.size());
    for (std::size_t k = 0; k < kernels_.size(); ++k) {
      ns[k] = from_seconds(kernel_seconds(*gpu_, kernels_[k], sms_held)).ns();
    }
    std::vector<std::int64_t>& before = at->second;
    before.assign(kernel_at_.size() + 1, 0);
    for (std::size_t i = 0; i < kernel_at_.size(); ++i) {
      before[i + 1] = before[i] + (kernel_at_[i] == kNoKernel ? 0 : ns[kernel_at_[i]]);
    }
    return before;
  }

 private:
  static constexpr std::uint32_t kNoKernel = ~std::uint32_t{0};
  const GpuProfile* gpu_;
  std::vector<Kernel> kernels_;           // the compute stream's distinct kernels
  std::vector<std::uint32_t> kernel_at_;  // of each compute stream position (kNoKernel: none)
  std::map<int, std::vector<std::int64_t>> ns_before_;  // by SMs held

  static TaskLists dependents_of(const Program& program) {
    std::vector<std::vector<TaskIndex>> lists(program.size());
    for (TaskIndex t = 0; t < program.size(); ++t) {
      for (const TaskIndex d : program[t].deps) {
        if (d >= t) throw ModelError("task " + program[t].name + " depends on a later task");
        lists[d].push_back(t);
      }
    }
    return TaskLists(lists);
  }
  static TaskLists compute_dep_positions_of(const Program& program) {
    std::vector<std::uint32_t> compute_position(program.size(), 0);
    std::uint32_t computed = 0;
    std::vector<std::vector<std::uint32_t>> lists(program.size());
    for (TaskIndex t = 0; t < program.size(); ++t) {
      for (const TaskIndex d : program[t].deps) {
        if (program[d].stream == Stream::compute) lists[t].push_back(compute_position[d]);
      }
      if (program[t].stream == Stream::compute) compute_position[t] = computed++;
    }
    return TaskLists(lists);
  }
};

// The ranks a trace records, `count` of them: the first replayed ones, or with a pipeline the
// first rank of stages spread from the first to the last, so the trace shows the schedule.
std::vector<bool> traced_ranks(const TaskGraph& graph, const std::vector<bool>& replayed,
                               int count) {
  const RankGrid& grid = graph.grid;
  std::vector<bool> traced(grid.ranks(), false);
  const int pp = grid.pp();
  if (pp == 1) {
    for (int r = 0; r < grid.ranks() && count > 0; ++r) {
      if (replayed[r]) {
        traced[r] = true;
        --count;
      }
    }
    return traced;
  }
  const int stages = std::min(count, pp);
  for (int i = 0; i < stages; ++i) {
    const int stage = stages == 1 ? 0 : i * (pp - 1) / (stages - 1);
    traced[grid.first_rank_of_stage(stage)] = true;
  }
  return traced;
}

// Which links the traffic of more than one data-parallel replica may cross: a union-find over
// links, in which the links of one tensor-parallel group or one pipeline pair are joined, with
// the replica that owns each. Under hash routing every link into or out of a switch with
// equal-cost peers stands for all of them (one extra element), as the hash may pick any.
class ReplicaSharing {
 public:
  explicit ReplicaSharing(const Topology& topology)
      : topology_(&topology),
        parent_(topology.link_count() + 1),
        owner_(topology.link_count() + 1, kNone) {
    std::iota(parent_.begin(), parent_.end(), std::size_t{0});
  }
  // Joins the links of one piece of traffic of `replica` and returns their part.
  std::optional<std::size_t> join(const std::vector<LinkId>& links, int replica) {
    std::optional<std::size_t> part;
    const auto add = [&](std::size_t element) {
      owner_[element] = owner_[element] == kNone || owner_[element] == replica ? replica : kMany;
      if (part) parent_[find(element)] = find(*part);
      part = element;
    };
    for (const LinkId link : links) {
      add(link);
      const Link& l = topology_->link(link);
      if (topology_->has_equal_cost_peers(l.from) || topology_->has_equal_cost_peers(l.to)) {
        add(any_equal_cost_link());
      }
    }
    return part;
  }
  // Once everything is joined: whether the part holds a link that two replicas cross.
  bool crossed_by_several(std::optional<std::size_t> part) {
    if (!part) return false;
    if (shared_root_.empty()) {
      shared_root_.assign(parent_.size(), false);
      for (std::size_t x = 0; x < parent_.size(); ++x) {
        if (owner_[x] == kMany) shared_root_[find(x)] = true;
      }
    }
    return shared_root_[find(*part)];
  }

 private:
  static constexpr int kNone = -1;
  static constexpr int kMany = -2;
  std::size_t any_equal_cost_link() const { return parent_.size() - 1; }
  std::size_t find(std::size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  const Topology* topology_;
  std::vector<std::size_t> parent_;
  std::vector<int> owner_;  // the one replica whose traffic crosses the link, or none, or many
  std::vector<bool> shared_root_;
};

// Whether every data-parallel replica sits on the cluster as replica 0 does, shifted by whole
// units or by whole tensor-parallel groups inside units that its stages fill alike, a unit
// being a node, or an NVLink domain of several nodes (GB200 NVL72): tensor groups that span
// whole units, or that divide a unit when each stage fills whole units (or there is one
// stage). Otherwise a pipeline transfer may stay inside a unit in one replica and cross the
// fabric in another, and replica 0 would not stand for the others.
bool replicas_placed_alike(const TaskGraph& graph, const Topology& topology) {
  const VertexId first = topology.gpus().front();
  const int first_node = topology.vertex(first).node;
  const std::optional<VertexId> domain = topology.nvswitch_of(first);
  const auto unit = static_cast<int>(
      std::count_if(topology.gpus().begin(), topology.gpus().end(), [&](VertexId gpu) {
        return domain ? topology.nvswitch_of(gpu) == domain
                      : topology.vertex(gpu).node == first_node;
      }));
  const RankGrid& grid = graph.grid;
  if (grid.tp() % unit == 0) return true;
  return unit % grid.tp() == 0 && (grid.pp() == 1 || grid.stage_ranks() % unit == 0);
}

class Replay {
 public:
  Replay(const TaskGraph& graph, const GpuProfile& gpu, const Topology& topology,
         const StepOptions& options, const HostCosts& host)
      : graph_(graph),
        grid_(graph.grid),
        gpu_(&gpu),
        host_costs_(host),
        // An expert group's all-to-alls, or a context group's ring, join several replicas:
        // each is replayed then.
        fold_(options.fold && graph.grid.replicas() > 1 && !graph.grid.groups_join_replicas() &&
              replicas_placed_alike(graph, topology)),
        replayed_(replayed_ranks(graph, fold_)),
        traced_(traced_ranks(graph, replayed_, options.trace_ranks)),
        network_(engine_, usable_link_capacities(topology, gpu)),
        collectives_(engine_, network_, topology, gpu.collectives, gpu_link_modes(gpu)),
        topology_(&topology),
        ranks_(graph.grid.ranks()) {
    if (static_cast<int>(graph.stages.size()) != grid_.pp()) {
      throw ModelError("the step's programs are not one per pipeline stage");
    }
    for (const Program& program : graph.stages) index_.emplace_back(program, gpu);
    for (int r = 0; r < grid_.ranks(); ++r) {
      Rank& rank = ranks_[r];
      rank.stage = grid_.stage_of(r);
      if (replayed_[r]) rank.waiting_on = index_[rank.stage].dependencies;
    }
    index_transfers();
    build_groups(topology);
    if (graph.host_work) count_host_sharing(topology, host);
    if (fold_) plan_shadows(topology);
    if (fold_ && graph.host_work) plan_host_shadows(topology);
    // One arrival counter per group a collective task of a stage runs in (its stage's groups of
    // that kind); transfers count their two sides apart.
    std::size_t counters = 0;
    for (const Program& program : graph.stages) {
      std::vector<std::size_t>& offsets = arrival_offset_.emplace_back(program.size(), 0);
      for (TaskIndex t = 0; t < program.size(); ++t) {
        offsets[t] = counters;
        if (const auto* work = std::get_if<CollectiveWork>(&program[t].work)) {
          if (work->group != GroupKind::pipeline) counters += grid_.groups_per_stage(work->group);
        }
      }
    }
    arrivals_.resize(counters, 0);
    transfer_first_side_.resize(static_cast<std::size_t>(graph.transfers) * grid_.stage_ranks());
  }

  StepResult run() {
    for (int r = 0; r < grid_.ranks(); ++r) {
      if (!replayed_[r]) continue;
      for (const TaskIndex t : index_[ranks_[r].stage].unordered) arrive_transfer(r, t);
      try_start(r);
    }
    engine_.run();
    for (int r = 0; r < grid_.ranks(); ++r) {
      const Rank& rank = ranks_[r];
      if (replayed_[r] && rank.tasks_done != graph_.stages[rank.stage].size()) {
        throw ModelError("step replay stalled: a collective or dependency never completed");
      }
    }
    return summarise();
  }

  const FlowNetwork& network() const { return network_; }

 private:
  struct StreamState {
    std::size_t next = 0;  // position in the stream's order
    bool busy = false;
  };
  // The compute kernel a rank is running, and its completion event, moved whenever the SMs its
  // collectives hold change. It may stand for a run of `tasks` kernels in stream order whose ends
  // wake nothing but the next one (see try_start_stream): as of `updated`, the kernels before
  // stream position `at` are done and `share` of the one at `at`.
  struct RunningKernel {
    TaskIndex task = 0;  // the first of the run
    std::size_t tasks = 1;
    SimTime begin{};
    SimTime updated{};
    std::size_t at = 0;
    double share = 0;
    EventHandle completion{};
  };
  struct Rank {
    int stage = 0;                // its pipeline stage, whose program it runs
    std::vector<int> waiting_on;  // unfinished dependencies per task
    std::array<StreamState, kStreamCount> streams;
    std::size_t tasks_done = 0;
    std::vector<Interval> compute_busy;
    // Communication by kind (CommKind), each kind's possibly overlapping.
    std::array<std::vector<Interval>, kCommKinds> comm_busy;
    std::optional<RunningKernel> kernel;  // on the compute stream
    // Its collectives running now (not pipeline sends): NCCL's, each on the GPU profile's
    // comm_sms, and the SMs of those that say what they hold (Transformer Engine's userbuffers).
    int nccl_in_flight = 0;
    int sms_declared = 0;
  };

  // The SMs the rank's communication kernels hold now; compute runs on those left (one at
  // least).
  int sms_held(const Rank& rank) const {
    return std::min(comm_sms_held(*gpu_, rank.nccl_in_flight) + rank.sms_declared,
                    std::max(0, gpu_->sm_count - 1));
  }

  // Schedules the running kernel's completion at the SMs held now: the rest of the kernel at
  // `at` and the whole of those after it in the run.
  void schedule_kernel(int r) {
    Rank& rank = ranks_[r];
    RunningKernel& kernel = *rank.kernel;
    ProgramIndex& index = index_[rank.stage];
    const std::vector<std::int64_t>& before = index.compute_ns_before(sms_held(rank));
    const std::size_t end = index.position[kernel.task] + kernel.tasks;
    const double left_ns = static_cast<double>(before[end] - before[kernel.at]) -
                           kernel.share * kernel_ns(before, kernel.at);
    const SimTime left = from_seconds(std::max(0.0, left_ns) * 1e-9);
    kernel.completion = engine_.schedule_after(left, [this, r] {
      Rank& done = ranks_[r];
      const RunningKernel finished = *done.kernel;
      done.kernel.reset();
      done.compute_busy.push_back({finished.begin, engine_.now()});
      const ProgramIndex& index = index_[done.stage];
      const std::vector<TaskIndex>& order = index.order[static_cast<int>(Stream::compute)];
      const std::size_t first = index.position[finished.task];
      // All but the last of a run only hand their dependents (compute tasks of the run or
      // later) one dependency fewer; the last ends as a single kernel does.
      for (std::size_t i = first; i + 1 < first + finished.tasks; ++i) {
        for (const TaskIndex d : index.dependents[order[i]]) --done.waiting_on[d];
        ++done.streams[static_cast<int>(Stream::compute)].next;
        ++done.tasks_done;
      }
      const TaskIndex last = order[first + finished.tasks - 1];
      record(r, last, finished.begin);
      finish(r, last);
    });
  }

  // The nanoseconds of the compute stream's kernel at position i, by one timeline's sums.
  static double kernel_ns(const std::vector<std::int64_t>& before, std::size_t i) {
    return static_cast<double>(before[i + 1] - before[i]);
  }

  // Moves a run to the kernel it is in, and that kernel's share done, `reached` nanoseconds
  // into the timeline whose sums `before` holds (a kernel that ends exactly there is done).
  static void move_to(RunningKernel& kernel, const std::vector<std::int64_t>& before,
                      std::size_t end, double reached) {
    const auto after =
        std::upper_bound(before.begin() + static_cast<std::ptrdiff_t>(kernel.at) + 1,
                         before.begin() + static_cast<std::ptrdiff_t>(end) + 1, reached);
    kernel.at = std::min(end - 1, static_cast<std::size_t>(after - before.begin()) - 1);
    const double ns = kernel_ns(before, kernel.at);
    kernel.share =
        ns > 0 ? std::clamp((reached - static_cast<double>(before[kernel.at])) / ns, 0.0, 1.0)
               : 0.0;
  }

  // A collective starts (+1) or ends (-1) on rank r: its running kernel (or run of kernels)
  // keeps the work it has done on the SMs it had, kernel by kernel, and goes on with those left
  // now.
  void change_collectives(int r, const CollectiveWork& work, int delta) {
    Rank& rank = ranks_[r];
    const int old_held = sms_held(rank);
    if (work.sms_held) {
      rank.sms_declared += delta * *work.sms_held;
    } else {
      rank.nccl_in_flight += delta;
    }
    const int held = sms_held(rank);
    if (!rank.kernel || held == old_held) return;
    RunningKernel& kernel = *rank.kernel;
    ProgramIndex& index = index_[rank.stage];
    // (The map keeps its elements in place: building the second leaves the first valid.)
    const std::vector<std::int64_t>& old_before = index.compute_ns_before(old_held);
    const std::vector<std::int64_t>& new_before = index.compute_ns_before(held);
    const std::size_t end = index.position[kernel.task] + kernel.tasks;
    // Where the run stands on the old SMs' timeline. At its end already, its completion
    // (due now) stands.
    const double reached = static_cast<double>(old_before[kernel.at]) +
                           kernel.share * kernel_ns(old_before, kernel.at) +
                           static_cast<double>((engine_.now() - kernel.updated).ns());
    if (reached >= static_cast<double>(old_before[end])) return;
    move_to(kernel, old_before, end, reached);
    const double old_ns = kernel_ns(old_before, kernel.at);
    kernel.updated = engine_.now();
    // Unchanged durations from here on leave the completion where it is.
    if (new_before[end] - new_before[kernel.at] == old_before[end] - old_before[kernel.at] &&
        kernel_ns(new_before, kernel.at) == old_ns) {
      return;
    }
    engine_.cancel(kernel.completion);
    schedule_kernel(r);
  }

  void try_start(int r) {
    for (int s = 0; s < kStreamCount; ++s) try_start_stream(r, s);
  }

  const Program& program_of(int r) const { return graph_.stages[ranks_[r].stage]; }

  void try_start_stream(int r, int s) {
    StreamState& stream = ranks_[r].streams[s];
    const ProgramIndex& index = index_[ranks_[r].stage];
    const std::vector<TaskIndex>& order = index.order[s];
    if (stream.busy || stream.next >= order.size()) return;
    const TaskIndex t = order[stream.next];
    if (ranks_[r].waiting_on[t] > 0) return;
    stream.busy = true;
    if (s == static_cast<int>(Stream::compute)) {
      // Kernels whose ends wake only the compute stream, each followed by one that is then
      // ready, run as one event: the same times without an event per kernel (a change of SMs
      // held inside the run is followed kernel by kernel, within a nanosecond per kernel, as
      // each kernel alone rounds its end up to a whole nanosecond). Traced ranks keep one slice
      // per kernel.
      std::size_t tasks = 1;
      constexpr auto compute_only =
          static_cast<std::uint8_t>(1u << static_cast<int>(Stream::compute));
      while (!traced_[r] && stream.next + tasks < order.size() &&
             index.wakes[order[stream.next + tasks - 1]] == compute_only &&
             ready_after_run(r, order[stream.next + tasks], stream.next)) {
        ++tasks;
      }
      ranks_[r].kernel =
          RunningKernel{t, tasks, engine_.now(), engine_.now(), stream.next, 0.0, EventHandle{}};
      schedule_kernel(r);
      return;
    }
    const Task& task = program_of(r)[t];
    if (const auto* host = std::get_if<HostWork>(&task.work)) {
      start_host_work(r, t, *host);
      return;
    }
    const auto& work = std::get<CollectiveWork>(task.work);
    const CollectiveGroup& group = group_of(r, work.group);
    // The collective waits for every member of the rank's group.
    const std::size_t counter =
        arrival_offset_[ranks_[r].stage][t] + grid_.local_group(r, work.group);
    if (++arrivals_[counter] < static_cast<int>(group.ranks.size())) return;
    // A folded tensor-parallel group stands for its copies in every replica.
    const int members = static_cast<int>(group.gpus.size());
    const double copies = fold_ && work.group == GroupKind::tensor ? grid_.replicas() : 1;
    comm_bytes_ += bus_factor(work.op, members) * work.size_bytes * members * copies;
    const SimTime begin = engine_.now();
    for (const int member : group.ranks) change_collectives(member, work, +1);
    const std::vector<int>& shadows = fold_ && work.group == GroupKind::tensor
                                          ? tensor_shadows_[grid_.group_of(r, GroupKind::tensor)]
                                          : kNoShadows;
    // The copies load the links they share; the replayed group's own copy times the task.
    collectives_.begin_batch();
    for (const int shadow : shadows) {
      collectives_.run(work.op, groups_[kTensor][shadow].gpus, work.size_bytes, [] {});
    }
    const CommKind kind = comm_kind(work.group);
    collectives_.run(work.op, group.gpus, work.size_bytes, [this, t, begin, &group, kind, &work] {
      for (const int member : group.ranks) change_collectives(member, work, -1);
      for (const int member : group.ranks) {
        ranks_[member].comm_busy[kind].push_back({begin, engine_.now()});
        record(member, t, begin);
        finish(member, t);
      }
    });
    collectives_.end_batch();
  }

  // Optimizer offload's host side as flows: a copy crosses the GPU's PCIe path to the host and
  // the host's memory (sharing the GPU's PCIe link with its NIC traffic); CPU work crosses host
  // memory alone, no faster than the rank's share of the node's cores updates parameters.
  void start_host_work(int r, TaskIndex t, const HostWork& work) {
    const int node = topology_->vertex(gpus_[r]).node;
    const Topology::HostMemory memory = *topology_->host_memory_of(node);  // checked up front
    double max_rate = FlowNetwork::kUncapped;
    if (work.op == HostOp::cpu && work.parameters > 0) {
      // The node's cores split evenly among its ranks (DeepSpeed binds cores to ranks).
      const double cycles_per_s = memory.cpu_cycles_per_s / ranks_on_node_[node];
      max_rate =
          work.bytes / work.parameters * cycles_per_s / host_costs_.adam_cycles_per_parameter;
    }
    // The rank's GPU to host memory, or back, or host memory alone.
    const auto links = [&](int rank) {
      std::vector<LinkId> path;
      if (work.op == HostOp::copy_to_host) path = topology_->route(gpus_[rank], memory.host);
      if (work.op == HostOp::copy_to_gpu) path = topology_->route(memory.host, gpus_[rank]);
      path.push_back(memory.memory_link);
      std::vector<LinkUse> uses;
      for (const LinkId link : path) uses.push_back({link, 1.0});
      return uses;
    };
    std::vector<FlowNetwork::FlowRequest> flows;
    if (fold_ && graph_.host_work) {
      for (const int copy : host_shadows_[r]) {
        flows.push_back({links(copy), work.bytes, SimTime{}, [] {}, max_rate});
      }
    }
    const SimTime begin = engine_.now();
    const bool copy = work.op != HostOp::cpu;
    flows.push_back({links(r), work.bytes, SimTime{},
                     [this, r, t, begin, copy] {
                       if (copy) ranks_[r].comm_busy[kHostComm].push_back({begin, engine_.now()});
                       record(r, t, begin);
                       finish(r, t);
                     },
                     max_rate});
    network_.start_flows(std::move(flows));
  }

  // Whether compute task `next` will be ready once the run of compute tasks from stream position
  // `first` up to it has finished: every dependency it still waits on is in that run.
  bool ready_after_run(int r, TaskIndex next, std::size_t first) const {
    int in_run = 0;
    for (const std::uint32_t position : index_[ranks_[r].stage].compute_dep_positions[next]) {
      in_run += position >= first;
    }
    return ranks_[r].waiting_on[next] == in_run;
  }

  // Checks that every transfer id is in range with exactly one sending and one receiving task,
  // in two different stages (otherwise a side would never be matched, or be matched twice), and
  // records the pair of stages of each.
  void index_transfers() {
    std::vector<int> senders(graph_.transfers, 0), receivers(graph_.transfers, 0);
    std::vector<int> send_stage(graph_.transfers, -1), receive_stage(graph_.transfers, -1);
    for (int stage = 0; stage < grid_.pp(); ++stage) {
      for (const Task& task : graph_.stages[stage]) {
        const auto* work = std::get_if<CollectiveWork>(&task.work);
        if (!work || work->group != GroupKind::pipeline) continue;
        if (task.stream != Stream::pipeline || work->transfer < 0 ||
            work->transfer >= graph_.transfers) {
          throw ModelError("pipeline transfer " + task.name + " is not on the pipeline stream " +
                           "or has no valid transfer id");
        }
        ++(work->sends ? senders : receivers)[work->transfer];
        (work->sends ? send_stage : receive_stage)[work->transfer] = stage;
      }
    }
    for (int t = 0; t < graph_.transfers; ++t) {
      if (senders[t] != 1 || receivers[t] != 1 || send_stage[t] == receive_stage[t]) {
        throw ModelError("pipeline transfer " + std::to_string(t) +
                         " needs one sender and one receiver in different stages");
      }
      transfer_stages_.insert({send_stage[t], receive_stage[t]});
    }
  }

  // A side of a pipeline transfer whose dependencies are done: the transfer starts when the
  // other side, a rank of the neighbouring stage with the same replica and tp rank, is there.
  void arrive_transfer(int r, TaskIndex t) {
    const auto& work = std::get<CollectiveWork>(program_of(r)[t].work);
    auto& first =
        transfer_first_side_[static_cast<std::size_t>(work.transfer) * grid_.stage_ranks() +
                             grid_.group_of(r, GroupKind::pipeline)];
    if (!first) {
      first = std::pair{r, t};
      return;
    }
    const auto [other, other_task] = *first;
    const bool sends = work.sends;
    const int from = sends ? r : other;
    const int to = sends ? other : r;
    comm_bytes_ += work.size_bytes * (fold_ ? grid_.replicas() : 1);
    const SimTime begin = engine_.now();
    // A pipeline send or receive holds few SMs (NCCL's point-to-point runs two channels per
    // network peer by default, NCCL_NCHANNELS_PER_NET_PEER): it leaves compute its SMs.
    // The replicas' copies of this send (folded), then its own, planned once per pair of
    // ranks and size.
    std::vector<Collectives::SendPlan>& plans = send_plans_[{from, to, work.size_bytes}];
    if (plans.empty()) {
      const std::vector<int>& replicas =
          fold_
              ? pipeline_shadows_.at({ranks_[from].stage, ranks_[to].stage})[grid_.tp_rank_of(from)]
              : kNoShadows;
      for (const int replica : replicas) {
        plans.push_back(collectives_.plan_send(gpus_[grid_.in_replica(from, replica)],
                                               gpus_[grid_.in_replica(to, replica)],
                                               work.size_bytes));
      }
      plans.push_back(collectives_.plan_send(gpus_[from], gpus_[to], work.size_bytes));
    }
    collectives_.begin_batch();
    for (std::size_t i = 0; i + 1 < plans.size(); ++i) collectives_.send(plans[i], [] {});
    collectives_.send(plans.back(), [this, begin, sides = std::array{std::pair{r, t}, *first}] {
      for (const auto& [member, task] : sides) {
        ranks_[member].comm_busy[kPipelineComm].push_back({begin, engine_.now()});
        record(member, task, begin);
        finish(member, task);
      }
    });
    collectives_.end_batch();
  }

  // The ranks of a collective group (rank_grid.hpp) and their GPUs. Folded, a data-parallel
  // group replays only its member in replica 0.
  struct CollectiveGroup {
    std::vector<int> ranks;      // the replayed members
    std::vector<VertexId> gpus;  // every member's
  };
  static constexpr int kTensor = static_cast<int>(GroupKind::tensor);

  const CollectiveGroup& group_of(int r, GroupKind kind) const {
    if (kind == GroupKind::pipeline)
      throw ModelError("a pipeline transfer has no collective group");
    return groups_[static_cast<int>(kind)][grid_.group_of(r, kind)];
  }

  // Every group of each kind the step's collectives run in: the tensor and data groups, and
  // the context and expert groups where there are any.
  void build_groups(const Topology& topology) {
    for (int r = 0; r < grid_.ranks(); ++r) gpus_.push_back(topology.gpus()[r]);
    for (const GroupKind kind : {GroupKind::tensor, GroupKind::data, GroupKind::context,
                                 GroupKind::expert, GroupKind::expert_data}) {
      if (!grid_.has_groups(kind)) continue;
      std::vector<CollectiveGroup>& groups = groups_[static_cast<int>(kind)];
      for (int g = 0; g < grid_.groups(kind); ++g) {
        CollectiveGroup group;
        for (const int rank : grid_.members(kind, g)) {
          group.gpus.push_back(gpus_[rank]);
          if (replayed_[rank]) group.ranks.push_back(rank);
        }
        groups.push_back(std::move(group));
      }
    }
  }

  static std::vector<bool> replayed_ranks(const TaskGraph& graph, bool fold) {
    std::vector<bool> replayed(graph.grid.ranks(), true);
    if (!fold) return replayed;
    for (int r = 0; r < graph.grid.ranks(); ++r) replayed[r] = graph.grid.representative(r);
    return replayed;
  }

  // The links a collective over `gpus` may cross: every hop of every channel's ring (the
  // tree's chains inside a node are ring hops too, and every link between nodes is one part).
  std::vector<LinkId> group_links(const std::vector<VertexId>& gpus) const {
    if (gpus.size() < 2) return {};
    std::vector<std::pair<VertexId, VertexId>> hops;
    for (const std::vector<VertexId>& ring : collectives_.channel_rings(gpus)) {
      for (std::size_t i = 0; i < ring.size(); ++i) {
        hops.emplace_back(ring[i], ring[(i + 1) % ring.size()]);
      }
    }
    std::sort(hops.begin(), hops.end());
    hops.erase(std::unique(hops.begin(), hops.end()), hops.end());
    std::vector<LinkId> links;
    for (const auto& [from, to] : hops) {
      const std::vector<LinkId> hop = collectives_.hop_links(from, to);
      links.insert(links.end(), hop.begin(), hop.end());
    }
    return links;
  }

  // Which copies of the replayed traffic in other replicas must run too. A copy whose links,
  // and the links of whatever else of its replica they are joined to, carry no other replica's
  // traffic loads them as its representative loads replica 0's: the data-parallel groups,
  // replayed whole, cross every replica's links alike and are slowed where replica 0's are, so
  // such a copy changes nothing and is left out. A copy joined to a link that several replicas
  // cross (a fabric uplink, a PCIe switch two replicas share) runs.
  void plan_shadows(const Topology& topology) {
    const int tp = grid_.tp();
    const int replicas = grid_.replicas();
    ReplicaSharing sharing(topology);
    // A tensor group's replica and its representative (the group of replica 0 of its stage).
    const auto replica_of = [&](int group) {
      return grid_.replica_of(grid_.members(GroupKind::tensor, group).front());
    };
    const auto representative_of = [&](int group) {
      const int first = grid_.members(GroupKind::tensor, group).front();
      return grid_.group_of(grid_.in_replica(first, 0), GroupKind::tensor);
    };
    const std::vector<CollectiveGroup>& tensor_groups = groups_[kTensor];
    std::vector<std::optional<std::size_t>> tensor_part;
    for (std::size_t g = 0; g < tensor_groups.size(); ++g) {
      tensor_part.push_back(
          sharing.join(group_links(tensor_groups[g].gpus), replica_of(static_cast<int>(g))));
    }
    // Pipeline pairs: the same tp rank and replica in two stages, sending both ways.
    std::map<std::pair<int, int>, std::vector<std::optional<std::size_t>>> pipeline_part;
    for (const std::pair<int, int>& stages : transfer_stages_) {
      auto& parts = pipeline_part[stages];
      for (int replica = 0; replica < replicas; ++replica) {
        for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
          const VertexId a = gpus_[grid_.rank_at(stages.first, replica, tp_rank)];
          const VertexId b = gpus_[grid_.rank_at(stages.second, replica, tp_rank)];
          std::vector<LinkId> links = collectives_.hop_links(a, b);
          const std::vector<LinkId> back = collectives_.hop_links(b, a);
          links.insert(links.end(), back.begin(), back.end());
          parts.push_back(sharing.join(links, replica));
        }
      }
    }
    tensor_shadows_.assign(tensor_groups.size(), {});
    for (std::size_t g = 0; g < tensor_part.size(); ++g) {
      const int group = static_cast<int>(g);
      if (replica_of(group) == 0 || !sharing.crossed_by_several(tensor_part[g])) continue;
      tensor_shadows_[representative_of(group)].push_back(group);
    }
    for (const auto& [stages, parts] : pipeline_part) {
      auto& shadows = pipeline_shadows_[stages];
      shadows.assign(tp, {});
      for (int replica = 1; replica < replicas; ++replica) {
        for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
          // parts lists the pairs replica by replica, tp rank innermost.
          if (sharing.crossed_by_several(parts[replica * tp + tp_rank])) {
            shadows[tp_rank].push_back(replica);
          }
        }
      }
    }
  }

  // Under optimizer offload: that every node's host is described, and how many ranks share
  // each (their CPU Adam splits its cores).
  void count_host_sharing(const Topology& topology, const HostCosts& host) {
    for (const VertexId gpu : gpus_) {
      const int node = topology.vertex(gpu).node;
      if (ranks_on_node_.size() <= static_cast<std::size_t>(node)) {
        ranks_on_node_.resize(node + 1, 0);
      }
      ++ranks_on_node_[node];
      const std::optional<Topology::HostMemory> memory = topology.host_memory_of(node);
      if (!memory || !(memory->cpu_cycles_per_s > 0) || !(host.adam_cycles_per_parameter > 0)) {
        throw ModelError("optimizer offload needs the host of node " + std::to_string(node) +
                         " described: host_memory, cpu_cores, cpu_clock and "
                         "cpu_adam_cycles_per_parameter");
      }
    }
  }

  // Under optimizer offload the replicas on a node share its host memory, cores and PCIe
  // uplinks: a replayed rank's host work runs for each of them too (the same rank of its stage
  // in another replica on its node). Replicas on other nodes have hosts of their own.
  void plan_host_shadows(const Topology& topology) {
    host_shadows_.assign(grid_.ranks(), {});
    for (int r = 0; r < grid_.ranks(); ++r) {
      if (!replayed_[r]) continue;
      const int node = topology.vertex(gpus_[r]).node;
      for (int replica = 1; replica < grid_.replicas(); ++replica) {
        const int copy = grid_.in_replica(r, replica);
        if (topology.vertex(gpus_[copy]).node == node) host_shadows_[r].push_back(copy);
      }
    }
  }

  void record(int r, TaskIndex t, SimTime begin) {
    if (!traced_[r]) return;
    const Task& task = program_of(r)[t];
    trace_.push_back({r, task.stream, task.name, begin, engine_.now()});
  }

  void finish(int r, TaskIndex t) {
    Rank& rank = ranks_[r];
    const ProgramIndex& index = index_[rank.stage];
    if (index.stream[t] != Stream::pipeline) {
      StreamState& stream = rank.streams[static_cast<int>(index.stream[t])];
      stream.busy = false;
      ++stream.next;
    }
    ++rank.tasks_done;
    for (const TaskIndex d : index.dependents[t]) {
      if (--rank.waiting_on[d] == 0 && index.stream[d] == Stream::pipeline) {
        arrive_transfer(r, d);
      }
    }
    for (int s = 0; s < kStreamCount; ++s) {
      if (index.wakes[t] & (1u << s)) try_start_stream(r, s);
    }
  }

  // Adds to `by_kind` the rank's exposed communication (its compute stream idle) by kind: a
  // stretch where several kinds run is shared among them evenly (the nanoseconds left over to
  // the first), so the kinds add up exactly to the exposed time.
  static void add_exposed_by_kind(const Rank& rank, std::array<SimTime, kCommKinds>& by_kind) {
    struct Edge {
      SimTime at;
      int kind;  // kCommKinds: the compute stream
      int step;  // +1 starts, -1 ends
    };
    std::vector<Edge> edges;
    for (const Interval& busy : rank.compute_busy) {
      edges.push_back({busy.begin, kCommKinds, +1});
      edges.push_back({busy.end, kCommKinds, -1});
    }
    for (int kind = 0; kind < kCommKinds; ++kind) {
      for (const Interval& busy : merged(rank.comm_busy[kind])) {
        edges.push_back({busy.begin, kind, +1});
        edges.push_back({busy.end, kind, -1});
      }
    }
    std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.at < b.at; });
    std::array<int, kCommKinds + 1> active{};
    for (std::size_t e = 0; e < edges.size(); ++e) {
      active[edges[e].kind] += edges[e].step;
      if (e + 1 == edges.size() || edges[e + 1].at == edges[e].at) continue;
      if (active[kCommKinds] > 0) continue;  // computing: nothing exposed
      const std::int64_t length = (edges[e + 1].at - edges[e].at).ns();
      int running = 0;
      for (int kind = 0; kind < kCommKinds; ++kind) running += active[kind] > 0;
      if (running == 0) continue;
      bool first = true;
      for (int kind = 0; kind < kCommKinds; ++kind) {
        if (active[kind] == 0) continue;
        by_kind[kind] += SimTime::from_ns(length / running + (first ? length % running : 0));
        first = false;
      }
    }
  }

  // Sums in integer nanoseconds, so compute + exposed + idle is exactly the step time.
  StepResult summarise() const {
    StepResult result;
    const SimTime step = engine_.now();
    result.step_time_s = step.seconds();
    result.events = engine_.events_processed();
    SimTime compute{}, exposed{};
    std::array<SimTime, kCommKinds> exposed_by_kind{};
    std::int64_t replayed = 0;
    for (int r = 0; r < grid_.ranks(); ++r) {
      if (!replayed_[r]) continue;
      const Rank& rank = ranks_[r];
      // The compute stream is serial, so its intervals are already disjoint and in order.
      std::vector<Interval> all;
      for (const auto& kind : rank.comm_busy) all.insert(all.end(), kind.begin(), kind.end());
      const std::vector<Interval> comm = merged(std::move(all));
      compute += total(rank.compute_busy);
      exposed += total(comm) - overlap(rank.compute_busy, comm);
      add_exposed_by_kind(rank, exposed_by_kind);
      ++replayed;
    }
    // Folded replicas run as their representative does, so the average over replayed ranks is
    // the average over all.
    const double ranks = static_cast<double>(replayed);
    result.breakdown.compute_s = compute.seconds() / ranks;
    result.breakdown.exposed_comm_s = exposed.seconds() / ranks;
    result.breakdown.idle_s =
        (SimTime::from_ns(step.ns() * replayed) - compute - exposed).seconds() / ranks;
    result.breakdown.exposed_dp_s = exposed_by_kind[kDataParallelComm].seconds() / ranks;
    result.breakdown.exposed_tp_s = exposed_by_kind[kTensorComm].seconds() / ranks;
    result.breakdown.exposed_pp_s = exposed_by_kind[kPipelineComm].seconds() / ranks;
    result.breakdown.exposed_host_s = exposed_by_kind[kHostComm].seconds() / ranks;
    result.comm_bytes_per_gpu = comm_bytes_ / grid_.ranks();
    result.replayed_ranks = static_cast<int>(replayed);
    result.trace = trace_;
    return result;
  }

  const TaskGraph& graph_;
  const RankGrid& grid_;
  const GpuProfile* gpu_;
  HostCosts host_costs_;
  bool fold_;
  std::vector<bool> replayed_;  // by rank
  std::vector<bool> traced_;    // by rank
  std::vector<TraceSlice> trace_;
  std::vector<ProgramIndex> index_;  // by stage
  Engine engine_;
  FlowNetwork network_;
  Collectives collectives_;
  const Topology* topology_;
  std::vector<VertexId> gpus_;      // by rank
  std::vector<int> ranks_on_node_;  // by node: the step's ranks there
  // By kind and group number (RankGrid::group_of); empty for a kind the step does not use.
  std::array<std::vector<CollectiveGroup>, kGroupKinds> groups_;
  // By stage and task: its first counter in arrivals_.
  std::vector<std::vector<std::size_t>> arrival_offset_;
  std::vector<Rank> ranks_;
  std::vector<int> arrivals_;
  // By transfer and position in the stage: the side that arrived first, if one has.
  std::vector<std::optional<std::pair<int, TaskIndex>>> transfer_first_side_;
  double comm_bytes_ = 0;                          // bytes sent, all GPUs
  std::set<std::pair<int, int>> transfer_stages_;  // (sending, receiving) stage of each transfer
  static inline const std::vector<int> kNoShadows{};
  // Folded copies to run: by representative tensor group, the other tensor groups; by
  // (sending, receiving) stage and tp rank, the other replicas.
  std::vector<std::vector<int>> tensor_shadows_;
  std::map<std::pair<int, int>, std::vector<std::vector<int>>> pipeline_shadows_;
  // Per (sending rank, receiving rank, bytes): the plans of its replicas' copies, then its own.
  std::map<std::tuple<int, int, double>, std::vector<Collectives::SendPlan>> send_plans_;
  std::vector<std::vector<int>> host_shadows_;  // by replayed rank: its host work's copies
};

}  // namespace

GpuLinkModes gpu_link_modes(const GpuProfile& gpu) {
  GpuLinkModes modes;
  const auto nvlink = gpu.link_efficiency.find("nvlink");
  const auto xgmi = gpu.link_efficiency.find("xgmi");
  if (nvlink != gpu.link_efficiency.end()) {
    modes.ring_efficiency = nvlink->second.value;
  } else if (xgmi != gpu.link_efficiency.end()) {
    modes.ring_efficiency = xgmi->second.value;
  }
  if (gpu.nvls_efficiency) {
    if (nvlink == gpu.link_efficiency.end()) {
      throw ModelError("GPU profile " + gpu.name + " has an NVLS efficiency but no nvlink one");
    }
    modes.nvls_efficiency = gpu.nvls_efficiency->value;
  }
  if (gpu.p2p_efficiency) {
    if (nvlink == gpu.link_efficiency.end() && xgmi == gpu.link_efficiency.end()) {
      throw ModelError("GPU profile " + gpu.name +
                       " has a p2p efficiency but no nvlink or xgmi one to run it on");
    }
    modes.p2p_efficiency = gpu.p2p_efficiency->value;
  }
  return modes;
}

std::vector<double> usable_link_capacities(const Topology& topology, const GpuProfile& gpu) {
  std::vector<double> capacity(topology.link_count());
  for (LinkId l = 0; l < topology.link_count(); ++l) {
    const Link& link = topology.link(l);
    if (link.kind == LinkKind::host_memory) {
      capacity[l] = link.bytes_per_s;  // already the host's sustained rate (NodeSpec)
      continue;
    }
    const auto efficiency = gpu.link_efficiency.find(to_string(link.kind));
    if (efficiency == gpu.link_efficiency.end()) {
      throw ModelError("GPU profile " + gpu.name + " has no link efficiency for " +
                       to_string(link.kind) + " links (add it under link_efficiency)");
    }
    capacity[l] = link.bytes_per_s * efficiency->second.value;
  }
  return capacity;
}

StepResult execute_step(const TaskGraph& graph, const GpuProfile& gpu, const Topology& topology,
                        const StepOptions& options, const HostCosts& host) {
  if (static_cast<std::size_t>(graph.grid.ranks()) > topology.gpus().size()) {
    throw ModelError("the layout needs " + std::to_string(graph.grid.ranks()) +
                     " GPUs, the cluster has " + std::to_string(topology.gpus().size()));
  }
  Replay replay(graph, gpu, topology, options, host);
  StepResult result = replay.run();

  const double gpus = graph.grid.ranks();
  const double peak = gpu.dense_bf16_flops_per_s.value;
  result.tokens_per_s = graph.tokens_per_step / result.step_time_s;
  result.model_flops = graph.model_flops_per_rank * gpus;
  result.hardware_flops = graph.hardware_flops_per_rank * gpus;
  result.mfu = result.model_flops / (result.step_time_s * gpus * peak);
  result.hfu = result.hardware_flops / (result.step_time_s * gpus * peak);

  const auto& carried = replay.network().link_bytes();
  for (LinkId l = 0; l < topology.link_count(); ++l) {
    if (carried[l] <= 0) continue;
    const Link& link = topology.link(l);
    result.links.push_back(LinkUsage{topology.link_name(l), to_string(link.kind), link.bytes_per_s,
                                     carried[l],
                                     carried[l] / (link.bytes_per_s * result.step_time_s)});
  }
  return result;
}

StepOutcome check_memory(const StepInputs& inputs) {
  validate_job(inputs.model, inputs.training, inputs.plan);
  StepOutcome outcome;
  MemoryBreakdown& memory = outcome.memory;
  memory = estimate_memory(inputs.model, inputs.training, inputs.plan,
                           inputs.gpu.hbm_capacity_bytes.value);
  memory.host_capacity_bytes = inputs.node.host_memory_capacity_bytes;
  if (inputs.plan.offload_optimizer) {
    if (!inputs.node.describes_host()) {
      throw ModelError("optimizer offload needs node " + inputs.node.name +
                       " to describe its host: host_memory, host_memory_capacity, cpu_cores, "
                       "cpu_clock and cpu_adam_cycles_per_parameter");
    }
    const int ranks = inputs.plan.world_size();
    memory.host_bytes_per_node = memory.host_bytes_per_rank * std::min(inputs.node.gpus, ranks);
  }
  if (!memory.gpu_fits()) {
    char text[160];
    std::snprintf(text, sizeof text, "does not fit: needs %.1f GB per GPU, %.1f GB available",
                  memory.total_bytes / 1e9, memory.capacity_bytes / 1e9);
    outcome.warnings.push_back(text);
  }
  if (!memory.host_fits()) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "does not fit: the offloaded optimizer needs %.1f GB of host memory per node, "
                  "%.1f GB available",
                  memory.host_bytes_per_node / 1e9, memory.host_capacity_bytes / 1e9);
    outcome.warnings.push_back(text);
  }
  if (!memory.fits()) return outcome;
  if (outcome.memory.headroom_fraction() < kMinComfortableHeadroom) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "memory headroom %.0f%% is under the %.0f%% practitioners keep free",
                  100 * outcome.memory.headroom_fraction(), 100 * kMinComfortableHeadroom);
    outcome.warnings.push_back(text);
  }
  return outcome;
}

StepOutcome simulate_step(const StepInputs& inputs, const StepOptions& options) {
  StepOutcome outcome = check_memory(inputs);
  if (!outcome.memory.fits()) return outcome;
  const TaskGraph graph = build_data_parallel_step(inputs.model, inputs.training, inputs.plan);
  const Topology topology = build_cluster(inputs.node, inputs.nodes, inputs.fabric);
  outcome.step = execute_step(graph, inputs.gpu, topology, options,
                              HostCosts{inputs.node.cpu_adam_cycles_per_parameter});
  outcome.simulated = true;
  return outcome;
}

}  // namespace fleetsim
