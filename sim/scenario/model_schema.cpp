// model: a zoo preset (workloads/models/), inline dimensions, or a Hugging Face config.json
// (hf_config.cpp); a preset's or a config's keys may be overridden inline.
#include <map>
#include <string>

#include "sim/scenario/loader.hpp"

namespace fleetsim {

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
                         "qk_norm_weights",
                         "positions",
                         "max_positions",
                         "experts",
                         "experts_per_token",
                         "shared_expert_ffn",
                         "shared_expert_gate",
                         "expert_score_bias",
                         "first_dense_layers",
                         "moe_layer_every",
                         "dense_ffn",
                         "attention_window",
                         "local_attention",
                         "full_attention_every",
                         "attention_sinks",
                         "post_norms",
                         "logit_softcap",
                         "q_lora_rank",
                         "kv_lora_rank",
                         "rope_head_dim",
                         "v_head_dim",
                         "mtp_layers"};
const Keys kModelDims = {"layers", "hidden", "ffn", "heads", "kv_heads", "vocab"};

void set_model_key(ModelSpec& m, const std::string& key, const Field& f) {
  if (key == "name") {
    m.name = read_string(f);
  } else if (key == "source") {
    m.source = read_string(f);
  } else if (key == "tied_embeddings") {
    m.tied_embeddings = read_bool(f);
  } else if (key == "mlp") {
    const std::string mlp = read_choice(f, {"swiglu", "geglu", "gelu"});
    m.mlp = mlp == "gelu" ? Mlp::gelu : mlp == "geglu" ? Mlp::geglu : Mlp::swiglu;
  } else if (key == "norm") {
    m.norm =
        read_choice(f, {"rmsnorm", "layernorm"}) == "layernorm" ? Norm::layernorm : Norm::rmsnorm;
  } else if (key == "linear_bias") {
    m.linear_bias = read_bool(f);
  } else if (key == "qkv_bias") {
    m.qkv_bias = read_bool(f);
  } else if (key == "qk_norm") {
    m.qk_norm = read_bool(f);
  } else if (key == "qk_norm_weights") {
    m.qk_norm_weights = read_bool(f);
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
  } else if (key == "shared_expert_ffn") {
    m.shared_expert_ffn = read_int(f, 1);
  } else if (key == "shared_expert_gate") {
    m.shared_expert_gate = read_bool(f);
  } else if (key == "expert_score_bias") {
    m.expert_score_bias = read_bool(f);
  } else if (key == "first_dense_layers") {
    m.first_dense_layers = read_int(f, 0);
  } else if (key == "moe_layer_every") {
    m.moe_layer_every = read_int(f, 1);
  } else if (key == "dense_ffn") {
    m.dense_ffn = read_int(f, 1);
  } else if (key == "attention_window") {
    m.attention_window = read_int(f, 1);
  } else if (key == "local_attention") {
    m.local_attention = read_choice(f, {"sliding", "chunked"}) == "chunked"
                            ? LocalAttention::chunked
                            : LocalAttention::sliding;
  } else if (key == "full_attention_every") {
    m.full_attention_every = read_int(f, 1);
  } else if (key == "attention_sinks") {
    m.attention_sinks = read_bool(f);
  } else if (key == "post_norms") {
    m.post_norms = read_bool(f);
  } else if (key == "logit_softcap") {
    m.logit_softcap = read_bool(f);
  } else if (key == "q_lora_rank") {
    m.q_lora_rank = read_int(f, 0);
  } else if (key == "kv_lora_rank") {
    m.kv_lora_rank = read_int(f, 1);
  } else if (key == "rope_head_dim") {
    m.rope_head_dim = read_int(f, 0);
  } else if (key == "v_head_dim") {
    m.v_head_dim = read_int(f, 1);
  } else if (key == "mtp_layers") {
    m.mtp_layers = read_int(f, 0);
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
  if (const auto kind = find(map, "local_attention"); kind && m.attention_window == 0) {
    fail(*kind,
         "local_attention names the kind of a window, and the model has no "
         "attention_window",
         "give attention_window, or remove local_attention");
  }
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
