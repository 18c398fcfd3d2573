// Models, training recipes and layouts as the loader reads them: the zoo, Hugging Face configs,
// LoRA, pipelines, GPT-3, overlap, offload, experts and context parallelism, each refusal at
// the key to change.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "sim/scenario/scenario.hpp"
#include "workloads/layout/dimensions.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

using testing::kBase;
using testing::load_error;
using testing::load_text;
using testing::shipped_file;
using testing::TempDir;
using testing::with;

TEST_CASE("the model zoo's Llama 2 and Llama 3 405B count their published parameters") {
  // Hugging Face configs of Llama-2-7b, -13b and -70b report 6,738,415,616, 13,015,864,320 and
  // 68,976,648,192 parameters; Llama 3 405B: embedding and head 2 x 128,256 x 16,384, 126
  // layers of 16,384 x (16,384 + 2 x 1,024) + 16,384^2 + 3 x 16,384 x 53,248 + 2 x 16,384,
  // and the final norm: 405,853,388,800, the count Meta publishes.
  const auto parameters = [](const std::string& model) {
    // On 8 nodes: 405B's weights do not fit one node's GPUs in any layout.
    return load_text(
               with(with(with(kBase, "model: llama3-8b", "model: " + model), "dp: 8", "dp: 64"),
                    "node: dgx-h100\n", "node: dgx-h100\n  nodes: 8\n"))
        .variants[0]
        .inputs.model.parameters();
  };
  CHECK(parameters("llama2-7b") == 6'738'415'616.0);
  CHECK(parameters("llama2-13b") == 13'015'864'320.0);
  CHECK(parameters("llama2-70b") == 68'976'648'192.0);
  CHECK(parameters("llama3-405b") == 405'853'388'800.0);
}

TEST_CASE("LoRA loads with its rank and targets, and what it cannot adapt is refused") {
  const std::string lora =
      with(kBase, "training:\n", "training:\n  method: lora\n  lora: {rank: 8, targets: [q, v]}\n");
  const StepInputs in = load_text(lora).variants[0].inputs;
  REQUIRE(in.training.lora);
  CHECK(in.training.lora->rank == 8);
  CHECK(in.training.lora->targets == std::vector<std::string>{"q", "v"});
  const StepInputs defaults =
      load_text(with(kBase, "training:\n", "training:\n  method: lora\n")).variants[0].inputs;
  CHECK(defaults.training.lora->targets.size() == 7);  // every linear layer

  const auto stray = load_error(with(lora, "method: lora", "method: full"));
  REQUIRE(stray);
  CHECK(stray->key() == "training.lora");
  const auto unknown = load_error(with(lora, "targets: [q, v]", "targets: [q, w]"));
  REQUIRE(unknown);
  CHECK(unknown->key() == "training.lora.targets[1]");
  // Adapters split over tensor parallelism as NeMo splits them, under FP8 base GEMMs too; a
  // 4-bit QLoRA base has no FP8 GEMM to run.
  const std::string tensor = with(with(lora, "dp: 8", "dp: 4\n  tp: 2"), "zero: 3", "zero: 1");
  CHECK(load_text(tensor).variants[0].inputs.plan.tp == 2);
  const std::string fp8 = with(tensor, "method: lora", "method: lora\n  precision: fp8");
  CHECK(load_text(fp8).variants[0].inputs.training.precision == Precision::fp8);
  const auto quantized = load_error(with(fp8, "method: lora", "method: qlora"));
  REQUIRE(quantized);
  CHECK(quantized->key() == "training.precision");
  const StepInputs dropped =
      load_text(with(lora, "targets: [q, v]",
                     "targets: [qkv, o], dropout: 0.1, sequence_all_to_all: true"))
          .variants[0]
          .inputs;
  CHECK(dropped.training.lora->dropout == 0.1);
  CHECK(dropped.training.lora->sequence_all_to_all);
  CHECK(dropped.training.lora->targets == std::vector<std::string>{"qkv", "o"});
  const auto certain = load_error(with(lora, "targets: [q, v]", "targets: [q, v], dropout: 1"));
  REQUIRE(certain);
  CHECK(certain->key() == "training.lora.dropout");
  const auto fused = load_error(with(lora, "targets: [q, v]", "targets: [q, qkv]"));
  REQUIRE(fused);
  CHECK_THAT(fused->what(), Catch::Contains("fused projection"));
  const std::string gpt3 =
      with(with(lora, "model: llama3-8b", "model: gpt3-175b"), "seq_len: 4096", "seq_len: 2048");
  const auto gate = load_error(with(gpt3, "targets: [q, v]", "targets: [q, gate]"));
  REQUIRE(gate);
  CHECK_THAT(gate->what(), Catch::Contains("no gate projection"));
  CHECK(gate->key() == "training.lora.targets[1]");
  const StepInputs gpt3_default =
      load_text(with(gpt3, "\n  lora: {rank: 8, targets: [q, v]}", "")).variants[0].inputs;
  CHECK(gpt3_default.training.lora->targets.size() == 6);
}

TEST_CASE("a pipeline layout loads, and its limits are checked at their keys") {
  const std::string pipelined =
      with(kBase, "  dp: 8\n  zero: 3\n", "  dp: 4\n  pp: 2\n  schedule: gpipe\n  zero: 1\n");
  const StepInputs in = load_text(pipelined).variants[0].inputs;
  CHECK(in.plan.pp == 2);
  CHECK(in.plan.dp == 4);
  CHECK(in.plan.schedule == PipelineSchedule::gpipe);
  // Stages that do not divide the layers split them unevenly: BLOOM's 70 over 8 stages.
  const StepInputs uneven =
      load_text(with(with(with(pipelined, "pp: 2", "pp: 8"), "dp: 4", "dp: 1"), "llama3-8b",
                     "bloom-176b"))
          .variants[0]
          .inputs;
  CHECK(uneven.plan.pp == 8);
  CHECK(stage_layers(uneven.model, uneven.plan, 0) == 8);
  CHECK(stage_layers(uneven.model, uneven.plan, 1) == 9);
  CHECK(stage_layers(uneven.model, uneven.plan, 7) == 8);

  const auto sharded = load_error(with(pipelined, "zero: 1", "zero: 3"));
  REQUIRE(sharded);
  CHECK(sharded->key() == "layout.zero");
  CHECK_THAT(sharded->what(), Catch::Contains("does not combine with pp 2"));
  // PyTorch's FSDP runs under PyTorch's pipelining (torchtitan), and gradients sharded under a
  // pipeline as Llama 3's FSDP ran them.
  CHECK_FALSE(load_error(with(pipelined, "zero: 1", "zero: 3\n  fsdp2: true")));
  CHECK_FALSE(load_error(with(pipelined, "zero: 1", "zero: 2")));
  const auto interleaved = load_error(with(pipelined, "schedule: gpipe", "schedule: interleaved"));
  REQUIRE(interleaved);
  CHECK_THAT(interleaved->what(), Catch::Contains("interleaving is set by vpp"));
  const auto virtual_stages = load_error(with(pipelined, "pp: 2", "pp: 2\n  vpp: 2"));
  REQUIRE(virtual_stages);  // GPipe has no interleaved form
  CHECK(virtual_stages->key() == "layout.vpp");
  const std::string interleaved_ok =
      with(with(pipelined, "pp: 2", "pp: 2\n  vpp: 4"), "schedule: gpipe", "schedule: 1f1b");
  CHECK(load_text(interleaved_ok).variants[0].inputs.plan.vpp == 4);
  const auto too_deep = load_error(with(interleaved_ok, "vpp: 4", "vpp: 20"));
  REQUIRE(too_deep);
  CHECK(too_deep->key() == "layout.vpp");
  CHECK_THAT(too_deep->what(), Catch::Contains("pp x vpp = 40 is more virtual stages than the "
                                               "model's 32 layers"));
  const auto odd_batches =
      load_error(with(interleaved_ok, "global_batch: 256", "global_batch: 24"));  // m = 3
  REQUIRE(odd_batches);
  CHECK(odd_batches->key() == "layout.vpp");
  CHECK_THAT(odd_batches->what(), Catch::Contains("(3) to be a multiple of pp 2"));
  const auto count = load_error(with(pipelined, "dp: 4", "dp: 8"));
  REQUIRE(count);
  CHECK_THAT(count->what(), Catch::Contains("got 1 x 2 x 8"));
  CHECK_THAT(count->what(), Catch::Contains("set layout.dp to 4"));
}

TEST_CASE("the shipped GPT-3 scenario uses every GPU with Megatron-LM's layout") {
  const Scenario s = load_scenario(
      std::filesystem::path(FLEETSIM_SOURCE_DIR) / "scenarios" / "gpt3-175b-pipeline.yaml",
      testing::source_data());
  REQUIRE(s.variants.size() == 4);
  for (const auto& variant : s.variants) {
    const StepInputs& in = variant.inputs;
    CHECK(in.plan.tp * in.plan.pp * in.plan.dp == in.nodes * in.node.gpus);
    CHECK(in.model.name == "gpt3-175b");
  }
  CHECK(s.variants[1].inputs.plan.schedule == PipelineSchedule::gpipe);
  CHECK(s.variants[2].inputs.plan.vpp == 2);
  CHECK(s.variants[3].inputs.plan.pp == 8);
}

TEST_CASE("GPT-3 175B loads with its architecture, and its limits are checked at their keys") {
  const std::string gpt3 =
      with(with(kBase, "model: llama3-8b", "model: gpt3-175b"), "  seq_len: 4096\n",
           "  seq_len: 2048\n  attention: eager\n  dropout: 0.1\n");
  const StepInputs in = load_text(gpt3).variants[0].inputs;
  CHECK(in.model.mlp == Mlp::gelu);
  CHECK(in.model.norm == Norm::layernorm);
  CHECK(in.model.linear_bias);
  CHECK(in.model.positions == Positions::learned);
  CHECK(in.model.max_positions == 2048);
  CHECK(in.model.parameters() == Approx(174.6e9).epsilon(0.0005));
  CHECK(in.training.attention == Attention::eager);
  CHECK(in.training.dropout == 0.1);
  const StepInputs eight_bit =
      load_text(with(with(gpt3, "  dropout: 0.1\n", "  dropout: 0.1\n  optimizer: adam8bit\n"),
                     "zero: 3", "zero: 3\n  recompute: selective"))
          .variants[0]
          .inputs;
  CHECK(eight_bit.training.optimizer == Optimizer::adam8bit);
  CHECK(eight_bit.plan.recompute == Recompute::selective);

  const auto too_long = load_error(with(gpt3, "seq_len: 2048", "seq_len: 4096"));
  REQUIRE(too_long);
  CHECK(too_long->key() == "training.seq_len");
  CHECK_THAT(too_long->what(), Catch::Contains("2048 learned positions"));
  const auto dropout = load_error(with(gpt3, "dropout: 0.1", "dropout: 1.5"));
  REQUIRE(dropout);
  CHECK(dropout->key() == "training.dropout");
  CHECK(dropout->line() == 6);
  const auto attention = load_error(with(gpt3, "attention: eager", "attention: sdpa"));
  REQUIRE(attention);
  CHECK(attention->key() == "training.attention");
  const auto no_table =
      load_error(with(kBase, "model: llama3-8b", "model: {preset: llama3-8b, positions: learned}"));
  REQUIRE(no_table);
  CHECK_THAT(no_table->what(), Catch::Contains("max_positions"));
  const auto unused_table = load_error(
      with(kBase, "model: llama3-8b", "model: {preset: llama3-8b, max_positions: 8192}"));
  REQUIRE(unused_table);
  CHECK(unused_table->key() == "model.max_positions");
}

TEST_CASE("a model can come from a Hugging Face config.json, with errors at its line") {
  // Meta-Llama-3-8B's config.json (the fields fleetsim reads, as published): the same model as
  // the llama3-8b preset.
  const std::string config = R"({
  "architectures": ["LlamaForCausalLM"],
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "tie_word_embeddings": false,
  "vocab_size": 128256
}
)";
  TempDir dir;
  dir.write("models/Meta-Llama-3-8B/config.json", config);
  const std::string scenario =
      with(kBase, "model: llama3-8b", "model: {hf_config: models/Meta-Llama-3-8B/config.json}");
  const Scenario s = load_scenario(dir.write("scenario.yaml", scenario), testing::source_data());
  const ModelSpec& hf = s.variants[0].inputs.model;
  const ModelSpec preset = load_text(kBase).variants[0].inputs.model;
  CHECK(hf.name == "Meta-Llama-3-8B");
  CHECK(hf.parameters() == preset.parameters());
  CHECK(hf.kv_heads == 8);
  CHECK_THAT(hf.source, Catch::Contains("config.json"));

  const auto error_with = [&](const std::string& from, const std::string& to) {
    dir.write("models/Meta-Llama-3-8B/config.json", with(config, from, to));
    return testing::file_error(dir.path() / "scenario.yaml");
  };
  const auto gpt2 = error_with("\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"");
  REQUIRE(gpt2);
  CHECK(gpt2->key() == "model_type");
  CHECK(gpt2->line() == 5);
  CHECK_THAT(gpt2->what(), Catch::Contains("is not modelled yet"));
  const auto missing = error_with("\"num_hidden_layers\": 32,", "");
  REQUIRE(missing);
  CHECK(missing->key() == "num_hidden_layers");
  const auto syntax = error_with("\"vocab_size\": 128256", "\"vocab_size\": [128256");
  REQUIRE(syntax);
  CHECK_THAT(syntax->file(), Catch::EndsWith("config.json"));
  CHECK(syntax->line() > 0);
  const auto window =
      error_with("\"vocab_size\": 128256", "\"vocab_size\": 128256,\n  \"sliding_window\": 4096");
  REQUIRE(window);
  CHECK(window->key() == "sliding_window");
  CHECK_THAT(window->what(), Catch::Contains("Llama has no sliding window"));
  const auto half_biased =
      error_with("\"vocab_size\": 128256", "\"vocab_size\": 128256,\n  \"attention_bias\": true");
  REQUIRE(half_biased);
  CHECK(half_biased->key() == "attention_bias");
  const std::string biased = with(config, "\"vocab_size\": 128256",
                                  "\"vocab_size\": 128256,\n  \"attention_bias\": true,\n  "
                                  "\"mlp_bias\": true");
  dir.write("models/Meta-Llama-3-8B/config.json", biased);
  const ModelSpec with_bias =
      load_scenario(dir.path() / "scenario.yaml", testing::source_data()).variants[0].inputs.model;
  CHECK(with_bias.linear_bias);
  CHECK(with_bias.parameters() > preset.parameters());
  const auto nowhere = load_error(with(kBase, "model: llama3-8b", "model: {hf_config: none.json}"));
  REQUIRE(nowhere);
  CHECK(nowhere->key() == "model.hf_config");
  CHECK_THAT(nowhere->what(), Catch::Contains("no Hugging Face config at"));
  // A symbolic link that loops is no file either: the same refusal, not a filesystem error.
  std::filesystem::create_symlink("loop.json", dir.path() / "loop.json");
  dir.write("scenario.yaml", with(kBase, "model: llama3-8b", "model: {hf_config: loop.json}"));
  const auto looping = testing::file_error(dir.path() / "scenario.yaml");
  REQUIRE(looping);
  CHECK(looping->key() == "model.hf_config");
  CHECK_THAT(looping->what(), Catch::Contains("no Hugging Face config at"));
  // Nor is a file of megabytes read whole: refused by its size before a byte is parsed.
  dir.write("models/huge/config.json", std::string(17 << 20, ' '));
  dir.write("scenario.yaml",
            with(kBase, "model: llama3-8b", "model: {hf_config: models/huge/config.json}"));
  const auto huge = testing::file_error(dir.path() / "scenario.yaml");
  REQUIRE(huge);
  CHECK_THAT(huge->what(), Catch::Contains("of more than 16 MiB (17 MiB), more than any"));
  dir.write("scenario.yaml", scenario);
  // A key given twice: Python's json keeps the last, a YAML reader the first; neither is taken.
  const auto twice =
      error_with("\"hidden_size\": 4096,", "\"hidden_size\": 4096, \"hidden_size\": 2048,");
  REQUIRE(twice);
  CHECK(twice->key() == "hidden_size");
  CHECK_THAT(twice->what(), Catch::Contains("duplicate key \"hidden_size\""));
  // A file that is no JSON object is not echoed: it may be anything given by mistake.
  dir.write("models/Meta-Llama-3-8B/config.json", "root:x:0:0:root:/root:/bin/bash\n");
  const auto foreign = testing::file_error(dir.path() / "scenario.yaml");
  REQUIRE(foreign);
  CHECK_THAT(foreign->what(), Catch::Contains("expected a JSON object, got other text"));
  CHECK_THAT(foreign->what(), !Catch::Contains("root:x"));
}

TEST_CASE("QLoRA loads as LoRA over a 4-bit base, under ZeRO-3 too (FSDP-QLoRA)") {
  const std::string qlora = with(kBase, "  seq_len:", "  method: qlora\n  seq_len:");
  const StepInputs in = load_text(with(qlora, "zero: 3", "zero: 2")).variants[0].inputs;
  REQUIRE(in.training.lora);
  CHECK(in.training.lora->quantized_base);
  const StepInputs sharded = load_text(qlora).variants[0].inputs;
  CHECK(sharded.plan.zero_stage == 3);
  CHECK(sharded.training.lora->quantized_base);
}

TEST_CASE("DoRA loads as LoRA with weight decomposition, QDoRA over a 4-bit base too") {
  const std::string dora = with(
      with(kBase, "training:\n", "training:\n  method: dora\n  lora: {rank: 8, targets: [q, v]}\n"),
      "zero: 3", "zero: 1");
  const StepInputs in = load_text(dora).variants[0].inputs;
  REQUIRE(in.training.lora);
  CHECK(in.training.lora->weight_decomposed);
  CHECK_FALSE(in.training.lora->quantized_base);
  CHECK(in.training.lora->rank == 8);
  const StepInputs quantized =
      load_text(with(dora, "method: dora", "method: qdora")).variants[0].inputs;
  CHECK(quantized.training.lora->weight_decomposed);
  CHECK(quantized.training.lora->quantized_base);
  CHECK_FALSE(load_text(with(dora, "method: dora", "method: qlora"))
                  .variants[0]
                  .inputs.training.lora->weight_decomposed);
  // Its adapter dropout under tensor parallelism is refused where the dropout is set (the
  // validator and the run alike: a job rule).
  const std::string dropped = with(dora, "targets: [q, v]", "targets: [q, v], dropout: 0.1");
  CHECK(load_text(dropped).variants[0].inputs.training.lora->dropout == 0.1);
  const auto split = load_error(with(dropped, "dp: 8", "dp: 4\n  tp: 2"));
  REQUIRE(split);
  CHECK(split->key() == "training.lora.dropout");
  CHECK_THAT(split->what(), Catch::Contains("DoRA with adapter dropout"));
}

TEST_CASE("shared_expert_overlap loads with a shared expert and the all-to-all dispatcher") {
  const std::string moe =
      with(with(with(kBase, "model: llama3-8b", "model: qwen1.5-moe-a2.7b"), "zero: 3", "zero: 1"),
           "dp: 8", "dp: 8\n  ep: 4");
  const std::string overlapped =
      with(moe, "  seq_len:", "  shared_expert_overlap: true\n  seq_len:");
  CHECK(load_text(overlapped).variants[0].inputs.training.shared_expert_overlap);
  CHECK_FALSE(load_text(moe).variants[0].inputs.training.shared_expert_overlap);
  // Nothing to overlap without a shared expert; Megatron-Core refuses the allgather dispatcher.
  const auto dense =
      load_error(with(kBase, "  seq_len:", "  shared_expert_overlap: true\n  seq_len:"));
  REQUIRE(dense);
  CHECK(dense->key() == "training.shared_expert_overlap");
  CHECK_THAT(dense->what(), Catch::Contains("no shared expert"));
  const auto gathered =
      load_error(with(with(overlapped, "  seq_len:", "  token_dispatcher: allgather\n  seq_len:"),
                      "ep: 4", "ep: 1"));
  REQUIRE(gathered);
  CHECK(gathered->key() == "training.shared_expert_overlap");
}

TEST_CASE("fp8_params loads under FP8 with the distributed optimizer, refused otherwise") {
  const std::string primary =
      with(with(kBase, "  seq_len:", "  precision: fp8\n  fp8_params: true\n  seq_len:"), "zero: 3",
           "zero: 1");
  CHECK(load_text(primary).variants[0].inputs.training.fp8_params);
  const auto bf16 = load_error(with(primary, "precision: fp8", "precision: bf16"));
  REQUIRE(bf16);
  CHECK(bf16->key() == "training.fp8_params");
  CHECK_THAT(bf16->what(), Catch::Contains("needs precision: fp8"));
  const auto sharded = load_error(with(primary, "zero: 1", "zero: 3"));
  REQUIRE(sharded);
  CHECK(sharded->key() == "layout.zero");
  CHECK_THAT(sharded->what(), Catch::Contains("not modelled yet"));
  const auto replicated = load_error(with(primary, "zero: 1", "zero: 0"));
  REQUIRE(replicated);
  CHECK_THAT(replicated->what(), Catch::Contains("distributed optimizer"));
  const auto offloaded = load_error(with(primary, "zero: 1", "zero: 1\n  offload_optimizer: true"));
  REQUIRE(offloaded);
  CHECK(offloaded->key() == "layout.offload_optimizer");
}

TEST_CASE("bf16_shards loads under ZeRO 3 and is refused without it or with fsdp2") {
  const std::string deepspeed = with(kBase, "  zero: 3\n", "  zero: 3\n  bf16_shards: true\n");
  CHECK(load_text(deepspeed).variants[0].inputs.plan.bf16_shards);
  const auto zero1 = load_error(with(deepspeed, "zero: 3", "zero: 1"));
  REQUIRE(zero1);
  CHECK(zero1->key() == "layout.bf16_shards");
  const auto fsdp2 =
      load_error(with(deepspeed, "bf16_shards: true", "bf16_shards: true\n  fsdp2: true"));
  REQUIRE(fsdp2);
  CHECK(fsdp2->key() == "layout.bf16_shards");
  CHECK_THAT(fsdp2->what(), Catch::Contains("fsdp2"));
}

TEST_CASE("recompute_layers loads under full recomputation and is refused otherwise") {
  const std::string partial =
      with(kBase, "  zero: 3\n", "  zero: 3\n  recompute: full\n  recompute_layers: 4\n");
  const ParallelPlan plan = load_text(partial).variants[0].inputs.plan;
  CHECK(plan.recompute == Recompute::full);
  CHECK(plan.recompute_layers == 4);
  const auto none = load_error(with(partial, "recompute: full", "recompute: selective"));
  REQUIRE(none);
  CHECK(none->key() == "layout.recompute_layers");
  CHECK_THAT(none->what(), Catch::Contains("full recomputation"));
  // 0, the default, recomputes every layer; below it nothing.
  CHECK(load_text(with(partial, "recompute_layers: 4", "recompute_layers: 0"))
            .variants[0]
            .inputs.plan.recompute_layers == 0);
  const auto negative = load_error(with(partial, "recompute_layers: 4", "recompute_layers: -1"));
  REQUIRE(negative);
  CHECK(negative->key() == "layout.recompute_layers");
}

TEST_CASE("recompute_modules loads under selective recomputation, each module where it applies") {
  const std::string modules =
      with(kBase, "  zero: 3\n",
           "  zero: 3\n  recompute: selective\n  recompute_modules: [mlp, core_attn]\n");
  const ParallelPlan plan = load_text(modules).variants[0].inputs.plan;
  CHECK(plan.recompute_modules == RecomputeModules{.core_attn = true, .mlp = true});
  CHECK(layout_label(plan).ends_with("recompute=selective recompute-modules=core_attn+mlp"));
  // One name alone is a list of one; the default is the attention core alone.
  CHECK(load_text(with(modules, "[mlp, core_attn]", "mlp"))
            .variants[0]
            .inputs.plan.recompute_modules == RecomputeModules{.core_attn = false, .mlp = true});
  CHECK(load_text(with(kBase, "  zero: 3\n", "  zero: 3\n  recompute: selective\n"))
            .variants[0]
            .inputs.plan.recompute_modules == RecomputeModules{});
  const auto misspelt = load_error(with(modules, "[mlp, core_attn]", "[mlp, core_atn]"));
  REQUIRE(misspelt);
  CHECK(misspelt->key() == "layout.recompute_modules[1]");
  CHECK(misspelt->line() == 11);
  CHECK_THAT(misspelt->what(), Catch::Contains("core_attn"));
  const auto not_selective = load_error(with(modules, "recompute: selective", "recompute: full"));
  REQUIRE(not_selective);
  CHECK(not_selective->key() == "layout.recompute_modules");
  CHECK_THAT(not_selective->what(), Catch::Contains("selective"));
  // A dense model has no experts' block, a mixture of experts no dense MLP.
  const auto dense = load_error(with(modules, "[mlp, core_attn]", "[moe_act]"));
  REQUIRE(dense);
  CHECK(dense->key() == "layout.recompute_modules");
  CHECK_THAT(dense->what(), Catch::Contains("is dense"));
  const std::string mixtral = with(modules, "model: llama3-8b", "model: mixtral-8x7b");
  const auto moe = load_error(mixtral);
  REQUIRE(moe);
  CHECK_THAT(moe->what(), Catch::Contains("mixture of experts"));
  CHECK(load_text(with(mixtral, "[mlp, core_attn]", "[core_attn, moe, layernorm]"))
            .variants[0]
            .inputs.plan.recompute_modules ==
        RecomputeModules{.core_attn = true, .moe = true, .layernorm = true});
  CHECK(load_error(with(mixtral, "[mlp, core_attn]", "[moe, moe_act]")));
}

TEST_CASE("overlap_param_gather loads with ZeRO 1 or 2 and is refused with 0 or 3") {
  const std::string distributed =
      with(kBase, "  zero: 3\n", "  zero: 1\n  overlap_param_gather: true\n");
  CHECK(load_text(distributed).variants[0].inputs.plan.overlap_param_gather);
  const auto sharded = load_error(with(distributed, "zero: 1", "zero: 3"));
  REQUIRE(sharded);
  CHECK(sharded->key() == "layout.overlap_param_gather");
  CHECK_THAT(sharded->what(), Catch::Contains("needs the distributed optimizer"));
}

TEST_CASE("tp_comm_overlap loads with tensor parallelism and is refused without") {
  const std::string tensor_parallel =
      with(kBase, "  dp: 8\n  zero: 3\n", "  dp: 2\n  tp: 4\n  tp_comm_overlap: true\n");
  CHECK(load_text(tensor_parallel).variants[0].inputs.plan.tp_comm_overlap);
  const auto alone = load_error(with(tensor_parallel, "  tp: 4\n", ""));
  REQUIRE(alone);
  CHECK(alone->key() == "layout.tp_comm_overlap");
  CHECK_THAT(alone->what(), Catch::Contains("needs tensor parallelism"));
  const auto not_bool =
      load_error(with(tensor_parallel, "tp_comm_overlap: true", "tp_comm_overlap: 2"));
  REQUIRE(not_bool);
  CHECK(not_bool->key() == "layout.tp_comm_overlap");
}

TEST_CASE("offload_optimizer loads with ZeRO 1-3 on a host the preset describes") {
  const std::string offloaded =
      with(kBase, "  zero: 3\n", "  zero: 3\n  offload_optimizer: true\n");
  const StepInputs in = load_text(offloaded).variants[0].inputs;
  CHECK(in.plan.offload_optimizer);
  CHECK(in.node.host_memory_capacity_bytes == Approx(2e12));
  CHECK(in.node.cpu_cores == 112);
  CHECK(in.node.cpu_clock_hz == Approx(2.0e9));
  const auto plain = load_error(with(offloaded, "zero: 3", "zero: 0"));
  REQUIRE(plain);
  CHECK(plain->key() == "layout.offload_optimizer");
  CHECK_THAT(plain->what(), Catch::Contains("needs ZeRO 1, 2 or 3"));
  // DGX A100's preset does not describe its host: the error names the first missing key.
  const auto undescribed = load_error(with(offloaded, "node: dgx-h100", "node: dgx-a100"));
  REQUIRE(undescribed);
  CHECK(undescribed->key() == "layout.offload_optimizer");
  CHECK_THAT(undescribed->what(), Catch::Contains("needs the node's host_memory"));
  CHECK_THAT(undescribed->what(), Catch::Contains("host_memory: 614.4GB/s"));
  const auto bad_clock =
      load_error(with(offloaded, "node: dgx-h100", "node: {preset: dgx-h100, cpu_clock: 2.0}"));
  REQUIRE(bad_clock);
  CHECK(bad_clock->key() == "cluster.node.cpu_clock");
  CHECK_THAT(bad_clock->what(), Catch::Contains("expected a frequency like 2.0GHz"));
}

TEST_CASE("Mixtral loads from the zoo and from its Hugging Face config, as the same model") {
  const std::string mixtral = with(kBase, "model: llama3-8b", "model: mixtral-8x7b");
  const ModelSpec zoo = load_text(mixtral).variants[0].inputs.model;
  CHECK(zoo.experts == 8);
  CHECK(zoo.experts_per_token == 2);
  // Mixtral-8x7B-v0.1's config.json, the fields fleetsim reads, as published.
  const std::string config = R"({
  "architectures": ["MixtralForCausalLM"],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "intermediate_size": 14336,
  "model_type": "mixtral",
  "num_attention_heads": 32,
  "num_experts_per_tok": 2,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "num_local_experts": 8,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "vocab_size": 32000
}
)";
  TempDir dir;
  dir.write("Mixtral-8x7B-v0.1/config.json", config);
  const ModelSpec hf =
      load_scenario(dir.write("scenario.yaml", with(kBase, "model: llama3-8b",
                                                    "model: {hf_config: "
                                                    "Mixtral-8x7B-v0.1/config.json}")),
                    testing::source_data())
          .variants[0]
          .inputs.model;
  CHECK(hf.parameters() == zoo.parameters());
  CHECK(hf.experts_per_token == 2);
  const auto hf_error = [&](const std::string& from, const std::string& to) {
    dir.write("Mixtral-8x7B-v0.1/config.json", with(config, from, to));
    return testing::file_error(dir.path() / "scenario.yaml");
  };
  const auto per_token = hf_error("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9");
  REQUIRE(per_token);
  CHECK(per_token->key() == "num_experts_per_tok");
  CHECK(per_token->line() == 8);
  const auto jitter =
      hf_error("\"vocab_size\": 32000", "\"vocab_size\": 32000,\n  \"router_jitter_noise\": 0.1");
  REQUIRE(jitter);
  CHECK(jitter->key() == "router_jitter_noise");
  const auto no_experts = hf_error("\"num_local_experts\": 8,", "");
  REQUIRE(no_experts);
  CHECK(no_experts->key() == "num_local_experts");
  const auto half =
      load_error(with(kBase, "model: llama3-8b", "model: {preset: llama3-8b, experts: 8}"));
  REQUIRE(half);
  CHECK(half->key() == "model.experts");
  CHECK_THAT(half->what(), Catch::Contains("needs both experts and experts_per_token"));
  const auto too_many = load_error(
      with(kBase, "model: llama3-8b", "model: {preset: mixtral-8x7b, experts_per_token: 9}"));
  REQUIRE(too_many);
  CHECK(too_many->key() == "model.experts_per_token");
  const auto lora =
      load_error(with(mixtral, "  micro_batch: 2\n", "  micro_batch: 2\n  method: lora\n"));
  REQUIRE(lora);
  CHECK(lora->key() == "training.method");
  CHECK_THAT(lora->what(), Catch::Contains("mixture-of-experts"));
}

TEST_CASE("tp spans whole trays of an NVLink domain, never a domain's edge") {
  // GB200 NVL72: 4-GPU trays, 72 GPUs to a domain. tp 8 takes two trays; 16 does not divide 72.
  const std::string rack = with(with(kBase, "node: dgx-h100", "node: gb200-nvl72\n  nodes: 18"),
                                "  dp: 8\n", "  dp: 9\n  tp: 8\n");
  const std::string batch = with(rack, "global_batch: 256", "global_batch: 144");
  CHECK(load_text(batch).variants[0].inputs.plan.tp == 8);
  const auto across = load_error(with(with(batch, "tp: 8", "tp: 16"), "dp: 9", "dp: 9"));
  REQUIRE(across);
  CHECK(across->key() == "layout.tp");
  CHECK_THAT(across->what(),
             Catch::Contains("nor is it a multiple of them that divides the 72 GPUs"));
  const auto node = load_error(with(kBase, "  dp: 8\n", "  dp: 1\n  tp: 16\n"));
  REQUIRE(node);
  CHECK_THAT(node->what(), Catch::Contains("does not divide the 8 GPUs of a node"));
}

TEST_CASE("ep loads for a mixture of experts and says what it needs otherwise") {
  const std::string mixtral = with(with(kBase, "model: llama3-8b", "model: mixtral-8x7b"),
                                   "  zero: 3\n", "  zero: 1\n  ep: 8\n");
  CHECK(load_text(mixtral).variants[0].inputs.plan.ep == 8);
  const auto dense = load_error(with(mixtral, "model: mixtral-8x7b", "model: llama3-8b"));
  REQUIRE(dense);
  CHECK(dense->key() == "layout.ep");
  CHECK_THAT(dense->what(), Catch::Contains("needs a mixture-of-experts model"));
  const auto uneven = load_error(with(mixtral, "ep: 8", "ep: 3"));
  REQUIRE(uneven);
  CHECK_THAT(uneven->what(), Catch::Contains("must divide the model's 8 experts and dp 8"));
  const auto offloaded = load_error(with(mixtral, "zero: 1", "zero: 1\n  offload_optimizer: true"));
  REQUIRE(offloaded);
  CHECK(offloaded->key() == "layout.ep");
  CHECK_THAT(offloaded->what(), Catch::Contains("without offload_optimizer"));
  // Sharded gradients (ZeRO 2) and parameters (ZeRO 3) load: each expert's over the replicas
  // that hold it.
  CHECK(load_text(with(mixtral, "zero: 1", "zero: 2")).variants[0].inputs.plan.zero_stage == 2);
  CHECK(load_text(with(mixtral, "zero: 1", "zero: 3")).variants[0].inputs.plan.zero_stage == 3);
}

TEST_CASE("cp loads, counts in the GPU total, and says what it needs otherwise") {
  // Eight GPUs: cp 2 x dp 4.
  const std::string context = with(kBase, "  dp: 8\n", "  dp: 4\n  cp: 2\n");
  const Scenario s = load_text(context);
  CHECK(s.variants[0].inputs.plan.cp == 2);
  CHECK(s.variants[0].inputs.plan.gradient_ranks() == 8);
  const auto total = load_error(with(context, "dp: 4", "dp: 8"));
  REQUIRE(total);
  CHECK(total->key() == "layout.dp");
  CHECK_THAT(total->what(), Catch::Contains("tp x cp x pp x dp must equal the GPU count"));
  CHECK_THAT(total->what(), Catch::Contains("set layout.dp to 4"));
  // 2 x cp chunks of 4,096 tokens: cp 4,096 leaves half a token per chunk.
  const auto chunks = load_error(with(with(kBase, "  dp: 8\n", "  dp: 1\n  cp: 4096\n"),
                                      "  node: dgx-h100\n", "  node: dgx-h100\n  nodes: 512\n"));
  REQUIRE(chunks);
  CHECK(chunks->key() == "layout.cp");
  CHECK(chunks->line() == 9);
  CHECK_THAT(chunks->what(), Catch::Contains("must divide seq_len 4096"));
  const auto eager =
      load_error(with(context, "  micro_batch: 2\n", "  micro_batch: 2\n  attention: eager\n"));
  REQUIRE(eager);
  CHECK(eager->key() == "layout.cp");
  CHECK_THAT(eager->what(), Catch::Contains("(ring or Ulysses) on FlashAttention"));
}

TEST_CASE("dp: auto takes what the GPUs leave to data parallelism") {
  // Two DGX H100 nodes, tp 8: 16 GPUs / 8 = 2 replicas; with pp 2 on three nodes, 24 GPUs do
  // not split into replicas of 16.
  const std::string automatic =
      with(with(kBase, "  dp: 8\n  zero: 3\n", "  dp: auto\n  tp: 8\n  zero: 1\n"),
           "  node: dgx-h100\n", "  node: dgx-h100\n  nodes: 2\n");
  CHECK(load_text(automatic).variants[0].inputs.plan.dp == 2);
  const auto uneven =
      load_error(with(with(automatic, "  tp: 8\n", "  tp: 8\n  pp: 2\n"), "nodes: 2", "nodes: 3"));
  REQUIRE(uneven);
  CHECK(uneven->key() == "layout.dp");
  CHECK_THAT(uneven->what(),
             Catch::Contains("dp: auto needs tp x cp x pp = 16 to divide the 24 GPUs"));
  // Anything else than a count or auto is refused as before.
  const auto word = load_error(with(kBase, "dp: 8", "dp: many"));
  REQUIRE(word);
  CHECK_THAT(word->what(), Catch::Contains("expected a positive integer"));
}

TEST_CASE("the elementwise kernels are fused unless the recipe says eager") {
  CHECK(load_text(kBase).variants[0].inputs.training.elementwise == Elementwise::fused);
  const std::string eager = with(kBase, "training:\n", "training:\n  elementwise: eager\n");
  CHECK(load_text(eager).variants[0].inputs.training.elementwise == Elementwise::eager);
  const auto e = load_error(with(kBase, "training:\n", "training:\n  elementwise: compiled\n"));
  REQUIRE(e);
  CHECK(e->key() == "training.elementwise");
  CHECK_THAT(e->what(), Catch::Contains("fused, eager"));
}

TEST_CASE("training.attention names a kernel of the GPU's profile, or flash for its default") {
  // dgx-h100's profile calibrates FlashAttention-2 (its default) and cuDNN's fused attention.
  const auto named = [](const std::string& kernel) {
    return with(kBase, "  micro_batch: 2\n", "  micro_batch: 2\n  attention: " + kernel + "\n");
  };
  const StepInputs flash = load_text(named("flash")).variants[0].inputs;
  CHECK(flash.training.attention == Attention::flash);
  CHECK_FALSE(flash.training.attention_kernel);
  CHECK(flash.gpu.attention_default == AttentionKernel::fa2);
  const StepInputs cudnn = load_text(named("cudnn")).variants[0].inputs;
  CHECK(cudnn.training.attention_kernel == AttentionKernel::cudnn);
  // A kernel the profile lacks is refused at the key, naming the ones it has.
  const auto ck = load_error(named("ck"));
  REQUIRE(ck);
  CHECK(ck->key() == "training.attention");
  CHECK(ck->line() == 7);
  CHECK_THAT(ck->what(), Catch::Contains("h100-sxm profile has no ck attention"));
  CHECK_THAT(ck->what(), Catch::Contains("fa2, cudnn"));
}

}  // namespace
}  // namespace fleetsim
