#include "workloads/memory_model.hpp"

#include <algorithm>
#include <string>

#include "workloads/layout/sharding.hpp"
#include "workloads/lora_ops.hpp"
#include "workloads/pipeline_schedule.hpp"
#include "workloads/precision.hpp"
#include "workloads/task_graph.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

// Mixed-precision training state per parameter, before sharding (Megatron-LM's recipe, 18 B):
// BF16 weights, FP32 main gradients, FP32 master weights and two FP32 Adam moments (8-bit
// moments: see optimizer_state_bytes_per_parameter). A gradient buffer every replica keeps
// whole is in the dtype it is reduced in (Megatron-Core's DDP: FP32 with grad_reduce_in_fp32,
// else the parameters' BF16, group_params_for_buffers in param_and_grad_buffer.py; PyTorch's
// DDP: the parameters' dtype); sharded gradients are the FP32 shard's (FSDP, ZeRO-2).
constexpr double kWeightBytes = kBf16Bytes;
constexpr double kMainGradBytes = kFp32Bytes;

// Assumptions, labelled as such in the report.
constexpr double kFrameworkOverheadBytes = 1.0e9;  // CUDA context, cuBLAS/cuDNN workspaces
constexpr double kFragmentation = 0.05;            // of the dynamic (per-step) allocations

// What a rank gathers of each unit (fsdp_unit_parameters): under expert parallelism over `ep`
// ranks an experts' layer's (or module's) experts / ep of its experts.
std::vector<double> rank_unit_parameters(const ModelSpec& model, int ep) {
  std::vector<double> units = fsdp_unit_parameters(model);
  const double absent = layer_expert_parameters(model) * (ep - 1) / ep;
  for (std::size_t u = 1; absent > 0 && u + 1 < units.size(); ++u) {
    const int layer = static_cast<int>(u) - 1;
    const bool routed =
        layer < model.layers ? model.layer_has_experts(layer) : model.mtp_layer_has_experts();
    if (routed) units[u] -= absent;
  }
  return units;
}

// The most bytes FSDP holds gathered at once: kFsdpUnitsGathered consecutive units, in BF16,
// or under QLoRA a decoder layer's base in NF4 beside its BF16 adapters.
double peak_gathered_bytes(const ModelSpec& model, const TrainingSpec& training, int ep) {
  std::vector<double> units = rank_unit_parameters(model, ep);
  const bool quantized = training.lora && training.lora->quantized_base;
  const double adapters = lora_parameters_per_layer(model, training);
  for (std::size_t u = 0; u < units.size(); ++u) {
    const bool layer = u > 0 && u + 1 < units.size();
    units[u] = layer && quantized ? weight_gather_bytes(units[u] + adapters, 0, units[u])
                                  : weight_gather_bytes(units[u] + (layer ? adapters : 0), 0);
  }
  const std::size_t window = std::min<std::size_t>(kFsdpUnitsGathered, units.size());
  double peak = 0;
  for (std::size_t first = 0; first + window <= units.size(); ++first) {
    double sum = 0;
    for (std::size_t u = first; u < first + window; ++u) sum += units[u];
    peak = std::max(peak, sum);
  }
  return peak;
}

// Without the FP8 weight cache each projection's FP8 cast of a BF16 weight is saved for its
// data-gradient GEMM (Transformer Engine's save_for_backward of weight_fp8), a layer's from its
// forward to its backward; FP8 primary weights are their own cast.
double saved_fp8_weight_bytes(const ModelSpec& model, const TrainingSpec& training,
                              const ParallelPlan& plan) {
  const bool recast =
      training.precision == Precision::fp8 && !training.fp8_weight_cache && !training.fp8_params;
  return recast ? kFp8Bytes * rank_layer_projection_weights(model, plan) : 0.0;
}

double largest_unit_parameters(const ModelSpec& model, int ep) {
  const std::vector<double> units = rank_unit_parameters(model, ep);
  return *std::max_element(units.begin(), units.end());
}

// The weights of a decoder layer's largest projection GEMM, before any split: the gate and up
// (or up) projection, or QKV (under latent attention the largest of its up projections and the
// output projection).
double largest_projection_weights(const ModelSpec& model) {
  const double h = model.hidden;
  const double ffn =
      model.has_dense_layers() ? std::max(model.ffn, model.dense_layer_model().ffn) : model.ffn;
  const double mlp = (model.gated_mlp() ? 2.0 : 1.0) * ffn * h;
  if (!model.latent_attention()) {
    return std::max(mlp, (model.query_width() + model.key_width() + model.value_width()) * h);
  }
  return std::max({mlp, model.query_projection_input() * model.query_width(),
                   model.kv_lora_rank * model.latent_key_value_width(),
                   model.attention_width() * h});
}

// The largest projection a rank holds: any of a layer's split over tp, or an expert's over
// the experts' own tensor parallelism (whole under expert_tp 1).
double rank_largest_projection_weights(const ModelSpec& model, const ParallelPlan& plan) {
  const double split = largest_projection_weights(model) / plan.tp;
  if (!model.mixture_of_experts()) return split;
  const double expert = (model.gated_mlp() ? 2.0 : 1.0) * model.ffn * model.hidden;
  return std::max(split, expert / plan.experts_split());
}

}  // namespace

double stage_parameters(const ModelSpec& model, const ParallelPlan& plan, int stage) {
  const std::vector<double> units = fsdp_unit_parameters(model);
  const int virtual_stages = plan.pp * plan.vpp;
  double sum = 0;
  for (int v = stage; v < virtual_stages; v += plan.pp) {
    for (const std::size_t index : virtual_stage_units(model, virtual_stages, v)) {
      sum += units[index];
      if (index == units.size() - 1) sum += embedding_copy_parameters(model, plan.pp);
    }
  }
  return sum;
}

RankParameters rank_parameters(const ModelSpec& model, const ParallelPlan& plan, int stage) {
  // (Latent attention's down projections are whole on every tensor-parallel rank.)
  const double stage_total = tensor_rank_layer_parameters(
      model, stage_parameters(model, plan, stage), stage_layers(model, plan, stage), plan.tp);
  if (plan.ep == 1) return {stage_total, 0.0};
  // Each of the rank's experts / ep experts split over the experts' own tensor parallelism.
  const double experts = stage_expert_layers(model, plan, stage) * layer_expert_parameters(model);
  return {stage_total - experts / plan.tp, experts / plan.experts_split() / plan.ep};
}

InFlight in_flight(const ModelSpec& model, const TrainingSpec& training, const ParallelPlan& plan,
                   int stage, double recomputed_share) {
  const int m = training.global_batch / (training.micro_batch * plan.dp);
  const int virtual_stages = plan.pp * plan.vpp;
  // Each of the stage's chunks: its layers, and of those the ones rerun.
  std::vector<int> chunk_layers(plan.vpp), chunk_recomputed(plan.vpp);
  InFlight live, peak;
  peak.every_layer_recomputed = plan.recompute == Recompute::full;
  for (int c = 0; c < plan.vpp; ++c) {
    // (A multi-token prediction module keeps a layer's activations.)
    const int layers = virtual_stage_slots(model, virtual_stages, stage + c * plan.pp).count();
    chunk_layers[c] = layers;
    chunk_recomputed[c] = plan.recompute != Recompute::full ? 0
                          : plan.recompute_layers == 0      ? layers
                                                       : std::min(plan.recompute_layers, layers);
    if (chunk_recomputed[c] < layers) peak.every_layer_recomputed = false;
  }
  live.every_layer_recomputed = peak.every_layer_recomputed;
  const auto held = [recomputed_share](const InFlight& in) {
    return in.layers - in.recomputed_layers + recomputed_share * in.recomputed_layers;
  };
  const std::vector<Pass> schedule = pipeline_schedule(plan, stage, m);
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    const Pass& pass = schedule[k];
    if (pass.merged) {
      // A forward merged with the backward after it (ep_comm_overlap) saves its layer j as the
      // backward frees its layer L - 1 - j (Megatron-Core releases a layer's tensors at its
      // backward): one layer more at once than before the pair, or the forward's layers beyond
      // the backward's, whichever is more. (Full recomputation is not merged: no rerun layers.)
      const int added = chunk_layers[pass.chunk] - chunk_layers[schedule[k + 1].chunk];
      InFlight during = live;
      during.passes += 1;
      during.layers += std::max(1, added);
      if (held(during) > held(peak)) peak = during;
      live.layers += added;
      ++k;
      continue;
    }
    const int sign = pass.forward ? 1 : -1;
    live.passes += sign;
    live.layers += sign * chunk_layers[pass.chunk];
    live.recomputed_layers += sign * chunk_recomputed[pass.chunk];
    if (held(live) > held(peak)) peak = live;
  }
  return peak;
}

namespace {

// What the loss holds at its peak, a logit at a time, and how that was counted.
struct LossMemory {
  double bytes_per_logit;
  std::string basis;
};
LossMemory loss_memory(CrossEntropy cross_entropy, int tp) {
  switch (cross_entropy) {
    case CrossEntropy::in_place:
      return {kBf16Bytes, "BF16 logits, their gradient written over them"};
    case CrossEntropy::compiled:
      return {2 * kBf16Bytes,
              "BF16 logits kept for backward and their BF16 gradient (the loss compiled by "
              "torch.compile)"};
    case CrossEntropy::log_softmax:
      if (runs_loss_parallel(cross_entropy, tp)) {
        return {4 * kFp32Bytes,
                "FP32 log-probabilities kept for backward, beside the NLL's gradient, its sum "
                "with their exp and the product (PyTorch's loss_parallel)"};
      }
      return {3 * kFp32Bytes,
              "FP32 log-probabilities kept for backward, beside the NLL's gradient and the "
              "log-softmax's (PyTorch's F.cross_entropy)"};
    case CrossEntropy::unfused:
    case CrossEntropy::fused: break;
  }
  return {kFp32Bytes + kBf16Bytes, "FP32 logits (their gradient in place) and the BF16 ones"};
}

MemoryBreakdown stage_memory(const ModelSpec& model, const TrainingSpec& training,
                             const ParallelPlan& plan, const MemoryDevice& device, int stage) {
  // A rank holds its tensor-parallel share of its stage's parameters (norms and a router, which
  // Megatron replicates, counted split too: a rounding error) and of every activation:
  // sequence parallelism shards what tensor parallelism does not split (see
  // decoder_layer_saved_bytes_per_token for what a mixture of experts, or a layout without
  // sequence parallelism, keeps whole).
  const double tp = plan.tp;
  // Under LoRA the stage's layers also hold their adapters, and only the adapters have
  // gradients and optimizer states.
  const double layers = stage_layers(model, plan, stage);
  const double adapters = lora_parameters_per_layer(model, training) * layers / tp;
  const RankParameters held = rank_parameters(model, plan, stage);
  const double p = held.total() + adapters;
  const double trained = training.lora ? adapters : p;
  // What the optimizer updates: ZeRO's shard, experts sharded over the replicas holding them.
  const Sharding sharding(plan);
  const double updated = training.lora ? sharding.optimizer_parameters(adapters, 0.0)
                                       : sharding.optimizer_parameters(held.dense, held.experts);
  const std::string which = training.lora ? "LoRA adapters only, " : "";
  // Gradients and ZeRO shards split over dp x cp (the cp ranks hold the same parameters).
  const std::string over_dp = plan.cp > 1 ? "over dp x cp" : "over dp";
  // An expert's sharded state: over the ranks holding it (one: whole).
  const int expert_holders = plan.expert_gradient_ranks();
  const std::string experts_sharded =
      plan.ep <= 1 ? ""
      : expert_holders == 1
          ? ", experts whole (one rank holds each)"
          : ", experts over the " + std::to_string(expert_holders) + " ranks holding each";
  // The rank's tokens of a micro-batch: its share of the sequence under context parallelism.
  const double tokens = static_cast<double>(training.micro_batch) * training.seq_len / plan.cp;
  const std::string per_param = " bytes/param";

  MemoryBreakdown memory;
  memory.capacity_bytes = device.capacity_bytes;
  // Items held all along count in the total at once; those held at one moment only are summed
  // by moment, and the larger sum joins the total at the end (the peak's moment).
  double at_moment[3] = {0, 0, 0};
  auto add = [&memory, &at_moment](std::string name, double bytes, std::string basis,
                                   MemoryMoment moment = MemoryMoment::all_along) {
    memory.items.push_back(MemoryItem{std::move(name), bytes, std::move(basis), moment});
    if (moment == MemoryMoment::all_along) {
      memory.total_bytes += bytes;
    } else {
      at_moment[static_cast<int>(moment)] += bytes;
    }
  };

  const std::string split = tp > 1 ? "split over tp, " : "";
  // The share of them a rank keeps between ZeRO 3's gathers: dense parameters split over its
  // data group, experts over the replicas holding them; all of them otherwise.
  const double weight_share = sharding.parameters_sharded() && p > 0
                                  ? ((held.dense + adapters) / sharding.weight_shards() +
                                     held.experts / sharding.expert_ranks()) /
                                        p
                                  : 1.0;
  // QLoRA keeps the stage's decoder layers in 4-bit NF4 (norms too: a rounding error).
  const bool quantized = training.lora && training.lora->quantized_base;
  const double quantized_params = quantized ? decoder_layer_parameters(model) * layers / tp : 0.0;
  // The stage's layers of each kind: a mixture of experts' experts' layers and the dense ones
  // among them (all of a dense model's), each kind a model of its own (dense_layer_model).
  const ModelSpec dense_kind = model.has_dense_layers() ? model.dense_layer_model() : model;
  const double expert_layers =
      model.mixture_of_experts() ? stage_expert_layers(model, plan, stage) : 0.0;
  const double expert_share = layers > 0 ? expert_layers / layers : 0.0;
  // A figure of one layer, over the stage's layers on average, or its largest.
  const auto mean_layer = [&](const auto& of) {
    return expert_share * of(model) + (1 - expert_share) * of(dense_kind);
  };
  const auto largest_layer = [&](const auto& of) {
    return std::max(expert_layers > 0 ? of(model) : 0.0,
                    expert_layers < layers ? of(dense_kind) : 0.0);
  };
  // A layer's projection weights (FP8 GEMM operands under precision fp8) on this rank.
  const auto rank_projections = [&](const ModelSpec& kind) {
    return training.precision == Precision::fp8 ? rank_layer_projection_weights(kind, plan) : 0.0;
  };
  const double layer_projections = largest_layer(rank_projections);
  const double projections =
      training.precision == Precision::fp8 ? stage_projection_weights(model, plan, stage) : 0.0;
  // FP8 primary weights replace their BF16 copies (Megatron-Core's fp8_param).
  const double fp8_weights = training.fp8_params ? projections : 0.0;
  // Where the FP32 shard is the parameter it counts with the optimizer states, as the master
  // weights; a LoRA's frozen base has no master to be, and keeps its shard as it is.
  if (sharding.shard_is_master() && !training.lora) {
    add("weights", 0,
        "none between gathers: each FP32 shard is the parameter, counted with the optimizer "
        "states as the master weights (PyTorch's FSDP)");
  } else {
    add("weights",
        (kWeightBytes * (p - quantized_params - fp8_weights) +
         kNf4BytesPerParameter * quantized_params + kFp8Bytes * fp8_weights) *
            weight_share,
        std::string(quantized ? "decoder layers in 4-bit NF4 with double-quantized scales (4.127 "
                                "bits), adapters, embedding and head BF16, "
                    : training.fp8_params
                        ? "decoder-layer projections in FP8 (fp8_params), the rest BF16, "
                        : "BF16, ") +
            split +
            (sharding.parameters_sharded()  ? "sharded " + over_dp + " (ZeRO-3)"
             : sharding.gathered_for_step() ? "gathered whole for the step (FSDP under a pipeline)"
                                            : std::string("replicated")) +
            (plan.ep > 1 ? ", experts / ep of each experts' layer's (expert parallelism)" +
                               std::string(plan.experts_split() < tp ? ", each whole" : "") +
                               std::string(sharding.parameters_sharded()
                                               ? ", sharded over the replicas holding them"
                                               : "")
                         : ""));
  }
  // Transformer Engine keeps each projection weight cast to FP8 and, where the GPU's FP8 GEMMs
  // take TN only (Hopper, compute capability 12), its transpose (dgrad reads it), refreshed once
  // per step; under ZeRO-3 only for the units gathered at once, freed with them (a per-step
  // allocation). Under FSDP2 (torchao's float8 linears, which lay each GEMM's second FP8 operand
  // out column-major themselves) each weight is cast and transposed as its unit runs: only the
  // units at work hold their copies, under a pipeline too. FP8 primary weights are their own cast:
  // only the transpose, if any, is kept beside them (a Float8Tensor's cached transpose).
  // Without the weight cache (fp8_weight_cache off) the copies of the projection at work alone.
  double fp8_copies = 0;
  const bool fp8_uncached = !training.fp8_weight_cache;
  const bool fp8_per_unit = sharding.parameters_sharded() || plan.fsdp2 || fp8_uncached;
  if (training.precision == Precision::fp8) {
    const bool transposed = plan.fsdp2 || !device.fp8_gemm_any_layout;
    const double copies = (training.fp8_params ? 0 : 1) + (transposed ? 1 : 0);
    fp8_copies = copies * kFp8Bytes *
                 (fp8_uncached   ? rank_largest_projection_weights(model, plan)
                  : fp8_per_unit ? layer_projections * kFsdpUnitsGathered
                                 : projections);
    const std::string in_fp8 = transposed ? "in FP8 and transposed " : "in FP8 ";
    add("FP8 weight copies", fp8_copies,
        fp8_uncached ? "the largest projection weight " + in_fp8 +
                           "as its GEMM runs (fp8_weight_cache off: cast again each micro-batch; "
                           "the cast its data gradient reads is saved with the activations)"
        : training.fp8_params
            ? std::string(transposed ? "each decoder-layer projection weight's FP8 transpose, "
                                       "beside the FP8 weight (Transformer Engine), the stage's "
                                       "layers"
                                     : "none: the FP8 weights are read in either layout")
            : "each decoder-layer projection weight " + in_fp8 +
                  (sharding.parameters_sharded()
                       ? "(Transformer Engine), the units gathered at once"
                   : plan.fsdp2 ? "(PyTorch's float8 linears), the units at work, cast as each runs"
                                : "(Transformer Engine), the stage's layers"));
  }
  const double grad_shards = sharding.gradient_shards();
  if (plan.offload_optimizer && sharding.gradients_sharded()) {
    add("gradients", 0, "offloaded: each reduced shard goes to host memory (ZeRO-Offload)");
  } else {
    // Gradients kept whole (a replica's buffer, FSDP's under a pipeline) are in the reduce
    // dtype. Sharded ones are the FP32 shard's, but beside a BF16 weight shard (bf16_shards:
    // Megatron FSDP's model weight buffer) in the reduce dtype, as its main gradient buffer is
    // (FP32 only with grad_reduce_in_fp32; megatron/core/distributed/custom_fsdp/
    // param_and_grad_buffer.py).
    const bool sharded = sharding.gradients_sharded();
    const bool fp32_shard = sharded && !(sharding.parameters_sharded() && plan.bf16_shards);
    const double bytes = fp32_shard ? kMainGradBytes : training.grad_reduce_bytes;
    // Apex reduce-scatters each bucket into a shard of its own, kept until the step.
    const bool apex = training.optimizer == Optimizer::distributed_fused_adam;
    const double reduced_shard = apex ? training.grad_reduce_bytes * updated : 0.0;
    // Sharded, an expert's gradient is split over the replicas holding the expert.
    const double gradients = sharded && !training.lora
                                 ? held.dense / grad_shards + held.experts / sharding.expert_ranks()
                                 : trained / grad_shards;
    add("gradients", bytes * gradients + reduced_shard,
        std::string(fp32_shard            ? "FP32 main gradients, "
                    : bytes == kFp32Bytes ? "FP32 gradient buffer (the reduce dtype), "
                    : training.precision == Precision::fp16
                        ? "FP16 gradient buffer (the reduce dtype), "
                        : "BF16 gradient buffer (the reduce dtype), ") +
            which + split +
            (sharded ? "sharded " + over_dp + (held.experts > 0 ? experts_sharded : "")
             : sharding.gathered_for_step()
                 ? std::string("accumulated whole until the last micro-batch (FSDP under a "
                               "pipeline)")
                 : std::string("replicated")) +
            (apex ? ", and the reduced shard of each bucket beside it (Apex)" : ""));
  }
  const bool eight_bit = training.optimizer == Optimizer::adam8bit;
  const std::string states_basis =
      std::string(eight_bit ? "FP32 master weights + 8-bit Adam m, v (block scales) = 6.004"
                  : master_weights_as_remainders(training)
                      ? "FP32 master weights as the 16 bits their BF16 parameters lack + Adam "
                        "m, v = 10"
                      : "FP32 master weights + Adam m, v = 12") +
      per_param + ", " + which + split +
      (sharding.optimizer_sharded() ? "sharded " + over_dp + experts_sharded
                                    : std::string("replicated"));
  if (plan.offload_optimizer) {
    add("optimizer states", 0, "offloaded to host memory (ZeRO-Offload): " + states_basis);
    memory.host_bytes_per_rank = (optimizer_state_bytes_held(training) + kMainGradBytes) * updated;
  } else {
    add("optimizer states", optimizer_state_bytes_held(training) * updated, states_basis);
  }

  double dynamic = 0;
  if (fp8_per_unit) dynamic += fp8_copies;
  if (sharding.parameters_sharded()) {
    const double gathered = peak_gathered_bytes(model, training, plan.ep) / tp;
    add("gathered parameters", gathered,
        std::string(quantized ? "the unit computing and the one prefetched, gathered whole "
                                "(FSDP): decoder layers in NF4 (FSDP-QLoRA), the rest BF16"
                              : "BF16 copies of the unit computing and the one prefetched (FSDP)") +
            (tp > 1 ? ", split over tp" : "") +
            (plan.ep > 1 ? ", experts / ep of an experts' layer's" : ""));
    dynamic += gathered;
  }

  const bool sp = plan.sequence_parallel;
  const auto saved = [&](const ModelSpec& kind) { return layer_saved_bytes(kind, training, plan); };
  const double per_layer = mean_layer(saved);
  // A layer's input: its shard under sequence parallelism, else whole on every rank.
  const double boundary = kWeightBytes * model.hidden * tokens / plan.sequence_shards();
  const bool uneven = (model.layers + model.mtp_layers) % (plan.pp * plan.vpp) != 0;
  const InFlight live = in_flight(model, training, plan, stage, boundary / per_layer);
  // Under per_op or selective recomputation the layer in backward holds what it recomputed
  // beside what it kept: all it keeps without recomputation, less what it kept of that (per_op
  // keeps some outputs no other policy keeps).
  // (Of the layer kind whose rebuild is largest.)
  const auto rebuilt = [&](const ModelSpec& kind) {
    const double unrecomputed = decoder_layer_saved_bytes_per_token(
                                    kind, training, Recompute::none, plan.tp, sp, {}, plan.ep,
                                    plan.tp_comm_overlap, plan.ulysses(), plan.experts_split()) *
                                    tokens +
                                saved_fp8_weight_bytes(kind, training, plan);
    return plan.recompute == Recompute::per_op
               ? unrecomputed + per_op_outputs_kept_only(kind, plan.tp, sp) * tokens - saved(kind)
           : plan.recompute == Recompute::selective ? unrecomputed - saved(kind)
                                                    : 0.0;
  };
  const double recomputed = largest_layer(rebuilt);
  // Under full recomputation the layer in backward holds what its rerun forward saved, less its
  // input, which is the kept checkpoint itself (counted with the boundaries). With only the
  // first recompute_layers of a chunk rerun, the backward reaches them after freeing the
  // chunk's kept layers, at least one layer's worth: the peak is the forward's end.
  // Activation offload (one stage, one micro-batch, no recomputation: the job rules): the
  // layers not offloaded keep their saved tensors on the GPU, and so does the last offloaded
  // one while the last layer computes (Transformer Engine waits for each copy to the host a
  // window of layers later, the last at the last layer's end: cpu_offload.py's
  // layer_window_map); the offloaded layers' tensors wait in pinned host memory.
  const int offloaded = std::min(plan.activation_offload_layers, live.layers);
  const int kept_layers = offloaded > 0 ? live.layers - offloaded + 1 : live.layers;
  const double activations =
      plan.recompute == Recompute::full
          ? live.recomputed_layers * boundary + (live.layers - live.recomputed_layers) * per_layer
          : kept_layers * per_layer;
  const double rerun = plan.recompute == Recompute::full
                           ? (live.every_layer_recomputed ? largest_layer(saved) - boundary : 0.0)
                           : recomputed;
  const std::string batches =
      plan.pp == 1
          ? (live.passes == 1 ? std::string("one micro-batch")
                              : std::string("one micro-batch and a layer of the next, whose "
                                            "forward runs merged with its backward "
                                            "(ep_comm_overlap)"))
          : std::to_string(live.passes) +
                (plan.vpp > 1 ? " passes (micro-batch x chunk)" : " micro-batches") +
                " in flight on stage " + std::to_string(stage) + " of " + std::to_string(plan.pp) +
                " (" +
                (plan.vpp > 1 ? "interleaved over " + std::to_string(plan.vpp) + " chunks, " +
                                    std::to_string(live.layers) + " layers' activations"
                              : std::string(to_string(plan.schedule))) +
                (uneven ? ", " + std::to_string(static_cast<int>(layers)) +
                              (model.mtp_layers > 0 && stage == plan.pp - 1
                                   ? " layers and multi-token prediction modules"
                                   : " layers") +
                              " on this stage of an uneven split"
                        : std::string()) +
                ")";
  add(kActivationsItem, activations,
      plan.recompute == Recompute::full && plan.recompute_layers > 0
          ? "the first " + std::to_string(plan.recompute_layers) +
                " layers of each chunk keep their inputs and are recomputed one at a time, the "
                "others keep their saved tensors, " +
                batches
      : plan.recompute == Recompute::full
          ? "layer inputs kept, one layer recomputed at a time, " + batches
      : plan.recompute == Recompute::per_op
          ? "torchtitan's per-op policy: each layer's input, Q, V, attention's output and "
            "every other matmul's kept, the rest of one layer recomputed at a time, " +
                batches
          : std::string("tensors saved for backward (") +
                (training.attention == Attention::flash ? "FlashAttention"
                                                        : "eager attention's probabilities") +
                (plan.recompute == Recompute::selective
                     ? ", less what selective recomputation (" + to_string(plan.recompute_modules) +
                           ") discards"
                     : std::string()) +
                (training.dropout > 0 ? ", dropout masks" : "") +
                (model.mlp == Mlp::swiglu  ? ", SwiGLU"
                 : model.mlp == Mlp::geglu ? ", GeGLU"
                                           : ", GELU") +
                (model.mixture_of_experts()
                     ? ", " + std::to_string(model.experts_per_token) + " of " +
                           std::to_string(model.experts) + " experts per token" +
                           std::string(plan.experts_split() <= 1 ? ""
                                       : training.token_dispatcher == TokenDispatcher::allgather
                                           ? ", their inputs and outputs whole on each tp rank"
                                           : ", their inputs whole on each tp rank")
                     : std::string()) +
                (model.kv_heads < model.heads ? ", GQA" : "") + "), " + batches +
                (offloaded > 0
                     ? ", " + std::to_string(kept_layers) + " of its " +
                           std::to_string(live.layers) + " layers' on the GPU, the first " +
                           std::to_string(offloaded) + " offloaded"
                     : std::string()));
  dynamic += activations;
  memory.activation_layers = live.layers;
  if (offloaded > 0) {
    add("offloaded activations", 0,
        "the first " + std::to_string(offloaded) +
            " layers' saved tensors in pinned host memory between their forward and backward "
            "(Transformer Engine's CPU offloading)");
    memory.host_bytes_per_rank += offloaded * per_layer;
  }
  if (rerun > 0) {
    add("recomputed layer", rerun,
        plan.recompute == Recompute::full
            ? "what one layer's forward, rerun before its backward, saves again"
        : plan.recompute == Recompute::per_op
            ? "what torchtitan's per-op policy recomputes of one layer before its backward"
            : "what selective recomputation (" + to_string(plan.recompute_modules) +
                  ") rebuilds of one layer before its backward",
        MemoryMoment::layer_backward);
  }

  if (quantized) {
    // Each GEMM reads a BF16 copy of its weight, dequantized just before it.
    const double largest = rank_largest_projection_weights(model, plan);
    add("dequantized weight", kWeightBytes * largest,
        "a BF16 copy of the largest projection, dequantized for its GEMM (QLoRA)");
    dynamic += kWeightBytes * largest;
  }
  if (const double norm = dora_weight_norm_bytes(model, training, plan.tp); norm > 0) {
    add("DoRA weight norm", norm,
        std::string("W + s B A of the largest adapted projection") +
            (tp > 1 ? " on a tp rank" : "") + ", and s B A beside it" +
            (quantized ? " (its dequantized base in the dequantized weight's buffer)" : "") +
            ", made for its row norms at each forward (DoRA)");
    dynamic += norm;
  }

  // The FP32 copy the cross-entropy works on (its gradient computed in place) beside the BF16
  // logits (forward) or their BF16 gradient (backward); in place, only the BF16 logits with the
  // gradient written over them. PyTorch's eager log_softmax peaks as the backward starts: the
  // FP32 log-probabilities it kept, the NLL's gradient and its own, while the logits are gone
  // (torchtitan deletes them before the backward; a caller that keeps them, as Hugging Face
  // models return them, holds 2 bytes more); in forward, the BF16 logits, their FP32 copy and
  // the log-probabilities hold 10 bytes a logit, less. PyTorch's loss_parallel computes
  // (gradient + exp(log-probabilities)) x the loss's gradient, the scattered zeros, the sum and
  // the product beside the log-probabilities: four FP32 tensors.
  // With multi-token prediction each module's loss keeps its own until the backward
  // (Megatron-Core's process_mtp_loss computes them before the main one's).
  const LossMemory loss = loss_memory(training.cross_entropy, tp);
  const double predictions = 1 + model.mtp_layers;
  const double logits =
      stage == plan.pp - 1 ? predictions * loss.bytes_per_logit * tokens * model.vocab / tp : 0.0;
  add("logits", logits,
      loss.basis + (tp > 1 ? ", vocabulary split over tp" : "") +
          (model.mtp_layers == 1 ? ", the main prediction's and the multi-token prediction "
                                   "module's"
           : model.mtp_layers > 1
               ? ", the main prediction's and each of " + std::to_string(model.mtp_layers) +
                     " multi-token prediction modules'"
               : std::string()),
      MemoryMoment::loss_backward);

  // Gradients are reduced from communication buckets (ZeRO 2 too, as DeepSpeed and Megatron
  // bucket them: see limitations.md for FSDP's SHARD_GRAD_OP); under ZeRO-3 the unit's full
  // gradient in the reduce dtype exists until its reduce-scatter finishes.
  const double staged_unit = training.lora ? lora_parameters_per_layer(model, training)
                                           : largest_unit_parameters(model, plan.ep);
  const double grad_staging = sharding.parameters_sharded()
                                  ? staged_unit / tp * training.grad_reduce_bytes
                                  : (sharding.optimizer_sharded() ? 2 * plan.bucket_bytes : 0.0);
  // The collective library's buffers, communicator by communicator (communicator_memory.hpp).
  double library_bytes = 0;
  std::string library_basis;
  for (const CommunicatorUse& use :
       layout_communicators(plan, stage, device.communicators.domain_gpus)) {
    const CommunicatorMemory held = communicator_memory(use, device.communicators);
    library_bytes += held.bytes;
    library_basis += (library_basis.empty() ? "" : "; ") + held.basis;
  }
  add("communication buffers", library_bytes + grad_staging,
      (library_basis.empty()
           ? std::string("no communicator")
           : "NCCL's buffers as its source sizes them (2.22 on), " + library_basis) +
          "; plus gradient staging");
  if (plan.tp > 1 && plan.sequence_parallel) {
    // Sequence parallelism gathers a block's T x hidden input before its first GEMM (and again
    // in backward for the weight gradient): transient full-sequence copies.
    const double gathered_input = 2 * kBf16Bytes * tokens * model.hidden;
    add("tensor-parallel buffers", gathered_input,
        "two BF16 T x hidden all-gather outputs (a block's input, its re-gather in backward)");
    dynamic += gathered_input;
  }
  if (plan.ulysses()) {
    // Ulysses' all-to-alls write what they receive into new tensors: Q, K and V of heads / cp
    // heads over the whole sequence, and the output sent back (as many bytes as the rank's
    // tokens of the local heads).
    const double traded =
        kBf16Bytes * tokens *
        (model.query_width() + model.key_width() + model.value_width() + model.attention_width()) /
        plan.tp;
    add("context-parallel buffers", traded,
        "Ulysses: Q, K, V and the output as the all-to-alls deliver them, BF16");
    dynamic += traded;
  } else if (plan.cp > 1) {
    // Ring attention holds the keys and values it computes with and those arriving for the
    // next step, in backward their gradients too: four chunks' K and V of the local heads.
    const double ring =
        4 * kBf16Bytes * tokens * (model.key_width() + model.value_width()) / plan.tp;
    add("context-parallel buffers", ring,
        "ring attention: K and V being used and arriving, and their gradients, BF16");
    dynamic += ring;
  }

  add("framework overhead", kFrameworkOverheadBytes,
      "assumed: CUDA context and cuBLAS/cuDNN workspaces");
  // The loss's backward on the last stage, or a recomputed layer's: whichever holds more.
  const double loss_held = at_moment[static_cast<int>(MemoryMoment::loss_backward)];
  const double layer_held = at_moment[static_cast<int>(MemoryMoment::layer_backward)];
  if (loss_held > 0 || layer_held > 0) {
    memory.peak =
        loss_held >= layer_held ? MemoryMoment::loss_backward : MemoryMoment::layer_backward;
    memory.total_bytes += std::max(loss_held, layer_held);
    dynamic += std::max(loss_held, layer_held);
  }
  add("fragmentation", kFragmentation * dynamic,
      "assumed: 5% of per-step allocations lost to the caching allocator");
  memory.allocator_gap_bytes = kFragmentation * dynamic;
  return memory;
}

}  // namespace

double layer_saved_bytes(const ModelSpec& model, const TrainingSpec& training,
                         const ParallelPlan& plan) {
  const double tokens = static_cast<double>(training.micro_batch) * training.seq_len / plan.cp;
  return decoder_layer_saved_bytes_per_token(model, training, plan.recompute, plan.tp,
                                             plan.sequence_parallel, plan.recompute_modules,
                                             plan.ep, plan.tp_comm_overlap, plan.ulysses(),
                                             plan.experts_split()) *
             tokens +
         saved_fp8_weight_bytes(model, training, plan);
}

const char* to_string(MemoryMoment moment) {
  switch (moment) {
    case MemoryMoment::all_along: return "all along";
    case MemoryMoment::loss_backward: return "the loss's backward";
    case MemoryMoment::layer_backward: return "a recomputed layer's backward";
  }
  return "?";
}

double model_weight_bytes(const ModelSpec& model, const TrainingSpec& training) {
  const bool quantized = training.lora && training.lora->quantized_base;
  const double quantized_params = quantized ? decoder_layer_parameters(model) * model.layers : 0.0;
  // (A multi-token prediction module's layer counted as one of the last layer's kind.)
  const int layers = model.layers + model.mtp_layers;
  const int expert_layers =
      model.expert_layers() + (model.mtp_layer_has_experts() ? model.mtp_layers : 0);
  const double fp8_params =
      !training.fp8_params ? 0.0
      : model.has_dense_layers()
          ? layer_projection_weights(model, model.experts) * expert_layers +
                layer_projection_weights(model.dense_layer_model(), 0) * (layers - expert_layers)
          : layer_projection_weights(model, model.experts) * layers;
  return kWeightBytes * (model.parameters() - quantized_params - fp8_params) +
         kNf4BytesPerParameter * quantized_params + kFp8Bytes * fp8_params;
}

MemoryBreakdown estimate_memory(const ModelSpec& model, const TrainingSpec& training,
                                const ParallelPlan& plan, const MemoryDevice& device) {
  MemoryBreakdown peak = stage_memory(model, training, plan, device, 0);
  double host = peak.host_bytes_per_rank;
  for (int stage = 1; stage < plan.pp; ++stage) {
    MemoryBreakdown memory = stage_memory(model, training, plan, device, stage);
    host = std::max(host, memory.host_bytes_per_rank);
    if (memory.total_bytes > peak.total_bytes) peak = std::move(memory);
  }
  peak.host_bytes_per_rank = host;
  return peak;
}

MemoryBreakdown estimate_stage_memory(const ModelSpec& model, const TrainingSpec& training,
                                      const ParallelPlan& plan, const MemoryDevice& device,
                                      int stage) {
  return stage_memory(model, training, plan, device, stage);
}

}  // namespace fleetsim
