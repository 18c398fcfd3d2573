#include "sim/plan/planner.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "calibration/kernel_cost.hpp"
#include "sim/engine/errors.hpp"
#include "sim/step/collective_benchmark.hpp"
#include "sim/step/step_executor.hpp"
#include "topology/topology.hpp"
#include "workloads/layout/dimensions.hpp"
#include "workloads/layout/rules.hpp"
#include "workloads/layout/sharding.hpp"
#include "workloads/layout/stage_split.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/precision.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

constexpr std::array kMicroBatches = {1, 2, 4, 8};

// The order the search sets the dimensions in (workloads/layout/dimensions.hpp): each one's
// candidates may depend on those before it. "" is the micro-batch, a recipe's choice searched
// once dp is known. Recomputation is not enumerated: each layout takes the first of its
// candidates that fits (SearchSpace::recompute_modes).
constexpr std::array<std::string_view, 24> kSearchOrder = {"cp",
                                                           "cp_comm_type",
                                                           "tp",
                                                           "pp",
                                                           "dp",
                                                           "",
                                                           "vpp",
                                                           "microbatch_group",
                                                           "zero",
                                                           "fsdp2",
                                                           "bf16_shards",
                                                           "ep",
                                                           "expert_tp",
                                                           "sequence_parallel",
                                                           "tp_comm_overlap",
                                                           "ep_comm_overlap",
                                                           "overlap_grad_reduce",
                                                           "overlap_param_gather",
                                                           "offload_optimizer",
                                                           "schedule",
                                                           "recompute_layers",
                                                           "recompute_modules",
                                                           "activation_offload_layers",
                                                           "bucket"};

// What the search enumerates, every dimension but recomputation once, in kSearchOrder.
std::vector<const LayoutDimension*> search_steps() {
  std::vector<const LayoutDimension*> steps;
  for (const std::string_view key : kSearchOrder) {
    steps.push_back(key.empty() ? nullptr : find_layout_dimension(key));
    if (!key.empty() && !steps.back()) {
      throw std::logic_error("no layout dimension " + std::string(key));
    }
  }
  if (std::count(steps.begin(), steps.end(), nullptr) != 1) {
    throw std::logic_error("the planner searches the micro-batch once");
  }
  for (const LayoutDimension& dimension : layout_dimensions()) {
    const bool searched = dimension.key == "recompute" ||
                          std::find(steps.begin(), steps.end(), &dimension) != steps.end();
    if (!searched || !dimension.candidates) {
      throw std::logic_error("the planner does not search layout." + std::string(dimension.key));
    }
  }
  return steps;
}

struct Enumeration {
  const StepInputs& base;
  const LayoutSearch& search;
  std::vector<const LayoutDimension*> steps;
  std::vector<StepInputs>& layouts;
};

// Every choice of the steps from `step` on, `chosen` holding those before it (the others at
// their defaults, as a dimension's candidates expect).
void enumerate(const Enumeration& e, std::size_t step, ParallelPlan& chosen, int micro_batch) {
  if (step == e.steps.size()) {
    StepInputs inputs = e.base;
    inputs.plan = chosen;
    inputs.training.micro_batch = micro_batch;
    e.layouts.push_back(std::move(inputs));
    return;
  }
  const LayoutDimension* dimension = e.steps[step];
  if (!dimension) {
    // Only micro-batches that split each replica's share of the batch.
    for (const int candidate : kMicroBatches) {
      if (e.base.training.global_batch % (candidate * chosen.dp) != 0) continue;
      enumerate(e, step + 1, chosen, candidate);
    }
    return;
  }
  for (const DimensionValue& value : dimension->candidates(e.search, chosen)) {
    dimension->set(chosen, value);
    enumerate(e, step + 1, chosen, micro_batch);
  }
  dimension->set(chosen, dimension->get(ParallelPlan{}));
}

// The least n in [1, high] for which `fits` holds, given that it holds at high and, once it
// holds, for every larger n: a bisection.
template <class Fits>
int least_fitting(int high, Fits fits) {
  int low = 1;  // the least that fits is in [low, high]
  while (low < high) {
    const int middle = low + (high - low) / 2;
    if (fits(middle)) {
      high = middle;
    } else {
      low = middle + 1;
    }
  }
  return high;
}

// Under full recomputation, the fewest layers of each chunk to rerun (Megatron's
// recompute_num_layers) for `inputs` to fit with `min_headroom` kept free: memory falls as more
// layers rerun (each keeps only its input), so a bisection over 1 to the longest chunk's layers
// less one finds it; 0, every layer, where only that fits. Fewer reruns, less compute.
int least_recomputed_layers(const StepInputs& inputs, double min_headroom) {
  const int longest = static_cast<int>(longest_stage_slots(
      inputs.model.layers + inputs.model.mtp_layers, inputs.plan.pp * inputs.plan.vpp));
  const auto fits = [&](int layers) {
    StepInputs partial = inputs;
    partial.plan.recompute_layers = layers;
    return check_memory(partial).memory.fits(min_headroom);
  };
  if (longest <= 1 || !fits(longest - 1)) return 0;
  return least_fitting(longest - 1, fits);
}

// Without recomputation, the inputs with the fewest of the first layers' activations in host
// memory (Transformer Engine's CPU offloading) that fit with `min_headroom` kept free: GPU
// memory falls as more layers go (a bisection over 1 to the layers less one) while host memory
// grows, so if the least that fits the GPU overflows the host, none fits. None where the job
// rules refuse offload (a pipeline, a node without its host memory described).
std::optional<StepInputs> with_least_offload(const StepInputs& inputs, double min_headroom) {
  StepInputs offloaded = inputs;
  offloaded.plan.activation_offload_layers = inputs.model.layers - 1;
  if (inputs.plan.recompute != Recompute::none ||
      first_job_problem(job_subject_on_cluster(offloaded), offloaded.plan) ||
      !check_memory(offloaded).memory.gpu_fits(min_headroom)) {
    return std::nullopt;
  }
  offloaded.plan.activation_offload_layers =
      least_fitting(inputs.model.layers - 1, [&](int layers) {
        StepInputs fewer = offloaded;
        fewer.plan.activation_offload_layers = layers;
        return check_memory(fewer).memory.gpu_fits(min_headroom);
      });
  if (!check_memory(offloaded).memory.fits(min_headroom)) return std::nullopt;
  return offloaded;
}

// What the search covers: every layout, in a fixed order, with the base's recipe and cluster,
// and the recomputation modes each may take, least first.
struct SearchSpace {
  std::vector<StepInputs> layouts;
  std::vector<Recompute> recompute_modes;
};

SearchSpace search_space(const StepInputs& base) {
  const JobSubject subject = job_subject(base.model, base.training);
  const LayoutSearch search{
      .subject = subject,
      .node = base.node,
      .gpus = base.node.gpus * base.nodes,
      .scenario = base.plan,
      .host_optimizer = base.node.describes_host() && base.training.optimizer == Optimizer::adam};
  SearchSpace space;
  ParallelPlan chosen;
  enumerate(Enumeration{base, search, search_steps(), space.layouts}, 0, chosen, 0);
  const LayoutDimension& recompute = *find_layout_dimension("recompute");
  ParallelPlan plan;
  for (const DimensionValue& mode : recompute.candidates(search, ParallelPlan{})) {
    recompute.set(plan, mode);
    space.recompute_modes.push_back(plan.recompute);
  }
  return space;
}

struct Candidate {
  StepInputs inputs;
  double bound_s = 0;
  double estimate_s = 0;  // the replay order: layouts likely fastest first
  std::size_t order = 0;  // enumeration index: the tie-break
};

// A rough step time, only to order the replays so that the ranking fills with fast layouts
// early and the bound prunes more: the bound, or the time a GPU needs to move its
// data-parallel traffic (gradients once per step, under ZeRO 2 once per micro-batch; under
// ZeRO-3 also weights, per micro-batch)
// over its share of the node's NICs (or NVLink, when a replica group stays in a node), if
// longer. Nothing is pruned by it.
double replay_order_estimate_s(const StepInputs& inputs, double bound_s) {
  const ParallelPlan& plan = inputs.plan;
  const int replicas = plan.gradient_ranks();
  if (replicas == 1) return bound_s;
  const double micro_batches = static_cast<double>(inputs.training.global_batch) /
                               (static_cast<double>(plan.dp) * inputs.training.micro_batch);
  const double trained = inputs.training.lora ? 0.01 : 1.0;  // adapters: a sliver of the model
  const double local = rank_parameters(inputs.model, plan, 0).total();
  // ZeRO 3: two gathers a micro-batch; ZeRO 2: a reduction a micro-batch and the step's gather;
  // else the step's reduction and gather.
  const Sharding sharding(plan);
  const double passes = sharding.parameters_sharded()          ? 2 * micro_batches + trained
                        : sharding.reduces_every_micro_batch() ? (micro_batches + 1) * trained
                                                               : 2 * trained;
  const double bytes = passes * kBf16Bytes * local * (replicas - 1) / replicas;
  const bool in_node = plan.tp * replicas <= inputs.node.gpus;
  const double per_gpu = in_node
                             ? inputs.node.nvlink_bytes_per_s
                             : inputs.node.nic_bytes_per_s * inputs.node.nics / inputs.node.gpus;
  return per_gpu > 0 ? std::max(bound_s, bytes / per_gpu) : bound_s;
}

// Fastest first; equal step times in enumeration order.
bool ranks_before(const PlannedLayout& a, std::size_t a_order, const PlannedLayout& b,
                  std::size_t b_order) {
  if (a.outcome.step.step_time_s != b.outcome.step.step_time_s) {
    return a.outcome.step.step_time_s < b.outcome.step.step_time_s;
  }
  return a_order < b_order;
}

// The time of each tensor-, expert- or context-parallel collective of a layer alone on an idle
// cluster, simulated once per (group size, op, size): a collective that shares links can only
// take longer, and the compute stream waits for each.
class LayerCollectiveClock {
 public:
  double seconds(const StepInputs& inputs, const LayerCollective& collective) {
    // A group of consecutive ranks: tp of them. A context group's cp ranks, and an expert
    // group's ep unless each expert is whole, lie tp apart; timed as that many consecutive
    // ones, on as few nodes, it can only be faster.
    const int ranks = collective.group == GroupKind::expert    ? inputs.plan.ep
                      : collective.group == GroupKind::context ? inputs.plan.cp
                                                               : inputs.plan.tp;
    const auto key = std::tuple{ranks, collective.op, collective.size_bytes};
    const auto known = seconds_.find(key);
    if (known != seconds_.end()) return known->second;
    // The fewest nodes that hold the group.
    StepInputs one_node = inputs;
    one_node.nodes = (ranks + inputs.node.gpus - 1) / inputs.node.gpus;
    const double time_s =
        benchmark_collective(one_node, collective.op, ranks, {collective.size_bytes})
            .front()
            .time_us *
        1e-6;
    seconds_.emplace(key, time_s);
    return time_s;
  }

 private:
  std::map<std::tuple<int, CollectiveOp, double>, double> seconds_;
};

// The least time the first node's NICs need, in one direction, for data-parallel all-gathers of
// `bytes` per group (each tp rank's group brings in the shards of its members on other nodes)
// or reduce-scatters of as many (each sends out, reduced once inside the node at best, the parts
// its members on other nodes keep), at their usable rate. A group inside one node, or nodes
// that share an NVLink domain, bound it by nothing.
double node_crossing_s(const StepInputs& inputs, double bytes) {
  const ParallelPlan& plan = inputs.plan;
  const NodeSpec& node = inputs.node;
  // Of each data-parallel group (at least one: a tp over several trays shares its nodes).
  const int members_per_node = std::max(1, node.gpus / plan.tp);
  const int replicas = plan.gradient_ranks();
  if (replicas <= members_per_node || node.nvlink_domain_nodes > 1 || node.nics <= 0 ||
      node.nic_bytes_per_s <= 0) {
    return 0;
  }
  // Without an efficiency for it the replay refuses the cluster; the line rate bounds anyway.
  const auto efficiency =
      inputs.gpu.link_efficiency.find(to_string(fabric_link_kind(node.nic_kind)));
  const double usable =
      node.nics * node.nic_bytes_per_s *
      (efficiency != inputs.gpu.link_efficiency.end() ? efficiency->second.value : 1.0);
  const double crossing =
      plan.tp * bytes * (1.0 - static_cast<double>(members_per_node) / replicas);
  return crossing / usable;
}

// Under ZeRO-3 every micro-batch gathers each unit of the first stage before its forward and
// again before its backward (all but a frozen embedding, left out here whatever it is): the
// first node must take all of that in, however well the rest overlaps.
double sharded_gathers_s(const StepInputs& inputs) {
  const ParallelPlan& plan = inputs.plan;
  if (!Sharding(plan).parameters_sharded()) return 0;
  const double micro_batches = static_cast<double>(inputs.training.global_batch) /
                               (static_cast<double>(plan.dp) * inputs.training.micro_batch);
  // (Under expert parallelism only the dense parameters, gathered over every replica: the
  // experts, gathered over fewer, left out of the bound.)
  const RankParameters parameters = rank_parameters(inputs.model, plan, 0);
  const double held = plan.ep > 1 ? parameters.dense : parameters.total();
  const double embedding = fsdp_unit_parameters(inputs.model).front() / plan.tp;
  // BF16, or under QLoRA all as the 4-bit base (the adapters and the rest, in BF16, counted as
  // little: a lower bound still).
  const double gathered = micro_batches * (2 * held - embedding);
  const bool quantized = inputs.training.lora && inputs.training.lora->quantized_base;
  return node_crossing_s(inputs, weight_gather_bytes(gathered, 0, quantized ? gathered : 0));
}

// Under ZeRO 2 and 3 every micro-batch reduce-scatters the first stage's gradients in the reduce
// dtype: the first node must send all of that out (lower_bound_s adds it to the gathers: both
// are rings, which load both directions alike).
double sharded_reductions_s(const StepInputs& inputs) {
  const ParallelPlan& plan = inputs.plan;
  if (!Sharding(plan).reduces_every_micro_batch() || inputs.training.lora) return 0;
  const double micro_batches = static_cast<double>(inputs.training.global_batch) /
                               (static_cast<double>(plan.dp) * inputs.training.micro_batch);
  const RankParameters held = rank_parameters(inputs.model, plan, 0);
  return node_crossing_s(inputs, micro_batches * held.dense * inputs.training.grad_reduce_bytes);
}

// Under ZeRO-1 and 2 (and FSDP gathering for the step), the all-gather of the parameters the
// first stage's replicas updated, through the first node (node_crossing_s).
double updated_parameters_gather_s(const StepInputs& inputs) {
  const ParallelPlan& plan = inputs.plan;
  if (inputs.training.lora || !Sharding(plan).gathers_updated_shards()) return 0;
  // Gathered over every replica (experts: a bound's omission).
  const double local = rank_parameters(inputs.model, plan, 0).dense;
  // Of which FP8 primary weights, gathered in FP8: at most the stage's projections (theirs
  // counted with its experts', which only lowers the bound).
  const double fp8 = inputs.training.fp8_params
                         ? std::min(local, stage_projection_weights(inputs.model, plan, 0))
                         : 0.0;
  return node_crossing_s(inputs, weight_gather_bytes(local, fp8));
}

// What the first stage still does after its last backward, which ends the drain: its
// optimizer step on its shard and, under ZeRO-1 and 2 without overlap_param_gather, the
// all-gather of the parameters its replicas updated. Gradient reductions held back past the
// backward (no overlap_grad_reduce) are left out: a lower bound still.
double first_stage_tail_s(const StepInputs& inputs) {
  const ParallelPlan& plan = inputs.plan;
  const ModelSpec& model = inputs.model;
  if (inputs.training.lora) return 0;  // adapters: a sliver
  const RankParameters held = rank_parameters(model, plan, 0);
  const Sharding sharding(plan);
  const double shard = sharding.optimizer_parameters(held.dense, held.experts);
  const NodeSpec& node = inputs.node;
  // Offloaded, the first node's ranks of the first stage each run CPU Adam after their last
  // backward: together their bytes cross its host memory, each rank's parameters take its
  // share of the cores, and then its BF16 shard crosses its PCIe link at line rate.
  const auto offloaded_s = [&] {
    const int stage_ranks_on_node = std::min(node.gpus, plan.tp * plan.gradient_ranks());
    const int ranks_on_node = inputs.ranks_per_node();
    const double memory_s = stage_ranks_on_node *
                            optimizer_step_bytes_per_parameter(inputs.training) * shard /
                            (node.host_memory_bytes_per_s * node.host_memory_efficiency);
    const double cores_s =
        shard * node.cpu_adam_cycles_per_parameter * ranks_on_node / node.cpu_cycles_per_s();
    return std::max(memory_s, cores_s) + kBf16Bytes * shard / node.pcie_bytes_per_s;
  };
  const double optimizer_s =
      plan.offload_optimizer
          ? offloaded_s()
          : kernel_seconds(inputs.gpu, adam_step_op(shard, inputs.training).kernel);
  // Overlapped with the next step's forward, the gather is not after the optimizer.
  return optimizer_s + (sharding.gathers_ahead() ? 0.0 : updated_parameters_gather_s(inputs));
}

// Activation offload's copies within the step: each micro-batch's offloaded layers cross each
// rank's PCIe link to the host and back (a direction at line rate), and all the node's ranks'
// cross its host memory both ways.
double offloaded_activations_s(const StepInputs& inputs) {
  const ParallelPlan& plan = inputs.plan;
  if (plan.activation_offload_layers == 0) return 0;
  const double micro_batches = static_cast<double>(inputs.training.global_batch) /
                               (static_cast<double>(plan.dp) * inputs.training.micro_batch);
  const double one_way = micro_batches * plan.activation_offload_layers *
                         layer_saved_bytes(inputs.model, inputs.training, plan);
  const NodeSpec& node = inputs.node;
  return std::max(one_way / node.pcie_bytes_per_s,
                  2 * one_way * inputs.ranks_per_node() /
                      (node.host_memory_bytes_per_s * node.host_memory_efficiency));
}

double lower_bound_s(const StepInputs& inputs, LayerCollectiveClock& clock) {
  const ParallelPlan& plan = inputs.plan;
  const ModelSpec& model = inputs.model;
  // The compute stream's kernels, and what it waits for beyond them: each blocking collective
  // whole, an overlapped one (ring attention's always overlaps) by how much the pair outlasts
  // the kernel alone. The pair starts together at the earliest (the task graph gives an
  // overlapped collective at least its kernel's dependencies, so it never starts before the
  // kernel beside it; a later start only ends the pair later); while the collective runs the
  // kernel runs on the SMs it leaves (k_beside), so with the collective's c shorter than
  // k_beside the kernel ends at c + (1 - c / k_beside) k, c (1 - k / k_beside) after its time
  // alone k; otherwise the collective ends last, c - k after it. A layer's tensor-parallel
  // collective holds its userbuffers method's SMs (none on copy engines), and a pipelined
  // reduce-scatter's last chunk runs after its GEMM: whole.
  const bool overlap = plan.tp_comm_overlap && plan.tp > 1;
  // A kernel's time while `sms_held` SMs are held, as userbuffers launch a GEMM beside them.
  const auto kernel_s = [&](const std::vector<Op>& ops, std::size_t i, int sms_held) {
    const GemmLaunch launch = overlap ? userbuffers_gemm(ops, i, plan.tp) : GemmLaunch{ops[i], 1};
    return launch.chunks * kernel_seconds(inputs.gpu, launch.part.kernel, sms_held);
  };
  const auto blocking_s = [&](const std::vector<Op>& ops) {
    double seconds = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (!op.collective) {
        seconds += kernel_s(ops, i, 0);
        continue;
      }
      // Merged passes (ep_comm_overlap) run the experts' all-to-alls beside the other pass's
      // compute: none is counted (the lone warm-up and cool-down passes wait for theirs, the
      // kernels beside one lose its SMs: the bound stays below the step).
      if (plan.ep_comm_overlap && is_expert_exchange(*op.collective)) continue;
      const std::optional<std::size_t> beside = kernel_beside(ops, i, overlap);
      if (!beside) {
        seconds += clock.seconds(inputs, *op.collective);
        continue;
      }
      const std::optional<UserbuffersOverlap> userbuffers =
          overlap ? userbuffers_collective(ops, i) : std::nullopt;
      const double after_gemm_share = userbuffers ? userbuffers->after_gemm_share : 0.0;
      LayerCollective beside_part = *op.collective;
      beside_part.size_bytes *= 1 - after_gemm_share;
      if (after_gemm_share > 0) {
        LayerCollective after_part = *op.collective;
        after_part.size_bytes *= after_gemm_share;
        seconds += clock.seconds(inputs, after_part);
      }
      const double collective_s = clock.seconds(inputs, beside_part);
      const double alone_s = kernel_s(ops, *beside, 0);
      const double beside_s =
          kernel_s(ops, *beside, userbuffers ? userbuffers->sms : comm_sms_held(inputs.gpu, 1));
      seconds += collective_s >= beside_s ? collective_s - alone_s
                                          : collective_s * (1 - alone_s / beside_s);
    }
    return seconds;
  };
  // Full recomputation runs each layer's forward again before its backward; with only the
  // first recompute_layers of each chunk rerun, those of the last stage's chunks are added once
  // a micro-batch below (the crossings count none: a lower bound still). A layer's forward
  // and its forward and backward, with full attention and within the model's window.
  const bool every_layer_rerun = plan.recompute == Recompute::full && plan.recompute_layers == 0;
  struct LayerTimes {
    double forward_s = 0;
    double layer_s = 0;
  };
  const auto layer_times = [&](const ModelSpec& kind, bool attends_locally) {
    const LayerOps layer =
        decoder_layer_ops(kind, inputs.training, plan.tp, plan.recompute, plan.ep, plan.cp,
                          plan.sequence_parallel, plan.recompute_modules, attends_locally,
                          plan.tp_comm_overlap, plan.cp_comm_type, plan.experts_split());
    const double forward_s = blocking_s(layer.forward);
    const double backward_s = blocking_s(layer.backward) + (every_layer_rerun ? forward_s : 0.0);
    return LayerTimes{forward_s, forward_s + backward_s};
  };
  // Each kind of layer, [dense][local]: the model's own (a mixture of experts' experts' layers)
  // or a dense one among them, attending fully or within the window.
  const bool mixed = model.has_dense_layers();
  const bool local_layers = model.has_local_layers(inputs.training.seq_len);
  std::array<LayerTimes, 4> kinds;
  for (int dense = 0; dense < (mixed ? 2 : 1); ++dense) {
    const ModelSpec kind = dense ? model.dense_layer_model() : model;
    kinds[2 * dense] = layer_times(kind, false);
    kinds[2 * dense + 1] = local_layers ? layer_times(kind, true) : kinds[2 * dense];
  }
  if (!mixed) {
    kinds[2] = kinds[0];
    kinds[3] = kinds[1];
  }
  // A slot's layer: a decoder layer, or a multi-token prediction module's, of the last
  // layer's kind (its own lookup, norms and eh_proj, left out, only add to it).
  const auto times_of = [&](int slot) {
    const int layer = std::min(slot, model.layers - 1);
    return kinds[(mixed && !model.layer_has_experts(layer) ? 2 : 0) +
                 (model.attends_locally(layer) ? 1 : 0)];
  };
  const double micro_batches = static_cast<double>(inputs.training.global_batch) /
                               (static_cast<double>(plan.dp) * inputs.training.micro_batch);
  // The last stage runs all its chunks of every micro-batch, one after another: it cannot
  // start before the first micro-batch's forward has crossed the pp - 1 stages before it, and
  // after its last backward the gradient still crosses pp - 1 stages back to the first, which
  // then finishes its step (first_stage_tail_s); each of those crossings takes at least the
  // smallest chunk. The embedding, pipeline transfers and the rest of the data-parallel
  // traffic only add to this.
  const int virtual_stages = plan.pp * plan.vpp;
  int smallest_chunk = model.layers + model.mtp_layers;
  for (int v = 0; v < virtual_stages; ++v) {
    smallest_chunk =
        std::min(smallest_chunk, virtual_stage_slots(model, virtual_stages, v).count());
  }
  double cheapest_forward_s = kinds[0].forward_s;
  double cheapest_backward_s = kinds[0].layer_s - kinds[0].forward_s;
  for (const LayerTimes& kind : kinds) {
    cheapest_forward_s = std::min(cheapest_forward_s, kind.forward_s);
    cheapest_backward_s = std::min(cheapest_backward_s, kind.layer_s - kind.forward_s);
  }
  const double cheapest_layer_s = cheapest_forward_s + cheapest_backward_s;
  // Of a micro-batch on the last stage: its layers' forwards and backwards, and under partial
  // recomputation the forwards it runs again.
  double last_stage_layers_s = 0;
  double last_stage_reruns_s = 0;
  const bool partial_rerun = plan.recompute == Recompute::full && plan.recompute_layers > 0;
  for (int c = 0; c < plan.vpp; ++c) {
    const LayerRange chunk = virtual_stage_slots(model, virtual_stages, c * plan.pp + plan.pp - 1);
    for (int layer = chunk.first; layer < chunk.end; ++layer) {
      last_stage_layers_s += times_of(layer).layer_s;
      if (partial_rerun && layer - chunk.first < plan.recompute_layers) {
        last_stage_reruns_s += times_of(layer).forward_s;
      }
    }
  }
  // The last stage also runs the output head of every micro-batch.
  const LayerOps head = head_ops(
      inputs.model, inputs.training.micro_batch, inputs.training.seq_len / plan.cp, plan.tp,
      inputs.training.lora.has_value(), inputs.training.cross_entropy, plan.sequence_parallel);
  const double head_s = blocking_s(head.forward) + blocking_s(head.backward);
  // The first node's NICs. The data-parallel gathers in the step (ZeRO-3's of every
  // micro-batch; the gather of the updated parameters overlapped with the forward) and the
  // reductions of every micro-batch (ZeRO 2 and 3) are rings, which send out of a node as much
  // as they take in: their times add, in either direction. And no gradient is reduced before
  // the first micro-batch's forward has run through every layer and its loss's backward.
  const double gathers_s =
      sharded_gathers_s(inputs) +
      (Sharding(plan).gathers_ahead() ? updated_parameters_gather_s(inputs) : 0.0);
  const double reductions_s = sharded_reductions_s(inputs);
  const double first_gradient_s =
      reductions_s > 0 ? (model.layers + model.mtp_layers) * cheapest_forward_s + head_s : 0.0;
  return std::max(micro_batches * (last_stage_layers_s + last_stage_reruns_s + head_s) +
                      (plan.pp - 1) * smallest_chunk * cheapest_layer_s +
                      first_stage_tail_s(inputs),
                  std::max({gathers_s + reductions_s, first_gradient_s + reductions_s,
                            offloaded_activations_s(inputs)}));
}

}  // namespace

double step_lower_bound_s(const StepInputs& inputs) {
  LayerCollectiveClock clock;
  return lower_bound_s(inputs, clock);
}

PlanResult search_layouts(const StepInputs& base, const PlanOptions& options) {
  if (options.top == 0 || options.batch_size == 0) {
    throw ModelError("the planner needs top and batch_size of at least 1");
  }
  if (!(options.min_headroom >= 0 && options.min_headroom < 1)) {
    throw ModelError("the planner's minimum headroom is a share of memory in [0, 1), got " +
                     std::to_string(options.min_headroom));
  }
  PlanResult result;
  SearchSpace space = search_space(base);
  std::vector<StepInputs>& layouts = space.layouts;
  result.layouts = layouts.size();
  const std::vector<Recompute>& modes = space.recompute_modes;

  // The memory check and the job rules for every layout, with the least recomputation that
  // fits: independent, so in parallel, each into its own slot.
  // By layout, what fits: with activations offloaded, and in the first recomputation mode.
  std::vector<std::vector<Candidate>> checked(layouts.size());
  std::vector<char> refused(layouts.size(), 0);
  // Of a layout that fits in no mode, its leanest mode's memory check (for `leanest`).
  std::vector<std::optional<PlannedLayout>> closest(layouts.size());
  tbb::parallel_for(std::size_t{0}, layouts.size(), [&](std::size_t i) {
    // The job rules look at recomputation to refuse per_op (which the search does not try), a
    // partial depth without full recomputation (which it sets only with full), modules other
    // than the default (which it does not set) and full recomputation beside ep_comm_overlap:
    // a layout they refuse is refused in every mode it tries, and a mode they refuse for the
    // layout is skipped.
    const JobSubject subject = job_subject_on_cluster(layouts[i]);
    if (first_job_problem(subject, layouts[i].plan)) {
      refused[i] = 1;
      return;
    }
    for (const Recompute recompute : modes) {
      StepInputs inputs = layouts[i];
      inputs.plan.recompute = recompute;
      if (recompute != layouts[i].plan.recompute && first_job_problem(subject, inputs.plan)) {
        continue;
      }
      StepOutcome outcome = check_memory(inputs);
      // Full recomputation that fits: rerun only as many layers of each chunk as it takes.
      if (recompute == Recompute::full && outcome.memory.fits(options.min_headroom)) {
        inputs.plan.recompute_layers = least_recomputed_layers(inputs, options.min_headroom);
        if (inputs.plan.recompute_layers > 0) outcome = check_memory(inputs);
      }
      if (!outcome.memory.fits(options.min_headroom)) {
        // Where nothing recomputed does not fit, activations offloaded may: a candidate beside
        // the recomputation mode that fits, the replay to tell which is faster.
        if (recompute == Recompute::none) {
          if (auto offloaded = with_least_offload(inputs, options.min_headroom)) {
            checked[i].push_back(Candidate{std::move(*offloaded), 0.0, 0.0, i});
          }
        }
        // Leanest by GPU memory, among modes whose host memory (if offloaded) fits.
        if (outcome.memory.host_fits() &&
            (!closest[i] || outcome.memory.total_bytes < closest[i]->outcome.memory.total_bytes)) {
          closest[i] = PlannedLayout{inputs, std::move(outcome), 0.0};
        }
        continue;
      }
      checked[i].push_back(Candidate{std::move(inputs), 0.0, 0.0, i});
      return;
    }
  });
  std::vector<Candidate> candidates;
  LayerCollectiveClock clock;
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    if (refused[i]) {
      ++result.refused;
    } else if (checked[i].empty()) {
      ++result.not_fitting;
      // The first of equally lean layouts, in enumeration order.
      if (closest[i] && (!result.leanest || closest[i]->outcome.memory.total_bytes <
                                                result.leanest->outcome.memory.total_bytes)) {
        result.leanest = std::move(closest[i]);
      }
    } else {
      result.offload_alternatives += checked[i].size() - 1;
      for (Candidate& fitting : checked[i]) {
        candidates.push_back(std::move(fitting));
        Candidate& candidate = candidates.back();
        candidate.bound_s = lower_bound_s(candidate.inputs, clock);
        candidate.estimate_s = replay_order_estimate_s(candidate.inputs, candidate.bound_s);
      }
    }
  }
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const Candidate& a, const Candidate& b) { return a.estimate_s < b.estimate_s; });

  std::vector<std::pair<PlannedLayout, std::size_t>> ranked;  // with enumeration order
  std::size_t next = 0;
  while (true) {
    // A full ranking rules out every layout whose bound is above its slowest step time.
    // (Strictly: one whose bound equals it might tie, and win the tie on enumeration order.)
    const auto cannot_enter = [&](const Candidate& c) {
      return ranked.size() == options.top &&
             c.bound_s > ranked.back().first.outcome.step.step_time_s;
    };
    // The next batch: the first layouts in estimate order that can still enter. The first
    // batch fills the ranking; later ones are small, so the bound prunes early.
    const std::size_t batch_size = ranked.empty() ? options.top : options.batch_size;
    std::vector<std::size_t> batch;
    for (; next < candidates.size() && batch.size() < batch_size; ++next) {
      if (cannot_enter(candidates[next])) {
        ++result.bounded_out;
      } else {
        batch.push_back(next);
      }
    }
    if (batch.empty()) break;
    std::vector<PlannedLayout> replays(batch.size());
    tbb::parallel_for(std::size_t{0}, batch.size(), [&](std::size_t i) {
      const Candidate& candidate = candidates[batch[i]];
      replays[i] = {candidate.inputs, simulate_step(candidate.inputs, options.step),
                    candidate.bound_s};
    });
    for (std::size_t i = 0; i < batch.size(); ++i) {
      ranked.emplace_back(std::move(replays[i]), candidates[batch[i]].order);
    }
    result.replayed += batch.size();
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return ranks_before(a.first, a.second, b.first, b.second);
    });
    if (ranked.size() > options.top) ranked.resize(options.top);
  }
  for (auto& [layout, order] : ranked) result.ranked.push_back(std::move(layout));
  return result;
}

}  // namespace fleetsim
