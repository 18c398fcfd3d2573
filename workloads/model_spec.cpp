#include "workloads/model_spec.hpp"

#include <algorithm>
#include <initializer_list>
#include <string>

#include "sim/engine/errors.hpp"
#include "workloads/layout/rules.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {

double ModelSpec::parameters() const {
  const double outer = embedding_parameters(*this) + position_parameters(*this) +
                       head_parameters(*this) + mtp_layers * mtp_module_parameters(*this);
  if (!has_dense_layers()) return outer + layers * decoder_layer_parameters(*this);
  const int moe = expert_layers();
  return outer + moe * decoder_layer_parameters(*this) +
         (layers - moe) * decoder_layer_parameters(dense_layer_model());
}

int ModelSpec::expert_layers() const {
  if (!mixture_of_experts()) return 0;
  int count = 0;
  for (int layer = 0; layer < layers; ++layer) count += layer_has_experts(layer) ? 1 : 0;
  return count;
}

ModelSpec ModelSpec::dense_layer_model() const {
  ModelSpec dense = *this;
  if (dense_ffn > 0) dense.ffn = dense_ffn;
  dense.experts = dense.experts_per_token = 0;
  dense.shared_expert_ffn = 0;
  dense.shared_expert_gate = false;
  dense.expert_score_bias = false;
  dense.first_dense_layers = 0;
  dense.moe_layer_every = 1;
  dense.dense_ffn = 0;
  dense.mtp_layers = 0;
  return dense;
}

double expert_rank_load(const TrainingSpec& training, int ep) {
  return ep > 1 ? training.busiest_expert_load() : 1.0;
}

JobSubject job_subject(const ModelSpec& model, const TrainingSpec& training) {
  JobSubject subject;
  subject.model = model.name;
  subject.layers = model.layers;
  subject.heads = model.heads;
  subject.kv_heads = model.kv_heads;
  subject.ffn = model.ffn;
  subject.dense_ffn = model.has_dense_layers() ? model.dense_ffn : 0;
  subject.shared_expert_ffn = model.shared_expert_ffn;
  subject.vocab = model.vocab;
  subject.experts = model.experts;
  subject.dense_layers = model.has_dense_layers();
  subject.experts_per_token = model.experts_per_token;
  subject.expert_load = training.busiest_expert_load();
  subject.allgather_dispatcher = training.token_dispatcher == TokenDispatcher::allgather;
  subject.shared_expert_overlap = training.shared_expert_overlap;
  subject.seq_len = training.seq_len;
  subject.global_batch = training.global_batch;
  subject.micro_batch = training.micro_batch;
  subject.flash_attention = training.attention == Attention::flash;
  subject.local_attention = model.has_local_layers(training.seq_len);
  subject.latent_attention = model.latent_attention();
  subject.mtp_layers = model.mtp_layers;
  subject.fp32_adam = training.optimizer != Optimizer::adam8bit;
  subject.apex_adam = training.optimizer == Optimizer::distributed_fused_adam;
  subject.lora = training.lora.has_value();
  subject.quantized_base = training.lora && training.lora->quantized_base;
  subject.dora_dropout =
      training.lora && training.lora->weight_decomposed && training.lora->dropout > 0;
  subject.fp8 = training.precision == Precision::fp8;
  subject.fp16 = training.precision == Precision::fp16;
  subject.fp8_params = training.fp8_params;
  return subject;
}

namespace {

JobProblem problem(std::string rule, std::vector<std::string> fields, std::string what,
                   std::string hint) {
  return JobProblem{std::move(rule), std::move(fields), std::move(what), std::move(hint)};
}

}  // namespace

// Attention splits hidden into heads of a whole size, and grouped-query attention shares each
// K/V head among a whole number of query heads; a router picks 1 to all of its experts.
std::vector<JobProblem> model_problems(const ModelSpec& m) {
  if (m.layers < 1 || m.hidden < 1 || m.ffn < 1 || m.vocab < 1 || m.heads < 1 || m.kv_heads < 1) {
    return {problem("model-sizes-positive", {},
                    "model " + m.name + " needs positive layers, sizes, heads and vocab",
                    "give each at least 1")};
  }
  std::vector<JobProblem> found;
  if (m.mixture_of_experts() != (m.experts_per_token > 0)) {
    found.push_back(
        problem("experts-with-experts-per-token",
                {m.mixture_of_experts() ? "experts" : "experts_per_token"},
                "a mixture of experts needs both experts and experts_per_token",
                "give the number of experts and how many each token goes to, e.g. experts: 8, "
                "experts_per_token: 2"));
  }
  if (m.experts_per_token > m.experts) {
    found.push_back(problem("experts-per-token-within-experts", {"experts_per_token"},
                            "experts_per_token (" + std::to_string(m.experts_per_token) +
                                ") is more than experts (" + std::to_string(m.experts) + ")",
                            "each token goes to at most every expert"));
  }
  if (m.shared_expert_ffn > 0 && !m.mixture_of_experts()) {
    found.push_back(problem("shared-expert-needs-experts", {"shared_expert_ffn"},
                            "a shared expert runs beside routed experts, and the model has none",
                            "give experts and experts_per_token, or remove shared_expert_ffn"));
  }
  if ((m.first_dense_layers != 0 || m.moe_layer_every != 1 || m.dense_ffn != 0) &&
      !m.mixture_of_experts()) {
    found.push_back(problem("dense-layers-need-experts",
                            {m.first_dense_layers != 0 ? "first_dense_layers"
                             : m.moe_layer_every != 1  ? "moe_layer_every"
                                                       : "dense_ffn"},
                            "dense layers among experts' layers need a mixture of experts",
                            "give experts and experts_per_token, or remove it"));
  }
  if (m.first_dense_layers < 0 || m.moe_layer_every < 1 || m.dense_ffn < 0) {
    found.push_back(problem("dense-layer-settings-positive",
                            {m.first_dense_layers < 0 ? "first_dense_layers"
                             : m.moe_layer_every < 1  ? "moe_layer_every"
                                                      : "dense_ffn"},
                            "first_dense_layers and dense_ffn must be at least 0, moe_layer_every "
                            "at least 1",
                            "moe_layer_every: 1 makes every layer after the first dense ones an "
                            "experts' layer"));
  } else if (m.mixture_of_experts() && m.expert_layers() == 0) {
    found.push_back(
        problem("some-expert-layer",
                {m.first_dense_layers >= m.layers ? "first_dense_layers" : "moe_layer_every"},
                "no layer is left for the experts: first_dense_layers and "
                "moe_layer_every make every one of the " +
                    std::to_string(m.layers) + " layers dense",
                "leave at least one experts' layer, or remove experts"));
  }
  if (!m.qk_norm_weights && !m.qk_norm) {
    found.push_back(problem("qk-norm-weights-need-qk-norm", {"qk_norm_weights"},
                            "qk_norm_weights says whether QK-norm has weights, and the model has "
                            "no QK-norm",
                            "set qk_norm: true, or remove qk_norm_weights"));
  }
  if (m.dense_ffn > 0 && m.mixture_of_experts() && m.expert_layers() == m.layers) {
    found.push_back(problem("dense-ffn-needs-dense-layers", {"dense_ffn"},
                            "dense_ffn sizes dense layers, and every layer of the model has "
                            "experts",
                            "give first_dense_layers or moe_layer_every, or remove dense_ffn"));
  }
  if (m.shared_expert_gate && m.shared_expert_ffn == 0) {
    found.push_back(problem("shared-expert-gate-needs-shared-expert", {"shared_expert_gate"},
                            "shared_expert_gate scales a shared expert, and the model has none",
                            "give shared_expert_ffn, or remove shared_expert_gate"));
  }
  if (m.expert_score_bias && !m.mixture_of_experts()) {
    found.push_back(problem("expert-score-bias-needs-experts", {"expert_score_bias"},
                            "expert_score_bias biases a router's scores, and the model has no "
                            "experts",
                            "give experts and experts_per_token, or remove expert_score_bias"));
  }
  if (m.mtp_layers < 0 || m.mtp_layers > m.layers) {
    found.push_back(problem("mtp-layers-within-layers", {"mtp_layers"},
                            "mtp_layers (" + std::to_string(m.mtp_layers) +
                                ") must be between 0 and the model's " + std::to_string(m.layers) +
                                " layers",
                            "give the multi-token prediction modules (DeepSeek-V3: 1), each a "
                            "layer more, or 0 for none"));
  }
  if (m.positions == Positions::learned && m.max_positions < 1) {
    found.push_back(problem("learned-positions-sized", {"positions"},
                            "learned positions need max_positions",
                            "give the size of the position table, e.g. max_positions: 2048"));
  }
  if (m.positions != Positions::learned && m.max_positions > 0) {
    found.push_back(problem(
        "max-positions-only-learned", {"max_positions"},
        "max_positions sizes a learned position table, and this model's positions have none",
        "set positions: learned, or remove max_positions"));
  }
  if (m.head_size < 0) {
    found.push_back(problem("head-dim-positive", {"head_dim"}, "head_dim must be positive",
                            "give the size of an attention head, or leave head_dim out for "
                            "hidden / heads"));
  }
  if (m.head_size == 0 && m.hidden % m.heads != 0) {
    found.push_back(problem("heads-divide-hidden", {"heads"},
                            "hidden (" + std::to_string(m.hidden) +
                                ") is not divisible by heads (" + std::to_string(m.heads) + ")",
                            "head_dim = hidden / heads must be a whole number, or give "
                            "head_dim"));
  }
  if (m.attention_window < 0) {
    found.push_back(problem("attention-window-positive", {"attention_window"},
                            "attention_window must be positive",
                            "give the tokens a local layer attends to, or leave it out for full "
                            "attention in every layer"));
  }
  if (m.full_attention_every < 0) {
    found.push_back(problem("full-attention-every-positive", {"full_attention_every"},
                            "full_attention_every must be positive",
                            "give N for full attention in every N-th layer, or leave it out for "
                            "local attention in every layer"));
  }
  if (m.full_attention_every > 0 && m.attention_window == 0) {
    found.push_back(problem("full-attention-every-needs-window", {"full_attention_every"},
                            "full_attention_every picks the layers without a window, and the "
                            "model has no attention_window",
                            "give attention_window, or remove full_attention_every"));
  }
  if (m.q_lora_rank < 0 || m.kv_lora_rank < 0 || m.rope_head_dim < 0 || m.v_head_dim < 0) {
    found.push_back(problem("latent-attention-sizes-positive",
                            {"kv_lora_rank", "q_lora_rank", "rope_head_dim", "v_head_dim"},
                            "latent attention's ranks and head sizes cannot be negative",
                            "DeepSeek-V3: q_lora_rank 1536, kv_lora_rank 512, rope_head_dim 64, "
                            "v_head_dim 128, head_dim 128"));
  } else if (!m.latent_attention() &&
             (m.q_lora_rank > 0 || m.rope_head_dim > 0 || m.v_head_dim > 0)) {
    found.push_back(problem("latent-attention-needs-kv-rank",
                            {"q_lora_rank", "rope_head_dim", "v_head_dim"},
                            "q_lora_rank, rope_head_dim and v_head_dim shape latent attention, "
                            "and the model has no kv_lora_rank",
                            "give kv_lora_rank (DeepSeek-V3: 512), or remove them"));
  } else if (m.latent_attention() && (m.v_head_dim == 0 || m.head_size == 0)) {
    found.push_back(problem("latent-attention-head-sizes",
                            {m.v_head_dim == 0 ? "v_head_dim" : "head_dim", "kv_lora_rank"},
                            "latent attention needs v_head_dim, its value heads' size, and "
                            "head_dim, its query and key heads' part without RoPE",
                            "DeepSeek-V3: v_head_dim 128, head_dim 128"));
  } else if (m.latent_attention() &&
             (m.kv_heads != m.heads || m.positions != Positions::rope || m.linear_bias ||
              m.qkv_bias || m.qk_norm || m.attention_sinks)) {
    found.push_back(problem(
        "latent-attention-as-deepseek", {"kv_lora_rank"},
        "latent attention is modelled as DeepSeek-V2 and V3 run it: kv_heads equal to heads, "
        "RoPE, no biases, QK-norm or sinks",
        "set kv_heads to heads and positions to rope; remove linear_bias, qkv_bias, qk_norm "
        "and attention_sinks"));
  }
  if (m.heads % m.kv_heads != 0) {
    found.push_back(problem("kv-heads-divide-heads", {"kv_heads", "heads"},
                            "heads (" + std::to_string(m.heads) +
                                ") is not divisible by kv_heads (" + std::to_string(m.kv_heads) +
                                ")",
                            "each key/value head serves heads / kv_heads query heads"));
  }
  return found;
}

std::vector<JobProblem> recipe_problems(const ModelSpec& model, const TrainingSpec& training) {
  std::vector<JobProblem> found;
  if (model.positions == Positions::learned && model.max_positions < training.seq_len) {
    found.push_back(
        problem("sequence-within-learned-positions", {"training.seq_len"},
                "seq_len " + std::to_string(training.seq_len) + " is longer than the model's " +
                    std::to_string(model.max_positions) + " learned positions",
                "a model with learned position embeddings has no position beyond max_positions"));
  }
  if (training.dropout < 0 || training.dropout >= 1) {
    found.push_back(problem("dropout-probability", {"training.dropout"},
                            "dropout must be in [0, 1)",
                            "dropout is the probability of zeroing an activation; 0 turns it off"));
  }
  if (!(training.expert_load_imbalance >= 1)) {
    found.push_back(problem("expert-load-at-least-balanced", {"training.expert_load_imbalance"},
                            "expert_load_imbalance is the busiest rank's tokens over the mean, "
                            "at least 1",
                            "1 is a balanced router; 1.2 gives the busiest rank 20% more"));
  }
  if (!(training.expert_capacity_factor == 0 || training.expert_capacity_factor >= 1)) {
    found.push_back(problem("expert-capacity-at-least-balanced",
                            {"training.expert_capacity_factor"},
                            "expert_capacity_factor must be at least 1",
                            "below 1 a balanced router's tokens are dropped too, which is not "
                            "modelled; 1.0 caps each expert at its balanced share, 0 or none "
                            "leaves it uncapped"));
  }
  // The routing and launching of experts is a mixture of experts' alone.
  const char* expert_key = training.expert_load_imbalance != 1   ? "training.expert_load_imbalance"
                           : training.expert_capacity_factor > 0 ? "training.expert_capacity_factor"
                           : training.expert_gemm != ExpertGemm::sequential ? "training.expert_gemm"
                           : training.token_dispatcher != TokenDispatcher::alltoall
                               ? "training.token_dispatcher"
                               : nullptr;
  if (expert_key && !model.mixture_of_experts()) {
    found.push_back(problem("expert-settings-need-experts", {expert_key},
                            "how experts route or run is set, and the model has none",
                            "remove expert_load_imbalance, expert_capacity_factor, "
                            "expert_gemm and token_dispatcher"));
  }
  if (training.fp8_params && training.precision != Precision::fp8) {
    found.push_back(problem("fp8-params-need-fp8", {"training.fp8_params"},
                            "fp8_params keeps the projection weights in FP8, which needs "
                            "precision: fp8",
                            "set precision: fp8, or remove fp8_params"));
  }
  if (!training.fp8_weight_cache && training.precision != Precision::fp8) {
    found.push_back(problem("fp8-weight-cache-needs-fp8", {"training.fp8_weight_cache"},
                            "fp8_weight_cache decides whether FP8 weight casts are kept, which "
                            "needs precision: fp8",
                            "set precision: fp8, or remove fp8_weight_cache"));
  }
  // Megatron-Core passes the flag to its fused SwiGLU only (mlp.py: bias_geglu_impl ignores it).
  if (training.activation_fp8_input &&
      (model.mlp != Mlp::swiglu || training.elementwise != Elementwise::fused)) {
    found.push_back(
        problem("activation-fp8-input-needs-fused-swiglu", {"training.activation_fp8_input"},
                "activation_fp8_input stores the input of Megatron-Core's fused SwiGLU, and this "
                "model's MLP " +
                    std::string(model.mlp != Mlp::swiglu ? "is not SwiGLU" : "runs eagerly"),
                "use a SwiGLU model with elementwise: fused, or remove activation_fp8_input"));
  }
  if (training.lora && model.latent_attention()) {
    found.push_back(problem("lora-needs-ordinary-attention", {"training.method", "training.lora"},
                            "LoRA on latent attention's projections is not modelled yet",
                            "train the model in full, or adapt a model with ordinary attention"));
  }
  if (training.elementwise == Elementwise::eager && model.latent_attention()) {
    found.push_back(problem("latent-attention-fused", {"training.elementwise"},
                            "latent attention is modelled as Megatron-Core runs it, its norms "
                            "and RoPE fused",
                            "remove elementwise: eager"));
  }
  if (const auto& lora = training.lora) {
    if (lora->rank < 1) {
      found.push_back(problem("lora-rank-positive", {"training.lora.rank"},
                              "LoRA needs a positive rank", "rank: 16, for example"));
    }
    for (auto t = lora->targets.begin(); t != lora->targets.end(); ++t) {
      if (std::find(lora->targets.begin(), t, *t) != t) {
        found.push_back(problem("lora-targets-once", {"training.lora.targets"},
                                "LoRA target " + *t + " is listed twice", "list each module once"));
      }
      const auto fused_with = [&](const char* fused, std::initializer_list<const char*> parts) {
        if (*t != fused) return;
        for (const char* part : parts) {
          if (std::find(lora->targets.begin(), lora->targets.end(), part) == lora->targets.end())
            continue;
          found.push_back(problem("lora-fused-target-alone", {"training.lora.targets"},
                                  std::string("LoRA target ") + fused + " adapts " + part +
                                      " with the rest of its fused projection",
                                  std::string("list ") + fused + " or its parts, not both"));
        }
      };
      fused_with("qkv", {"q", "k", "v"});
      fused_with("gate_up", {"gate", "up"});
      if ((*t == "gate" || *t == "gate_up") && !model.gated_mlp()) {
        found.push_back(problem("lora-gate-needs-swiglu", {"training.lora.targets"},
                                "a GELU MLP has no gate projection to adapt",
                                "target q, k, v, o, up and down"));
      }
    }
  }
  return found;
}

void validate_job(const ModelSpec& model, const TrainingSpec& training, const ParallelPlan& plan) {
  for (const auto& problems : {model_problems(model), recipe_problems(model, training),
                               job_problems(job_subject(model, training), plan)}) {
    if (!problems.empty()) throw ModelError(problems.front().problem);
  }
}

}  // namespace fleetsim
