// model: {hf_config: PATH}: a Hugging Face config.json as users have it (JSON is YAML, so its
// errors have lines and columns too), or the model directory holding it, for the decoder
// families the op graph models, as transformers' modeling_<type>.py builds them: Llama,
// Mistral, Mixtral, Qwen2 (Qwen2.5: biases on Q, K and V; Qwen2-MoE: a gated shared expert
// beside the routed ones; dense layers where decoder_sparse_step and mlp_only_layers put them),
// Qwen3 (QK-norm, a head_dim of its own, dense or a mixture of experts), Gemma 2 and Gemma 3's
// text decoder (GeGLU, four norms a layer, sliding windows in most layers, Gemma 2's
// soft-capped logits), GPT-OSS (sliding windows in every other layer, attention sinks, biased
// experts and router) and Llama 4's text decoder (chunked attention in three layers of four,
// experts and a shared expert in every interleave_moe_layer_step-th layer, dense MLPs between).
// What the op graph does not model is refused at its key, not ignored.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "sim/scenario/loader.hpp"

namespace fleetsim {
namespace fs = std::filesystem;

using namespace fields;

namespace {

// A key given a value: neither null nor false.
bool is_set(const Field& f) {
  return !(f.node.IsNull() ||
           (f.node.IsScalar() && (f.node.Scalar() == "null" || f.node.Scalar() == "false")));
}

// What a family's configuration class assumes where a config leaves a key out, so that a
// config reads as transformers reads it: Gemma ties its embeddings and slides a window of
// 4,096 (Gemma2Config, Gemma3TextConfig), Gemma 2 in every other layer and Gemma 3 in five of
// six; GPT-OSS slides 128 in every other layer (GptOssConfig); MistralConfig's window is 4,096
// in every layer. The activation is read from the key the family's MLP reads.
struct Family {
  std::string_view type;
  bool tied_embeddings = false;
  int window = 0;      // the default window of its local layers (0: none)
  int full_every = 0;  // its default: every N-th layer attends fully (0: none)
  std::string_view act = "silu";
  std::string_view act_key = "hidden_act";
};
constexpr Family kFamilies[] = {
    {"llama"},
    {"mistral", false, 4096},
    {"mixtral"},
    {"qwen2"},
    {"qwen2_moe"},
    {"qwen3"},
    {"qwen3_moe"},
    {"gemma2", true, 4096, 2, "gelu_pytorch_tanh", "hidden_activation"},
    {"gemma3_text", true, 4096, 6, "gelu_pytorch_tanh", "hidden_activation"},
    {"gpt_oss", false, 128, 2},
    {"llama4_text", false, 8192, 4},
    {"deepseek_v2"},
    {"deepseek_v3"},
};

const Family* family_of(std::string_view type) {
  for (const Family& family : kFamilies) {
    if (family.type == type) return &family;
  }
  return nullptr;
}

// The N of a per-layer list where every N-th layer attends fully (`full`, the last of each N),
// or 0 where none does; a list breaking that pattern is refused at the layer that breaks it.
int full_attention_every(const std::vector<Field>& listed, const std::vector<bool>& full) {
  int every = 0;  // the first full layer's place from 1, if any
  for (std::size_t i = 0; i < full.size() && every == 0; ++i) {
    if (full[i]) every = static_cast<int>(i) + 1;
  }
  for (std::size_t i = 0; i < full.size(); ++i) {
    if (full[i] != (every > 0 && (static_cast<int>(i) + 1) % every == 0)) {
      fail(listed[i],
           "layer " + std::to_string(i) + "'s attention breaks the pattern of the layers before",
           "fleetsim models every N-th layer attending fully (the last of each N) and the rest "
           "within the window, or every layer within it");
    }
  }
  return every;
}

// Which layers attend locally: layer_types where the config lists them (transformers' newer
// configs), else Gemma 3's sliding_window_pattern, else the family's rule. fleetsim models every
// N-th layer attending fully (N 0: none); another pattern is refused at the list.
void read_layer_attention(const Field& root, const Family& family, ModelSpec& m) {
  m.full_attention_every = family.full_every;
  if (const auto pattern = find(root, "sliding_window_pattern");
      family.type == "gemma3_text" && pattern && is_set(*pattern)) {
    m.full_attention_every = read_int(*pattern, 1);
  }
  const auto types = find(root, "layer_types");
  if (!types || !is_set(*types)) return;
  const std::vector<Field> listed =
      read_list(*types, static_cast<std::size_t>(m.layers), "layer types, one a layer");
  std::vector<bool> full;
  for (const Field& type : listed) {
    full.push_back(read_choice(type, {"sliding_attention", "full_attention"}) == "full_attention");
  }
  m.full_attention_every = full_attention_every(listed, full);
}

// Llama 4's chunked attention: in every layer but its NoPE ones, which attend globally: every
// no_rope_layer_interval-th (Llama4TextConfig's default 4), or as no_rope_layers lists them (1:
// RoPE and chunks, 0: global), or as newer configs' layer_types name them
// (chunked_attention, full_attention); attention_chunk_size null: every layer global.
void read_llama4_attention(const Field& root, ModelSpec& m) {
  m.local_attention = LocalAttention::chunked;
  if (const auto chunk = find(root, "attention_chunk_size")) {
    m.attention_window = is_set(*chunk) ? read_int(*chunk, 1) : 0;
  }
  if (m.attention_window == 0) {
    m.full_attention_every = 0;
    return;
  }
  if (const auto interval = find(root, "no_rope_layer_interval"); interval && is_set(*interval)) {
    m.full_attention_every = read_int(*interval, 1);
  }
  std::vector<Field> listed;
  std::vector<bool> full;
  if (const auto types = find(root, "layer_types"); types && is_set(*types)) {
    listed = read_list(*types, static_cast<std::size_t>(m.layers), "layer types, one a layer");
    for (const Field& type : listed) {
      full.push_back(read_choice(type, {"chunked_attention", "full_attention"}) ==
                     "full_attention");
    }
  } else if (const auto flags = find(root, "no_rope_layers");
             flags && flags->node.IsSequence() && flags->node.size() > 0) {
    listed = read_list(*flags, static_cast<std::size_t>(m.layers), "flags, one a layer");
    for (const Field& flag : listed) full.push_back(read_int(flag, 0) == 0);
  }
  if (!listed.empty()) m.full_attention_every = full_attention_every(listed, full);
}

// DeepSeek-V2 and V3 (modeling_deepseek_v3.py, DeepSeek's modeling_deepseek.py): latent
// attention (q_lora_rank null: queries projected directly), routed experts of
// moe_intermediate_size in every layer from first_k_dense_replace on (moe_layer_freq 1), with
// n_shared_experts of that size as one shared expert, the dense layers intermediate_size wide;
// V3's noaux_tc routing biases the scores by a stored per-expert correction. V3's multi-token
// prediction modules (num_nextn_predict_layers), which transformers leaves out of its model
// though the released weights and the training run have them, are trained as Megatron-Core
// trains them.
void read_deepseek(const Field& root, ModelSpec& m) {
  const auto optional_int = [&](const char* key, int least) {
    const auto f = find(root, key);
    return f && is_set(*f) ? read_int(*f, least) : 0;
  };
  m.q_lora_rank = optional_int("q_lora_rank", 1);
  m.kv_lora_rank = read_int(require(root, "kv_lora_rank"), 1);
  m.mtp_layers = optional_int("num_nextn_predict_layers", 0);
  m.head_size = read_int(require(root, "qk_nope_head_dim"), 1);
  m.rope_head_dim = read_int(require(root, "qk_rope_head_dim"), 0);
  m.v_head_dim = read_int(require(root, "v_head_dim"), 1);
  m.experts = optional_int("n_routed_experts", 1);
  if (m.experts == 0) return;  // a dense model
  m.experts_per_token = read_int(require(root, "num_experts_per_tok"), 1);
  if (m.experts_per_token > m.experts) {
    fail(require(root, "num_experts_per_tok"), "num_experts_per_tok is more than n_routed_experts",
         "each token goes to at most every expert");
  }
  m.dense_ffn = m.ffn;
  m.ffn = read_int(require(root, "moe_intermediate_size"), 1);
  m.shared_expert_ffn = optional_int("n_shared_experts", 1) * m.ffn;
  m.first_dense_layers = optional_int("first_k_dense_replace", 0);
  if (const auto every = find(root, "moe_layer_freq"); every && read_int(*every, 1) != 1) {
    fail(*every,
         "experts in every moe_layer_freq-th layer from the first of each group are "
         "not modelled",
         "fleetsim models DeepSeek's experts in every layer after the first dense ones "
         "(moe_layer_freq 1, as the released models set it)");
  }
  const auto method = find(root, "topk_method");
  m.expert_score_bias = method && method->node.IsScalar() && read_string(*method) == "noaux_tc";
}

}  // namespace

ModelSpec Loader::hf_model(const Field& path_field) {
  const Preset& config = file_named_by(path_field, "Hugging Face config",
                                       "give the path of the model's config.json (or of its "
                                       "directory), relative to the scenario file",
                                       "config.json");
  const Field root{config.root, &config.doc, ""};
  // A foreign file's text is not echoed: it may be anything (a path given by mistake).
  if (!root.node.IsMap()) {
    fail(root,
         "expected a JSON object, got " +
             (root.node.IsScalar() ? "other text" : describe(root.node)),
         "give the model's config.json, as Hugging Face saves it");
  }
  expect_unique_keys(root);
  const Field type = require(root, "model_type");
  const std::string model_type = read_string(type);
  if (model_type == "llama4") {
    fail(type, "Llama 4's vision encoder is not modelled",
         "give its text decoder as a config of its own: text_config's keys with model_type "
         "llama4_text");
  }
  if (model_type == "gemma3") {
    fail(type, "Gemma 3's vision encoder is not modelled",
         "give its text decoder as a config of its own: text_config's keys with model_type "
         "gemma3_text, and the keys it leaves to Gemma3TextConfig's defaults (vocab_size "
         "262208; on the 4B num_attention_heads 8, num_key_value_heads 4, head_dim 256)");
  }
  const Family* family = family_of(model_type);
  if (!family) {
    fail(type, "model_type " + in_quotes(model_type) + " is not modelled yet",
         "fleetsim models the decoders of model_type llama, mistral, mixtral, qwen2, "
         "qwen2_moe, qwen3, qwen3_moe, gemma2, gemma3_text, gpt_oss, llama4_text, deepseek_v2 "
         "and deepseek_v3");
  }
  const bool qwen3 = model_type == "qwen3" || model_type == "qwen3_moe";
  const bool qwen2 = model_type == "qwen2" || model_type == "qwen2_moe";
  const bool qwen = qwen2 || qwen3;
  const bool gemma = model_type == "gemma2" || model_type == "gemma3_text";
  const bool gpt_oss = model_type == "gpt_oss";
  const bool llama4 = model_type == "llama4_text";
  const bool deepseek = model_type == "deepseek_v2" || model_type == "deepseek_v3";
  ModelSpec m;
  m.layers = read_int(require(root, "num_hidden_layers"), 1);
  m.hidden = read_int(require(root, "hidden_size"), 1);
  m.ffn = read_int(require(root, "intermediate_size"), 1);
  m.heads = read_int(require(root, "num_attention_heads"), 1);
  const auto kv_heads = find(root, "num_key_value_heads");
  m.kv_heads = kv_heads ? read_int(*kv_heads, 1) : m.heads;
  m.vocab = read_int(require(root, "vocab_size"), 1);
  m.tied_embeddings = family->tied_embeddings;
  if (const auto tied = find(root, "tie_word_embeddings")) m.tied_embeddings = read_bool(*tied);
  // A mixture of experts: its experts (under the config's key for them) and how many a token
  // visits.
  // Llama4TextConfig defaults them (16 experts, 1 a token); the others' configs give them.
  const auto read_experts = [&](const char* experts_key) {
    const auto experts = find(root, experts_key);
    m.experts =
        llama4 && !experts ? 16 : read_int(experts ? *experts : require(root, experts_key), 1);
    const auto per_token = find(root, "num_experts_per_tok");
    m.experts_per_token =
        llama4 && !per_token
            ? 1
            : read_int(per_token ? *per_token : require(root, "num_experts_per_tok"), 1);
    if (m.experts_per_token > m.experts) {
      fail(per_token ? *per_token : root,
           std::string("num_experts_per_tok is more than ") + experts_key,
           "each token goes to at most every expert");
    }
  };
  // Dense layers among the experts' layers: all but every step-th (`step_key`: the last of each
  // group is the experts'), and the first N where `listed_key` lists layers 0 to N - 1.
  const auto read_moe_step = [&](const char* step_key) {
    if (const auto step = find(root, step_key); step && is_set(*step)) {
      m.moe_layer_every = read_int(*step, 1);
    }
  };
  const auto read_first_dense_layers = [&](const char* listed_key) {
    const auto listed = find(root, listed_key);
    if (!listed || !listed->node.IsSequence() || listed->node.size() == 0) return;
    const std::vector<Field> layers = read_list(*listed, 0, "layer indices");
    for (std::size_t i = 0; i < layers.size(); ++i) {
      if (read_int(layers[i], 0) != static_cast<int>(i)) {
        fail(layers[i], std::string(listed_key) + " lists other layers than the first ones",
             "fleetsim models dense layers first, then every step-th layer an experts' one; "
             "list layers 0, 1, ... N - 1");
      }
    }
    m.first_dense_layers = static_cast<int>(layers.size());
  };
  if (model_type == "mixtral" || gpt_oss) read_experts("num_local_experts");
  if (model_type == "mixtral" || llama4) {
    if (const auto jitter = find(root, "router_jitter_noise"); jitter && jitter->node.IsScalar() &&
                                                               jitter->node.Scalar() != "null" &&
                                                               read_number(*jitter) != 0) {
      fail(*jitter, "router jitter noise is not modelled",
           "fleetsim routes each token by its scores alone; set it to 0.0");
    }
  }
  if (model_type == "qwen3_moe" || model_type == "qwen2_moe") {
    // Experts of moe_intermediate_size each in every decoder_sparse_step-th layer but those of
    // mlp_only_layers, whose dense MLPs are intermediate_size wide; Qwen2-MoE's shared expert
    // of shared_expert_intermediate_size beside them, its output gated (shared_expert_gate).
    read_experts("num_experts");
    m.dense_ffn = m.ffn;
    m.ffn = read_int(require(root, "moe_intermediate_size"), 1);
    if (model_type == "qwen2_moe") {
      m.shared_expert_ffn = read_int(require(root, "shared_expert_intermediate_size"), 1);
      m.shared_expert_gate = true;
    }
    read_moe_step("decoder_sparse_step");
    read_first_dense_layers("mlp_only_layers");
  }
  if (deepseek) read_deepseek(root, m);
  if (llama4) {
    // Llama4TextMoe: experts of intermediate_size and a shared expert of the same size in every
    // interleave_moe_layer_step-th layer (moe_layers, where listed, must follow it); the dense
    // layers' MLPs intermediate_size_mlp wide (Llama4TextConfig's default 16,384).
    read_experts("num_local_experts");
    m.shared_expert_ffn = m.ffn;
    const auto dense = find(root, "intermediate_size_mlp");
    m.dense_ffn = dense && is_set(*dense) ? read_int(*dense, 1) : 16384;
    read_moe_step("interleave_moe_layer_step");
    // moe_layers, where listed, decides (transformers builds the step's pattern only where it
    // is null): every N-th layer from layer N - 1, N its first entry plus one.
    if (const auto listed = find(root, "moe_layers"); listed && is_set(*listed)) {
      const std::vector<Field> layers = read_list(*listed, 0, "layer indices");
      m.moe_layer_every = read_int(layers.front(), 0) + 1;
      std::size_t i = 0;
      for (int layer = m.moe_layer_every - 1; layer < m.layers || i < layers.size();
           layer += m.moe_layer_every, ++i) {
        if (i >= layers.size() || layer >= m.layers || read_int(layers[i], 0) != layer) {
          fail(i < layers.size() ? layers[i] : *listed,
               "moe_layers breaks the pattern of every N-th layer an experts' layer",
               "fleetsim models every N-th layer (the last of each N) an experts' layer: list "
               "layers N - 1, 2N - 1, ... up to the last");
        }
      }
    }
  }
  // Local attention. Qwen's configs give a window that only use_sliding_window turns on, and
  // then only from layer max_window_layers on. Mistral's and Mixtral's window, where set, is
  // every layer's; Gemma's and GPT-OSS's most layers'.
  const auto window = find(root, "sliding_window");
  const auto use_window = find(root, "use_sliding_window");
  if (qwen && use_window && is_set(*use_window)) {
    fail(*use_window,
         "Qwen's sliding window in the layers from max_window_layers on is not "
         "modelled",
         "set use_sliding_window to false: the released Qwen2.5 and Qwen3 models attend fully");
  }
  if (model_type == "llama" && window && is_set(*window)) {
    fail(*window, "a Llama model attends fully: transformers' Llama has no sliding window",
         "remove sliding_window, or give model_type mistral for a window in every layer");
  }
  if (!qwen && window && is_set(*window)) {
    m.attention_window = read_int(*window, 1);
  } else if (!qwen && !window) {
    m.attention_window = family->window;
  }
  if (llama4) {
    m.full_attention_every = family->full_every;
    read_llama4_attention(root, m);
  } else if (m.attention_window > 0) {
    read_layer_attention(root, *family, m);
  }
  // Biases are modelled on every projection or on none. GPT-OSS's experts and router always
  // have them, and its attention (GptOssConfig sets attention_bias).
  const auto attention_bias = find(root, "attention_bias");
  if (gpt_oss && attention_bias && !is_set(*attention_bias)) {
    fail(*attention_bias, "GPT-OSS's attention without biases is not modelled",
         "its experts and router have biases, and fleetsim models biases on every projection "
         "or on none; the released models set attention_bias true");
  }
  const bool attention_biased = gpt_oss || (attention_bias && is_set(*attention_bias));
  const auto mlp_bias = find(root, "mlp_bias");
  if (!gpt_oss && attention_biased != (mlp_bias && is_set(*mlp_bias))) {
    fail(attention_biased ? *attention_bias : *mlp_bias,
         "biases on only the attention or only the MLP projections are not modelled",
         "fleetsim's layers have biases on all projections (linear_bias) or on none");
  }
  m.linear_bias = attention_biased;
  m.attention_sinks = gpt_oss;
  // Qwen2's query, key and value projections always have biases (bias=True in
  // modeling_qwen2.py and modeling_qwen2_moe.py); Qwen3 and Gemma 3 norm each head's query and key
  // (q_norm, k_norm).
  m.qkv_bias = qwen2;
  m.qk_norm = qwen3 || model_type == "gemma3_text";
  // Llama 4's is an L2 norm without weights (Llama4TextL2Norm; use_qk_norm, default true; run
  // here in every layer, where Llama 4 runs it in its RoPE layers only).
  if (llama4) {
    const auto use = find(root, "use_qk_norm");
    m.qk_norm = !use || read_bool(*use);
    m.qk_norm_weights = !m.qk_norm;
  }
  // Gemma: GeGLU, a norm after each block too, the logits soft-capped where
  // final_logit_softcapping is set (Gemma 2's 30). Its attention's soft-capping
  // (attn_logit_softcapping) runs inside the attention kernel, which is costed at its rate.
  if (gemma) {
    m.mlp = Mlp::geglu;
    m.post_norms = true;
    const auto softcap = find(root, "final_logit_softcapping");
    m.logit_softcap = softcap ? is_set(*softcap) : model_type == "gemma2";
  }
  if (const auto bidirectional = find(root, "use_bidirectional_attention");
      bidirectional && is_set(*bidirectional)) {
    fail(*bidirectional, "bidirectional attention is not modelled",
         "fleetsim models causal decoders; EmbeddingGemma's encoder is not one");
  }
  if (const auto act = find(root, family->act_key);
      act && is_set(*act) && read_string(*act) != family->act) {
    fail(*act,
         std::string(family->act_key) + " " + in_quotes(read_string(*act)) + " is not modelled",
         "the " + model_type + " MLP is modelled with " + std::string(family->act));
  }
  // (DeepseekV3Config's head_dim is its rotated part, qk_rope_head_dim: read above.)
  if (const auto head_dim = find(root, "head_dim");
      !deepseek && head_dim && head_dim->node.IsScalar() && head_dim->node.Scalar() != "null") {
    const int size = read_int(*head_dim, 1);
    if (m.hidden % m.heads != 0 || size != m.hidden / m.heads) m.head_size = size;
  }
  // The model's name: the last part of the name it was saved under, else its directory's.
  const fs::path path = config.doc.file;
  m.name = fs::absolute(path).lexically_normal().parent_path().filename().string();
  if (const auto saved_as = find(root, "_name_or_path"); saved_as && saved_as->node.IsScalar()) {
    const std::string name =
        fs::path(read_string(*saved_as)).lexically_normal().filename().string();
    if (!name.empty() && name != "." && name != "..") m.name = name;
  }
  if (m.name.empty()) m.name = "hf-model";
  if (!m.has_dense_layers()) m.dense_ffn = 0;  // no dense layer to size
  m.source = "Hugging Face config " + path.string();
  check_model(m, root);
  return m;
}

}  // namespace fleetsim
