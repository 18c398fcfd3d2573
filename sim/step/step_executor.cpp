#include "sim/step/step_executor.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
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
#include "sim/step/folding.hpp"
#include "sim/step/step_accounting.hpp"
#include "sim/step/step_program.hpp"

namespace fleetsim {
namespace {

using namespace step_detail;

// What a traced slice did that its task alone does not say (TraceSlice).
struct SliceDetail {
  int sms_held = 0;                             // a kernel: held beside it as it began
  std::optional<CollectiveChoice> choice = {};  // a collective: what it ran
  int peer = -1;                                // a transfer: the other side, and its number
  std::int64_t transfer = -1;
  std::int64_t collective = -1;  // a collective: its arrival counter, which its members share
};

class Replay {
 public:
  Replay(const TaskGraph& graph, const GpuProfile& gpu, const Topology& topology,
         const StepOptions& options, const HostCosts& host)
      : graph_(graph),
        grid_(graph.grid),
        gpu_(&gpu),
        host_costs_(host),
        fold_(fold_of(graph, topology, options.fold)),
        replayed_(replayed_ranks(graph.grid, fold_)),
        traced_(traced_ranks(graph.grid, fold_, replayed_, options.trace_ranks,
                             options.trace_rank_list)),
        network_(engine_, usable_link_capacities(topology, gpu),
                 links_that_never_bind(topology, usable_link_capacities(topology, gpu))),
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
    watch_traced_links(topology);
    if (graph.host_work) count_host_sharing(topology, host, graph.cpu_work);
    if (fold_ != Fold::none) {
      GroupGpus group_gpus;
      for (int kind = 0; kind < kGroupKinds; ++kind) {
        for (const CollectiveGroup& group : groups_[kind]) group_gpus[kind].push_back(group.gpus);
      }
      const HostWorkShape host_work{ranks_on_node_, graph.cpu_work};
      std::optional<Shadows> mirrored =
          mirrored_shadows(grid_, fold_, topology, collectives_, gpus_, group_gpus,
                           transfer_stages_, network_.never_binding(),
                           graph.data_parallel_rings_only, graph.host_work ? &host_work : nullptr);
      if (mirrored) {
        shadows_ = std::move(*mirrored);
      } else {
        shadows_ = plan_shadows(grid_, fold_, topology, collectives_, gpus_, group_gpus,
                                transfer_stages_, network_.never_binding());
        if (graph.host_work) shadows_.host = host_shadows(grid_, fold_, topology, gpus_);
      }
    }
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
  // The traced GPUs' links' loads (watch_traced_links), as they changed.
  std::vector<FlowNetwork::LoadSample> take_link_loads() { return network_.take_load_samples(); }

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
    int sms_at_begin = 0;  // held by communication as it began (for a trace)
  };
  // The ranks of a collective group (rank_grid.hpp) and their GPUs. Folded, a group replays
  // only its members in replica 0 (a data, context or expert group one of its members), or
  // none.
  struct CollectiveGroup {
    std::vector<int> ranks;      // the replayed members
    std::vector<VertexId> gpus;  // every member's
    // The HBM bytes/s one of its collectives moves on each member's GPU while it runs.
    std::int64_t hbm_taken = 0;
    // The plans of the collectives it has run, by op and size: a few a group, found here
    // faster than the library's cache finds them by every member.
    mutable std::vector<std::tuple<CollectiveOp, double, Collectives::CachedPlan>> plans;
  };
  struct Rank {
    int stage = 0;                // its pipeline stage, whose program it runs
    std::vector<int> waiting_on;  // unfinished dependencies per task
    std::array<StreamState, kStreamCount> streams;
    std::size_t tasks_done = 0;
    RankActivity activity;                // what it was busy with (step_accounting.hpp)
    std::optional<RunningKernel> kernel;  // on the compute stream
    // Its collectives running now (not pipeline sends): NCCL's, each on the GPU profile's
    // comm_sms, and the SMs of those that say what they hold (Transformer Engine's userbuffers).
    int nccl_in_flight = 0;
    int sms_declared = 0;
    // The HBM bytes/s its collectives running now move (comm_hbm_bytes_per_s), which compute
    // kernels do not get.
    std::int64_t hbm_taken = 0;
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
    const std::vector<std::int64_t>& before =
        index.compute_ns_before(sms_held(rank), rank.hbm_taken);
    const std::size_t end = index.position[kernel.task] + kernel.tasks;
    const double left_ns = static_cast<double>(before[end] - before[kernel.at]) -
                           kernel.share * kernel_ns(before, kernel.at);
    const SimTime left = from_seconds(std::max(0.0, left_ns) * 1e-9);
    kernel.completion = engine_.schedule_after(left, [this, r] {
      Rank& done = ranks_[r];
      const RunningKernel finished = *done.kernel;
      done.kernel.reset();
      done.activity.compute_busy.push_back({finished.begin, engine_.now()});
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
      record(r, last, finished.begin, {.sms_held = finished.sms_at_begin});
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

  // A collective of `group` starts (+1) or ends (-1) on rank r: its running kernel (or run of
  // kernels) keeps the work it has done on the SMs and HBM bandwidth it had, kernel by kernel,
  // and goes on with those left now.
  void change_collectives(int r, const CollectiveWork& work, const CollectiveGroup& group,
                          int delta) {
    Rank& rank = ranks_[r];
    const int old_held = sms_held(rank);
    const std::int64_t old_taken = rank.hbm_taken;
    if (work.sms_held) {
      rank.sms_declared += delta * *work.sms_held;
    } else {
      rank.nccl_in_flight += delta;
    }
    rank.hbm_taken += delta * group.hbm_taken;
    const int held = sms_held(rank);
    if (traced_[r]) {
      trace_comm_load(r, held, static_cast<double>(rank.hbm_taken));
      // A kernel that began this instant runs beside what is held now.
      if (rank.kernel && rank.kernel->begin == engine_.now()) rank.kernel->sms_at_begin = held;
    }
    if (!rank.kernel || (held == old_held && rank.hbm_taken == old_taken)) return;
    RunningKernel& kernel = *rank.kernel;
    ProgramIndex& index = index_[rank.stage];
    // (The map keeps its elements in place: building the second leaves the first valid.)
    const std::vector<std::int64_t>& old_before = index.compute_ns_before(old_held, old_taken);
    const std::vector<std::int64_t>& new_before = index.compute_ns_before(held, rank.hbm_taken);
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
      ranks_[r].kernel = RunningKernel{t,           tasks, engine_.now(), engine_.now(),
                                       stream.next, 0.0,   EventHandle{}, sms_held(ranks_[r])};
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
    // Folded, a group holding a replayed rank stands for its copies in the stage.
    const int members = static_cast<int>(group.gpus.size());
    const int kind_index = static_cast<int>(work.group);
    const double copies = static_cast<double>(grid_.groups_per_stage(work.group)) /
                          held_groups(grid_, fold_, work.group);
    comm_bytes_ += bus_factor(work.op, members) * work.size_bytes * members * copies;
    const SimTime begin = engine_.now();
    for (const int member : group.ranks) change_collectives(member, work, group, +1);
    const std::vector<int>& shadows =
        folded() ? shadows_.groups[kind_index][grid_.group_of(r, work.group)] : kNoShadows;
    // The copies load the links they share; the replayed group's own copy times the task.
    collectives_.begin_batch();
    for (const int shadow : shadows) {
      collectives_.run(plan_of(groups_[kind_index][shadow], work), [] {});
    }
    const CommKind kind = comm_kind(work.group);
    const Collectives::CachedPlan plan = plan_of(group, work);
    collectives_.run(plan, [this, t, begin, &group, kind, &work, counter, choice = plan.choice()] {
      for (const int member : group.ranks) change_collectives(member, work, group, -1);
      for (const int member : group.ranks) {
        ranks_[member].activity.comm_busy[kind].push_back({begin, engine_.now()});
        record(member, t, begin,
               {.choice = choice, .collective = static_cast<std::int64_t>(counter)});
        finish(member, t);
      }
    });
    collectives_.end_batch();
  }

  // Optimizer offload's host side as flows: a copy crosses the GPU's PCIe path to the host and
  // the host's memory (sharing the GPU's PCIe link with its NIC traffic); CPU work crosses host
  // memory alone, no faster than the rank's share of the node's cores updates parameters.
  void start_host_work(int r, TaskIndex t, const HostWork& work) {
    // A rank's work on its own node's host (a copy's node may differ from r's): its GPU
    // to host memory, or back, or host memory alone.
    const auto flow = [&](int rank, FlowNetwork::Callback done) {
      const int node = topology_->vertex(gpus_[rank]).node;
      const Topology::HostMemory memory = *topology_->host_memory_of(node);  // checked up front
      double max_rate = FlowNetwork::kUncapped;
      if (work.op == HostOp::cpu && work.parameters > 0) {
        // The node's cores split evenly among its ranks (DeepSpeed binds cores to ranks).
        const double cycles_per_s = memory.cpu_cycles_per_s / ranks_on_node_[node];
        max_rate =
            work.bytes / work.parameters * cycles_per_s / host_costs_.adam_cycles_per_parameter;
      }
      std::vector<LinkId> path;
      if (work.op == HostOp::copy_to_host) topology_->append_route(gpus_[rank], memory.host, path);
      if (work.op == HostOp::copy_to_gpu) topology_->append_route(memory.host, gpus_[rank], path);
      path.push_back(memory.memory_link);
      std::vector<LinkUse> uses;
      for (const LinkId link : path) uses.push_back({link, 1.0});
      return FlowNetwork::FlowRequest{std::move(uses), work.bytes, SimTime{}, std::move(done),
                                      max_rate};
    };
    std::vector<FlowNetwork::FlowRequest> flows;
    if (folded()) {
      for (const int copy : shadows_.host[r]) flows.push_back(flow(copy, [] {}));
    }
    const SimTime begin = engine_.now();
    const bool copy = work.op != HostOp::cpu;
    flows.push_back(flow(r, [this, r, t, begin, copy] {
      if (copy) ranks_[r].activity.comm_busy[kHostComm].push_back({begin, engine_.now()});
      record(r, t, begin);
      finish(r, t);
    }));
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
          throw ModelError("pipeline transfer " + std::string(task.name) +
                           " is not on the pipeline stream or has no valid transfer id");
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
    comm_bytes_ += work.size_bytes * ranks_stood_for(grid_, fold_);
    const SimTime begin = engine_.now();
    // A pipeline send or receive holds few SMs (NCCL's point-to-point runs two channels per
    // network peer by default, NCCL_NCHANNELS_PER_NET_PEER): it leaves compute its SMs.
    // The copies of this send it stands for (folded), then its own, planned once per pair of
    // ranks and size.
    std::vector<Collectives::CachedPlan>& plans = send_plans_[{from, to, work.size_bytes}];
    if (plans.empty()) {
      const int from_stage = ranks_[from].stage;
      const int to_stage = ranks_[to].stage;
      const std::vector<int>& places =
          folded() ? shadows_.pipeline.at(
                         {from_stage, to_stage})[from - grid_.first_rank_of_stage(from_stage)]
                   : kNoShadows;
      for (const int place : places) {
        plans.push_back(collectives_.plan_send(gpus_[grid_.first_rank_of_stage(from_stage) + place],
                                               gpus_[grid_.first_rank_of_stage(to_stage) + place],
                                               work.size_bytes));
      }
      plans.push_back(collectives_.plan_send(gpus_[from], gpus_[to], work.size_bytes));
    }
    collectives_.begin_batch();
    for (std::size_t i = 0; i + 1 < plans.size(); ++i) collectives_.run(plans[i], [] {});
    const std::int64_t transfer = static_cast<std::int64_t>(work.transfer) * grid_.stage_ranks() +
                                  grid_.group_of(r, GroupKind::pipeline);
    collectives_.run(
        plans.back(), [this, begin, transfer, sides = std::array{std::pair{r, t}, *first}] {
          for (std::size_t side = 0; side < sides.size(); ++side) {
            const auto [member, task] = sides[side];
            ranks_[member].activity.comm_busy[kPipelineComm].push_back({begin, engine_.now()});
            record(member, task, begin, {.peer = sides[1 - side].first, .transfer = transfer});
            finish(member, task);
          }
        });
    collectives_.end_batch();
  }

  Collectives::CachedPlan plan_of(const CollectiveGroup& group, const CollectiveWork& work) {
    for (const auto& [op, bytes, plan] : group.plans) {
      if (op == work.op && bytes == work.size_bytes) return plan;
    }
    const Collectives::CachedPlan plan =
        collectives_.plan_collective(work.op, group.gpus, work.size_bytes);
    group.plans.emplace_back(work.op, work.size_bytes, plan);
    return plan;
  }

  const CollectiveGroup& group_of(int r, GroupKind kind) const {
    if (kind == GroupKind::pipeline)
      throw ModelError("a pipeline transfer has no collective group");
    return groups_[static_cast<int>(kind)][grid_.group_of(r, kind)];
  }

  // The rate a collective of the group moves data at over each member's links: the usable
  // capacity of the narrowest link on the way from its first member to a member on another
  // node (a ring or tree across nodes runs at its slowest hop), or, inside one node, to its
  // next member. None for a group of one.
  double link_rate(const Topology& topology, const std::vector<VertexId>& gpus) const {
    if (gpus.size() < 2) return 0;
    const int node = topology.vertex(gpus.front()).node;
    const auto across = std::find_if(gpus.begin() + 1, gpus.end(), [&](VertexId gpu) {
      return topology.vertex(gpu).node != node;
    });
    const VertexId to = across != gpus.end() ? *across : gpus[1];
    double rate = std::numeric_limits<double>::infinity();
    for (const LinkId link : topology.route(gpus.front(), to)) {
      rate = std::min(rate, network_.capacity(link));
    }
    return std::isfinite(rate) ? rate : 0;
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
        group.hbm_taken = static_cast<std::int64_t>(
            std::llround(comm_hbm_bytes_per_s(link_rate(topology, group.gpus))));
        groups.push_back(std::move(group));
      }
    }
  }

  // Under offload: that every node's host memory is described (its cores too where CPU Adam
  // runs), and how many ranks share each (their CPU Adam splits its cores).
  void count_host_sharing(const Topology& topology, const HostCosts& host, bool cpu_work) {
    for (const VertexId gpu : gpus_) {
      const int node = topology.vertex(gpu).node;
      if (ranks_on_node_.size() <= static_cast<std::size_t>(node)) {
        ranks_on_node_.resize(node + 1, 0);
      }
      ++ranks_on_node_[node];
      const std::optional<Topology::HostMemory> memory = topology.host_memory_of(node);
      if (!memory) {
        throw ModelError("offload needs the host memory of node " + std::to_string(node) +
                         " described: host_memory and host_memory_capacity");
      }
      if (cpu_work && (!(memory->cpu_cycles_per_s > 0) || !(host.adam_cycles_per_parameter > 0))) {
        throw ModelError("optimizer offload needs the host of node " + std::to_string(node) +
                         " described: host_memory, cpu_cores, cpu_clock and "
                         "cpu_adam_cycles_per_parameter");
      }
    }
  }

  // A traced rank's communication load from now on: one sample an instant (the last change
  // wins), none where it stays the same.
  void trace_comm_load(int r, int sms_held, double hbm_bytes_per_s) {
    const auto last = last_comm_load_.find(r);
    if (last != last_comm_load_.end()) {
      StepResult::CommLoad& sample = comm_load_[last->second];
      if (sample.at == engine_.now()) {
        sample.sms_held = sms_held;
        sample.hbm_bytes_per_s = hbm_bytes_per_s;
        return;
      }
      if (sample.sms_held == sms_held && sample.hbm_bytes_per_s == hbm_bytes_per_s) return;
    }
    last_comm_load_[r] = comm_load_.size();
    comm_load_.push_back({r, engine_.now(), sms_held, hbm_bytes_per_s});
  }

  // The links a trace follows: each traced GPU's own, and its NIC's to and from the fabric.
  void watch_traced_links(const Topology& topology) {
    std::set<VertexId> ends;  // the traced GPUs and their NICs
    for (int r = 0; r < grid_.ranks(); ++r) {
      if (!traced_[r]) continue;
      ends.insert(gpus_[r]);
      if (const auto nic = topology.nic_of_gpu(gpus_[r])) ends.insert(*nic);
    }
    if (ends.empty()) return;
    // A traced GPU, or a traced GPU's NIC facing a fabric switch (a vertex of no node).
    const auto gpu_end = [&](VertexId v) {
      return ends.contains(v) && topology.vertex(v).kind == VertexKind::gpu;
    };
    const auto nic_end = [&](VertexId v, VertexId other) {
      return ends.contains(v) && topology.vertex(v).kind == VertexKind::nic &&
             topology.vertex(other).node < 0;
    };
    std::vector<FlowLinkId> watched;
    for (LinkId l = 0; l < topology.link_count(); ++l) {
      const Link& link = topology.link(l);
      if (gpu_end(link.from) || gpu_end(link.to) || nic_end(link.from, link.to) ||
          nic_end(link.to, link.from)) {
        watched.push_back(static_cast<FlowLinkId>(l));
      }
    }
    network_.watch(watched);
  }

  // A traced rank's decoder layers with saved tensors, after task t of its program ended.
  void trace_saved_layers(int r, TaskIndex t) {
    const std::span<const Program::SavedLayers> marks = program_of(r).saved_layers();
    const auto mark = std::lower_bound(
        marks.begin(), marks.end(), t,
        [](const Program::SavedLayers& m, TaskIndex task) { return m.task < task; });
    if (mark == marks.end() || mark->task != t) return;
    auto& [held, latest] = saved_layers_.try_emplace(r, 0, memory_.size()).first->second;
    held += mark->change;
    if (latest < memory_.size() && memory_[latest].at == engine_.now()) {
      memory_[latest].saved_layers = held;  // the last change of an instant holds
      return;
    }
    latest = memory_.size();
    memory_.push_back({.rank = r, .at = engine_.now(), .saved_layers = held});
  }

  void record(int r, TaskIndex t, SimTime begin, const SliceDetail& detail = {}) {
    if (!traced_[r]) return;
    trace_saved_layers(r, t);
    const Task& task = program_of(r)[t];
    TraceSlice& slice = trace_.emplace_back();
    slice.rank = r;
    slice.stream = task.stream;
    slice.name = task.name;
    slice.begin = begin;
    slice.end = engine_.now();
    if (const auto* compute = std::get_if<ComputeWork>(&task.work)) {
      slice.flops = compute->kernel->flops;
      slice.bytes = compute->kernel->bytes;
      slice.sms_held = detail.sms_held;
    } else if (const auto* host = std::get_if<HostWork>(&task.work)) {
      slice.bytes = host->bytes;
    } else if (const auto* work = std::get_if<CollectiveWork>(&task.work)) {
      slice.bytes = work->size_bytes;
      if (work->group == GroupKind::pipeline) {
        slice.peer = detail.peer;
        slice.sends = work->sends;
        slice.transfer = detail.transfer;
        return;
      }
      slice.sms_held = work->sms_held.value_or(comm_sms_held(*gpu_, 1));
      slice.collective = detail.collective;
      slice.op = to_string(work->op);
      slice.group = std::string(to_string(work->group)) + " " +
                    std::to_string(grid_.group_of(r, work->group));
      if (detail.choice) {
        slice.algorithm = std::string(to_string(detail.choice->algorithm)) + "/" +
                          to_string(detail.choice->protocol);
      }
    }
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

  StepResult summarise() const {
    StepResult result;
    const SimTime step = engine_.now();
    result.step_time_s = step.seconds();
    result.events = engine_.events_processed();
    std::vector<const RankActivity*> replayed;
    for (int r = 0; r < grid_.ranks(); ++r) {
      if (replayed_[r]) replayed.push_back(&ranks_[r].activity);
    }
    result.breakdown = step_breakdown(replayed, step);
    result.comm_bytes_per_gpu = comm_bytes_ / grid_.ranks();
    result.replayed_ranks = static_cast<int>(replayed.size());
    result.trace = std::move(trace_);
    result.trace_comm_load = std::move(comm_load_);
    result.trace_memory = std::move(memory_);
    return result;
  }

  const TaskGraph& graph_;
  const RankGrid& grid_;
  const GpuProfile* gpu_;
  HostCosts host_costs_;
  Fold fold_;
  std::vector<bool> replayed_;  // by rank
  std::vector<bool> traced_;    // by rank
  std::vector<TraceSlice> trace_;
  std::vector<StepResult::CommLoad> comm_load_;  // of the traced ranks, as it changes
  std::map<int, std::size_t> last_comm_load_;    // by traced rank: its latest in comm_load_
  std::vector<StepResult::MemoryInUse> memory_;  // of the traced ranks, as it changes
  // By traced rank: the layers whose saved tensors it holds now, and its latest in memory_
  // (past the end: none yet).
  std::map<int, std::pair<int, std::size_t>> saved_layers_;
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
  // Folded, the other ranks' copies that run (none where they mirror the replayed traffic; see
  // folding.hpp).
  bool folded() const { return fold_ != Fold::none; }
  Shadows shadows_;
  // Per (sending rank, receiving rank, bytes): the plans of its replicas' copies, then its own.
  std::map<std::tuple<int, int, double>, std::vector<Collectives::CachedPlan>> send_plans_;
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
  std::vector<int> usage(topology.link_count(), -1);  // by link: its place in result.links
  for (LinkId l = 0; l < topology.link_count(); ++l) {
    if (carried[l] <= 0) continue;
    const Link& link = topology.link(l);
    usage[l] = static_cast<int>(result.links.size());
    result.links.push_back(LinkUsage{topology.link_name(l), to_string(link.kind), link.bytes_per_s,
                                     carried[l],
                                     carried[l] / (link.bytes_per_s * result.step_time_s)});
  }
  // (A link with a load carried bytes.)
  for (const FlowNetwork::LoadSample& load : replay.take_link_loads()) {
    result.trace_link_load.push_back({usage.at(load.link), load.at, load.bytes_per_s});
  }
  return result;
}

StepOutcome simulate_step(const StepInputs& inputs, const StepOptions& options) {
  StepOutcome outcome = check_memory(inputs);
  if (!outcome.memory.fits() && !options.replay_beyond_memory) return outcome;
  const TaskGraph graph = build_data_parallel_step(inputs.model, inputs.training, inputs.plan);
  const Topology topology = build_cluster(inputs.node, inputs.nodes, inputs.fabric);
  outcome.step = execute_step(graph, inputs.gpu, topology, options,
                              HostCosts{inputs.node.cpu_adam_cycles_per_parameter});
  add_memory_in_use(inputs, outcome.step);
  outcome.simulated = true;
  return outcome;
}

}  // namespace fleetsim
