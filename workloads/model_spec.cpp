#include "workloads/model_spec.hpp"

#include <algorithm>
#include <string>

#include "sim/engine/errors.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {

double ModelSpec::parameters() const {
  return embedding_parameters(*this) + position_parameters(*this) +
         layers * decoder_layer_parameters(*this) + head_parameters(*this);
}

std::optional<PlanProblem> expert_parallelism_problem(const ModelSpec& model,
                                                      const ParallelPlan& plan) {
  if (plan.ep <= 1) return std::nullopt;
  const std::string ep = "ep " + std::to_string(plan.ep);
  if (!model.mixture_of_experts()) {
    return PlanProblem{ep + " needs a mixture-of-experts model",
                       "remove ep, or use e.g. mixtral-8x7b"};
  }
  if (model.experts % plan.ep != 0 || plan.dp % plan.ep != 0) {
    return PlanProblem{
        ep + " must divide the model's " + std::to_string(model.experts) + " experts and dp " +
            std::to_string(plan.dp),
        "the expert groups are ep consecutive data-parallel replicas, each holding experts / ep"};
  }
  if (plan.tp > 1 || plan.zero_stage > 1 || plan.offload_optimizer || plan.overlap_param_gather) {
    return PlanProblem{
        "expert parallelism is modelled with tp 1, zero 0 or 1, without offload_optimizer and "
        "overlap_param_gather",
        "set tp: 1 and zero: 0 or 1, or remove ep"};
  }
  return std::nullopt;
}

std::optional<PlanProblem> context_parallelism_problem(const TrainingSpec& training,
                                                       const ParallelPlan& plan) {
  if (plan.cp <= 1) return std::nullopt;
  const std::string cp = "cp " + std::to_string(plan.cp);
  const int chunks = 2 * plan.cp * plan.tp;
  if (training.seq_len % chunks != 0) {
    return PlanProblem{cp + " cuts each sequence into 2 x cp chunks that tp " +
                           std::to_string(plan.tp) +
                           " shards again: 2 x cp x tp = " + std::to_string(chunks) +
                           " must divide seq_len " + std::to_string(training.seq_len),
                       "pick a cp whose 2 x cp x tp divides the sequence length"};
  }
  if (training.attention != Attention::flash) {
    return PlanProblem{cp + " runs ring attention, which is built on FlashAttention",
                       "set training.attention: flash, or remove cp"};
  }
  if (plan.ep > 1) {
    return PlanProblem{"context and expert parallelism together are not modelled yet",
                       "remove cp or ep"};
  }
  return std::nullopt;
}

void validate_job(const ModelSpec& model, const TrainingSpec& training, const ParallelPlan& plan) {
  if (model.layers < 1 || model.hidden < 1 || model.ffn < 1 || model.vocab < 1 || model.heads < 1 ||
      model.kv_heads < 1) {
    throw ModelError("model " + model.name + " needs positive layers, sizes, heads and vocab");
  }
  if (model.positions == Positions::learned && model.max_positions < training.seq_len) {
    throw ModelError("model " + model.name + " has " + std::to_string(model.max_positions) +
                     " learned positions, fewer than seq_len " + std::to_string(training.seq_len));
  }
  if (const auto& lora = training.lora) {
    if (lora->rank < 1 || plan.tp > 1) {
      throw ModelError("LoRA needs a positive rank, and runs without tensor parallelism here");
    }
    if (lora->quantized_base && plan.zero_stage >= 3) {
      throw ModelError("QLoRA's 4-bit weights are not sharded here (FSDP-QLoRA): use ZeRO 0-2");
    }
    for (auto t = lora->targets.begin(); t != lora->targets.end(); ++t) {
      if (std::find(lora->targets.begin(), t, *t) != t) {
        throw ModelError("LoRA target " + *t + " is listed twice");
      }
      if (*t == "gate" && model.mlp != Mlp::swiglu) {
        throw ModelError("a GELU MLP has no gate projection for LoRA to adapt");
      }
    }
  }
  if (model.mixture_of_experts() &&
      (model.experts_per_token < 1 || model.experts_per_token > model.experts)) {
    throw ModelError("model " + model.name + ": experts_per_token must be 1 to experts");
  }
  if (training.precision == Precision::fp8 && training.lora) {
    throw ModelError("FP8 training with LoRA is not modelled yet: use precision bf16");
  }
  if (model.mixture_of_experts() && training.lora) {
    throw ModelError("LoRA on a mixture-of-experts model is not modelled yet");
  }
  if (training.dropout < 0 || training.dropout >= 1) {
    throw ModelError("dropout must be in [0, 1)");
  }
  if (model.hidden % model.heads != 0 || model.heads % model.kv_heads != 0) {
    throw ModelError("model " + model.name +
                     ": heads must divide the hidden size and KV heads must divide heads");
  }
  if (training.micro_batch < 1 || training.seq_len < 1 || plan.dp < 1 || plan.tp < 1 ||
      plan.cp < 1) {
    throw ModelError("micro-batch, sequence length, tp, cp and dp must be positive");
  }
  // Tensor parallelism splits heads, KV heads, the MLP and the vocabulary (the embedding and
  // output head are vocabulary-parallel), and shards the sequence between blocks.
  const auto splits = [&](int size) { return size % plan.tp == 0; };
  if (!splits(model.heads) || !splits(model.kv_heads) || !splits(model.ffn) ||
      !splits(model.vocab) || !splits(training.seq_len)) {
    throw ModelError("tp " + std::to_string(plan.tp) + " must divide the heads (" +
                     std::to_string(model.heads) + "), KV heads (" +
                     std::to_string(model.kv_heads) + "), MLP size, vocabulary and sequence");
  }
  const int per_pass = training.micro_batch * plan.dp;
  if (training.global_batch < per_pass || training.global_batch % per_pass != 0) {
    throw ModelError(
        "global batch " + std::to_string(training.global_batch) +
        " is not a positive multiple of micro_batch x dp = " + std::to_string(per_pass));
  }
  if (plan.zero_stage < 0 || plan.zero_stage > 3) throw ModelError("ZeRO stage must be 0-3");
  if (plan.pp < 1 || plan.vpp < 1 || plan.pp * plan.vpp > model.layers) {
    throw ModelError((plan.vpp > 1 ? "pp x vpp = " : "pp ") + std::to_string(plan.pp * plan.vpp) +
                     " is more stages than the " + std::to_string(model.layers) + " layers");
  }
  if (plan.vpp > 1) {
    const int m = training.global_batch / std::max(1, training.micro_batch * plan.dp);
    if (plan.pp < 2 || plan.schedule != PipelineSchedule::one_f_one_b || m % plan.pp != 0) {
      throw ModelError(
          "virtual stages (vpp > 1) need pp > 1, the 1F1B schedule and micro-batches per step "
          "a multiple of pp, as Megatron-LM's interleaved schedule does");
    }
  }
  if (plan.offload_optimizer && plan.zero_stage < 1) {
    throw ModelError("optimizer offload needs ZeRO 1-3: each rank offloads its shard");
  }
  if (plan.offload_optimizer && training.optimizer != Optimizer::adam) {
    throw ModelError("optimizer offload runs CPU Adam with FP32 moments, not 8-bit Adam");
  }
  if (plan.ep < 1) throw ModelError("ep must be at least 1");
  if (const auto problem = context_parallelism_problem(training, plan)) {
    throw ModelError(problem->problem);
  }
  if (const auto problem = expert_parallelism_problem(model, plan)) {
    throw ModelError(problem->problem);
  }
  // Megatron-LM and DeepSpeed pipelines shard optimizer states at most: gradients accumulate
  // over the micro-batches, and parameters stay on their stage.
  if (plan.pp > 1 && plan.zero_stage > 1) {
    throw ModelError("pipeline parallelism runs with ZeRO 0 or 1, not " +
                     std::to_string(plan.zero_stage));
  }
}

}  // namespace fleetsim
