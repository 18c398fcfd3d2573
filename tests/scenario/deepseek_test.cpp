// DeepSeek-V2 and V3 as the loader reads them, from the zoo and from their Hugging Face
// configs: latent attention, a shared expert beside 256 routed ones, the first layers dense.
#include <catch2/catch.hpp>

#include <string>

#include "fixture.hpp"
#include "sim/scenario/scenario.hpp"
#include "workloads/flop_conventions.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

using testing::with;

// deepseek-ai/DeepSeek-V3's config.json, the fields that shape the model, as published.
const std::string kDeepSeekV3Config = R"({
  "architectures": ["DeepseekV3ForCausalLM"],
  "attention_bias": false,
  "first_k_dense_replace": 3,
  "hidden_act": "silu",
  "hidden_size": 7168,
  "intermediate_size": 18432,
  "kv_lora_rank": 512,
  "model_type": "deepseek_v3",
  "moe_intermediate_size": 2048,
  "moe_layer_freq": 1,
  "n_group": 8,
  "n_routed_experts": 256,
  "n_shared_experts": 1,
  "norm_topk_prob": true,
  "num_attention_heads": 128,
  "num_experts_per_tok": 8,
  "num_hidden_layers": 61,
  "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1,
  "q_lora_rank": 1536,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "scoring_func": "sigmoid",
  "tie_word_embeddings": false,
  "topk_group": 4,
  "topk_method": "noaux_tc",
  "v_head_dim": 128,
  "vocab_size": 129280
}
)";

// 16 nodes of DGX H100 with ZeRO 1 (multi-token prediction's rule), enough memory for 671 B
// parameters in some layout.
std::string on_16_nodes(const std::string& model) {
  return with(with(with(with(testing::kBase, "dp: 8", "dp: 128"), "zero: 3", "zero: 1"),
                   "  node: dgx-h100\n", "  node: dgx-h100\n  nodes: 16\n"),
              "model: llama3-8b", "model: " + model);
}

}  // namespace

TEST_CASE("DeepSeek-V3 counts its checkpoint's parameters, from the zoo and from its config") {
  // Per layer: latent attention 187,107,328 (q_a_proj, q_a_layernorm, q_b_proj,
  // kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj) and two norms of 7,168; layers 0-2 a
  // dense MLP of 3 x 7,168 x 18,432; layers 3-60 256 experts and a shared one of 3 x 7,168 x
  // 2,048, the router's 256 x 7,168 and its 256 score biases; untied embedding and head of
  // 129,280 x 7,168; the final norm: 671,026,419,200. The multi-token prediction module (layer
  // 61 of the release, 13,463,426,304 values with its copies of the embedding and head, 2 x
  // 926,679,040): an experts' layer, enorm, hnorm, its final norm (shared_head.norm) and
  // eh_proj of 2 x 7,168 x 7,168: 11,610,068,224. The released safetensors hold
  // 684,531,386,000 values: the model and its module, the module's copies of the embedding
  // and head, and 41,540,496 FP8 block scales.
  const ModelSpec zoo = testing::load_text(on_16_nodes("deepseek-v3")).variants[0].inputs.model;
  CHECK(zoo.mtp_layers == 1);
  CHECK(zoo.parameters() == 682'636'487'424.0);
  static_assert(682'636'487'424 + 2 * 926'679'040LL + 41'540'496 == 684'531'386'000);
  CHECK(mtp_module_parameters(zoo) == 11'610'068'224.0);
  CHECK(zoo.expert_layers() == 58);
  CHECK(zoo.latent_attention());
  // Active: 248 of each experts' layer's routed experts idle, the module's too; without the
  // module DeepSeek's "37B activated".
  CHECK(active_parameters(zoo) == 682'636'487'424.0 - 59.0 * 248 * 3 * 7168 * 2048);
  ModelSpec without_module = zoo;
  without_module.mtp_layers = 0;
  CHECK(without_module.parameters() == 671'026'419'200.0);
  CHECK(active_parameters(without_module) == Approx(37.55e9).epsilon(0.001));

  testing::TempDir dir;
  dir.write("DeepSeek-V3/config.json", kDeepSeekV3Config);
  const auto load = [&](const std::string& hf_config) {
    return load_scenario(dir.write("scenario.yaml", on_16_nodes("{hf_config: " + hf_config + "}")),
                         testing::source_data())
        .variants[0]
        .inputs.model;
  };
  ModelSpec loaded = load("DeepSeek-V3");
  CHECK(loaded.name == "DeepSeek-V3");
  loaded.name = zoo.name;
  loaded.source = zoo.source;
  CHECK(loaded == zoo);

  // DeepSeek-V2-Lite: queries from the hidden state (q_lora_rank null), 64 experts of 1,408, 6
  // a token, 2 shared, greedy routing without score biases, the first layer dense:
  // 15,706,484,224 by its tensors (Hugging Face: "15.7B params").
  dir.write("DeepSeek-V2-Lite/config.json", R"({
  "model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
  "kv_lora_rank": 512, "moe_intermediate_size": 1408, "moe_layer_freq": 1,
  "n_routed_experts": 64, "n_shared_experts": 2, "num_attention_heads": 16,
  "num_experts_per_tok": 6, "num_hidden_layers": 27, "num_key_value_heads": 16,
  "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "topk_method": "greedy", "first_k_dense_replace": 1, "v_head_dim": 128,
  "vocab_size": 102400, "tie_word_embeddings": false, "attention_bias": false
}
)");
  const ModelSpec lite = load("DeepSeek-V2-Lite");
  CHECK(lite.q_lora_rank == 0);
  CHECK(lite.shared_expert_ffn == 2 * 1408);
  CHECK_FALSE(lite.expert_score_bias);
  CHECK(lite.parameters() == 15'706'484'224.0);

  // Experts placed by moe_layer_freq other than 1 are refused at the key.
  dir.write("DeepSeek-V3/config.json",
            with(kDeepSeekV3Config, "\"moe_layer_freq\": 1", "\"moe_layer_freq\": 2"));
  dir.write("scenario.yaml", on_16_nodes("{hf_config: DeepSeek-V3}"));
  const auto placed = testing::file_error(dir.path() / "scenario.yaml");
  REQUIRE(placed);
  CHECK(placed->key() == "moe_layer_freq");
}

TEST_CASE("latent attention's keys are refused where the model is not DeepSeek's") {
  // Latent attention with fewer KV heads than heads, or its shapes without kv_lora_rank.
  const auto problem = [](const std::string& model) {
    return testing::load_error(on_16_nodes(model));
  };
  const auto grouped = problem("{preset: deepseek-v3, kv_heads: 8}");
  REQUIRE(grouped);
  CHECK_THAT(grouped->what(), Catch::Contains("as DeepSeek-V2 and V3 run it"));
  const auto shapes = problem("{preset: llama3-8b, v_head_dim: 128}");
  REQUIRE(shapes);
  CHECK(shapes->key() == "model.v_head_dim");
  // LoRA on its projections is not modelled.
  const auto lora = testing::load_error(
      with(on_16_nodes("deepseek-v3"), "training:\n", "training:\n  method: lora\n"));
  REQUIRE(lora);
  CHECK_THAT(lora->what(), Catch::Contains("LoRA on latent attention"));
}

}  // namespace fleetsim
