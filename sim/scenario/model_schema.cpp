// model: a zoo preset (workloads/models/), inline dimensions, or a Hugging Face config.json;
// a preset's or a config's keys may be overridden inline.
#include <map>
#include <string>

#include "sim/scenario/loader.hpp"

namespace fleetsim {
namespace fs = std::filesystem;

using namespace fields;

namespace {

const Keys kModelKeys = {"name",
                         "source",
                         "layers",
                         "hidden",
                         "ffn",
                         "heads",
                         "kv_heads",
                         "head_dim",
                         "vocab",
                         "tied_embeddings",
                         "mlp",
                         "norm",
                         "linear_bias",
                         "qkv_bias",
                         "qk_norm",
                         "positions",
                         "max_positions",
                         "experts",
                         "experts_per_token"};
const Keys kModelDims = {"layers", "hidden", "ffn", "heads", "kv_heads", "vocab"};

void set_model_key(ModelSpec& m, const std::string& key, const Field& f) {
  if (key == "name") {
    m.name = read_string(f);
  } else if (key == "source") {
    m.source = read_string(f);
  } else if (key == "tied_embeddings") {
    m.tied_embeddings = read_bool(f);
  } else if (key == "mlp") {
    m.mlp = read_choice(f, {"swiglu", "gelu"}) == "gelu" ? Mlp::gelu : Mlp::swiglu;
  } else if (key == "norm") {
    m.norm =
        read_choice(f, {"rmsnorm", "layernorm"}) == "layernorm" ? Norm::layernorm : Norm::rmsnorm;
  } else if (key == "linear_bias") {
    m.linear_bias = read_bool(f);
  } else if (key == "qkv_bias") {
    m.qkv_bias = read_bool(f);
  } else if (key == "qk_norm") {
    m.qk_norm = read_bool(f);
  } else if (key == "head_dim") {
    m.head_size = read_int(f, 1);
  } else if (key == "positions") {
    const std::string positions = read_choice(f, {"rope", "learned", "alibi"});
    m.positions = positions == "learned" ? Positions::learned
                  : positions == "alibi" ? Positions::alibi
                                         : Positions::rope;
  } else if (key == "max_positions") {
    m.max_positions = read_int(f, 1);
  } else if (key == "experts") {
    m.experts = read_int(f, 1);
  } else if (key == "experts_per_token") {
    m.experts_per_token = read_int(f, 1);
  } else {
    static const std::map<std::string, int ModelSpec::*> dims = {
        {"layers", &ModelSpec::layers},     {"hidden", &ModelSpec::hidden},
        {"ffn", &ModelSpec::ffn},           {"heads", &ModelSpec::heads},
        {"kv_heads", &ModelSpec::kv_heads}, {"vocab", &ModelSpec::vocab}};
    m.*dims.at(key) = read_int(f, 1);
  }
}

void apply_model_keys(ModelSpec& m, const Field& map) {
  for (const Entry& e : entries(map)) {
    if (e.key != "preset" && e.key != "hf_config") {
      set_model_key(m, e.key, e.value);
    }
  }
}

}  // namespace

// The model's rules (workloads/model_spec.hpp), its keys looked up in `map`.
void check_model(const ModelSpec& m, const Field& map) {
  const std::vector<JobProblem> problems = model_problems(m);
  if (!problems.empty()) fail_at(map, problems.front());
}

ModelSpec Loader::model_preset(const Field& name) {
  const Preset& p = preset(name, data_.root / "workloads" / "models", "model");
  const Field root{p.root, &p.doc, ""};
  expect_map(root, kModelKeys);
  require_keys(root, {"name", "source"});
  require_keys(root, kModelDims);
  ModelSpec m;
  apply_model_keys(m, root);
  check_model(m, root);
  return m;
}

// A Hugging Face config.json as users have it (JSON is YAML, so its errors have lines and
// columns too), or the model directory holding it, for the decoder families the op graph
// models: Llama, Mistral, Mixtral, Qwen2 (Qwen2.5: biases on Q, K and V) and Qwen3 (QK-norm,
// a head_dim of its own), dense or a mixture of experts in every layer (qwen3_moe), as
// transformers' modeling_<type>.py builds them.
ModelSpec Loader::hf_model(const Field& path_field) {
  const Preset& config = file_named_by(path_field, "Hugging Face config",
                                       "give the path of the model's config.json (or of its "
                                       "directory), relative to the scenario file",
                                       "config.json");
  const Field root{config.root, &config.doc, ""};
  if (!root.node.IsMap()) fail(root, "expected a JSON object, got " + describe(root.node));
  const Field type = require(root, "model_type");
  const std::string model_type = read_string(type);
  const bool qwen3 = model_type == "qwen3" || model_type == "qwen3_moe";
  const bool qwen = model_type == "qwen2" || qwen3;
  if (model_type != "llama" && model_type != "mistral" && model_type != "mixtral" && !qwen) {
    fail(type, "model_type " + in_quotes(model_type) + " is not modelled yet",
         "fleetsim models Llama-style decoders (model_type llama, mistral, mixtral, qwen2, "
         "qwen3 or qwen3_moe)");
  }
  ModelSpec m;
  m.layers = read_int(require(root, "num_hidden_layers"), 1);
  m.hidden = read_int(require(root, "hidden_size"), 1);
  m.ffn = read_int(require(root, "intermediate_size"), 1);
  m.heads = read_int(require(root, "num_attention_heads"), 1);
  const auto kv_heads = find(root, "num_key_value_heads");
  m.kv_heads = kv_heads ? read_int(*kv_heads, 1) : m.heads;
  m.vocab = read_int(require(root, "vocab_size"), 1);
  if (const auto tied = find(root, "tie_word_embeddings")) m.tied_embeddings = read_bool(*tied);
  // A mixture of experts: its experts (under the config's key for them) and how many a token
  // visits.
  const auto read_experts = [&](const char* experts_key) {
    m.experts = read_int(require(root, experts_key), 1);
    const Field per_token = require(root, "num_experts_per_tok");
    m.experts_per_token = read_int(per_token, 1);
    if (m.experts_per_token > m.experts) {
      fail(per_token, std::string("num_experts_per_tok is more than ") + experts_key,
           "each token goes to at most every expert");
    }
  };
  if (model_type == "mixtral") {
    read_experts("num_local_experts");
    if (const auto jitter = find(root, "router_jitter_noise"); jitter && jitter->node.IsScalar() &&
                                                               jitter->node.Scalar() != "null" &&
                                                               read_number(*jitter) != 0) {
      fail(*jitter, "router jitter noise is not modelled",
           "fleetsim routes each token by its scores alone; set it to 0.0");
    }
  }
  if (model_type == "qwen3_moe") {
    // Every layer a mixture of experts of moe_intermediate_size each (intermediate_size sizes
    // the dense MLPs of mlp_only_layers, which are refused).
    read_experts("num_experts");
    m.ffn = read_int(require(root, "moe_intermediate_size"), 1);
    if (const auto step = find(root, "decoder_sparse_step"); step && read_int(*step, 1) != 1) {
      fail(*step, "a mixture of experts in only some layers is not modelled",
           "fleetsim models every layer as a mixture of experts; decoder_sparse_step 1");
    }
    if (const auto dense = find(root, "mlp_only_layers");
        dense && dense->node.IsSequence() && dense->node.size() > 0) {
      fail(*dense, "dense MLP layers beside mixture-of-experts layers are not modelled",
           "fleetsim models every layer as a mixture of experts; mlp_only_layers []");
    }
  }
  // What the op graph does not model is refused, not ignored.
  const auto is_set = [](const Field& f) {
    return !(f.node.IsNull() ||
             (f.node.IsScalar() && (f.node.Scalar() == "null" || f.node.Scalar() == "false")));
  };
  // Qwen's configs give a window that only use_sliding_window turns on.
  const auto use_window = find(root, "use_sliding_window");
  const bool window_off = qwen && !(use_window && is_set(*use_window));
  if (const auto window = find(root, "sliding_window"); window && is_set(*window) && !window_off) {
    fail(*window, "sliding-window attention is not modelled",
         "fleetsim models full causal attention; set it to null if the model attends fully");
  }
  // Biases are modelled on every projection or on none.
  const auto attention_bias = find(root, "attention_bias");
  const auto mlp_bias = find(root, "mlp_bias");
  const bool attention_biased = attention_bias && is_set(*attention_bias);
  if (attention_biased != (mlp_bias && is_set(*mlp_bias))) {
    fail(attention_biased ? *attention_bias : *mlp_bias,
         "biases on only the attention or only the MLP projections are not modelled",
         "fleetsim's layers have biases on all projections (linear_bias) or on none");
  }
  m.linear_bias = attention_biased;
  // Qwen2's query, key and value projections always have biases (bias=True in
  // modeling_qwen2.py); Qwen3 norms each head's query and key (q_norm, k_norm).
  m.qkv_bias = model_type == "qwen2";
  m.qk_norm = qwen3;
  if (const auto act = find(root, "hidden_act"); act && read_string(*act) != "silu") {
    fail(*act, "hidden_act " + in_quotes(read_string(*act)) + " is not modelled",
         "the MLP is SwiGLU (silu)");
  }
  if (const auto head_dim = find(root, "head_dim");
      head_dim && head_dim->node.IsScalar() && head_dim->node.Scalar() != "null") {
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
  m.source = "Hugging Face config " + path.string();
  check_model(m, root);
  return m;
}

ModelSpec Loader::parse_model(const Field& f) {
  if (f.node.IsScalar()) {
    return model_preset(f);
  }
  Keys allowed = kModelKeys;
  allowed.push_back("preset");
  allowed.push_back("hf_config");
  expect_map(f, allowed);
  const auto preset = find(f, "preset");
  const auto hf_config = find(f, "hf_config");
  if (preset && hf_config) {
    fail(*hf_config,
         "a model takes its dimensions from a preset or a Hugging Face config, not both",
         "remove one of preset and hf_config");
  }
  ModelSpec m;
  if (preset) {
    m = model_preset(*preset);
  } else if (hf_config) {
    m = hf_model(*hf_config);
  } else {
    require_keys(f, kModelDims);
    m.name = "custom";
  }
  apply_model_keys(m, f);
  check_model(m, f);
  return m;
}

}  // namespace fleetsim
