// Loading scenarios: the shipped example, preset overrides, compare variants, and one test per
// kind of mistake, each checking the file:line:column, key and hint of the error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "calibration/profile_file.hpp"
#include "fixture.hpp"
#include "sim/scenario/scenario.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

using testing::load_error;
using testing::load_text;
using testing::TempDir;
using testing::with;

// Line numbers in the tests below count from here.
const std::string kBase =
    "name: test\n"           // 1
    "model: llama3-8b\n"     // 2
    "training:\n"            // 3
    "  seq_len: 4096\n"      // 4
    "  global_batch: 256\n"  // 5
    "  micro_batch: 2\n"     // 6
    "layout:\n"              // 7
    "  dp: 8\n"              // 8
    "  zero: 3\n"            // 9
    "cluster:\n"             // 10
    "  node: dgx-h100\n";    // 11

// The text of a file shipped in the source tree, to plant a broken copy of it.
std::string shipped_file(const std::string& name) {
  std::ifstream in(std::filesystem::path(FLEETSIM_SOURCE_DIR) / name);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

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
             Catch::Contains("expected one of none, selective, full, got \"some\""));

  const auto zero = load_error(with(kBase, "  zero: 3\n", "  zero: 4\n"));
  REQUIRE(zero);
  CHECK_THAT(zero->what(), Catch::Contains("expected one of 0, 1, 2, 3, got \"4\""));

  const auto fp16 = load_error(with(kBase, "training:\n", "training:\n  precision: fp16\n"));
  REQUIRE(fp16);
  CHECK(fp16->key() == "training.precision");
  CHECK_THAT(fp16->what(), Catch::Contains("expected one of bf16, fp8, got \"fp16\""));
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
             Catch::Contains("expected a map with keys tp, cp, pp, vpp, schedule, dp, ep, zero, "
                             "recompute, tp_comm_overlap, overlap_param_gather, "
                             "offload_optimizer, bucket, got \"8\""));

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

TEST_CASE("a fitted entry replaces its block in a profile and nothing else") {
  const std::string profile =
      "name: p\n"
      "link_efficiency:\n"
      "  nvlink: {value: 0.8, sigma: 0.1, provenance: 'assumed: x'}\n"
      "  pcie:\n"
      "    value: 0.7\n"
      "\n"
      "    sigma: 0.1   # spread\n"
      "    provenance: 'assumed: y'\n"
      "# the library\n"
      "collective_library: nccl\n";
  const Calibrated entry{0.65, 0.02, "measured: it's a fit"};
  CHECK(with_profile_entry(profile, "p.yaml", "link_efficiency.pcie", entry) ==
        "name: p\n"
        "link_efficiency:\n"
        "  nvlink: {value: 0.8, sigma: 0.1, provenance: 'assumed: x'}\n"
        "  pcie:\n"
        "    value: 0.650\n"
        "    sigma: 0.020\n"
        "    provenance: 'measured: it''s a fit'\n"
        "# the library\n"
        "collective_library: nccl\n");
  CHECK(with_profile_entry(profile, "p.yaml", "link_efficiency.nvlink", entry)
            .find("  nvlink:\n    value: 0.650\n") != std::string::npos);
  try {
    with_profile_entry(profile, "p.yaml", "link_efficiency.efa", entry);
    FAIL("no efa entry to replace");
  } catch (const ScenarioError& e) {
    CHECK(e.file() == "p.yaml");
    CHECK_THAT(e.what(), Catch::Contains("no link_efficiency.efa entry to replace"));
  }
  CHECK_THROWS_AS(with_profile_entry(profile, "p.yaml", "nvls_efficiency", entry), ScenarioError);

  // A comment that introduces the next entry stays with it, even indented like the entry.
  const std::string commented =
      "link_efficiency:\n"
      "  nvlink:\n"
      "    value: 0.8\n"
      "    # the PCIe figure below is extrapolated\n"
      "  pcie: {value: 0.7, sigma: 0.1, provenance: 'assumed: y'}\n";
  CHECK(with_profile_entry(commented, "p.yaml", "link_efficiency.nvlink", entry) ==
        "link_efficiency:\n"
        "  nvlink:\n"
        "    value: 0.650\n"
        "    sigma: 0.020\n"
        "    provenance: 'measured: it''s a fit'\n"
        "    # the PCIe figure below is extrapolated\n"
        "  pcie: {value: 0.7, sigma: 0.1, provenance: 'assumed: y'}\n");
  // Windows line endings stay Windows line endings.
  const std::string crlf = "link_efficiency:\r\n  pcie:\r\n    value: 0.7\r\n\r\nname: p\r\n";
  CHECK(with_profile_entry(crlf, "p.yaml", "link_efficiency.pcie", {0.5, 0.01, "measured: x"}) ==
        "link_efficiency:\r\n  pcie:\r\n    value: 0.500\r\n    sigma: 0.010\r\n"
        "    provenance: 'measured: x'\r\n\r\nname: p\r\n");
  // A flow-style map cannot be edited in place.
  try {
    with_profile_entry("link_efficiency: {pcie: {value: 0.7}}\n", "p.yaml", "link_efficiency.pcie",
                       entry);
    FAIL("flow style");
  } catch (const ScenarioError& e) {
    CHECK_THAT(e.what(), Catch::Contains("write link_efficiency as a block map"));
  }
}

TEST_CASE("a GPU profile provenance must say what kind of number it is") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string profile =
      with(shipped_file("calibration/profiles/b200.yaml"), "name: b200", "name: guess");
  dir.write("calibration/profiles/guess.yaml",
            with(profile, "provenance: 'published: dense BF16", "provenance: 'rumour: dense BF16"));
  const auto e = load_error(kBase + "  gpu: guess\n", data);
  REQUIRE(e);
  CHECK(e->key() == "dense_bf16.provenance");
  CHECK(e->file() == (dir.path() / "calibration/profiles/guess.yaml").string());
  CHECK_THAT(e->what(),
             Catch::Contains("(hint: start with one of measured:, published:, extrapolated:, "
                             "assumed:"));
}

TEST_CASE("a GPU profile efficiency must lie above 0 and at most 1") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string profile =
      with(shipped_file("calibration/profiles/h100-sxm.yaml"), "name: h100-sxm", "name: fast");
  dir.write("calibration/profiles/fast.yaml", with(profile, "value: 0.891", "value: 1.2"));
  const auto e = load_error(kBase + "  gpu: fast\n", data);
  REQUIRE(e);
  CHECK(e->key() == "gemm_efficiency.value");
  CHECK_THAT(e->what(), Catch::Contains("expected a fraction in (0, 1], got \"1.2\""));
}

TEST_CASE("a GPU profile's name must be its file name") {
  // A copy under another file name that keeps the old name would send `calibrate --write`
  // to the original's file.
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  dir.write("calibration/profiles/my-h100.yaml",
            shipped_file("calibration/profiles/h100-sxm.yaml"));
  const auto e = load_error(kBase + "  gpu: my-h100\n", data);
  REQUIRE(e);
  CHECK(e->key() == "name");
  CHECK_THAT(e->what(), Catch::Contains("make the name match the file name"));
}

TEST_CASE("an MI300X node takes RCCL's tuning tables, not NCCL's") {
  const Scenario s = load_text(with(kBase, "node: dgx-h100", "node: mi300x-platform"));
  const CollectiveCosts& rccl = s.variants[0].inputs.gpu.collectives;
  CHECK(rccl.library == "rccl");
  CHECK(rccl.tree_efficiency == Approx(0.27));
  CHECK(rccl.ring[static_cast<int>(Protocol::ll)].bandwidth == Approx(0.2));
  CHECK(rccl.ring[static_cast<int>(Protocol::simple)].base.ns() == 27900);
  const CollectiveCosts nccl = load_text(kBase).variants[0].inputs.gpu.collectives;
  CHECK(nccl.library == "nccl");
  CHECK(nccl.tree_efficiency == Approx(0.92));
  // NCCL's per-channel tree limits for the H100 (compute capability 9.0: Hopper's row); RCCL's
  // are not in its table, so the tree stays out of its tuner.
  REQUIRE(nccl.gpu_tree_limits);
  CHECK(nccl.gpu_tree_limits->from_compute_capability == 90);
  CHECK(nccl.gpu_tree_limits->simple_bytes_per_s[1] == Approx(41.4e9));
  CHECK(nccl.tree_correction(Protocol::simple, 64.0 * 4096) == Approx(0.5));
  CHECK(nccl.tree_correction(Protocol::simple, 1e12) == 1.0);
  CHECK_FALSE(rccl.gpu_tree_limits);
  const CollectiveCosts rtx4090 = load_text(with(kBase, "node: dgx-h100", "node: rtx4090-server"))
                                      .variants[0]
                                      .inputs.gpu.collectives;
  REQUIRE(rtx4090.gpu_tree_limits);  // sm_89: Ampere's row, as NCCL picks it
  CHECK(rtx4090.gpu_tree_limits->from_compute_capability == 80);
}

TEST_CASE("a compute capability is written as NVIDIA prints it") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string profile = shipped_file("calibration/profiles/h100-sxm.yaml");
  dir.write("calibration/profiles/h100-sxm.yaml",
            with(profile, "compute_capability: 9.0", "compute_capability: 9.05"));
  const auto e = load_error(kBase, data);
  REQUIRE(e);
  CHECK(e->key() == "compute_capability");
  CHECK_THAT(e->what(), Catch::Contains("expected a compute capability like 9.0"));
}

TEST_CASE("a collective library's tables are checked: protocols, tree limits, sources") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string library = shipped_file("calibration/collectives/nccl.yaml");
  const auto load_with = [&](const std::string& from, const std::string& to) {
    dir.write("calibration/collectives/nccl.yaml", with(library, from, to));
    return load_error(kBase, data);
  };
  SECTION("Simple at other than 1 is an error") {
    const auto e = load_with("network: 9.6us, bandwidth: 1.0", "network: 9.6us, bandwidth: 0.9");
    REQUIRE(e);
    CHECK(e->key() == "ring.simple.bandwidth");
    CHECK_THAT(e->what(), Catch::Contains("expected 1, got \"0.9\""));
    CHECK_THAT(e->what(), Catch::Contains("(hint: Simple is the reference protocol"));
  }
  SECTION("LL above Simple is an error") {
    const auto e = load_with("bandwidth: 0.25}", "bandwidth: 1.5}");
    REQUIRE(e);
    CHECK(e->key() == "ring.ll.bandwidth");
    CHECK_THAT(e->what(), Catch::Contains("got \"1.5\""));
  }
  SECTION("a protocol at 0 is one the library does not use") {
    CHECK_FALSE(load_with("bandwidth: 0.25}", "bandwidth: 0}"));
  }
  SECTION("generations in ascending order") {
    const auto e = load_with("from_compute_capability: 9.0,", "from_compute_capability: 7.5,");
    REQUIRE(e);
    CHECK(e->key() == "tree_channel_limits.hopper.from_compute_capability");
    CHECK_THAT(e->what(), Catch::Contains("ascending"));
  }
  SECTION("one bandwidth per node count") {
    const auto e = load_with("simple: [38.7GB/s, 41.4GB/s, 36.0GB/s]", "simple: [38.7GB/s]");
    REQUIRE(e);
    CHECK(e->key() == "tree_channel_limits.hopper.simple");
    CHECK_THAT(e->what(), Catch::Contains("expected a list of 3 bandwidths"));
  }
  SECTION("the tables name their source") {
    const auto e = load_with("tree_model_source:", "# tree_model_source:");
    REQUIRE(e);
    CHECK(e->key() == "tree_model_source");
    CHECK_THAT(e->what(), Catch::Contains("missing required key"));
  }
}

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
  const auto tensor = load_error(with(with(lora, "dp: 8", "dp: 4\n  tp: 2"), "zero: 3", "zero: 1"));
  REQUIRE(tensor);
  CHECK(tensor->key() == "training.method");
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
  CHECK_THAT(window->what(), Catch::Contains("sliding-window attention is not modelled"));
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
}

TEST_CASE("QLoRA loads as LoRA over a 4-bit base, and is refused under ZeRO-3") {
  const std::string qlora = with(kBase, "  seq_len:", "  method: qlora\n  seq_len:");
  const StepInputs in = load_text(with(qlora, "zero: 3", "zero: 2")).variants[0].inputs;
  REQUIRE(in.training.lora);
  CHECK(in.training.lora->quantized_base);
  const auto sharded = load_error(qlora);
  REQUIRE(sharded);
  CHECK(sharded->key() == "training.method");
  CHECK_THAT(sharded->what(), Catch::Contains("QLoRA with ZeRO-3"));
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
  const auto sharded = load_error(with(mixtral, "zero: 1", "zero: 3"));
  REQUIRE(sharded);
  CHECK(sharded->key() == "layout.ep");
  CHECK_THAT(sharded->what(), Catch::Contains("zero 0 or 1"));
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
  CHECK_THAT(eager->what(), Catch::Contains("built on FlashAttention"));
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

}  // namespace
}  // namespace fleetsim
