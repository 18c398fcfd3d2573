// The model families beyond Llama as the loader reads them, from the zoo and from their
// Hugging Face configs: Qwen2.5 (biases on Q, K and V) and Qwen3 (QK-norm, heads wider than
// hidden / heads).
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

// Qwen/Qwen3-32B's config.json, the fields that shape the model, as published.
const std::string kQwen3Config = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 5120,
  "intermediate_size": 25600,
  "max_window_layers": 64,
  "model_type": "qwen3",
  "num_attention_heads": 64,
  "num_hidden_layers": 64,
  "num_key_value_heads": 8,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "use_sliding_window": false,
  "vocab_size": 151936
}
)";

// Qwen/Qwen2.5-7B's: a window the model does not use unless use_sliding_window says so.
const std::string kQwen25Config = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "hidden_act": "silu",
  "hidden_size": 3584,
  "intermediate_size": 18944,
  "max_window_layers": 28,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_hidden_layers": 28,
  "num_key_value_heads": 4,
  "sliding_window": 131072,
  "tie_word_embeddings": false,
  "use_sliding_window": false,
  "vocab_size": 152064
}
)";

}  // namespace

TEST_CASE("Qwen2.5 and Qwen3 in the zoo count their released checkpoints' parameters") {
  // The Hugging Face Hub's safetensors totals of Qwen/Qwen2.5-7B, Qwen/Qwen3-8B and
  // Qwen/Qwen3-32B (every tensor BF16). Qwen3-32B by hand: embedding and head 2 x 151,936 x
  // 5,120; 64 layers of 5,120 x (8,192 + 2 x 1,024) for Q, K, V (64 heads of 128, wider than
  // hidden), 8,192 x 5,120 for o_proj, 3 x 5,120 x 25,600 for the MLP, 2 x 5,120 norms and
  // 2 x 128 QK-norm weights; the final norm: 32,762,123,264. Qwen2.5-7B adds its Q, K, V
  // biases, 3,584 + 2 x 512 a layer.
  CHECK(zoo_model("qwen2.5-7b").parameters() == 7'615'616'512.0);
  CHECK(zoo_model("qwen3-8b").parameters() == 8'190'735'360.0);
  const ModelSpec qwen3_32b = zoo_model("qwen3-32b");
  CHECK(qwen3_32b.parameters() == 32'762'123'264.0);
  CHECK(qwen3_32b.head_dim() == 128);
  CHECK(qwen3_32b.attention_width() == 8192);
}

TEST_CASE("Qwen3's mixtures of experts count their checkpoints' parameters, and the active share") {
  // The Hub's totals of Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B. Each of 48 (94) layers:
  // the attention as Qwen3's dense models have it, a router of hidden x 128 and 128 experts of
  // 3 x hidden x 768 (1,536). A token visits 8 of the 128: 3.35 B and 22.19 B parameters
  // active, the "3.3B" and "22B activated" of the model cards.
  const ModelSpec small = zoo_model("qwen3-30b-a3b");
  CHECK(small.parameters() == 30'532'122'624.0);
  CHECK(active_parameters(small) == 30'532'122'624.0 - 48.0 * 120 * 3 * 2048 * 768);
  CHECK(active_parameters(small) == Approx(3.3e9).epsilon(0.02));
  const ModelSpec large = zoo_model("qwen3-235b-a22b");
  CHECK(large.parameters() == 235'093'634'560.0);
  CHECK(active_parameters(large) == Approx(22e9).epsilon(0.03));
}

TEST_CASE("a Qwen3 layer's attention is heads x head_dim wide, its queries and keys normed") {
  // Qwen3-32B on tp 8, 4,096 tokens: the QKV GEMM writes (8,192 + 2 x 1,024) / 8 columns from
  // 5,120, o_proj reads 8,192 / 8 and writes 5,120, and causal attention does 2 x 2 x 4,096^2 x
  // 8,192 / 8 / 2 FLOPs forward; QK-norm reads and writes the 9,216 / 8 normed columns.
  const ModelSpec m = zoo_model("qwen3-32b");
  TrainingSpec training;
  training.seq_len = 4096;
  training.micro_batch = 1;
  training.global_batch = 8;
  const LayerOps ops = decoder_layer_ops(m, training, 8, Recompute::none, 1, 1, true, {});
  int found = 0;
  for (const Op& op : ops.forward) {
    if (op.name == "qkv") {
      CHECK(op.kernel.n == (8192 + 2 * 1024) / 8);
      CHECK(op.kernel.k == 5120);
      ++found;
    } else if (op.name == "o_proj") {
      CHECK(op.kernel.n == 5120);
      CHECK(op.kernel.k == 8192 / 8);
      ++found;
    } else if (op.name == "attention") {
      CHECK(op.kernel.flops == Approx(2.0 * 2 * 4096.0 * 4096 * 8192 / 8 / 2));
      ++found;
    } else if (op.name == "qk_norm") {
      CHECK(op.kernel.bytes == Approx(2 * 2 * 4096.0 * (8192 + 1024) / 8));
      ++found;
    }
  }
  CHECK(found == 4);
}

TEST_CASE("Qwen configs load from a model directory, as the zoo's models, named as saved") {
  TempDir dir;
  dir.write("models/Qwen3-32B/config.json", kQwen3Config);
  const auto load = [&](const std::string& hf_config) {
    const std::string scenario =
        with(kBase, "model: llama3-8b", "model: {hf_config: " + hf_config + "}");
    return load_scenario(dir.write("scenario.yaml", scenario), testing::source_data())
        .variants[0]
        .inputs.model;
  };
  // The directory stands for its config.json.
  const ModelSpec qwen3 = load("models/Qwen3-32B");
  CHECK(qwen3.name == "Qwen3-32B");
  CHECK(qwen3.qk_norm);
  CHECK_FALSE(qwen3.qkv_bias);
  CHECK(qwen3.head_dim() == 128);
  CHECK(qwen3.parameters() == zoo_model("qwen3-32b").parameters());

  // Qwen2.5: biased Q, K and V; its unused window accepted, a used one refused at its key. A
  // config saved with its hub name takes that name.
  dir.write("models/q/config.json",
            with(kQwen25Config, "{", "{\n  \"_name_or_path\": \"Qwen/Qwen2.5-7B\","));
  const ModelSpec qwen25 = load("models/q/config.json");
  CHECK(qwen25.name == "Qwen2.5-7B");
  CHECK(qwen25.qkv_bias);
  CHECK_FALSE(qwen25.linear_bias);
  CHECK(qwen25.parameters() == 7'615'616'512.0);
  dir.write("models/q/config.json",
            with(kQwen25Config, "\"use_sliding_window\": false", "\"use_sliding_window\": true"));
  const auto windowed = testing::file_error(dir.path() / "scenario.yaml");
  REQUIRE(windowed);
  CHECK(windowed->key() == "use_sliding_window");
  CHECK_THAT(windowed->what(), Catch::Contains("sliding window in the layers from"));

  // Qwen3's mixture of experts: every layer's MLP 128 experts of moe_intermediate_size, the
  // zoo's model; with dense layers among them (decoder_sparse_step, mlp_only_layers) those are
  // intermediate_size wide; dense layers that are not the first ones are refused at the list.
  const std::string moe = R"({
  "head_dim": 128, "hidden_size": 2048, "intermediate_size": 6144, "model_type": "qwen3_moe",
  "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
  "decoder_sparse_step": 1, "mlp_only_layers": [], "num_attention_heads": 32,
  "num_hidden_layers": 48, "num_key_value_heads": 4, "tie_word_embeddings": false,
  "vocab_size": 151936, "sliding_window": null, "use_sliding_window": false
}
)";
  dir.write("models/Qwen3-30B-A3B/config.json", moe);
  const ModelSpec qwen3_moe = load("models/Qwen3-30B-A3B");
  CHECK(qwen3_moe.experts == 128);
  CHECK(qwen3_moe.ffn == 768);
  CHECK(qwen3_moe.parameters() == zoo_model("qwen3-30b-a3b").parameters());
  dir.write("models/Qwen3-30B-A3B/config.json",
            with(with(moe, "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2"),
                 "\"mlp_only_layers\": []", "\"mlp_only_layers\": [0, 1]"));
  const ModelSpec sparse = load("models/Qwen3-30B-A3B");
  CHECK(sparse.first_dense_layers == 2);
  CHECK(sparse.moe_layer_every == 2);
  CHECK(sparse.dense_ffn == 6144);
  // Layers 3, 5, ..., 47 route to experts: 23 of the 48.
  CHECK(sparse.expert_layers() == 23);
  const ModelSpec dense = sparse.dense_layer_model();
  CHECK(sparse.parameters() == qwen3_moe.parameters() - 25 * (decoder_layer_parameters(qwen3_moe) -
                                                              decoder_layer_parameters(dense)));
  dir.write("models/Qwen3-30B-A3B/config.json",
            with(moe, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [1, 4]"));
  const auto scattered = testing::file_error(dir.path() / "scenario.yaml");
  REQUIRE(scattered);
  CHECK(scattered->key() == "mlp_only_layers[0]");
}

TEST_CASE("Qwen1.5-MoE counts its checkpoint's parameters, its gated shared expert included") {
  // Keras Hub's qwen1.5_moe_2.7b_en preset (keras_hub/src/models/qwen_moe/qwen_moe_presets.py):
  // 14,315,784,192. By hand: embedding and head 2 x 151,936 x 2,048; 24 layers of Q, K, V
  // (2,048 x 2,048 each, with biases) and o_proj, a router of 2,048 x 60, 60 experts of
  // 3 x 2,048 x 1,408, a shared expert of 3 x 2,048 x 5,632 and its 2,048-wide gate, two
  // norms; the final norm. 2.69 B are active a token (4 of the 60 experts): the "A2.7B".
  const ModelSpec m = testing::zoo_model("qwen1.5-moe-a2.7b");
  CHECK(m.parameters() == 14'315'784'192.0);
  CHECK(active_parameters(m) == Approx(2.7e9).epsilon(0.01));
  // Its config.json (the fields that shape it) loads as the same model.
  testing::TempDir dir;
  dir.write("Qwen1.5-MoE-A2.7B/config.json", R"({
  "decoder_sparse_step": 1, "hidden_act": "silu", "hidden_size": 2048,
  "intermediate_size": 5632, "mlp_only_layers": [], "model_type": "qwen2_moe",
  "moe_intermediate_size": 1408, "num_attention_heads": 16, "num_experts": 60,
  "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
  "shared_expert_intermediate_size": 5632, "sliding_window": 32768,
  "tie_word_embeddings": false, "use_sliding_window": false, "vocab_size": 151936
}
)");
  const std::string scenario =
      testing::with(testing::kBase, "model: llama3-8b", "model: {hf_config: Qwen1.5-MoE-A2.7B}");
  ModelSpec loaded = load_scenario(dir.write("scenario.yaml", scenario), testing::source_data())
                         .variants[0]
                         .inputs.model;
  loaded.name = m.name;
  loaded.source = m.source;
  CHECK(loaded == m);
}

}  // namespace fleetsim

namespace fleetsim {

TEST_CASE("Llama 4 counts its checkpoints' text parameters, dense layers among experts' ones") {
  // Scout: 48 layers, each Q and O of 5,120 x 5,120, K and V of 5,120 x 1,024, two norms, a
  // router of 5,120 x 16, 16 experts and a shared expert of 3 x 5,120 x 8,192 (its L2 QK-norm
  // has no weight); untied embedding and head of 202,048 x 5,120; the final norm:
  // 107,769,861,120. With the vision encoder and projector (871,932,416) this is the
  // 108,641,793,536 of the released checkpoint (Meta: "109B"). Maverick: every other layer
  // (1, 3, ..., 47) 128 experts and a shared expert, the others a dense MLP of 3 x 5,120 x
  // 16,384: 400,711,848,960 (401,583,781,376 with the vision encoder; Meta: "400B"). Both
  // have 17B active parameters a token.
  const ModelSpec scout = testing::zoo_model("llama4-scout-17b-16e");
  CHECK(scout.parameters() == 107'769'861'120.0);
  CHECK(scout.expert_layers() == 48);
  CHECK(active_parameters(scout) == Approx(17.17e9).epsilon(0.001));
  // (Its 801 GB of BF16 weights need more than one node.)
  const std::string four_nodes =
      testing::with(testing::with(testing::kBase, "dp: 8", "dp: 32"), "  node: dgx-h100\n",
                    "  node: dgx-h100\n  nodes: 4\n");
  const ModelSpec maverick = testing::load_text(testing::with(four_nodes, "model: llama3-8b",
                                                              "model: llama4-maverick-17b-128e"))
                                 .variants[0]
                                 .inputs.model;
  CHECK(maverick.parameters() == 400'711'848'960.0);
  CHECK(maverick.expert_layers() == 24);
  CHECK_FALSE(maverick.layer_has_experts(0));
  CHECK(maverick.layer_has_experts(1));
  CHECK(active_parameters(maverick) == Approx(17.18e9).epsilon(0.001));
  // Their text configs load as the zoo's models: Llama4TextConfig's defaults fill what a
  // config leaves out (here no_rope_layers, attention_chunk_size and intermediate_size_mlp).
  testing::TempDir dir;
  const std::string text = R"({
  "model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
  "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
  "head_dim": 128, "vocab_size": 202048, "num_local_experts": 16, "num_experts_per_tok": 1,
  "interleave_moe_layer_step": 1, "use_qk_norm": true, "attention_bias": false,
  "tie_word_embeddings": false, "hidden_act": "silu", "router_jitter_noise": 0.0
}
)";
  dir.write("Llama-4-Scout-17B-16E/config.json", text);
  const auto load = [&](const std::string& name) {
    const std::string scenario =
        testing::with(four_nodes, "model: llama3-8b", "model: {hf_config: " + name + "}");
    ModelSpec m = load_scenario(dir.write("scenario.yaml", scenario), testing::source_data())
                      .variants[0]
                      .inputs.model;
    return m;
  };
  ModelSpec loaded = load("Llama-4-Scout-17B-16E");
  CHECK(loaded.name == "Llama-4-Scout-17B-16E");
  loaded.name = scout.name;
  loaded.source = scout.source;
  CHECK(loaded == scout);
  dir.write("Llama-4-Maverick-17B-128E/config.json",
            testing::with(
                testing::with(
                    testing::with(text, "\"num_local_experts\": 16", "\"num_local_experts\": 128"),
                    "\"interleave_moe_layer_step\": 1",
                    "\"interleave_moe_layer_step\": 2, \"intermediate_size_mlp\": 16384"),
                "\"use_qk_norm\": true", "\"use_qk_norm\": false"));
  loaded = load("Llama-4-Maverick-17B-128E");
  loaded.name = maverick.name;
  loaded.source = maverick.source;
  CHECK(loaded == maverick);
  // moe_layers decides the pattern where it is listed; attention_chunk_size null makes every
  // layer global.
  dir.write("Llama-4-Maverick-17B-128E/config.json",
            testing::with(testing::with(text, "\"num_local_experts\": 16",
                                        "\"num_local_experts\": 128, \"moe_layers\": [1, 3, 5, 7, "
                                        "9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33, 35, "
                                        "37, 39, 41, 43, 45, 47]"),
                          "\"use_qk_norm\": true", "\"attention_chunk_size\": null"));
  loaded = load("Llama-4-Maverick-17B-128E");
  CHECK(loaded.moe_layer_every == 2);
  CHECK(loaded.expert_layers() == 24);
  CHECK(loaded.attention_window == 0);
  CHECK(loaded.full_attention_every == 0);
  // The multimodal config is refused with the way to give its text decoder.
  dir.write("Llama-4-Maverick-17B-128E/config.json",
            testing::with(text, "\"llama4_text\"", "\"llama4\""));
  const auto multimodal = testing::file_error(dir.path() / "scenario.yaml");
  REQUIRE(multimodal);
  CHECK(multimodal->key() == "model_type");
  CHECK_THAT(multimodal->what(), Catch::Contains("text_config"));
}

}  // namespace fleetsim
