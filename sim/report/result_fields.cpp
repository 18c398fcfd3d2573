#include "sim/report/result_fields.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "sim/report/summary_table.hpp"
#include "workloads/layout/dimensions.hpp"

namespace fleetsim {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

const VariantReport& at(const RunReport& report, std::size_t i) {
  return report.variants[i];
}
const StepInputs& in(const RunReport& report, std::size_t i) {
  return at(report, i).inputs;
}
const StepResult& step(const RunReport& report, std::size_t i) {
  return at(report, i).outcome.step;
}
// A step quantity: NaN until the variant is simulated (its layout does not fit).
double stepped(const RunReport& report, std::size_t i, double value) {
  return at(report, i).outcome.simulated ? value : kNan;
}
const MemoryBreakdown& memory(const RunReport& report, std::size_t i) {
  return at(report, i).outcome.memory;
}
const JobSpec& job(const RunReport& report, std::size_t i) {
  return *at(report, i).job;
}
const JobResult& mc(const RunReport& report, std::size_t i) {
  return *at(report, i).job_result;
}
bool priced(const RunReport& report, std::size_t i) {
  return at(report, i).run->priced;
}
const SpotCapacity& spot(const RunReport& report, std::size_t i) {
  return *job(report, i).spot;
}
// A priced run's summary; absent without a price.
FieldValue if_priced(const RunReport& report, std::size_t i, const SampleSummary& s) {
  return priced(report, i) ? FieldValue{s} : FieldValue{};
}

using R = const RunReport&;
using I = std::size_t;

const ResultGroup kGroups[] = {
    {FieldGroup::scenario, "scenario", "root attributes", "the scenario the results are of"},
    {FieldGroup::plan, "plan", "root attributes (plan_<name>)",
     "`fleetsim plan` only: what the search did; the variants are its ranking"},
    {FieldGroup::variant, "", "variant attributes", "each variant's setup and comparisons"},
    {FieldGroup::step, "step", "variant attributes",
     "the simulated step (JSON: null when the layout does not fit; HDF5: NaN)"},
    {FieldGroup::memory, "memory", "variant attributes", "memory per GPU at the step's peak"},
    {FieldGroup::run, "run", "run attributes",
     "a run: block's Monte Carlo (absent without one, or when the layout does not fit)"},
    {FieldGroup::spot, "run.spot", "run attributes (spot_<name>)",
     "the run's spot capacity (absent on on-demand capacity)"},
};

const ResultField kFields[] = {
    // ---- the scenario
    {FieldGroup::scenario, "name", "scenario_name", "", "the scenario's name",
     [](R r, I) -> FieldValue { return r.scenario_name; }},
    {FieldGroup::scenario, "description", "description", "", "its description",
     [](R r, I) -> FieldValue { return r.description; }},
    {FieldGroup::scenario, "file", "scenario_file", "", "the scenario file",
     [](R r, I) -> FieldValue { return r.scenario_file; }},
    {FieldGroup::scenario, "seed", "seed", "", "the seed of every random stream",
     [](R r, I) -> FieldValue { return r.seed; }},
    {FieldGroup::scenario, "fleetsim_version", "fleetsim_version", "", "the version that wrote it",
     [](R r, I) -> FieldValue { return r.fleetsim_version; }},
    // ---- a plan's search
    {FieldGroup::plan, "layouts", "plan_layouts", "", "layouts enumerated",
     [](R r, I) -> FieldValue { return std::uint64_t{r.plan->layouts}; }},
    {FieldGroup::plan, "refused", "plan_refused", "", "refused by the job rules",
     [](R r, I) -> FieldValue { return std::uint64_t{r.plan->refused}; }},
    {FieldGroup::plan, "not_fitting", "plan_not_fitting", "",
     "fitting in no recomputation mode (with min_headroom free)",
     [](R r, I) -> FieldValue { return std::uint64_t{r.plan->not_fitting}; }},
    {FieldGroup::plan, "min_headroom", "plan_min_headroom", "1",
     "the share of GPU memory a layout had to leave free (--min-headroom)",
     [](R r, I) -> FieldValue { return r.plan->min_headroom; }},
    {FieldGroup::plan, "replayed", "plan_replayed", "", "replayed",
     [](R r, I) -> FieldValue { return std::uint64_t{r.plan->replayed}; }},
    {FieldGroup::plan, "bounded_out", "plan_bounded_out", "",
     "fitting, but ruled out by their lower bound",
     [](R r, I) -> FieldValue { return std::uint64_t{r.plan->bounded_out}; }},
    {FieldGroup::plan, "offload_alternatives", "plan_offload_alternatives", "",
     "layouts also tried with activations offloaded, beside recomputed (each try replayed or "
     "ruled out)",
     [](R r, I) -> FieldValue { return std::uint64_t{r.plan->offload_alternatives}; }},
    {FieldGroup::plan, "search_s", "plan_search_s", "s", "the search's wall time",
     [](R r, I) -> FieldValue { return r.plan->search_s; }},
    // ---- the variant
    {FieldGroup::variant, "name", "name", "", "the variant's name (HDF5: also its group's)",
     [](R r, I i) -> FieldValue { return at(r, i).name; }},
    {FieldGroup::variant, "", "index", "", "its position in the scenario (HDF5 sorts groups)",
     [](R, I i) -> FieldValue { return static_cast<int>(i); }},
    {FieldGroup::variant, "node", "node", "", "the node preset",
     [](R r, I i) -> FieldValue { return in(r, i).node.name; }},
    {FieldGroup::variant, "nodes", "nodes", "", "nodes",
     [](R r, I i) -> FieldValue { return in(r, i).nodes; }},
    {FieldGroup::variant, "gpus_per_node", "gpus_per_node", "", "GPUs a node",
     [](R r, I i) -> FieldValue { return in(r, i).node.gpus; }},
    {FieldGroup::variant, "gpus", "gpus", "", "GPUs in all",
     [](R r, I i) -> FieldValue { return in(r, i).nodes * in(r, i).node.gpus; }},
    {FieldGroup::variant, "gpu_profile", "gpu_profile", "", "the GPU's calibration profile",
     [](R r, I i) -> FieldValue { return in(r, i).gpu.name; }},
    {FieldGroup::variant, "model", "model", "", "the model",
     [](R r, I i) -> FieldValue { return in(r, i).model.name; }},
    {FieldGroup::variant, "precision", "precision", "", "bf16, fp16 or fp8",
     [](R r, I i) -> FieldValue { return std::string(to_string(in(r, i).training.precision)); }},
    {FieldGroup::variant, "lora_rank", "lora_rank", "", "LoRA's rank (0: every weight trained)",
     [](R r, I i) -> FieldValue {
       const auto& lora = in(r, i).training.lora;
       return lora ? lora->rank : 0;
     }},
    {FieldGroup::variant, "lora_quantized_base", "lora_quantized_base", "",
     "QLoRA: the frozen weights in 4-bit NormalFloat",
     [](R r, I i) -> FieldValue {
       const auto& lora = in(r, i).training.lora;
       return lora && lora->quantized_base;
     }},
    {FieldGroup::variant, "lora_weight_decomposed", "lora_weight_decomposed", "",
     "DoRA: each adapted projection's output scaled by a trained magnitude over its weight's "
     "row norm",
     [](R r, I i) -> FieldValue {
       const auto& lora = in(r, i).training.lora;
       return lora && lora->weight_decomposed;
     }},
    {FieldGroup::variant, "layout_label", "layout_label", "",
     "the layout in words (tp8 pp2 dp4 ...)",
     [](R r, I i) -> FieldValue { return layout_label(in(r, i).plan); }},
    {FieldGroup::variant, "fabric_oversubscription", "fabric_oversubscription", "1",
     "the scale-out fabric's leaf downlink : uplink bandwidth (one node: no fabric is used)",
     [](R r, I i) -> FieldValue { return in(r, i).fabric.oversubscription; }},
    {FieldGroup::variant, "fabric_placement", "fabric_placement", "",
     "packed or spread: the nodes under as few leaves as they fill, or one a leaf",
     [](R r, I i) -> FieldValue {
       return std::string(in(r, i).fabric.placement == NodePlacement::spread ? "spread" : "packed");
     }},
    {FieldGroup::variant, "simulated", "simulated", "",
     "whether the step was replayed (false: the layout does not fit)",
     [](R r, I i) -> FieldValue { return at(r, i).outcome.simulated; }},
    {FieldGroup::variant, "speedup_vs_first", "speedup_vs_first", "1",
     "tokens/s over the first variant's",
     [](R r, I i) -> FieldValue { return speedup_vs_first(r, i).value_or(kNan); }},
    {FieldGroup::variant, "scaling_efficiency_vs_first", "scaling_efficiency_vs_first", "1",
     "tokens/s per GPU over the first variant's",
     [](R r, I i) -> FieldValue { return scaling_efficiency_vs_first(r, i).value_or(kNan); }},
    // ---- its step
    {FieldGroup::step, "step_time_s", "step_time_s", "s", "one optimizer step",
     [](R r, I i) -> FieldValue { return stepped(r, i, step(r, i).step_time_s); }},
    {FieldGroup::step, "tokens_per_s", "tokens_per_s", "tokens/s", "of the whole cluster",
     [](R r, I i) -> FieldValue { return stepped(r, i, step(r, i).tokens_per_s); }},
    {FieldGroup::step, "tokens_per_s_per_gpu", "tokens_per_s_per_gpu", "tokens/s",
     "tokens/s over the GPUs",
     [](R r, I i) -> FieldValue {
       return stepped(r, i, step(r, i).tokens_per_s / (in(r, i).nodes * in(r, i).node.gpus));
     }},
    {FieldGroup::step, "mfu", "mfu", "1",
     "model FLOPs / (step time x GPUs x dense BF16 peak), causal attention halved",
     [](R r, I i) -> FieldValue { return stepped(r, i, step(r, i).mfu); }},
    {FieldGroup::step, "hfu", "hfu", "1", "MFU with recomputation counted",
     [](R r, I i) -> FieldValue { return stepped(r, i, step(r, i).hfu); }},
    {FieldGroup::step, "model_flops", "model_flops", "FLOP", "per step, all GPUs",
     [](R r, I i) -> FieldValue { return stepped(r, i, step(r, i).model_flops); }},
    {FieldGroup::step, "hardware_flops", "hardware_flops", "FLOP", "model FLOPs plus recomputation",
     [](R r, I i) -> FieldValue { return stepped(r, i, step(r, i).hardware_flops); }},
    {FieldGroup::step, "compute_s", "", "s", "a rank's compute stream busy (HDF5: breakdown)",
     [](R r, I i) -> FieldValue { return step(r, i).breakdown.compute_s; }},
    {FieldGroup::step, "exposed_comm_s", "", "s", "communication while compute was idle",
     [](R r, I i) -> FieldValue { return step(r, i).breakdown.exposed_comm_s; }},
    {FieldGroup::step, "exposed_dp_s", "", "s",
     "of which data-parallel gradient reductions and parameter gathers",
     [](R r, I i) -> FieldValue { return step(r, i).breakdown.exposed_dp_s; }},
    {FieldGroup::step, "exposed_tp_s", "", "s", "of which tensor-parallel collectives",
     [](R r, I i) -> FieldValue { return step(r, i).breakdown.exposed_tp_s; }},
    {FieldGroup::step, "exposed_cp_s", "", "s",
     "of which context-parallel exchanges (ring attention's, Ulysses' all-to-alls)",
     [](R r, I i) -> FieldValue { return step(r, i).breakdown.exposed_cp_s; }},
    {FieldGroup::step, "exposed_ep_s", "", "s", "of which expert-parallel all-to-alls and gathers",
     [](R r, I i) -> FieldValue { return step(r, i).breakdown.exposed_ep_s; }},
    {FieldGroup::step, "exposed_pp_s", "", "s", "of which pipeline transfers",
     [](R r, I i) -> FieldValue { return step(r, i).breakdown.exposed_pp_s; }},
    {FieldGroup::step, "exposed_host_s", "", "s", "of which optimizer offload's PCIe copies",
     [](R r, I i) -> FieldValue { return step(r, i).breakdown.exposed_host_s; }},
    {FieldGroup::step, "idle_s", "", "s", "neither (bubbles, waits, latency)",
     [](R r, I i) -> FieldValue { return step(r, i).breakdown.idle_s; }},
    {FieldGroup::step, "largest_share", "largest_share", "",
     "what holds the step most: \"compute\", \"exposed DP comm\", \"exposed TP comm\", \"exposed "
     "CP comm\", \"exposed EP comm\", "
     "\"exposed PP comm\", \"exposed offload copies\" or \"idle (bubble, waits)\" (HDF5: \"\" "
     "when not simulated)",
     [](R r, I i) -> FieldValue {
       return at(r, i).outcome.simulated ? largest_share(step(r, i).breakdown) : std::string();
     }},
    {FieldGroup::step, "comm_bytes_per_gpu", "comm_bytes_per_gpu", "bytes",
     "sent by a GPU in a step, averaged over the GPUs",
     [](R r, I i) -> FieldValue { return stepped(r, i, step(r, i).comm_bytes_per_gpu); }},
    {FieldGroup::step, "events", "", "", "engine events the replay processed",
     [](R r, I i) -> FieldValue { return step(r, i).events; }},
    {FieldGroup::step, "replayed_ranks", "replayed_ranks", "",
     "ranks replayed: all, or folded one replica's or one rank a stage (HDF5: 0 when not "
     "simulated)",
     [](R r, I i) -> FieldValue {
       return at(r, i).outcome.simulated ? step(r, i).replayed_ranks : 0;
     }},
    // ---- its memory
    {FieldGroup::memory, "total_bytes", "memory_total_bytes", "bytes",
     "per GPU at the peak, as the caching allocator reserves it (its peak reserved memory)",
     [](R r, I i) -> FieldValue { return memory(r, i).total_bytes; }},
    {FieldGroup::memory, "allocated_bytes", "memory_allocated_bytes", "bytes",
     "per GPU at the peak, as the framework allocates it: total_bytes less the allocator's "
     "fragmentation (its peak allocated memory)",
     [](R r, I i) -> FieldValue { return memory(r, i).allocated_bytes(); }},
    {FieldGroup::memory, "peak_moment", "memory_peak_moment", "",
     "when in the step the peak falls: \"all along\" the activations' peak, \"the loss's "
     "backward\" (its logits' tensors) or \"a recomputed layer's backward\"",
     [](R r, I i) -> FieldValue { return std::string(to_string(memory(r, i).peak)); }},
    {FieldGroup::memory, "capacity_bytes", "memory_capacity_bytes", "bytes",
     "what the device reports", [](R r, I i) -> FieldValue { return memory(r, i).capacity_bytes; }},
    {FieldGroup::memory, "headroom_fraction", "headroom_fraction", "1",
     "1 - total / capacity (practitioners keep 0.15-0.30)",
     [](R r, I i) -> FieldValue { return memory(r, i).headroom_fraction(); }},
    {FieldGroup::memory, "fits", "", "", "whether it fits the GPU (and the host, offloaded)",
     [](R r, I i) -> FieldValue { return memory(r, i).fits(); }},
    {FieldGroup::memory, "host_bytes_per_rank", "host_memory_per_rank_bytes", "bytes",
     "offloaded optimizer states of a rank in host memory (0 without offload)",
     [](R r, I i) -> FieldValue { return memory(r, i).host_bytes_per_rank; }},
    {FieldGroup::memory, "host_bytes_per_node", "host_memory_per_node_bytes", "bytes",
     "of all a node's ranks",
     [](R r, I i) -> FieldValue { return memory(r, i).host_bytes_per_node; }},
    {FieldGroup::memory, "host_capacity_bytes", "host_memory_capacity_bytes", "bytes",
     "the node's host memory (0 where its preset does not say)",
     [](R r, I i) -> FieldValue { return memory(r, i).host_capacity_bytes; }},
    // ---- its run
    {FieldGroup::run, "interruptions_preset", "interruptions_preset", "",
     "the interruption rates' preset, or \"listed\"",
     [](R r, I i) -> FieldValue { return at(r, i).run->interruptions; }},
    {FieldGroup::run, "steps", "steps", "", "optimizer steps to train",
     [](R r, I i) -> FieldValue { return job(r, i).steps; }},
    {FieldGroup::run, "step_s", "step_s", "s", "a step on the healthy cluster, jitter included",
     [](R r, I i) -> FieldValue { return job(r, i).step_s; }},
    {FieldGroup::run, "jitter_factor", "jitter_factor", "1", "what jitter made of the step",
     [](R r, I i) -> FieldValue { return job(r, i).jitter_factor; }},
    {FieldGroup::run, "checkpoint_write", "checkpoint_write", "", "blocking, async or in_memory",
     [](R r, I i) -> FieldValue { return std::string(to_string(job(r, i).write)); }},
    {FieldGroup::run, "peer_copy_s", "peer_copy_s", "s", "in memory: a node's share to its peer",
     [](R r, I i) -> FieldValue { return job(r, i).peer_copy_s; }},
    {FieldGroup::run, "peer_restore_s", "peer_restore_s", "s", "in memory: reading it back",
     [](R r, I i) -> FieldValue { return job(r, i).peer_restore_s; }},
    {FieldGroup::run, "persist_every_s", "persist_every_s", "s",
     "in memory: training between writes to storage",
     [](R r, I i) -> FieldValue { return job(r, i).persist_every_s; }},
    {FieldGroup::run, "checkpoint_write_s", "checkpoint_write_s", "s", "a checkpoint to storage",
     [](R r, I i) -> FieldValue { return job(r, i).checkpoint_write_s; }},
    {FieldGroup::run, "checkpoint_copy_s", "checkpoint_copy_s", "s",
     "async, in memory: the device-to-host copy training stops for",
     [](R r, I i) -> FieldValue { return job(r, i).checkpoint_copy_s; }},
    {FieldGroup::run, "restore_s", "restore_s", "s", "reading the last checkpoint back",
     [](R r, I i) -> FieldValue { return job(r, i).restore_s; }},
    {FieldGroup::run, "detection_s", "detection_s", "s",
     "an interruption to the job declared failed",
     [](R r, I i) -> FieldValue { return job(r, i).detection_s; }},
    {FieldGroup::run, "restart_s", "restart_s", "s", "rescheduling and relaunching",
     [](R r, I i) -> FieldValue { return job(r, i).restart_s; }},
    {FieldGroup::run, "node_repair_s", "node_repair_s", "s", "a node out after a hardware fault",
     [](R r, I i) -> FieldValue { return job(r, i).node_repair_s; }},
    {FieldGroup::run, "hot_spares", "hot_spares", "", "idle nodes paid for, replacing one at once",
     [](R r, I i) -> FieldValue { return job(r, i).hot_spares; }},
    {FieldGroup::run, "when_short", "when_short", "", "wait or shrink, short of nodes",
     [](R r, I i) -> FieldValue {
       return std::string(job(r, i).when_short == ShortagePolicy::shrink ? "shrink" : "wait");
     }},
    {FieldGroup::run, "replicas", "replicas", "", "data-parallel replicas (what shrinking drops)",
     [](R r, I i) -> FieldValue { return job(r, i).replicas; }},
    {FieldGroup::run, "shrunk_step_s", "shrunk_step_s", "s", "a step one replica short",
     [](R r, I i) -> FieldValue { return job(r, i).shrunk_step_s; }},
    {FieldGroup::run, "paid_gpus", "paid_gpus", "", "GPUs paid for, spares' included",
     [](R r, I i) -> FieldValue { return paid_gpus(job(r, i)); }},
    {FieldGroup::run, "checkpoint_interval_steps", "checkpoint_interval_steps", "",
     "steps between checkpoints", [](R r, I i) -> FieldValue { return mc(r, i).interval_steps; }},
    {FieldGroup::run, "mtbf_s", "mtbf_s", "s",
     "the cluster's mean time between interruptions (JSON: null, HDF5: inf when none)",
     [](R r, I i) -> FieldValue { return mc(r, i).mtbf_s; }},
    {FieldGroup::run, "usd_per_gpu_hour", "usd_per_gpu_hour", "USD/h", "the price (NaN: none)",
     [](R r, I i) -> FieldValue { return priced(r, i) ? job(r, i).usd_per_gpu_hour : kNan; }},
    {FieldGroup::run, "replications", "", "", "Monte Carlo replications (HDF5: the datasets' rows)",
     [](R r, I i) -> FieldValue { return std::uint64_t{mc(r, i).replications.size()}; }},
    {FieldGroup::run, "useful_s", "useful_s", "s", "training the run needs, nothing failing",
     [](R r, I i) -> FieldValue { return mc(r, i).useful_s; }},
    {FieldGroup::run, "wall_s", "wall_s", "s", "time to train",
     [](R r, I i) -> FieldValue { return mc(r, i).wall_s; }},
    {FieldGroup::run, "goodput", "goodput", "1", "useful training / wall time",
     [](R r, I i) -> FieldValue { return mc(r, i).goodput; }},
    {FieldGroup::run, "interruptions", "interruptions", "", "interruptions in a run",
     [](R r, I i) -> FieldValue { return mc(r, i).interruptions; }},
    {FieldGroup::run, "lost_gpu_hours", "lost_gpu_hours", "GPU-h",
     "paid for and not spent on useful training",
     [](R r, I i) -> FieldValue { return mc(r, i).lost_gpu_hours; }},
    {FieldGroup::run, "node_wait_s", "node_wait_s", "s", "waiting for nodes",
     [](R r, I i) -> FieldValue { return mc(r, i).node_wait_s; }},
    {FieldGroup::run, "shrunk_s", "shrunk_s", "s", "trained a replica short",
     [](R r, I i) -> FieldValue { return mc(r, i).shrunk_s; }},
    {FieldGroup::run, "regrows", "regrows", "", "back to full size after shrinking",
     [](R r, I i) -> FieldValue { return mc(r, i).regrows; }},
    {FieldGroup::run, "evict_degraded_after_s", "evict_degraded_after_s", "s",
     "degraded nodes evicted after this (NaN: kept)",
     [](R r, I i) -> FieldValue { return job(r, i).evict_degraded_after_s.value_or(kNan); }},
    {FieldGroup::run, "degraded_s", "degraded_s", "s", "trained on degraded hardware",
     [](R r, I i) -> FieldValue { return mc(r, i).degraded_s; }},
    {FieldGroup::run, "evictions", "evictions", "", "degraded nodes evicted",
     [](R r, I i) -> FieldValue { return mc(r, i).evictions; }},
    {FieldGroup::run, "memory_lost", "memory_lost", "", "in memory: restarts from storage",
     [](R r, I i) -> FieldValue { return mc(r, i).memory_lost; }},
    {FieldGroup::run, "cost_usd", "cost_usd", "USD", "cost to train (absent without a price)",
     [](R r, I i) -> FieldValue { return if_priced(r, i, mc(r, i).cost_usd); }},
    {FieldGroup::run, "usd_per_million_tokens", "usd_per_million_tokens", "USD",
     "cost per million tokens trained",
     [](R r, I i) -> FieldValue { return if_priced(r, i, mc(r, i).usd_per_million_tokens); }},
    {FieldGroup::run, "usd_per_checkpoint", "usd_per_checkpoint", "USD",
     "training stood still per scheduled checkpoint, priced",
     [](R r, I i) -> FieldValue { return if_priced(r, i, mc(r, i).usd_per_checkpoint); }},
    // ---- its spot capacity
    {FieldGroup::spot, "preemptions_per_node_hour", "spot_preemptions_per_node_hour", "1/h",
     "the assumed rate (0 for a trace)",
     [](R r, I i) -> FieldValue { return spot(r, i).preemptions_per_node_hour; }},
    {FieldGroup::spot, "source", "spot_source", "", "where the rate or trace comes from",
     [](R r, I i) -> FieldValue { return spot(r, i).source; }},
    {FieldGroup::spot, "notice_s", "spot_notice_s", "s", "warning before a preemption",
     [](R r, I i) -> FieldValue { return spot(r, i).notice_s; }},
    {FieldGroup::spot, "capacity_return_s", "spot_capacity_return_s", "s",
     "until preempted capacity comes back",
     [](R r, I i) -> FieldValue { return spot(r, i).capacity_return_s; }},
    {FieldGroup::spot, "trace_preemptions", "spot_trace_preemptions", "",
     "preemptions of a trace (0 for a rate)",
     [](R r, I i) -> FieldValue { return std::uint64_t{spot(r, i).trace_s.size()}; }},
    {FieldGroup::spot, "preemptions", "preemptions", "", "preemptions in a run",
     [](R r, I i) -> FieldValue { return mc(r, i).preemptions; }},
};

const ResultTable kTables[] = {
    {FieldGroup::scenario, "partial",
     "partial, stopped_by, variants_planned, not_finished, left_out",
     "stopped_by, variants_planned, variants_finished (JSON), not_finished, left_out",
     "what a stop left undone (JSON: null when nothing; HDF5: root attributes, partial 0 or 1, "
     "the lists as text joined by \"; \")"},
    {FieldGroup::plan, "plan.leanest", "", "name, layout, memory",
     "`fleetsim plan` where nothing fits: the layout needing the least memory per GPU"},
    {FieldGroup::variant, "layout", "", "one key per layout dimension",
     "the layout (HDF5: a variant attribute each; see the layout's dimensions below)"},
    {FieldGroup::step, "", "breakdown", "component (string), seconds",
     "9 rows: compute, exposed_comm, idle, exposed_dp, exposed_tp, exposed_cp, exposed_ep, "
     "exposed_pp, exposed_host (NaN seconds when not simulated)"},
    {FieldGroup::memory, "memory.items", "memory", "name (HDF5: item), bytes, basis, moment",
     "one row per item of the memory per GPU, with how it was counted and when it is held (only "
     "those held all along or at the peak's moment count in total_bytes)"},
    {FieldGroup::variant, "links", "links", "name, kind, capacity_bytes_per_s, bytes, utilisation",
     "every link that carried traffic (with --summary, JSON sums them by kind: kind, links, "
     "bytes, max_utilisation)"},
    {FieldGroup::variant, "warnings", "warnings", "text", "the variant's warnings"},
    {FieldGroup::variant, "", "profile", "key, value, sigma, provenance",
     "the GPU profile's entries the variant read (the memory check's capacity, the step's "
     "kernel, attention, FP8 and link entries), as calibrated: value, one-sigma uncertainty and "
     "where it comes from"},
    {FieldGroup::variant, "swept", "", "path: value",
     "a sweep point's swept values (HDF5: /summary's columns sweep.<path>)"},
    {FieldGroup::variant, "scaling_efficiency_in_sweep", "", "number or null",
     "a sweep point's tokens/s per GPU over its group's smallest fitting point's (/summary's "
     "scaling_efficiency in HDF5)"},
    {FieldGroup::run, "run.causes", "", "cause, per_gpu_day, source, nodes_out",
     "the interruption causes and their rates"},
    {FieldGroup::run, "run.degradations", "", "cause, slows, fraction, per_gpu_day, source, step_s",
     "degraded hardware and its step"},
    {FieldGroup::run, "",
     "run/wall_s, interruptions, checkpoints, lost_training_s, node_wait_s, "
     "cost_usd",
     "one number a replication", "each replication's outcome, in replication order"},
    {FieldGroup::variant, "attribution", "attribution",
     "parts: factor, step_time_s, wall_s_mean, cost_usd_mean",
     "--attribute: each factor's Shapley share of the difference from the first variant"},
    {FieldGroup::variant, "measured", "measured",
     "source; metrics: metric, basis, measured, predicted, error (HDF5: the dataset's rows, "
     "the source as measured_source)",
     "the scenario's measured: block beside the simulation, each metric on its source's terms "
     "(basis: the FLOP convention and peak) in the unit its name says (tokens/s a GPU, s, "
     "TFLOP/s a GPU, a fraction, bytes); error = predicted / measured - 1; predicted and error "
     "null (NaN) for the step's metrics where the layout does not fit (JSON: absent without a "
     "measured: block)"},
    {FieldGroup::variant, "sensitivity", "sensitivity",
     "intervals: metric, nominal, low, median, high; inputs: input, value, sigma, swings; "
     "samples",
     "--sensitivity N: the 90% prediction interval and the inputs that move it most"},
};

}  // namespace

std::span<const ResultGroup> result_groups() {
  return kGroups;
}
std::span<const ResultField> result_fields() {
  return kFields;
}
std::span<const ResultTable> result_tables() {
  return kTables;
}

const ResultField& result_field(FieldGroup group, std::string_view name) {
  const auto* field =
      std::find_if(std::begin(kFields), std::end(kFields), [&](const ResultField& f) {
        return f.group == group && (f.name.empty() ? f.hdf5 : f.name) == name;
      });
  if (field == std::end(kFields)) {
    throw std::logic_error("no result field " + std::string(name) + " is registered");
  }
  return *field;
}

bool in_json(FieldGroup group, const VariantReport& variant) {
  switch (group) {
    case FieldGroup::step: return variant.outcome.simulated;
    case FieldGroup::run: return variant.job_result.has_value();
    case FieldGroup::spot: return variant.job_result.has_value() && variant.job->spot.has_value();
    default: return true;
  }
}

bool in_hdf5(FieldGroup group, const VariantReport& variant) {
  return group == FieldGroup::step || in_json(group, variant);
}

namespace {

std::string code(std::string_view text) {
  return text.empty() ? std::string("—") : "`" + std::string(text) + "`";
}

}  // namespace

std::string render_results_schema() {
  std::string page =
      "# Results schema\n\n"
      "<!-- Generated by fleetsim_docs from sim/report/result_fields.cpp and "
      "workloads/layout/dimensions.cpp: edit those, not this page. -->\n\n"
      "`fleetsim run --json` prints one object: `scenario`, `partial` (null, or what a stop "
      "left out), `variants` (one object each, in the scenario's order) and, from `fleetsim "
      "plan`, `plan`. `-o results.h5` writes the same fields: the scenario's and the plan's "
      "as root attributes, each variant as the group `/variants/<name>` (its name in ASCII "
      "letters, digits, `.`, `-` and `_`, each run of other characters one `_`, `_<index>` "
      "added where names then collide) with its fields as attributes and its tables as datasets, "
      "its run "
      "as the subgroup `run`.\n\n"
      "`/summary` is the table to load first: one row per variant (a sweep's point, a plan's "
      "layout), a column per field below (the HDF5 name; the JSON key where HDF5 has none; "
      "run and spot fields prefixed `run_`; a summary as its five columns), the layout's "
      "dimensions, and in a sweep the swept values (columns `sweep.<path>`, numbers where "
      "every point's value is one, listed in the attribute `swept`) and "
      "`scaling_efficiency` (tokens/s per GPU over the smallest point of the same series). A "
      "field no variant has is left out. Its attributes `units` and `descriptions` hold each "
      "column's, in order. Text is a UTF-8 string (empty where absent), every other column a "
      "double (NaN where absent; flags 0 or 1). `--csv` on `run`, `sweep` and `plan` prints the "
      "same table (flags `true`/`false`, absent cells empty); on `collective` a line per "
      "message size, its columns `" +
      std::string(kCollectiveCsvColumns) +
      "`. `tools/python/fleetsim_results.py` loads any result file into tables.\n\n"
      "Strings are UTF-8, numbers IEEE 754 doubles unless said, flags 0 or 1 in HDF5. A "
      "quantity that does not exist (no baseline, no price, a step that was not simulated) is "
      "null in JSON and NaN in HDF5. A Monte Carlo summary is an object `{mean, "
      "ci99_half_width, p50, p90, p99}` in JSON and the attributes `<name>_mean`, "
      "`<name>_ci99_half_width`, `<name>_p50`, `<name>_p90`, `<name>_p99` in HDF5.\n";
  for (const ResultGroup& group : kGroups) {
    page += "\n## " + std::string(group.json.empty() ? "variant" : group.json) + "\n\n" +
            std::string(group.description) + ". HDF5: " + std::string(group.hdf5) +
            ".\n\n| JSON | HDF5 | unit | meaning |\n| --- | --- | --- | --- |\n";
    for (const ResultField& field : kFields) {
      if (field.group != group.group) continue;
      page += "| " + code(field.name) + " | " + code(field.hdf5) + " | " + std::string(field.unit) +
              " | " + std::string(field.description) + " |\n";
    }
  }
  page +=
      "\n## Tables\n\n| of | JSON | HDF5 | columns | meaning |\n"
      "| --- | --- | --- | --- | --- |\n";
  for (const ResultTable& table : kTables) {
    const auto of = std::find_if(std::begin(kGroups), std::end(kGroups),
                                 [&](const ResultGroup& g) { return g.group == table.group; });
    page += "| " + std::string(of->json.empty() ? "variant" : of->json) + " | " + code(table.json) +
            " | " + code(table.hdf5) + " | " + std::string(table.columns) + " | " +
            std::string(table.description) + " |\n";
  }
  page +=
      "\n## Layout\n\nA variant's `layout` object (HDF5: variant attributes), one key per "
      "dimension (workloads/layout/dimensions.cpp); the scenario key is the one `layout:` "
      "takes.\n\n| output | scenario key | default | meaning |\n"
      "| --- | --- | --- | --- |\n";
  for (const LayoutDimension& dimension : layout_dimensions()) {
    page += "| " + code(dimension.output) + " | " + code(dimension.key) + " | " +
            code(default_text(dimension)) + " | " + std::string(dimension.description) + " |\n";
  }
  return page;
}

}  // namespace fleetsim
