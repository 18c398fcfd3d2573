#include <catch2/catch.hpp>

#include "sim/engine/errors.hpp"

#include "workloads/layout/sharding.hpp"

using namespace fleetsim;

namespace {

ParallelPlan with_zero(int stage, int dp = 8, int cp = 1, int ep = 1) {
  ParallelPlan plan;
  plan.dp = dp;
  plan.cp = cp;
  plan.ep = ep;
  plan.zero_stage = stage;
  return plan;
}

}  // namespace

TEST_CASE("each ZeRO stage shards what DeepSpeed's does, over the ranks holding the same state") {
  // Stage 0 shards nothing; 1 the optimizer states; 2 the gradients too; 3 the weights too.
  for (int stage = 0; stage <= 3; ++stage) {
    INFO("ZeRO " << stage);
    const Sharding sharding(with_zero(stage));
    CHECK(sharding.optimizer_sharded() == (stage >= 1));
    CHECK(sharding.gradients_sharded() == (stage >= 2));
    CHECK(sharding.parameters_sharded() == (stage >= 3));
    CHECK(sharding.gradient_shards() == (stage >= 2 ? 8 : 1));
    CHECK(sharding.weight_shards() == (stage >= 3 ? 8 : 1));
    CHECK(sharding.reduces_by_scatter() == (stage >= 1));
    CHECK(sharding.reduces_every_micro_batch() == (stage >= 2));
    CHECK(sharding.gathers_updated_shards() == (stage == 1 || stage == 2));
  }
}

TEST_CASE("a layout with no replica to shard over is refused, not divided by") {
  CHECK_THROWS_AS(Sharding(with_zero(1, 0)), ModelError);
  CHECK_THROWS_AS(Sharding(with_zero(1, 2, 1, 4)), ModelError);  // 2 replicas, ep 4
}

TEST_CASE("the cp ranks hold the same parameters, and an expert lies on dp / ep replicas") {
  // dp 4 x cp 2: a dense parameter's state is split 8 ways.
  CHECK(Sharding(with_zero(1, 4, 2)).dense_ranks() == 8);
  // 8 replicas, ep 4: each expert on 2 of them.
  const Sharding experts(with_zero(1, 8, 1, 4));
  CHECK(experts.dense_ranks() == 8);
  CHECK(experts.expert_ranks() == 2);
  // A rank of 800 dense and 60 expert parameters updates 800 / 8 + 60 / 2 = 130 of them.
  CHECK(experts.optimizer_parameters(800, 60) == 130);
  // Unsharded, all of them.
  CHECK(Sharding(with_zero(0, 8, 1, 4)).optimizer_parameters(800, 60) == 860);
}
