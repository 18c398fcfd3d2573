#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "topology/node_spec.hpp"
#include "workloads/layout/dimensions.hpp"
#include "workloads/layout/rules.hpp"

using namespace fleetsim;

namespace {

// A layout with every field away from its default.
ParallelPlan unusual_plan() {
  ParallelPlan plan;
  plan.tp = 8;
  plan.cp = 2;
  plan.dp = 16;
  plan.pp = 4;
  plan.schedule = PipelineSchedule::gpipe;
  plan.vpp = 3;
  plan.zero_stage = 2;
  plan.recompute = Recompute::selective;
  plan.recompute_layers = 3;
  plan.bucket_bytes = 50e6;
  plan.tp_comm_overlap = true;
  plan.overlap_param_gather = true;
  plan.fsdp2 = true;
  plan.bf16_shards = true;
  plan.ep = 2;
  plan.expert_tp = 1;
  plan.offload_optimizer = true;
  return plan;
}

}  // namespace

TEST_CASE("the table covers every field of the layout: copying its dimensions copies the layout") {
  // If ParallelPlan gains a field without a row here, the copy keeps that field's default and
  // differs from the original.
  const ParallelPlan original = unusual_plan();
  ParallelPlan copy;
  REQUIRE_FALSE(copy == original);
  for (const LayoutDimension& dimension : layout_dimensions()) {
    dimension.set(copy, dimension.get(original));
  }
  CHECK(copy == original);
}

TEST_CASE("every dimension has its own key and output name, and a choice reads its names back") {
  std::set<std::string_view> keys, outputs;
  for (const LayoutDimension& dimension : layout_dimensions()) {
    INFO(dimension.key);
    CHECK(keys.insert(dimension.key).second);
    CHECK(outputs.insert(dimension.output).second);
    CHECK(find_layout_dimension(dimension.key) == &dimension);
    CHECK_FALSE(dimension.description.empty());
    CHECK_FALSE(dimension.planner.empty());
    CHECK(dimension.choices.empty() ==
          (dimension.kind != DimensionKind::choice && dimension.kind != DimensionKind::names));
    for (const std::string_view choice : dimension.choices) {
      ParallelPlan plan;
      dimension.set(plan, std::string(choice));
      const DimensionValue value = dimension.get(plan);
      const std::string written = std::holds_alternative<int>(value)
                                      ? std::to_string(std::get<int>(value))
                                      : std::get<std::string>(value);
      CHECK(written == choice);
    }
  }
  CHECK(find_layout_dimension("zero_stage") == nullptr);  // the output name is not a key
}

TEST_CASE("a layout's label is its dimensions' words in the table's order") {
  ParallelPlan plan;
  plan.tp = 8;
  plan.pp = 8;
  plan.vpp = 2;
  plan.dp = 16;
  plan.zero_stage = 1;
  plan.recompute = Recompute::selective;
  plan.tp_comm_overlap = true;
  plan.overlap_param_gather = true;
  CHECK(layout_label(plan) ==
        "tp8 pp8 vpp2 dp16 zero1 recompute=selective tp-overlap param-gather-overlap");
  // A pipeline without virtual stages names its schedule; none names neither.
  plan.vpp = 1;
  plan.schedule = PipelineSchedule::gpipe;
  plan.tp_comm_overlap = plan.overlap_param_gather = false;
  CHECK(layout_label(plan) == "tp8 pp8 gpipe dp16 zero1 recompute=selective");
  CHECK(layout_label(ParallelPlan{}) == "dp1 zero0 recompute=none");
  CHECK(layout_label(unusual_plan()) ==
        "tp8 cp2 pp4 vpp3 dp16 ep2 etp1 zero2 recompute=selective tp-overlap param-gather-overlap "
        "fsdp2 bf16-shards offload");
}

TEST_CASE("defaults are written as a scenario writes them") {
  CHECK(default_text(*find_layout_dimension("tp")) == "1");
  CHECK(default_text(*find_layout_dimension("schedule")) == "1f1b");
  CHECK(default_text(*find_layout_dimension("zero")) == "0");
  CHECK(default_text(*find_layout_dimension("recompute")) == "none");
  CHECK(default_text(*find_layout_dimension("bucket")) == "25MB");
  CHECK(default_text(*find_layout_dimension("offload_optimizer")) == "false");
}

TEST_CASE("dp: auto is what the GPUs leave to tp x cp x pp") {
  ParallelPlan plan;
  plan.tp = 8;
  plan.cp = 2;
  plan.pp = 4;
  plan.dp = 0;
  CHECK(data_parallel_size_for(plan, 1024) == 16);  // 1024 / (8 x 2 x 4)
  CHECK(data_parallel_size_for(plan, 96) == 0);     // 64 does not divide 96
  plan.dp = 3;
  CHECK(data_parallel_size_for(plan, 1024) == 3);  // a dp given stays
  // Sizes whose product no int holds leave nothing, rather than wrap to a divisor of zero.
  plan.dp = 0;
  plan.tp = 65536;
  plan.cp = 65536;
  CHECK(data_parallel_size_for(plan, 1024) == 0);
  CHECK(size_product({65536, 65536, 65536, 65536}) == std::numeric_limits<std::int64_t>::max());
}

namespace {

std::vector<int> counts(const std::vector<DimensionValue>& values) {
  std::vector<int> found;
  for (const DimensionValue& value : values) found.push_back(std::get<int>(value));
  return found;
}

std::vector<int> candidates_of(std::string_view key, const LayoutSearch& search,
                               const ParallelPlan& chosen) {
  return counts(find_layout_dimension(key)->candidates(search, chosen));
}

}  // namespace

TEST_CASE("every dimension says what the planner tries for it, in words and in code") {
  for (const LayoutDimension& dimension : layout_dimensions()) {
    INFO(dimension.key);
    CHECK_FALSE(dimension.planner.empty());
    CHECK(dimension.candidates != nullptr);
  }
}

TEST_CASE("the planner's candidates on 16 GPUs of 8-GPU nodes, a 12-layer mixture of experts") {
  JobSubject job;
  job.layers = 12;
  job.heads = 32;
  job.kv_heads = 8;
  job.experts = 8;
  job.seq_len = 4096;
  job.global_batch = 64;
  job.micro_batch = 1;
  NodeSpec node;  // 8 GPUs, one NVLink domain a node
  ParallelPlan scenario;
  scenario.cp = 2;
  scenario.tp_comm_overlap = true;
  const LayoutSearch search{job, node, 16, scenario, true};
  ParallelPlan chosen;
  // tp: the powers of two of a node; cp: up to the scenario's.
  CHECK(candidates_of("tp", search, chosen) == std::vector<int>{1, 2, 4, 8});
  CHECK(candidates_of("cp", search, chosen) == std::vector<int>{1, 2});
  // pp: 12's divisors and the powers of two leaving two layers a stage (1, 2, 3, 4, 6, 12 and
  // 8 would leave fewer than two layers a stage), of which tp x cp x pp must divide 16: with tp 4,
  // cp 1, only 1, 2, 4.
  chosen.tp = 4;
  CHECK(candidates_of("pp", search, chosen) == std::vector<int>{1, 2, 4});
  chosen.tp = 1;
  CHECK(candidates_of("pp", search, chosen) == std::vector<int>{1, 2, 4});
  // vpp: with 4 stages of 3 layers, 1 and 3.
  chosen.pp = 4;
  CHECK(candidates_of("vpp", search, chosen) == std::vector<int>{1, 3});
  // dp: what 16 GPUs leave to 1 x 1 x 4.
  CHECK(candidates_of("dp", search, chosen) == std::vector<int>{4});
  chosen.dp = 4;
  // ZeRO: 0-2 with a pipeline, 0-3 without, 0 alone without replicas.
  CHECK(candidates_of("zero", search, chosen) == std::vector<int>{0, 1, 2});
  chosen.pp = 1;
  chosen.dp = 16;
  CHECK(candidates_of("zero", search, chosen) == std::vector<int>{0, 1, 2, 3});
  // ep: powers of two dividing the 8 experts and the replicas (dp 16, or 8 at tp 2), any ZeRO
  // stage.
  chosen.zero_stage = 1;
  CHECK(candidates_of("ep", search, chosen) == std::vector<int>{1, 2, 4, 8});
  chosen.zero_stage = 3;
  CHECK(candidates_of("ep", search, chosen) == std::vector<int>{1, 2, 4, 8});
  chosen.tp = 2;
  chosen.dp = 8;
  CHECK(candidates_of("ep", search, chosen) == std::vector<int>{1, 2, 4, 8});
  chosen.dp = 4;
  CHECK(candidates_of("ep", search, chosen) == std::vector<int>{1, 2, 4});
  chosen.tp = 1;
  chosen.dp = 16;
  chosen.zero_stage = 2;
  CHECK(candidates_of("ep", search, chosen) == std::vector<int>{1, 2, 4, 8});
  // Offload with ZeRO and ep 1, where the node and optimizer allow it; tp overlap with tp.
  CHECK(find_layout_dimension("offload_optimizer")->candidates(search, chosen).size() == 2);
  CHECK(find_layout_dimension("tp_comm_overlap")->candidates(search, chosen) ==
        std::vector<DimensionValue>{false});
  chosen.tp = 2;
  CHECK(find_layout_dimension("tp_comm_overlap")->candidates(search, chosen) ==
        std::vector<DimensionValue>{true});
}

TEST_CASE("recompute_modules offers exactly the modules the layout knows, read back as written") {
  const LayoutDimension& modules = *find_layout_dimension("recompute_modules");
  REQUIRE(modules.choices.size() == kRecomputeModuleNames.size());
  for (std::size_t i = 0; i < kRecomputeModuleNames.size(); ++i) {
    CHECK(modules.choices[i] == kRecomputeModuleNames[i].first);
  }
  // Written as results write it (the names in the table's order, joined by ", ") and read back.
  ParallelPlan plan;
  plan.recompute_modules = {.core_attn = true, .moe = true, .layernorm = true};
  const DimensionValue written = modules.get(plan);
  CHECK(std::get<std::string>(written) == "core_attn, layernorm, moe");
  ParallelPlan read;
  modules.set(read, written);
  CHECK(read.recompute_modules == plan.recompute_modules);
  CHECK(default_text(modules) == "[core_attn]");
}
