#include "sim/step/step_executor.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "sim/collectives/collectives.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/errors.hpp"
#include "sim/network/flow_network.hpp"
#include "workloads/memory_model.hpp"

namespace fleetsim {
namespace {

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

// The task graph's static structure, shared by all ranks.
struct ProgramIndex {
  std::vector<std::vector<TaskIndex>> dependents;
  std::array<std::vector<TaskIndex>, kStreamCount> order;  // each stream's tasks, program order
  std::vector<SimTime> duration;                           // compute tasks only
  // The streams whose head a task's end can unblock: its own and its dependents', as bits.
  std::vector<std::uint8_t> wakes;
  static_assert(kStreamCount <= 8, "a stream is a bit of a byte in `wakes`");

  ProgramIndex(const TaskGraph& graph, const GpuProfile& gpu) {
    const auto& program = graph.program;
    dependents.resize(program.size());
    duration.resize(program.size());
    wakes.resize(program.size());
    for (TaskIndex t = 0; t < program.size(); ++t) {
      const auto bit = static_cast<std::uint8_t>(1u << static_cast<int>(program[t].stream));
      wakes[t] |= bit;
      for (const TaskIndex d : program[t].deps) {
        if (d >= t) throw ModelError("task " + program[t].name + " depends on a later task");
        dependents[d].push_back(t);
        wakes[d] |= bit;
      }
      order[static_cast<int>(program[t].stream)].push_back(t);
      if (const auto* work = std::get_if<ComputeWork>(&program[t].work)) {
        duration[t] = from_seconds(kernel_seconds(gpu, work->kernel));
      }
    }
  }
};

class Replay {
 public:
  Replay(const TaskGraph& graph, const GpuProfile& gpu, const Topology& topology, int trace_ranks)
      : graph_(graph),
        trace_ranks_(std::min(trace_ranks, graph.ranks)),
        index_(graph, gpu),
        comm_slowdown_(gpu.comm_slowdown.value),
        network_(engine_, usable_link_capacities(topology, gpu)),
        collectives_(engine_, network_, topology, gpu.collectives, gpu_link_modes(gpu)),
        ranks_(graph.ranks) {
    for (Rank& rank : ranks_) {
      rank.waiting_on.resize(graph.program.size());
      for (TaskIndex t = 0; t < graph.program.size(); ++t) {
        rank.waiting_on[t] = static_cast<int>(graph.program[t].deps.size());
      }
    }
    if (graph.tp < 1 || graph.ranks % graph.tp != 0) {
      throw ModelError("the step's ranks are not a whole number of tensor-parallel groups");
    }
    build_groups(topology);
    // One arrival counter per group a collective task runs in: dp tensor groups, tp data groups.
    arrival_offset_.resize(graph.program.size(), 0);
    std::size_t counters = 0;
    for (TaskIndex t = 0; t < graph.program.size(); ++t) {
      arrival_offset_[t] = counters;
      if (const auto* work = std::get_if<CollectiveWork>(&graph.program[t].work)) {
        counters +=
            work->group == Group::tensor_parallel ? tensor_groups_.size() : data_groups_.size();
      }
    }
    arrivals_.resize(counters, 0);
  }

  StepResult run() {
    for (int r = 0; r < graph_.ranks; ++r) try_start(r);
    engine_.run();
    for (const Rank& rank : ranks_) {
      if (rank.tasks_done != graph_.program.size()) {
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
  // The compute kernel a rank is running: its work left, in nanoseconds at full speed, as of
  // `updated`, and its completion event, moved whenever its speed changes.
  struct RunningKernel {
    TaskIndex task = 0;
    SimTime begin{};
    SimTime updated{};
    double remaining_ns = 0;
    EventHandle completion{};
  };
  struct Rank {
    std::vector<int> waiting_on;  // unfinished dependencies per task
    std::array<StreamState, kStreamCount> streams;
    std::size_t tasks_done = 0;
    std::vector<Interval> compute_busy;
    std::vector<Interval> comm_busy;      // collectives of any stream, possibly overlapping
    std::optional<RunningKernel> kernel;  // on the compute stream
    int collectives_in_flight = 0;        // its communication kernels running now
  };

  // Compute runs slower while the rank's communication kernels share its SMs and HBM: at
  // 1 / (1 + slowdown) of full speed while any collective it takes part in is in flight.
  double compute_speed(const Rank& rank) const {
    return rank.collectives_in_flight > 0 ? 1 / (1 + comm_slowdown_) : 1.0;
  }

  // Schedules the running kernel's completion at its current speed.
  void schedule_kernel(int r) {
    Rank& rank = ranks_[r];
    RunningKernel& kernel = *rank.kernel;
    const SimTime left = from_seconds(kernel.remaining_ns * 1e-9 / compute_speed(rank));
    kernel.completion = engine_.schedule_after(left, [this, r] {
      Rank& done = ranks_[r];
      const RunningKernel finished = *done.kernel;
      done.kernel.reset();
      done.compute_busy.push_back({finished.begin, engine_.now()});
      record(r, finished.task, finished.begin);
      finish(r, finished.task);
    });
  }

  // A collective starts or ends on rank r: its running kernel keeps the work it has done at the
  // old speed and goes on at the new one.
  void change_collectives(int r, int delta) {
    Rank& rank = ranks_[r];
    const double old_speed = compute_speed(rank);
    rank.collectives_in_flight += delta;
    // Only a change of speed (no collective <-> some) moves the running kernel's end.
    if (!rank.kernel || compute_speed(rank) == old_speed) return;
    RunningKernel& kernel = *rank.kernel;
    const double elapsed_ns = static_cast<double>((engine_.now() - kernel.updated).ns());
    kernel.remaining_ns = std::max(0.0, kernel.remaining_ns - elapsed_ns * old_speed);
    kernel.updated = engine_.now();
    engine_.cancel(kernel.completion);
    schedule_kernel(r);
  }

  void try_start(int r) {
    for (int s = 0; s < kStreamCount; ++s) try_start_stream(r, s);
  }

  void try_start_stream(int r, int s) {
    StreamState& stream = ranks_[r].streams[s];
    const std::vector<TaskIndex>& order = index_.order[s];
    if (stream.busy || stream.next >= order.size()) return;
    const TaskIndex t = order[stream.next];
    if (ranks_[r].waiting_on[t] > 0) return;
    stream.busy = true;
    const Task& task = graph_.program[t];
    if (task.stream == Stream::compute) {
      ranks_[r].kernel = RunningKernel{t, engine_.now(), engine_.now(),
                                       static_cast<double>(index_.duration[t].ns()), EventHandle{}};
      schedule_kernel(r);
      return;
    }
    const auto& work = std::get<CollectiveWork>(task.work);
    const CollectiveGroup& group = group_of(r, work.group);
    // The collective waits for every member of the rank's group.
    if (++arrivals_[arrival_offset_[t] + group.id] < static_cast<int>(group.ranks.size())) return;
    // Each GPU belongs to one group of each kind: group 0 counts the bytes a GPU sends.
    if (group.id == 0) {
      comm_bytes_per_gpu_ +=
          bus_factor(work.op, static_cast<int>(group.ranks.size())) * work.size_bytes;
    }
    const SimTime begin = engine_.now();
    for (const int member : group.ranks) change_collectives(member, +1);
    collectives_.run(work.op, group.gpus, work.size_bytes, [this, t, begin, &group] {
      for (const int member : group.ranks) change_collectives(member, -1);
      for (const int member : group.ranks) {
        ranks_[member].comm_busy.push_back({begin, engine_.now()});
        record(member, t, begin);
        finish(member, t);
      }
    });
  }

  // The ranks of a collective group and their GPUs: tp consecutive ranks for tensor
  // parallelism, the ranks of one tp rank across replicas for data parallelism (task_graph.hpp).
  struct CollectiveGroup {
    int id = 0;
    std::vector<int> ranks;
    std::vector<VertexId> gpus;
  };

  const CollectiveGroup& group_of(int r, Group kind) const {
    const int tp = graph_.tp;
    return kind == Group::tensor_parallel ? tensor_groups_[r / tp] : data_groups_[r % tp];
  }

  void build_groups(const Topology& topology) {
    const int tp = graph_.tp;
    const int dp = graph_.ranks / tp;
    const auto gpu = [&](int rank) { return topology.gpus()[rank]; };
    for (int replica = 0; replica < dp; ++replica) {
      CollectiveGroup group{replica, {}, {}};
      for (int i = 0; i < tp; ++i) group.ranks.push_back(replica * tp + i);
      tensor_groups_.push_back(group);
    }
    for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
      CollectiveGroup group{tp_rank, {}, {}};
      for (int replica = 0; replica < dp; ++replica) group.ranks.push_back(replica * tp + tp_rank);
      data_groups_.push_back(group);
    }
    for (auto* groups : {&tensor_groups_, &data_groups_}) {
      for (CollectiveGroup& group : *groups) {
        for (const int rank : group.ranks) group.gpus.push_back(gpu(rank));
      }
    }
  }

  void record(int r, TaskIndex t, SimTime begin) {
    if (r >= trace_ranks_) return;
    const Task& task = graph_.program[t];
    trace_.push_back({r, task.stream, task.name, begin, engine_.now()});
  }

  void finish(int r, TaskIndex t) {
    Rank& rank = ranks_[r];
    StreamState& stream = rank.streams[static_cast<int>(graph_.program[t].stream)];
    stream.busy = false;
    ++stream.next;
    ++rank.tasks_done;
    for (const TaskIndex d : index_.dependents[t]) --rank.waiting_on[d];
    for (int s = 0; s < kStreamCount; ++s) {
      if (index_.wakes[t] & (1u << s)) try_start_stream(r, s);
    }
  }

  // Sums in integer nanoseconds, so compute + exposed + idle is exactly the step time.
  StepResult summarise() const {
    StepResult result;
    const SimTime step = engine_.now();
    result.step_time_s = step.seconds();
    result.events = engine_.events_processed();
    SimTime compute{}, exposed{};
    for (const Rank& rank : ranks_) {
      // The compute stream is serial, so its intervals are already disjoint and in order.
      const std::vector<Interval> comm = merged(rank.comm_busy);
      compute += total(rank.compute_busy);
      exposed += total(comm) - overlap(rank.compute_busy, comm);
    }
    const double ranks = graph_.ranks;
    result.breakdown.compute_s = compute.seconds() / ranks;
    result.breakdown.exposed_comm_s = exposed.seconds() / ranks;
    result.breakdown.idle_s =
        (SimTime::from_ns(step.ns() * graph_.ranks) - compute - exposed).seconds() / ranks;
    result.comm_bytes_per_gpu = comm_bytes_per_gpu_;
    result.trace = trace_;
    return result;
  }

  const TaskGraph& graph_;
  int trace_ranks_;
  std::vector<TraceSlice> trace_;
  ProgramIndex index_;
  double comm_slowdown_;
  Engine engine_;
  FlowNetwork network_;
  Collectives collectives_;
  std::vector<CollectiveGroup> tensor_groups_;  // by data-parallel replica
  std::vector<CollectiveGroup> data_groups_;    // by tensor-parallel rank
  std::vector<std::size_t> arrival_offset_;     // by task: its first counter in arrivals_
  std::vector<Rank> ranks_;
  std::vector<int> arrivals_;
  double comm_bytes_per_gpu_ = 0;
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
                        const StepOptions& options) {
  if (graph.ranks < 1 || static_cast<std::size_t>(graph.ranks) > topology.gpus().size()) {
    throw ModelError("the layout needs " + std::to_string(graph.ranks) + " GPUs, the cluster has " +
                     std::to_string(topology.gpus().size()));
  }
  Replay replay(graph, gpu, topology, options.trace_ranks);
  StepResult result = replay.run();

  const double gpus = graph.ranks;
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
  outcome.memory = estimate_memory(inputs.model, inputs.training, inputs.plan,
                                   inputs.gpu.hbm_capacity_bytes.value);
  if (!outcome.memory.fits()) {
    char text[160];
    std::snprintf(text, sizeof text, "does not fit: needs %.1f GB per GPU, %.1f GB available",
                  outcome.memory.total_bytes / 1e9, outcome.memory.capacity_bytes / 1e9);
    outcome.warnings.push_back(text);
    return outcome;
  }
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
  outcome.step = execute_step(graph, inputs.gpu, topology, options);
  outcome.simulated = true;
  return outcome;
}

}  // namespace fleetsim
