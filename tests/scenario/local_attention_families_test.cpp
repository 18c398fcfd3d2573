// The families with local attention as the loader reads them, from the zoo and from their
// Hugging Face configs: GPT-OSS (a sliding window of 128 in every other layer, attention sinks,
// biased experts and router), Gemma 2 (GeGLU, four norms a layer, a window of 4,096 in every
// other layer, soft-capped logits) and Gemma 3's text decoder (QK-norm, five local layers to a
// global one), Mistral (a window in every layer).
#include <catch2/catch.hpp>

#include <string>

#include "fixture.hpp"
#include "sim/scenario/scenario.hpp"
#include "workloads/flop_conventions.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

using testing::kBase;
using testing::TempDir;
using testing::with;
using testing::zoo_model;

// openai/gpt-oss-120b's config.json as released, less its quantization and RoPE scaling.
const std::string kGptOssConfig = R"({
  "architectures": ["GptOssForCausalLM"],
  "attention_bias": true,
  "experts_per_token": 4,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2880,
  "intermediate_size": 2880,
  "layer_types": [
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention"
  ],
  "model_type": "gpt_oss",
  "num_attention_heads": 64,
  "num_experts_per_tok": 4,
  "num_hidden_layers": 36,
  "num_key_value_heads": 8,
  "num_local_experts": 128,
  "router_aux_loss_coef": 0.9,
  "sliding_window": 128,
  "swiglu_limit": 7.0,
  "tie_word_embeddings": false,
  "vocab_size": 201088
}
)";

// google/gemma-2-9b-it's config.json: no layer_types, the family's every other layer.
const std::string kGemma2Config = R"({
  "architectures": ["Gemma2ForCausalLM"],
  "attention_bias": false,
  "attn_logit_softcapping": 50.0,
  "final_logit_softcapping": 30.0,
  "head_dim": 256,
  "hidden_act": "gelu_pytorch_tanh",
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 3584,
  "intermediate_size": 14336,
  "model_type": "gemma2",
  "num_attention_heads": 16,
  "num_hidden_layers": 42,
  "num_key_value_heads": 8,
  "query_pre_attn_scalar": 256,
  "sliding_window": 4096,
  "vocab_size": 256000
}
)";

// google/gemma-3-1b-it's: sliding_window_pattern 6, no soft-capping.
const std::string kGemma3Config = R"({
  "architectures": ["Gemma3ForCausalLM"],
  "attention_bias": false,
  "attn_logit_softcapping": null,
  "final_logit_softcapping": null,
  "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 1152,
  "intermediate_size": 6912,
  "model_type": "gemma3_text",
  "num_attention_heads": 4,
  "num_hidden_layers": 26,
  "num_key_value_heads": 1,
  "query_pre_attn_scalar": 256,
  "rope_local_base_freq": 10000,
  "rope_theta": 1000000,
  "sliding_window": 512,
  "sliding_window_pattern": 6,
  "vocab_size": 262144
}
)";

// The same model as `expected`, whatever either is called.
void check_same_model(ModelSpec loaded, const ModelSpec& expected) {
  loaded.name = expected.name;
  loaded.source = expected.source;
  CHECK(loaded == expected);
}

}  // namespace

TEST_CASE("GPT-OSS in the zoo counts its model card's parameters, total and active") {
  // gpt-oss-120b by hand: embedding and unembedding 2 x 201,088 x 2,880; 36 layers of Q
  // (2,880 x 4,096), K and V (2,880 x 512 each) and o_proj (4,096 x 2,880) with their biases,
  // 64 sinks, a router of 2,880 x 128 and its bias, 128 experts of gate_up (2,880 x 5,760) and
  // down (2,880 x 2,880) with biases, two norms; the final norm: 116,829,156,672, the card's
  // 116.83B. Active, without the embedding as the card counts: 5.13B (4 of 128 experts).
  const ModelSpec large = zoo_model("gpt-oss-120b");
  CHECK(large.parameters() == 116'829'156'672.0);
  CHECK(active_parameters(large) - embedding_parameters(large) == 5'132'849'472.0);
  const ModelSpec small = zoo_model("gpt-oss-20b");
  CHECK(small.parameters() == 20'914'757'184.0);
  CHECK(active_parameters(small) - embedding_parameters(small) == Approx(3.61e9).epsilon(0.001));
  // Layers 0, 2, 4, ... slide a window of 128; 1, 3, 5, ... attend fully.
  CHECK(large.attends_locally(0));
  CHECK_FALSE(large.attends_locally(1));
  CHECK(large.attention_window == 128);
}

TEST_CASE("Gemma 2 and 3 in the zoo count their checkpoints' parameters") {
  // Keras Hub's Gemma presets (keras_hub/src/models/gemma/gemma_presets.py, gemma3_presets.py)
  // give 2,614,341,888, 9,241,705,984 and 27,227,128,320 for Gemma 2, 999,885,952 for Gemma 3
  // 1B, and for the 4B, 12B and 27B text decoders with a vocabulary of 262,144:
  // 3,880,099,328, 11,765,788,416 and 27,009,002,240; Hugging Face's checkpoints keep 262,208
  // rows (Gemma3TextConfig), 64 x hidden more. Gemma 2 9B by hand: the tied 256,000 x 3,584
  // embedding; 42 layers of Q and o_proj (3,584 x 4,096: 16 heads of 256, wider than hidden),
  // K and V (3,584 x 2,048), GeGLU's 3 x 3,584 x 14,336, four norms; the final norm.
  CHECK(zoo_model("gemma-2-2b").parameters() == 2'614'341'888.0);
  CHECK(zoo_model("gemma-2-9b").parameters() == 9'241'705'984.0);
  CHECK(zoo_model("gemma-2-27b").parameters() == 27'227'128'320.0);
  CHECK(zoo_model("gemma-3-1b").parameters() == 999'885'952.0);
  CHECK(zoo_model("gemma-3-4b").parameters() == 3'880'099'328.0 + 64 * 2560);
  CHECK(zoo_model("gemma-3-12b").parameters() == 11'765'788'416.0 + 64 * 3840);
  CHECK(zoo_model("gemma-3-27b").parameters() == 27'009'002'240.0 + 64 * 5376);
  // Gemma 3: layers 5, 11, 17, ... attend fully, the rest within 1,024 tokens.
  const ModelSpec gemma3 = zoo_model("gemma-3-27b");
  int full = 0;
  for (int layer = 0; layer < gemma3.layers; ++layer) full += !gemma3.attends_locally(layer);
  CHECK(full == 10);
  CHECK_FALSE(gemma3.attends_locally(5));
}

TEST_CASE("GPT-OSS, Gemma 2 and Gemma 3 configs load as the zoo's models") {
  TempDir dir;
  const auto load = [&](const std::string& config) {
    dir.write("model/config.json", config);
    const std::string scenario = with(kBase, "model: llama3-8b", "model: {hf_config: model}");
    return load_scenario(dir.write("scenario.yaml", scenario), testing::source_data())
        .variants[0]
        .inputs.model;
  };
  check_same_model(load(kGptOssConfig), zoo_model("gpt-oss-120b"));
  check_same_model(load(kGemma2Config), zoo_model("gemma-2-9b"));
  check_same_model(load(kGemma3Config), zoo_model("gemma-3-1b"));
  // Mistral 7B v0.1's window is every layer's.
  const ModelSpec mistral = load(R"({"model_type": "mistral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "sliding_window": 4096})");
  CHECK(mistral.attention_window == 4096);
  CHECK(mistral.full_attention_every == 0);
  CHECK(mistral.attends_locally(31));
  // A kind of window without a window is refused at its key.
  dir.write("scenario.yaml", with(kBase, "model: llama3-8b",
                                  "model: {preset: llama3-8b, local_attention: chunked}"));
  const auto kind = testing::file_error(dir.path() / "scenario.yaml");
  REQUIRE(kind);
  CHECK(kind->key() == "model.local_attention");
}

TEST_CASE("configs whose layers the op graph cannot model are refused at the key") {
  TempDir dir;
  const auto error_of = [&](const std::string& config) {
    dir.write("model/config.json", config);
    dir.write("scenario.yaml", with(kBase, "model: llama3-8b", "model: {hf_config: model}"));
    return testing::file_error(dir.path() / "scenario.yaml");
  };
  // Full attention in layers 33 and 34 breaks the every-other-layer pattern: refused at layer
  // 34's entry, on the config's 18th line.
  const std::string broken = with(kGptOssConfig, R"("sliding_attention", "full_attention"
  ])",
                                  R"("full_attention", "full_attention"
  ])");
  const auto pattern = error_of(broken);
  REQUIRE(pattern);
  CHECK(pattern->line() == 18);
  CHECK_THAT(pattern->what(), Catch::Contains("layer 34's attention breaks the pattern"));
  // Gemma 3's multimodal config: its vision encoder is not modelled.
  const auto multimodal = error_of(R"({"model_type": "gemma3", "text_config": {}})");
  REQUIRE(multimodal);
  CHECK(multimodal->key() == "model_type");
  CHECK_THAT(multimodal->what(), Catch::Contains("vision encoder"));
  // Gemma with another activation, read where Gemma's MLP reads it.
  const auto act = error_of(with(kGemma2Config, "\"hidden_activation\": \"gelu_pytorch_tanh\"",
                                 "\"hidden_activation\": \"silu\""));
  REQUIRE(act);
  CHECK(act->key() == "hidden_activation");
  // GPT-OSS without attention biases; EmbeddingGemma's bidirectional encoder.
  const auto unbiased =
      error_of(with(kGptOssConfig, "\"attention_bias\": true", "\"attention_bias\": false"));
  REQUIRE(unbiased);
  CHECK(unbiased->key() == "attention_bias");
  const auto bidirectional =
      error_of(with(kGemma3Config, "\"attention_bias\": false",
                    "\"attention_bias\": false,\n  \"use_bidirectional_attention\": true"));
  REQUIRE(bidirectional);
  CHECK(bidirectional->key() == "use_bidirectional_attention");
}

}  // namespace fleetsim
