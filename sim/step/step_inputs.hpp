// Everything one step simulation needs, and what it reports.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "calibration/gpu_profile.hpp"
#include "topology/node_spec.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/model_spec.hpp"
#include "workloads/task_graph.hpp"

namespace fleetsim {

struct StepInputs {
  NodeSpec node;
  int nodes = 1;
  FabricSpec fabric;
  GpuProfile gpu;
  ModelSpec model;
  TrainingSpec training;
  ParallelPlan plan;
  // The ranks on each node: its GPUs, or all of them where the job is smaller than a node.
  int ranks_per_node() const { return std::min(node.gpus, plan.world_size()); }
  bool operator==(const StepInputs&) const = default;
};

// The facts the job rules read (workloads/layout/rules.hpp), with the cluster the inputs name;
// the node is referred to, not copied: valid while `inputs` is.
inline JobSubject job_subject_on_cluster(const StepInputs& inputs) {
  JobSubject subject = job_subject(inputs.model, inputs.training);
  const auto& fp16 = inputs.gpu.dense_fp16_flops_per_s;
  subject.cluster =
      JobCluster{&inputs.node, inputs.nodes, inputs.gpu.name, inputs.gpu.fp8.has_value(),
                 !fp16 || fp16->value == inputs.gpu.dense_bf16_flops_per_s.value};
  return subject;
}

struct LinkUsage {
  std::string name;  // "n0.gpu3->n0.nvswitch", stable across runs
  std::string kind;  // "nvlink", "pcie", "infiniband", ...
  double capacity_bytes_per_s = 0;
  double bytes = 0;        // carried during the step
  double utilisation = 0;  // bytes / (capacity x step time)
  bool operator==(const LinkUsage&) const = default;
};

struct StepBreakdown {
  double compute_s = 0;       // time the compute stream of a rank was busy
  double exposed_comm_s = 0;  // communication running while compute was idle
  double idle_s = 0;          // neither (pipeline bubbles, waiting on peers, latency, dependencies)
  // exposed_comm_s by what the communication is for (a stretch where several run shared among
  // them evenly, so a kind's share depends on how many others run beside it): data-parallel
  // gradient reductions and parameter gathers; tensor-parallel
  // collectives; context-parallel exchanges (ring attention's, Ulysses' all-to-alls);
  // expert-parallel all-to-alls and gathers; pipeline transfers; optimizer offload's PCIe
  // copies.
  double exposed_dp_s = 0;
  double exposed_tp_s = 0;
  double exposed_cp_s = 0;
  double exposed_ep_s = 0;
  double exposed_pp_s = 0;
  double exposed_host_s = 0;
  bool operator==(const StepBreakdown&) const = default;
};

// The kinds of exposed communication, the one list every output takes them from, in the order
// of step_detail::CommKind: each one's key (its result is exposed_<key>_s, its HDF5 breakdown
// row exposed_<key>), what a step's largest share calls it, and its member.
struct ExposedPart {
  const char* key;
  const char* share;
  double StepBreakdown::*seconds;
};
inline constexpr std::array<ExposedPart, 6> kExposedParts{{
    {"dp", "exposed DP comm", &StepBreakdown::exposed_dp_s},
    {"tp", "exposed TP comm", &StepBreakdown::exposed_tp_s},
    {"cp", "exposed CP comm", &StepBreakdown::exposed_cp_s},
    {"ep", "exposed EP comm", &StepBreakdown::exposed_ep_s},
    {"pp", "exposed PP comm", &StepBreakdown::exposed_pp_s},
    {"host", "exposed offload copies", &StepBreakdown::exposed_host_s},
}};

// One activity of one rank's stream, for traces: a kernel, or a collective the rank took part
// in (from the moment all members had arrived to its end).
// A slice of a traced rank's timeline, and what it did (a trace writes them as its arguments).
struct TraceSlice {
  int rank = 0;
  Stream stream = Stream::compute;
  std::string name;
  SimTime begin{};
  SimTime end{};
  double flops = 0;  // a kernel's executed FLOPs
  // A kernel's HBM bytes; a collective's message size (nccl-tests' S); a pipeline transfer's
  // bytes; host work's.
  double bytes = 0;
  // The SMs communication held: beside a kernel as it began; a collective's own kernels'.
  int sms_held = 0;
  // A collective: its op, its group ("data 3": kind and number) and the algorithm and protocol
  // it ran ("ring/Simple"); empty otherwise.
  std::string op;
  std::string group;
  std::string algorithm;
  // A pipeline transfer: the rank on its other side, whether this side sends, and the
  // transfer's number, which both sides share (-1 for anything else).
  int peer = -1;
  bool sends = false;
  std::int64_t transfer = -1;
  // A collective: a number its members' slices share, unique in the step (-1 otherwise).
  std::int64_t collective = -1;
  bool operator==(const TraceSlice&) const = default;
};

struct StepResult {
  double step_time_s = 0;
  StepBreakdown breakdown;  // averaged over ranks
  double tokens_per_s = 0;
  double model_flops = 0;     // per step, all GPUs, from the op graph (causal attention halved)
  double hardware_flops = 0;  // model FLOPs plus recomputation
  double mfu = 0;             // model_flops / (step time x GPUs x dense BF16 peak)
  double hfu = 0;
  // Bytes the GPUs sent during the step (collectives at their bus factor, pipeline transfers
  // whole), averaged over the GPUs: stages of a pipeline send different amounts.
  double comm_bytes_per_gpu = 0;
  std::uint64_t events = 0;       // engine events processed
  int replayed_ranks = 0;         // all the ranks, or folded fewer (see StepOptions)
  std::vector<LinkUsage> links;   // links that carried traffic, in topology order
  std::vector<TraceSlice> trace;  // every slice of the traced ranks, when asked for
  // Each traced rank's communication load whenever it changes: the SMs its collectives hold
  // and the HBM bytes/s they move (the compute beside them gets the rest).
  struct CommLoad {
    int rank = 0;
    SimTime at{};
    int sms_held = 0;
    double hbm_bytes_per_s = 0;
    bool operator==(const CommLoad&) const = default;
  };
  std::vector<CommLoad> trace_comm_load;
  // The load on each link of the traced GPUs (each GPU's own, and its NIC's to and from the
  // fabric) whenever it changes: the bytes/s of the flows that run there (under folding, the
  // replayed ranks' and the copies run beside them; StepOptions::fold).
  struct LinkLoad {
    int link = 0;  // in links
    SimTime at{};
    double bytes_per_s = 0;
    bool operator==(const LinkLoad&) const = default;
  };
  std::vector<LinkLoad> trace_link_load;
  // Each traced rank's memory whenever the decoder layers whose saved tensors it holds change
  // (a layer's forward ends, or its backward): the replay counts the layers; simulate_step adds
  // the bytes, from the memory model's breakdown of the rank's stage: what it counts at the
  // peak besides activations and the items held at one moment only (constant here), and each
  // layer its even share of the activations item (MemoryBreakdown::activation_layers).
  struct MemoryInUse {
    int rank = 0;
    SimTime at{};
    int saved_layers = 0;
    double state_bytes = 0;
    double activation_bytes = 0;
    bool operator==(const MemoryInUse&) const = default;
  };
  std::vector<MemoryInUse> trace_memory;
  bool operator==(const StepResult&) const = default;
};

// What a replay records beyond its results.
struct StepOptions {
  // Ranks whose slices are recorded: the first trace_ranks replayed ranks, or with a pipeline
  // the first rank of up to trace_ranks stages from the first to the last; 0: none. Or, where
  // given, the ranks listed (each must be replayed: folded, a replica stands for the others).
  int trace_ranks = 0;
  std::vector<int> trace_rank_list = {};
  bool traces() const { return trace_ranks > 0 || !trace_rank_list.empty(); }
  // These options for the steps no trace is asked of (a run's degraded states, analyses).
  StepOptions untraced() const {
    StepOptions options = *this;
    options.trace_ranks = 0;
    options.trace_rank_list.clear();
    return options;
  }
  // Folding (DESIGN.md, sim/step/folding.hpp): data-parallel replicas run the same program at
  // the same time, so only replica 0 of each stage is replayed, and where its tp ranks meet the
  // cluster alike only its tp rank 0. The other ranks' collectives and pipeline transfers are
  // run too wherever their links are shared with replayed traffic, so contention is kept; off:
  // every rank is replayed.
  bool fold = true;
  // The step replayed even where memory does not fit, as if it did: how fast the layout would
  // run, apart from whether it fits (docs/accuracy.md keeps the two verdicts apart).
  bool replay_beyond_memory = false;
  bool operator==(const StepOptions&) const = default;
};

struct StepOutcome {
  StepResult step;  // empty when the layout does not fit
  MemoryBreakdown memory;
  std::vector<std::string> warnings;
  bool simulated = false;  // false when memory does not fit: no step is replayed (unless
                           // StepOptions::replay_beyond_memory)
  bool operator==(const StepOutcome&) const = default;
};

}  // namespace fleetsim
