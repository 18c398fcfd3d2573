// The sweep: block: a scenario's points, their order, and the mistakes a sweep can make.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "scenario/fixture.hpp"

namespace fleetsim {
namespace {

using testing::load_error;
using testing::load_text;
using testing::with;

TEST_CASE("a sweep's points: the grid's combinations times the zip's rows") {
  // The base sets the fields the sweep varies; dp: auto follows the GPUs.
  const std::string base =
      "name: sweep\n"                                                   // 1
      "model: llama3-8b\n"                                              // 2
      "training: {seq_len: 4096, global_batch: 256, micro_batch: 2}\n"  // 3
      "layout: {dp: auto, tp: 8, zero: 1}\n"                            // 4
      "cluster: {node: dgx-h100, nodes: 1}\n"                           // 5
      "sweep:\n"                                                        // 6
      "  grid:\n"                                                       // 7
      "    cluster.nodes: [1, 2, 4]\n"                                  // 8
      "    cluster.node: [dgx-h100, dgx-b200]\n";                       // 9
  const Scenario s = load_text(base);
  CHECK(s.swept);
  REQUIRE(s.variants.size() == 6);
  CHECK(s.variants[0].name == "cluster.nodes=1, cluster.node=dgx-h100");
  CHECK(s.variants[1].name == "cluster.nodes=1, cluster.node=dgx-b200");
  CHECK(s.variants[5].name == "cluster.nodes=4, cluster.node=dgx-b200");
  CHECK(s.variants[4].inputs.nodes == 4);
  CHECK(s.variants[4].inputs.plan.dp == 4);
  CHECK(s.variants[5].inputs.node.name == "dgx-b200");
  // Zipped lists vary together, times the grid: 3 x 2 points.
  const Scenario zipped = load_text(with(base, "    cluster.node: [dgx-h100, dgx-b200]\n",
                                         "  zip:\n"
                                         "    training.global_batch: [128, 256]\n"
                                         "    training.micro_batch: [1, 2]\n"));
  REQUIRE(zipped.variants.size() == 6);
  CHECK(zipped.variants[0].inputs.training.global_batch == 128);
  CHECK(zipped.variants[0].inputs.training.micro_batch == 1);
  CHECK(zipped.variants[1].inputs.training.global_batch == 256);
  CHECK(zipped.variants[1].inputs.training.micro_batch == 2);
  CHECK(zipped.variants[2].inputs.nodes == 2);

  // A field the scenario does not set, at the sweep's key; a value that does not fit its key,
  // at the value, named by its point.
  const auto unknown = load_error(with(base, "cluster.node:", "cluster.nodez:"));
  REQUIRE(unknown);
  CHECK(unknown->line() == 9);
  CHECK_THAT(unknown->what(), Catch::Contains("cluster.nodez is not a field the scenario sets"));
  const auto zero = load_error(with(base, "[1, 2, 4]", "[1, 0, 4]"));
  REQUIRE(zero);
  CHECK(zero->line() == 8);
  CHECK(zero->column() == 24);  // the 0 in "    cluster.nodes: [1, 0, 4]"
  CHECK_THAT(zero->what(),
             Catch::Contains("at sweep point \"cluster.nodes=0, cluster.node=dgx-h100\""));
  // What a point is not made of, a field swept twice, and a value that is not one value.
  const auto seed = load_error(with(base, "cluster.node:", "seed:"));
  REQUIRE(seed);
  CHECK(seed->line() == 9);
  CHECK_THAT(seed->what(), Catch::Contains("\"seed\" is not a field a sweep can vary"));
  const auto overlap = load_error(with(base, "    cluster.node: [dgx-h100, dgx-b200]\n",
                                       "  zip:\n    cluster: [{node: dgx-h100}]\n"));
  REQUIRE(overlap);
  CHECK_THAT(overlap->what(), Catch::Contains("overlaps \"cluster.nodes\""));
  const auto map_value =
      load_error(with(base, "[dgx-h100, dgx-b200]", "[dgx-h100, {preset: dgx-b200}]"));
  REQUIRE(map_value);
  CHECK_THAT(map_value->what(), Catch::Contains("a swept value is one value"));
  const auto lengths = load_error(with(base, "    cluster.node: [dgx-h100, dgx-b200]\n",
                                       "  zip:\n"
                                       "    training.global_batch: [128, 256]\n"
                                       "    training.micro_batch: [1, 2, 4]\n"));
  REQUIRE(lengths);
  CHECK_THAT(lengths->what(), Catch::Contains("need one length"));
  // Too many points, sweeping beside a compare, and what is not supported yet: refused.
  const auto many = load_error(with(
      base, "[1, 2, 4]", "[" + [] {
        std::string values;
        for (int i = 1; i <= 5001; ++i) values += (i > 1 ? ", " : "") + std::to_string(i);
        return values;
      }() + "]"));
  REQUIRE(many);
  CHECK_THAT(many->what(), Catch::Contains("more than 10000 points"));
  CHECK_FALSE(s.replanned);
  CHECK(load_text(base + "  layout: plan\n").replanned);
  const auto layout = load_error(base + "  layout: guess\n");
  REQUIRE(layout);
  CHECK_THAT(layout->what(), Catch::Contains("expected one of fixed, plan"));
}

TEST_CASE("a sweep beside a compare sweeps every variant alike") {
  const std::string base =
      "name: sweep\n"                                                   // 1
      "label: h100\n"                                                   // 2
      "model: llama3-8b\n"                                              // 3
      "training: {seq_len: 4096, global_batch: 256, micro_batch: 2}\n"  // 4
      "layout: {dp: auto, zero: 3}\n"                                   // 5
      "cluster: {node: dgx-h100, nodes: 1}\n"                           // 6
      "compare:\n"                                                      // 7
      "  - name: b200\n"                                                // 8
      "    cluster: {node: dgx-b200}\n"                                 // 9
      "  - name: mb1\n"                                                 // 10
      "    training: {micro_batch: 1}\n"                                // 11
      "sweep:\n"                                                        // 12
      "  grid:\n"                                                       // 13
      "    cluster.nodes: [1, 2]\n";                                    // 14
  const Scenario s = load_text(base);
  REQUIRE(s.variants.size() == 6);  // 3 variants x 2 points, variant by variant
  CHECK(s.variants[0].name == "h100: cluster.nodes=1");
  CHECK(s.variants[3].name == "b200: cluster.nodes=2");
  CHECK(s.variants[3].inputs.node.name == "dgx-b200");
  CHECK(s.variants[3].inputs.nodes == 2);
  CHECK(s.variants[3].inputs.plan.dp == 16);
  CHECK(s.variants[5].inputs.training.micro_batch == 1);
  CHECK(s.variants[5].inputs.node.name == "dgx-h100");
  // The variant is a swept value of its own, first: scaling and tables tell them apart by it.
  using Swept = std::vector<std::pair<std::string, std::string>>;
  CHECK(s.variants[4].swept == Swept{{"compare", "mb1"}, {"cluster.nodes", "1"}});
  // A compare entry that sets a swept field: at the sweep's key.
  const auto both = load_error(with(base, "{node: dgx-b200}", "{node: dgx-b200, nodes: 2}"));
  REQUIRE(both);
  CHECK(both->line() == 14);
  CHECK_THAT(
      both->what(),
      Catch::Contains("compare entry \"b200\" sets \"cluster.nodes\", which the sweep varies"));
  const auto inside =
      load_error(with(base, "    cluster.nodes: [1, 2]\n", "    training: [{seq_len: 4096}]\n"));
  REQUIRE(inside);  // a section is not one value, whatever the entries set
  // The point limit counts every variant's points.
  std::string values;
  for (int i = 1; i <= 4000; ++i) values += (i > 1 ? ", " : "") + std::to_string(i);
  const auto many = load_error(with(base, "[1, 2]", "[" + values + "]"));
  REQUIRE(many);
  CHECK_THAT(many->what(), Catch::Contains("more than 10000 points over its 3 compared variants"));
}

TEST_CASE("the shipped scaling sweep has both node types at every size") {
  const Scenario s = load_scenario(
      std::filesystem::path(FLEETSIM_SOURCE_DIR) / "scenarios" / "scaling-h100-vs-b200.yaml",
      testing::source_data());
  REQUIRE(s.variants.size() == 16);
  CHECK(s.variants[0].inputs.node.name == "dgx-h100");
  CHECK(s.variants[15].inputs.node.name == "dgx-b200");
  CHECK(s.variants[15].inputs.nodes == 128);
  CHECK(s.variants[15].inputs.plan.dp == 128);
  CHECK(s.variants[15].inputs.training.global_batch == 16 * 128);
}

TEST_CASE("a sweep's batch per GPU keeps each replica's share") {
  // 256 sequences on one node's single replica (tp 8); per GPU, 2 and 4 nodes train 512 and
  // 1,024 a step, each replica 256 as at the base.
  const std::string base =
      "name: sweep\n"
      "model: llama3-8b\n"
      "training: {seq_len: 4096, global_batch: 256, micro_batch: 2}\n"
      "layout: {dp: auto, tp: 8, zero: 1}\n"
      "cluster: {node: dgx-h100, nodes: 1}\n"
      "sweep:\n"
      "  grid: {cluster.nodes: [1, 2, 4]}\n"
      "  batch: per_gpu\n";
  const Scenario s = load_text(base);
  REQUIRE(s.variants.size() == 3);
  CHECK(s.variants[0].inputs.training.global_batch == 256);
  CHECK(s.variants[1].inputs.training.global_batch == 512);
  CHECK(s.variants[2].inputs.training.global_batch == 1024);
  CHECK(s.variants[2].inputs.plan.dp == 4);
  // It sets the batch: the sweep cannot vary it too.
  const auto both = load_error(with(base, "{cluster.nodes: [1, 2, 4]}",
                                    "{cluster.nodes: [1, 2, 4], training.global_batch: [256]}"));
  REQUIRE(both);
  CHECK(both->key() == "sweep.batch");
}

}  // namespace
}  // namespace fleetsim
