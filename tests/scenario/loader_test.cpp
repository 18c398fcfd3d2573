// Loading scenarios: the shipped example, preset overrides, compare variants, and one test per
// kind of mistake, each checking the file:line:column, key and hint of the error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "sim/scenario/scenario.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

using testing::kBase;
using testing::load_error;
using testing::load_text;
using testing::shipped_file;
using testing::TempDir;
using testing::with;

TEST_CASE("the shipped H100 vs B200 scenario loads with two variants") {
  const std::filesystem::path file =
      std::filesystem::path(FLEETSIM_SOURCE_DIR) / "scenarios" / "h100-vs-b200.yaml";
  const Scenario s = load_scenario(file, testing::source_data());
  CHECK(s.name == "h100-vs-b200");
  CHECK(s.seed == 1);
  CHECK(s.file == file.string());
  REQUIRE(s.variants.size() == 2);

  const StepInputs& h100 = s.variants[0].inputs;
  CHECK(s.variants[0].name == "dgx-h100");
  CHECK(h100.node.name == "dgx-h100");
  CHECK(h100.node.gpus == 8);
  CHECK(h100.node.nvlink_bytes_per_s == Approx(450e9));
  CHECK(h100.node.nic_bytes_per_s == Approx(50e9));  // 400 Gb/s / 8
  CHECK(h100.node.nvlink_latency.ns() == 500);
  CHECK(h100.node.nic_latency.ns() == 2000);
  CHECK_THAT(h100.node.source, Catch::Contains("nvlink: stas00/ml-engineering"));
  CHECK(h100.gpu.name == "h100-sxm");
  CHECK(h100.gpu.sm_count == 132);
  CHECK(h100.gpu.dense_bf16_flops_per_s.value == Approx(989e12));
  CHECK(h100.gpu.hbm_capacity_bytes.value == Approx(81559.0 * 1024 * 1024));
  CHECK(h100.gpu.hbm_bytes_per_s.value == Approx(3.35e12));
  // Kernel entries fitted by `fleetsim calibrate --kernels` (calibration/microbench/h100-sxm).
  CHECK(h100.gpu.gemm_efficiency.value == Approx(0.891));
  CHECK(h100.gpu.gemm_efficiency.sigma == Approx(0.046));
  CHECK(h100.gpu.kernel_launch_s.value == Approx(5.564e-6));
  CHECK(h100.gpu.gemm_tiles.size() == 6);
  // The H100 runs NCCL: its ring/Simple step over NVLink is 3.4 us (calibration/collectives).
  CHECK(h100.gpu.collectives.library == "nccl");
  CHECK(h100.gpu.collectives.ring[static_cast<int>(fleetsim::Protocol::simple)].nvlink_step ==
        fleetsim::from_us(3.4));
  CHECK_THAT(h100.gpu.memory_efficiency.provenance,
             Catch::StartsWith("published: fleetsim calibrate --kernels"));
  CHECK(h100.model.name == "llama3-8b");
  CHECK(h100.model.layers == 32);
  CHECK(h100.model.hidden == 4096);
  CHECK(h100.model.kv_heads == 8);
  CHECK(h100.model.vocab == 128256);
  CHECK_FALSE(h100.model.tied_embeddings);
  CHECK(h100.training.seq_len == 4096);
  CHECK(h100.training.global_batch == 256);
  CHECK(h100.training.micro_batch == 2);
  CHECK(h100.training.grad_reduce_bytes == 2);
  CHECK(h100.plan.dp == 8);
  CHECK(h100.plan.zero_stage == 3);
  CHECK(h100.plan.recompute == Recompute::none);
  CHECK(h100.plan.bucket_bytes == Approx(25e6));
  CHECK(h100.nodes == 1);
  CHECK(h100.fabric.link_bytes_per_s == Approx(50e9));
  CHECK(h100.fabric.oversubscription == 1.0);
  CHECK(h100.fabric.switch_latency.ns() == 600);

  const StepInputs& b200 = s.variants[1].inputs;
  CHECK(s.variants[1].name == "dgx-b200");
  CHECK(b200.node.name == "dgx-b200");
  CHECK(b200.node.nvlink_bytes_per_s == Approx(900e9));
  CHECK(b200.gpu.name == "b200");
  CHECK(b200.gpu.dense_bf16_flops_per_s.value == Approx(2250e12));
  CHECK(b200.gpu.hbm_bytes_per_s.sigma == Approx(0.15e12));
  // Everything the entry does not mention comes from the base scenario.
  CHECK(b200.model.layers == 32);
  CHECK(b200.plan.zero_stage == 3);
  CHECK(b200.fabric.link_bytes_per_s == Approx(50e9));
}

TEST_CASE("a minimal scenario takes the documented defaults") {
  const Scenario s = load_text(kBase);
  REQUIRE(s.variants.size() == 1);
  CHECK(s.variants[0].name == "dgx-h100");  // label defaults to the node preset name
  CHECK(s.seed == 1);
  const StepInputs& in = s.variants[0].inputs;
  CHECK(in.fabric.link_bytes_per_s == 0);  // as fast as the NIC
  CHECK(in.fabric.switch_latency.ns() == 600);
  CHECK(in.plan.recompute == Recompute::none);
  CHECK(in.training.grad_reduce_bytes == 2);
}

TEST_CASE("optional keys are read") {
  std::string yaml = with(kBase, "name: test\n", "name: test\nseed: 42\nlabel: base\n");
  yaml = with(yaml, "  micro_batch: 2\n",
              "  micro_batch: 2\n  method: full\n  grad_reduce_dtype: fp32\n  tokens: 20e9\n");
  yaml = with(yaml, "  dp: 8\n  zero: 3\n",
              "  dp: 16\n  tp: 1\n  zero: 1\n  recompute: full\n  bucket: 50MB\n");
  yaml += "  nodes: 2\n  gpu: b200\n";
  yaml +=
      "  fabric: {kind: rail-fat-tree, link: 200Gbps, oversubscription: 2, "
      "switch_latency: 1us, placement: spread, routing: hash}\n";
  const Scenario s = load_text(yaml);
  CHECK(s.seed == 42);
  REQUIRE(s.variants.size() == 1);
  CHECK(s.variants[0].name == "base");
  const StepInputs& in = s.variants[0].inputs;
  CHECK(in.training.grad_reduce_bytes == 4);
  CHECK(in.plan.dp == 16);
  CHECK(in.plan.zero_stage == 1);
  CHECK(in.plan.recompute == Recompute::full);
  CHECK(in.plan.bucket_bytes == Approx(50e6));
  CHECK(in.nodes == 2);
  CHECK(in.gpu.name == "b200");
  CHECK(in.node.name == "dgx-h100");
  CHECK(in.node.gpu_profile == "b200");  // the cluster's gpu replaces the preset's profile
  CHECK(in.fabric.link_bytes_per_s == Approx(25e9));  // 200 Gb/s / 8
  CHECK(in.fabric.oversubscription == 2.0);
  CHECK(in.fabric.switch_latency.ns() == 1000);
  CHECK(in.fabric.placement == NodePlacement::spread);
  CHECK(in.fabric.routing == FabricRouting::hash);
  CHECK(in.fabric.hash_seed == 42);  // the scenario's seed
  CHECK(load_text(kBase).variants[0].inputs.fabric.placement == NodePlacement::packed);
}

TEST_CASE("a node preset can be overridden field by field") {
  const Scenario s =
      load_text(with(kBase, "  node: dgx-h100\n", "  node: {preset: dgx-h100, nic: 200Gbps}\n"));
  const NodeSpec& node = s.variants[0].inputs.node;
  CHECK(node.name == "dgx-h100");
  CHECK(node.nic_bytes_per_s == Approx(25e9));      // 200 Gb/s / 8
  CHECK(node.nvlink_bytes_per_s == Approx(450e9));  // untouched
  // The override needs no source of its own; the node's source says where it came from.
  CHECK_THAT(node.source, Catch::Contains("nic: overridden in "));
  CHECK_THAT(node.source, Catch::Contains("scenario.yaml:11"));
}

TEST_CASE("a model can be a zoo name, a preset with overrides, or inline") {
  const Scenario preset =
      load_text(with(kBase, "model: llama3-8b\n", "model: {preset: llama3-8b, layers: 16}\n"));
  CHECK(preset.variants[0].inputs.model.layers == 16);
  CHECK(preset.variants[0].inputs.model.hidden == 4096);
  CHECK(preset.variants[0].inputs.model.name == "llama3-8b");

  const Scenario inline_model =
      load_text(with(kBase, "model: llama3-8b\n",
                     "model: {layers: 2, hidden: 256, ffn: 512, heads: 4, kv_heads: 2, vocab: 1000,"
                     " tied_embeddings: true}\n"));
  const ModelSpec& m = inline_model.variants[0].inputs.model;
  CHECK(m.name == "custom");
  CHECK(m.layers == 2);
  CHECK(m.head_dim() == 64);
  CHECK(m.tied_embeddings);
}

TEST_CASE("the error message has the form FILE:LINE:COLUMN: KEY: PROBLEM (hint: HINT)") {
  CHECK(std::string(ScenarioError("a.yaml", 3, 7, "cluster.nodes", "bad", "fix it").what()) ==
        "a.yaml:3:7: cluster.nodes: bad (hint: fix it)");
  CHECK(std::string(ScenarioError("a.yaml", 0, 0, "", "cannot open scenario file").what()) ==
        "a.yaml: cannot open scenario file");
  const ScenarioError e("a.yaml", 3, 7, "k", "p");
  CHECK(e.file() == "a.yaml");
  CHECK(e.line() == 3);
  CHECK(e.column() == 7);
  CHECK(e.key() == "k");
}

TEST_CASE("a missing scenario file is reported without a line") {
  TempDir dir;
  const auto file = dir.path() / "nowhere.yaml";
  try {
    load_scenario(file, testing::source_data());
    FAIL("no error");
  } catch (const ScenarioError& e) {
    CHECK(std::string(e.what()) ==
          file.string() + ": cannot open scenario file (hint: no such file)");
    CHECK(e.line() == 0);
  }
}

TEST_CASE("a YAML syntax error carries the parser's line and column") {
  const auto e = load_error(with(kBase, "  dp: 8\n", "  dp: [8\n"));
  REQUIRE(e);
  CHECK_THAT(e->what(), Catch::Contains("YAML syntax error"));
  CHECK(e->line() >= 8);  // the unclosed list opens on line 8; yaml-cpp notices a little later
  CHECK(e->line() <= 10);
}

TEST_CASE("an unknown key names its line and column and suggests the closest key") {
  const auto e = load_error(kBase + "  fabirc: {link: 400Gbps}\n");
  REQUIRE(e);
  CHECK(e->line() == 12);
  CHECK(e->column() == 3);
  CHECK(e->key() == "cluster.fabirc");
  CHECK_THAT(e->what(),
             Catch::EndsWith(":12:3: cluster.fabirc: unknown key \"fabirc\" (hint: did you mean "
                             "\"fabric\"? allowed keys: node, nodes, gpu, fabric, storage)"));

  // `nods` is one edit from both `node` and `nodes`, so both are offered.
  const auto both = load_error(kBase + "  nods: 2\n");
  REQUIRE(both);
  CHECK_THAT(both->what(), Catch::Contains("did you mean \"node\" or \"nodes\"?"));
}

TEST_CASE("a near miss in capitals or with a preset file's suffix gets its did-you-mean") {
  const auto capitals = load_error(with(kBase, "node: dgx-h100", "node: DGX-H100"));
  REQUIRE(capitals);
  CHECK_THAT(capitals->what(), Catch::Contains("did you mean \"dgx-h100\"?"));
  const auto file = load_error(with(kBase, "node: dgx-h100", "node: dgx-h100.yaml"));
  REQUIRE(file);
  CHECK_THAT(file->what(), Catch::Contains("did you mean \"dgx-h100\"?"));
  const auto key = load_error(with(kBase, "zero:", "ZERO:"));
  REQUIRE(key);
  CHECK_THAT(key->what(), Catch::Contains("did you mean \"zero\"?"));
  // A key of a thousand characters is no typo: no suggestion, and no quadratic table for it.
  const auto long_key = load_error(kBase + std::string(1000, 'n') + ": 1\n");
  REQUIRE(long_key);
  CHECK_THAT(long_key->what(), !Catch::Contains("did you mean"));
  CHECK_THAT(long_key->what(), Catch::Contains("...\""));
}

TEST_CASE("a file holds one YAML document: a second is refused where it starts") {
  const auto second = load_error(kBase + "---\nname: other\n");
  REQUIRE(second);
  CHECK(second->line() == 12);  // its `---`
  CHECK_THAT(second->what(), Catch::Contains("a second YAML document"));
  const auto after_end = load_error(kBase + "...\nmodel: llama3-70b\n");
  REQUIRE(after_end);
  CHECK_THAT(after_end->what(), Catch::Contains("a second YAML document"));
  // A document marker before the one document is fine.
  CHECK(load_text("---\n" + kBase).variants.size() == 1);
}

TEST_CASE("an unknown top-level key far from any known one gets no suggestion") {
  const auto e = load_error(kBase + "costs: {gpu_hour: 3USD/h}\n");
  REQUIRE(e);
  CHECK(e->key() == "costs");
  CHECK_THAT(e->what(), Catch::Contains("(hint: allowed keys: name, description"));
}

TEST_CASE("a key given twice is an error, not a silent override") {
  const auto e = load_error(kBase + "  node: dgx-b200\n");
  REQUIRE(e);
  CHECK(e->key() == "cluster.node");
  CHECK(e->line() == 12);
  CHECK_THAT(e->what(), Catch::Contains("duplicate key \"node\""));
}

TEST_CASE("the seed and the token budget are checked") {
  const auto seed = load_error(kBase + "seed: -1\n");
  REQUIRE(seed);
  CHECK_THAT(seed->what(), Catch::Contains("seed: expected an unsigned integer, got \"-1\""));
  const auto tokens =
      load_error(with(kBase, "  micro_batch: 2\n", "  micro_batch: 2\n  tokens: lots\n"));
  REQUIRE(tokens);
  CHECK(tokens->key() == "training.tokens");
}

TEST_CASE("a negative or zero bandwidth is an error") {
  const auto negative = load_error(kBase + "  fabric: {link: -400Gbps}\n");
  REQUIRE(negative);
  CHECK(negative->key() == "cluster.fabric.link");
  CHECK(negative->line() == 12);
  CHECK(negative->column() == 18);
  CHECK_THAT(negative->what(), Catch::Contains("expected a bandwidth >= 0, got \"-400Gbps\""));

  const auto zero = load_error(kBase + "  fabric: {link: 0Gbps}\n");
  REQUIRE(zero);
  CHECK_THAT(zero->what(), Catch::Contains("expected a bandwidth > 0"));
}

TEST_CASE("a bandwidth that is not one says what it expected") {
  const auto e = load_error(kBase + "  fabric: {link: fast}\n");
  REQUIRE(e);
  CHECK_THAT(e->what(), Catch::Contains("cluster.fabric.link: expected a bandwidth like 400Gbps or "
                                        "450GB/s, got \"fast\""));
  const auto bare = load_error(kBase + "  fabric: {link: 400}\n");
  REQUIRE(bare);
  CHECK_THAT(bare->what(), Catch::Contains("bare number"));
  CHECK_THAT(bare->what(), Catch::Contains("Gbps"));
}

namespace {

// The names of the YAML files in a preset directory, sorted and joined as the hint lists them.
std::string shipped_presets(const char* directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(FLEETSIM_SOURCE_DIR) / directory)) {
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  std::string joined;
  for (const auto& name : names) joined += (joined.empty() ? "" : ", ") + name;
  return joined;
}

}  // namespace

TEST_CASE("an unknown preset lists the available ones, sorted") {
  const auto node = load_error(with(kBase, "node: dgx-h100", "node: dgx-h900"));
  REQUIRE(node);
  CHECK(node->key() == "cluster.node");
  CHECK(node->line() == 11);
  CHECK_THAT(node->what(), Catch::Contains("unknown node preset \"dgx-h900\""));
  CHECK_THAT(node->what(), Catch::Contains("did you mean \"dgx-h100\"? available: "));
  CHECK_THAT(node->what(), Catch::Contains("available: " + shipped_presets("topology/presets")));

  const auto model = load_error(with(kBase, "model: llama3-8b", "model: llama4"));
  REQUIRE(model);
  CHECK_THAT(model->what(), Catch::Contains("available: " + shipped_presets("workloads/models")));

  const auto gpu = load_error(kBase + "  gpu: h900\n");
  REQUIRE(gpu);
  CHECK_THAT(gpu->what(), Catch::Contains("unknown GPU profile \"h900\""));
  CHECK_THAT(gpu->what(), Catch::Contains("available: " + shipped_presets("calibration/profiles")));

  // A name is never a path out of the preset directory.
  const auto path = load_error(with(kBase, "node: dgx-h100", "node: ../presets/dgx-h100"));
  REQUIRE(path);
  CHECK_THAT(path->what(), Catch::Contains("unknown node preset"));
}

TEST_CASE("a bad enum value lists the allowed values") {
  const auto recompute = load_error(with(kBase, "  zero: 3\n", "  zero: 3\n  recompute: some\n"));
  REQUIRE(recompute);
  CHECK(recompute->key() == "layout.recompute");
  CHECK(recompute->line() == 10);
  CHECK_THAT(recompute->what(),
             Catch::Contains("expected one of none, selective, per_op, full, got \"some\""));

  const auto zero = load_error(with(kBase, "  zero: 3\n", "  zero: 4\n"));
  REQUIRE(zero);
  CHECK_THAT(zero->what(), Catch::Contains("expected one of 0, 1, 2, 3, got \"4\""));

  const auto fp32 = load_error(with(kBase, "training:\n", "training:\n  precision: fp32\n"));
  REQUIRE(fp32);
  CHECK(fp32->key() == "training.precision");
  CHECK_THAT(fp32->what(), Catch::Contains("expected one of bf16, fp16, fp8, got \"fp32\""));
}

TEST_CASE("fp16 loads, its step the BF16 one but for the loss scaling's pass over the gradients") {
  // Llama-3-8B ZeRO-3 over 8 H100 (the base): FP16 runs the BF16 entries; the only difference
  // is the optimizer kernel's 8 more bytes a local parameter (check and unscale).
  const Scenario bf16 = load_text(kBase);
  const Scenario fp16 = load_text(with(kBase, "training:\n", "training:\n  precision: fp16\n"));
  CHECK(fp16.variants[0].inputs.training.precision == Precision::fp16);
  TrainingSpec same = fp16.variants[0].inputs.training;
  same.precision = Precision::bf16;
  CHECK(same == bf16.variants[0].inputs.training);
}

TEST_CASE("fp8 loads where the GPU has FP8 GEMM entries, and is refused where it has none") {
  const std::string fp8 = with(kBase, "training:\n", "training:\n  precision: fp8\n");
  const Scenario s = load_text(fp8);
  CHECK(s.variants[0].inputs.training.precision == Precision::fp8);
  REQUIRE(s.variants[0].inputs.gpu.fp8);
  CHECK(s.variants[0].inputs.gpu.fp8->dense_flops_per_s.value == 1979e12);
  const auto a100 = load_error(with(fp8, "  node: dgx-h100\n", "  node: dgx-a100\n"));
  REQUIRE(a100);
  CHECK(a100->key() == "training.precision");
  CHECK(a100->line() == 4);
  CHECK_THAT(a100->what(), Catch::Contains("GPU profile a100-sxm has no FP8 GEMM entries"));
}

TEST_CASE("a missing required key names the key and its map") {
  const auto e = load_error(with(kBase, "  micro_batch: 2\n", ""));
  REQUIRE(e);
  CHECK(e->key() == "training.micro_batch");
  CHECK(e->line() == 4);  // where the training map starts
  CHECK_THAT(e->what(), Catch::Contains("missing required key"));

  const auto name = load_error(with(kBase, "name: test\n", ""));
  REQUIRE(name);
  CHECK(name->key() == "name");
}

TEST_CASE("a value of the wrong type says what it found") {
  const auto map = load_error(
      with(kBase, "model: llama3-8b\ntraining:\n", "model: llama3-8b\ntraining: 5\nunused:\n"));
  REQUIRE(map);
  CHECK(map->key() == "unused");  // unknown keys are checked before any value is read

  const auto layout = load_error(with(kBase, "layout:\n  dp: 8\n  zero: 3\n", "layout: 8\n"));
  REQUIRE(layout);
  CHECK(layout->key() == "layout");
  CHECK_THAT(layout->what(),
             Catch::Contains(
                 "expected a map with keys tp, cp, cp_comm_type, pp, vpp, microbatch_group, "
                 "schedule, dp, ep, expert_tp, "
                 "zero, "
                 "recompute, recompute_layers, recompute_modules, activation_offload_layers, "
                 "sequence_parallel, "
                 "tp_comm_overlap, ep_comm_overlap, "
                 "overlap_grad_reduce, "
                 "overlap_param_gather, fsdp2, bf16_shards, offload_optimizer, bucket, got \"8\""));

  const auto integer = load_error(with(kBase, "  seq_len: 4096\n", "  seq_len: long\n"));
  REQUIRE(integer);
  CHECK(integer->key() == "training.seq_len");
  CHECK_THAT(integer->what(), Catch::Contains("expected a positive integer, got \"long\""));

  const auto list = load_error(with(kBase, "  seq_len: 4096\n", "  seq_len: [1, 2]\n"));
  REQUIRE(list);
  CHECK_THAT(list->what(), Catch::Contains("got a list"));
}

TEST_CASE("tp x pp x dp must cover every GPU, and the global batch must split into micro-batches") {
  const auto dp = load_error(kBase + "  nodes: 2\n");
  REQUIRE(dp);
  CHECK(dp->key() == "layout.dp");
  CHECK(dp->line() == 8);
  CHECK_THAT(dp->what(), Catch::Contains("tp x pp x dp must equal the GPU count (16 = 2 nodes x 8 "
                                         "GPUs), got 1 x 1 x 8"));
  CHECK_THAT(dp->what(), Catch::Contains("set layout.dp to 16"));
  // tp 2 x dp 8 on 16 GPUs is a layout; tp must fit a node and split the model.
  CHECK_FALSE(load_error(with(kBase, "  dp: 8\n", "  dp: 8\n  tp: 2\n") + "  nodes: 2\n"));
  const auto tp3 = load_error(with(kBase, "  dp: 8\n", "  dp: 8\n  tp: 3\n"));
  REQUIRE(tp3);
  CHECK(tp3->key() == "layout.tp");
  CHECK_THAT(tp3->what(), Catch::Contains("tp 3 does not divide the 8 GPUs of a node"));
  const auto tp16 = load_error(with(with(kBase, "  dp: 8\n", "  dp: 1\n  tp: 16\n"),
                                    "node: dgx-h100", "node: {preset: dgx-h100, gpus: 16}"));
  REQUIRE(tp16);
  CHECK_THAT(tp16->what(), Catch::Contains("does not divide the model's kv_heads (8)"));

  // 100 sequences over 8 ranks of 2: 100 / 16 is not whole.
  const auto batch = load_error(with(kBase, "global_batch: 256", "global_batch: 100"));
  REQUIRE(batch);
  CHECK(batch->key() == "training.global_batch");
  CHECK_THAT(batch->what(), Catch::Contains("gradient accumulation"));
  CHECK_THAT(batch->what(), Catch::Contains("multiple of 16"));
}

TEST_CASE("a model whose heads do not divide is rejected") {
  const auto e =
      load_error(with(kBase, "model: llama3-8b\n", "model: {preset: llama3-8b, heads: 30}\n"));
  REQUIRE(e);
  CHECK(e->key() == "model.heads");
  CHECK_THAT(e->what(), Catch::Contains("hidden (4096) is not divisible by heads (30)"));
}

const std::string kCompare = kBase +
                             "compare:\n"                              // 12
                             "  - name: slow-fabric\n"                 // 13
                             "    cluster: {fabric: {link: fast}}\n";  // 14

TEST_CASE("a bad value in a compare entry reports the entry's line") {
  const auto e = load_error(kCompare);
  REQUIRE(e);
  CHECK(e->key() == "compare[0].cluster.fabric.link");
  CHECK(e->line() == 14);
  CHECK(e->column() == 30);
  CHECK_THAT(e->what(), Catch::Contains("got \"fast\""));
}

TEST_CASE("an unknown key in a compare entry reports the entry's line") {
  const auto e = load_error(kBase + "compare:\n  - name: more\n    cluster: {nods: 2}\n");
  REQUIRE(e);
  CHECK(e->key() == "compare[0].cluster.nods");
  CHECK(e->line() == 14);
  CHECK(e->column() == 15);
}

TEST_CASE("a base value that a variant makes wrong reports the base line, naming the variant") {
  const auto e = load_error(kBase + "compare:\n  - name: two-nodes\n    cluster: {nodes: 2}\n");
  REQUIRE(e);
  CHECK(e->key() == "layout.dp");
  CHECK(e->line() == 8);
  CHECK_THAT(e->what(), Catch::Contains("in variant \"two-nodes\": tp x pp x dp must equal"));
}

TEST_CASE("compare entries deep-merge over the base") {
  const Scenario s = load_text(kBase + "  fabric: {link: 400Gbps, oversubscription: 2}\n" +
                               "compare:\n"
                               "  - name: two-nodes\n"
                               "    cluster: {nodes: 2, fabric: {link: 200Gbps}}\n"
                               "    layout: {dp: 16}\n"
                               "  - name: b200\n"
                               "    cluster: {node: {preset: dgx-b200, nic: 800Gbps}}\n");
  REQUIRE(s.variants.size() == 3);
  const StepInputs& two = s.variants[1].inputs;
  CHECK(s.variants[1].name == "two-nodes");
  CHECK(two.nodes == 2);
  CHECK(two.plan.dp == 16);
  CHECK(two.plan.zero_stage == 3);                     // kept from the base layout
  CHECK(two.fabric.link_bytes_per_s == Approx(25e9));  // replaced
  CHECK(two.fabric.oversubscription == 2.0);           // kept from the base fabric
  CHECK(two.node.name == "dgx-h100");
  const StepInputs& b200 = s.variants[2].inputs;
  CHECK(b200.node.name == "dgx-b200");
  CHECK(b200.node.nic_bytes_per_s == Approx(100e9));
  CHECK(b200.gpu.name == "b200");
  // The base is untouched by its variants.
  CHECK(s.variants[0].inputs.nodes == 1);
  CHECK(s.variants[0].inputs.fabric.link_bytes_per_s == Approx(50e9));
}

TEST_CASE("compare names are required and unique, and differ from the base label") {
  const auto label = load_error(kBase + "compare:\n  - name: dgx-h100\n    layout: {zero: 1}\n");
  REQUIRE(label);
  CHECK(label->key() == "compare[0].name");
  CHECK(label->line() == 13);
  CHECK_THAT(label->what(), Catch::Contains("already taken"));

  const auto missing = load_error(kBase + "compare:\n  - layout: {zero: 1}\n");
  REQUIRE(missing);
  CHECK(missing->key() == "compare[0].name");

  const auto not_a_list = load_error(kBase + "compare: {name: x}\n");
  REQUIRE(not_a_list);
  CHECK_THAT(not_a_list->what(), Catch::Contains("expected a list of variants"));
}

// ---- mistakes inside preset files -----------------------------------------------------------

TEST_CASE("a preset number without a source names the preset file and line") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  dir.write("topology/presets/bad-node.yaml",
            "name: bad-node\n"
            "gpu_profile: h100-sxm\n"
            "gpus: 8\n"
            "gpu_fabric: pcie_only\n"
            "pcie_switches: 4\n"
            "pcie: 64GB/s\n"
            "pcie_latency: 1us\n"
            "host_link: 64GB/s\n"
            "nics: 8\n"
            "nic: 400Gbps\n"  // line 10
            "nic_latency: 2us\n"
            "sources:\n"
            "  gpus: a\n  pcie_switches: b\n  pcie: c\n  pcie_latency: d\n  host_link: e\n"
            "  nics: f\n  nic_latency: g\n");
  const auto e = load_error(with(kBase, "node: dgx-h100", "node: bad-node"), data);
  REQUIRE(e);
  CHECK(e->file() == (dir.path() / "topology/presets/bad-node.yaml").string());
  CHECK(e->line() == 10);
  CHECK(e->key() == "nic");
  CHECK_THAT(e->what(), Catch::Contains("no source for nic"));
}

TEST_CASE("a node without peer-to-peer needs its host memory bandwidth") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string preset = shipped_file("topology/presets/rtx5090-workstation.yaml");
  dir.write("topology/presets/no-memory.yaml",
            with(with(preset, "host_memory: 460.8GB/s\n", ""), "name: rtx5090-workstation",
                 "name: no-memory"));
  const auto e =
      load_error(with(kBase, "node: dgx-h100", "node: no-memory") + "  gpu: rtx5090\n", data);
  REQUIRE(e);
  CHECK(e->key() == "host_memory");
  CHECK(e->file() == (dir.path() / "topology/presets/no-memory.yaml").string());
  const Scenario s = load_text(
      with(with(kBase, "node: dgx-h100", "node: rtx5090-workstation"), "  dp: 8\n", "  dp: 4\n"));
  CHECK_FALSE(s.variants[0].inputs.node.gpu_p2p);
  const auto nvlink_without_p2p =
      load_error(with(kBase, "node: dgx-h100", "node: {preset: dgx-h100, gpu_p2p: false}"));
  REQUIRE(nvlink_without_p2p);
  CHECK_THAT(nvlink_without_p2p->what(), Catch::Contains("needs gpu_fabric pcie_only"));
  // With peer-to-peer access host memory carries optimizer offload's traffic instead.
  const Scenario overridden =
      load_text(with(kBase, "node: dgx-h100", "node: {preset: dgx-h100, host_memory: 1TB/s}"));
  CHECK(overridden.variants[0].inputs.node.host_memory_bytes_per_s == Approx(1e12));
  CHECK(s.variants[0].inputs.node.host_memory_bytes_per_s == Approx(460.8e9));
}

TEST_CASE("NVLink bridges need a bandwidth and GPUs in pairs") {
  const std::string bridged = with(kBase, "node: dgx-h100", "node: h100-pcie-server");
  CHECK(load_text(bridged).variants[0].inputs.node.gpu_fabric == GpuFabric::nvlink_pairs);
  const auto odd = load_error(
      with(bridged, "node: h100-pcie-server", "node: {preset: h100-pcie-server, gpus: 7}"));
  REQUIRE(odd);
  CHECK_THAT(odd->what(), Catch::Contains("needs an even number of GPUs"));
  CHECK_THAT(odd->what(), Catch::Contains("set gpus to an even number"));
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string preset = shipped_file("topology/presets/h100-pcie-server.yaml");
  dir.write("topology/presets/h100-pcie-server.yaml", with(preset, "nvlink: 300GB/s\n", ""));
  const auto no_bandwidth = load_error(bridged, data);
  REQUIRE(no_bandwidth);
  CHECK(no_bandwidth->key() == "nvlink");
  CHECK(no_bandwidth->file() == (dir.path() / "topology/presets/h100-pcie-server.yaml").string());
}

TEST_CASE("a p2p efficiency needs GPU links to run on") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string profile = shipped_file("calibration/profiles/l40s.yaml");
  dir.write("calibration/profiles/l40s.yaml",
            with(profile, "collective_library: nccl",
                 "p2p_efficiency: {value: 0.5, sigma: 0.1, provenance: 'assumed: test'}\n"
                 "collective_library: nccl"));
  const auto e = load_error(with(kBase, "node: dgx-h100", "node: l40s-server"), data);
  REQUIRE(e);
  CHECK(e->key() == "p2p_efficiency");
  CHECK_THAT(e->what(), Catch::Contains("needs an nvlink or xgmi link efficiency"));
}

}  // namespace
}  // namespace fleetsim
