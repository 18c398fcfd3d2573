// What a model holds: parameters by unit and pipeline stage, and the optimizer's state and
// traffic per parameter (declared in workloads/transformer_ops.hpp beside the ops that use them).
#include <algorithm>
#include <string>
#include <vector>

#include "workloads/precision.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

constexpr double kBf16 = kBf16Bytes;
constexpr double kFp32 = kFp32Bytes;
constexpr double kFp8 = kFp8Bytes;

double norm_parameters(const ModelSpec& model) {
  return model.norm == Norm::layernorm ? 2.0 * model.hidden : model.hidden;
}

// The projection weights of an MLP of inner size f: gate and up (or up), then down.
double mlp_weights_of_width(const ModelSpec& model, double f) {
  return model.hidden * ((model.gated_mlp() ? 2 : 1) * f + f);
}

// Those and, with linear biases, their biases: one per output column.
double mlp_parameters_of_width(const ModelSpec& model, double f) {
  const double biases = (model.gated_mlp() ? 2 : 1) * f + model.hidden;
  return mlp_weights_of_width(model, f) + (model.linear_bias ? biases : 0);
}

}  // namespace

double mlp_parameters(const ModelSpec& model) {
  return mlp_parameters_of_width(model, model.ffn);
}

double shared_expert_parameters(const ModelSpec& model) {
  if (model.shared_expert_ffn == 0) return 0;
  return mlp_parameters_of_width(model, model.shared_expert_ffn) +
         (model.shared_expert_gate ? model.hidden : 0.0);
}

double layer_expert_parameters(const ModelSpec& model) {
  return model.mixture_of_experts() ? model.experts * mlp_parameters(model) : 0.0;
}

double attention_projection_weights(const ModelSpec& model) {
  const double h = model.hidden;
  const double output = model.attention_width() * h;
  if (!model.latent_attention()) {
    return h * (model.query_width() + model.key_width() + model.value_width()) + output;
  }
  // Latent attention: the queries' down and up projections (or one from the hidden state), the
  // keys' and values' shared down projection with the rotated key, their up projection to
  // every head's key part without RoPE and its value (DeepSeek-V3's q_a_proj, q_b_proj,
  // kv_a_proj_with_mqa, kv_b_proj).
  const double queries = (model.q_lora_rank > 0 ? h * model.q_lora_rank : 0.0) +
                         model.query_projection_input() * model.query_width();
  const double keys_values = h * (model.kv_lora_rank + model.rope_head_dim) +
                             model.kv_lora_rank * model.latent_key_value_width();
  return queries + keys_values + output;
}

double tensor_replicated_weights(const ModelSpec& model) {
  if (!model.latent_attention()) return 0;
  return static_cast<double>(model.hidden) *
         (model.q_lora_rank + model.kv_lora_rank + model.rope_head_dim);
}

double tensor_rank_layer_parameters(const ModelSpec& model, double parameters, double layers,
                                    int tp) {
  return parameters / tp + layers * tensor_replicated_weights(model) * (1 - 1.0 / tp);
}

double layer_projection_weights(const ModelSpec& model, double experts_held) {
  const double mlps = model.mixture_of_experts() ? experts_held : 1.0;
  return attention_projection_weights(model) + mlps * mlp_weights_of_width(model, model.ffn) +
         mlp_weights_of_width(model, model.shared_expert_ffn);
}

double rank_layer_projection_weights(const ModelSpec& model, const ParallelPlan& plan) {
  if (!model.mixture_of_experts()) {
    return tensor_rank_layer_parameters(model, layer_projection_weights(model, 1), 1, plan.tp);
  }
  // The experts / ep experts split over the experts' own tensor parallelism, the rest over tp.
  const double experts = static_cast<double>(model.experts) / plan.ep;
  return tensor_rank_layer_parameters(model, layer_projection_weights(model, 0), 1, plan.tp) +
         experts * mlp_weights_of_width(model, model.ffn) / plan.experts_split();
}

double weight_gather_bytes(double parameters, double fp8, double nf4) {
  return kBf16 * (parameters - fp8 - nf4) + kFp8 * fp8 + kNf4BytesPerParameter * nf4;
}

double decoder_layer_parameters(const ModelSpec& model) {
  const double h = model.hidden;
  // Output columns of the QKV projection.
  const double qkv = model.query_width() + model.key_width() + model.value_width();
  // Biases on every projection (linear_bias) or on Q, K and V only (qkv_bias); QK-norm's
  // weights, one head_dim vector for the queries and one for the keys; a sink logit per head;
  // latent attention's norms of its two latents.
  const double attention = attention_projection_weights(model) + (model.linear_bias ? qkv + h : 0) +
                           (model.qkv_bias ? qkv : 0) +
                           (model.qk_norm && model.qk_norm_weights ? 2.0 * model.head_dim() : 0) +
                           (model.attention_sinks ? model.heads : 0) + model.q_lora_rank +
                           model.kv_lora_rank;
  // A mixture of experts has one MLP per expert, the router's h x experts weight (and, with
  // linear biases, its bias: GPT-OSS) and any shared expert.
  const double router =
      h * model.experts + (model.linear_bias || model.expert_score_bias ? model.experts : 0);
  const double mlps = model.mixture_of_experts() ? layer_expert_parameters(model) + router +
                                                       shared_expert_parameters(model)
                                                 : mlp_parameters(model);
  // A norm before each block, and with post-norms one after each (Gemma).
  return attention + mlps + (model.post_norms ? 4 : 2) * norm_parameters(model);
}

double embedding_parameters(const ModelSpec& model) {
  return static_cast<double>(model.vocab) * model.hidden;
}

double position_parameters(const ModelSpec& model) {
  return model.positions == Positions::learned
             ? static_cast<double>(model.max_positions) * model.hidden
             : 0.0;
}

std::vector<double> fsdp_unit_parameters(const ModelSpec& model) {
  std::vector<double> units{embedding_parameters(model) + position_parameters(model)};
  const double expert_layer = decoder_layer_parameters(model);
  const double dense_layer =
      model.has_dense_layers() ? decoder_layer_parameters(model.dense_layer_model()) : expert_layer;
  for (int layer = 0; layer < model.layers; ++layer) {
    units.push_back(model.layer_has_experts(layer) ? expert_layer : dense_layer);
  }
  units.insert(units.end(), model.mtp_layers, mtp_module_parameters(model));
  units.push_back(head_parameters(model));
  return units;
}

double mtp_module_parameters(const ModelSpec& model) {
  const double h = model.hidden;
  const ModelSpec kind = model.mtp_layer_has_experts() || !model.has_dense_layers()
                             ? model
                             : model.dense_layer_model();
  // enorm, hnorm and the final norm; eh_proj, 2 hidden -> hidden without a bias.
  return decoder_layer_parameters(kind) + 3 * norm_parameters(model) + 2 * h * h;
}

LayerRange virtual_stage_slots(const ModelSpec& model, int virtual_stages, int v) {
  return split_stage_slots(model.layers + model.mtp_layers, virtual_stages, v);
}

LayerRange virtual_stage_layers(const ModelSpec& model, int virtual_stages, int v) {
  const LayerRange slots = virtual_stage_slots(model, virtual_stages, v);
  return {std::min(slots.first, model.layers), std::min(slots.end, model.layers)};
}

int virtual_stage_mtp_layers(const ModelSpec& model, int virtual_stages, int v) {
  return virtual_stage_slots(model, virtual_stages, v).count() -
         virtual_stage_layers(model, virtual_stages, v).count();
}

int stage_layers(const ModelSpec& model, const ParallelPlan& plan, int stage) {
  const int virtual_stages = plan.pp * plan.vpp;
  int layers = 0;
  for (int v = stage; v < virtual_stages; v += plan.pp) {
    layers += virtual_stage_slots(model, virtual_stages, v).count();
  }
  return layers;
}

double stage_projection_weights(const ModelSpec& model, const ParallelPlan& plan, int stage) {
  const double experts = stage_expert_layers(model, plan, stage);
  const double dense = stage_layers(model, plan, stage) - experts;
  return experts * rank_layer_projection_weights(model, plan) +
         (dense > 0 ? dense * rank_layer_projection_weights(model.dense_layer_model(), plan) : 0.0);
}

int stage_expert_layers(const ModelSpec& model, const ParallelPlan& plan, int stage) {
  const int virtual_stages = plan.pp * plan.vpp;
  int layers = 0;
  for (int v = stage; v < virtual_stages; v += plan.pp) {
    const LayerRange range = virtual_stage_layers(model, virtual_stages, v);
    for (int layer = range.first; layer < range.end; ++layer) {
      layers += model.layer_has_experts(layer) ? 1 : 0;
    }
    if (model.mtp_layer_has_experts()) layers += virtual_stage_mtp_layers(model, virtual_stages, v);
  }
  return layers;
}

std::vector<std::size_t> virtual_stage_units(const ModelSpec& model, int virtual_stages, int v) {
  // Its slots: decoder layers, and after the last the multi-token prediction modules.
  const LayerRange slots = virtual_stage_slots(model, virtual_stages, v);
  std::vector<std::size_t> units;
  if (v == 0) units.push_back(0);
  for (int l = slots.first; l < slots.end; ++l) {
    units.push_back(static_cast<std::size_t>(l) + 1);
  }
  if (v == virtual_stages - 1) {
    units.push_back(static_cast<std::size_t>(model.layers + model.mtp_layers) + 1);
  }
  return units;
}

double head_parameters(const ModelSpec& model) {
  const double norm = norm_parameters(model);
  return model.tied_embeddings ? norm : norm + embedding_parameters(model);
}

double embedding_copy_parameters(const ModelSpec& model, int pp) {
  if (pp == 1) return 0.0;
  // The modules look their tokens up through the whole embedding, learned positions too.
  if (model.mtp_layers > 0) return embedding_parameters(model) + position_parameters(model);
  return model.tied_embeddings ? embedding_parameters(model) : 0.0;
}

double optimizer_state_bytes_per_parameter(Optimizer optimizer) {
  // FP32 master weight and two moments: FP32, or 8-bit with an FP32 scale per block of 2048.
  const double moment = optimizer == Optimizer::adam8bit ? 1.0 + kFp32 / 2048 : kFp32;
  return kFp32 + 2 * moment;
}

bool master_weights_as_remainders(const TrainingSpec& training) {
  return training.optimizer == Optimizer::distributed_fused_adam && !training.fp8_params &&
         training.precision != Precision::fp16;
}

double optimizer_state_bytes_held(const TrainingSpec& training) {
  const bool remainders = master_weights_as_remainders(training);
  return optimizer_state_bytes_per_parameter(training.optimizer) - (remainders ? kBf16 : 0.0);
}

namespace {

double adam_step_bytes_per_parameter(const TrainingSpec& training) {
  // Read the FP32 master weight, both moments and the FP32 gradient; write master and moments
  // and the BF16 working copy (FP32 moments: 4*7 + 2 = 30 bytes). Rebuilt from remainders, the
  // master's high half is the BF16 parameter, read as well; Apex reads its gradient shard in the
  // reduce dtype (2*10 + 2 + 2*2 = 26 bytes with BF16 reduction).
  const bool remainders = master_weights_as_remainders(training);
  const double gradient =
      training.optimizer == Optimizer::distributed_fused_adam ? training.grad_reduce_bytes : kFp32;
  return 2 * optimizer_state_bytes_held(training) + gradient + (remainders ? 2 * kBf16 : kBf16);
}

constexpr double kUnscaleBytesPerParameter = 2 * kFp32;  // an FP32 gradient read and written

}  // namespace

double optimizer_step_bytes_per_parameter(const TrainingSpec& training) {
  const bool loss_scaled = training.precision == Precision::fp16;
  return adam_step_bytes_per_parameter(training) + (loss_scaled ? kUnscaleBytesPerParameter : 0.0);
}

Op adam_step_op(double local_parameters, const TrainingSpec& training) {
  return memory_op(training.optimizer == Optimizer::adam8bit ? "adam8bit" : "adam",
                   optimizer_step_bytes_per_parameter(training) * local_parameters);
}

}  // namespace fleetsim
