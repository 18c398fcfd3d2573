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

TEST_CASE("FSDP under a pipeline is sharded between steps, whole within one") {
  // PyTorch's pipelining runs fully_shard with reshard_after_forward off and each group's
  // reduction after the stage's last backward: within the step the distributed optimizer's
  // sharding (ZeRO 1), its gather always ahead of the forward, its reductions held back.
  ParallelPlan plan = with_zero(3, 4);
  plan.pp = 2;
  plan.fsdp2 = true;
  const Sharding pipelined(plan);
  CHECK(pipelined.gathered_for_step());
  CHECK(pipelined.optimizer_sharded());
  CHECK_FALSE(pipelined.gradients_sharded());
  CHECK_FALSE(pipelined.parameters_sharded());
  CHECK(pipelined.weight_shards() == 1);
  CHECK(pipelined.gradient_shards() == 1);
  CHECK_FALSE(pipelined.reduces_every_micro_batch());
  CHECK(pipelined.reduces_by_scatter());
  CHECK(pipelined.gathers_updated_shards());
  CHECK(pipelined.gathers_ahead());
  CHECK(pipelined.holds_back_reductions());  // whatever overlap_grad_reduce says
  // Its FP32 shards are the parameters between steps (a checkpoint holds them), the BF16 copies
  // gathered for the step only.
  CHECK(pipelined.master_is_parameter());
  CHECK_FALSE(pipelined.shard_is_master());
  // Without a pipeline, or without fsdp2 (which the rules refuse), ZeRO 3 is per use.
  plan.pp = 1;
  CHECK_FALSE(Sharding(plan).gathered_for_step());
  CHECK(Sharding(plan).parameters_sharded());
  CHECK_FALSE(Sharding(plan).holds_back_reductions());
  plan.pp = 2;
  plan.fsdp2 = false;
  CHECK_FALSE(Sharding(plan).gathered_for_step());
  // ZeRO 1: the gather ahead only with overlap_param_gather, reductions held back only
  // without overlap_grad_reduce.
  ParallelPlan distributed = with_zero(1, 4);
  distributed.pp = 2;
  CHECK_FALSE(Sharding(distributed).gathers_ahead());
  distributed.overlap_param_gather = true;
  CHECK(Sharding(distributed).gathers_ahead());
  CHECK_FALSE(Sharding(distributed).holds_back_reductions());
  distributed.overlap_grad_reduce = false;
  CHECK(Sharding(distributed).holds_back_reductions());
}

TEST_CASE("ZeRO 3's FP32 shard is the parameter unless a BF16 shard is kept beside it") {
  // PyTorch's FSDP: no BF16 copy between gathers. DeepSpeed's ZeRO-3 and Megatron FSDP
  // (bf16_shards) keep one, and so does an offload, whose master lives on the host. Below
  // ZeRO 3 the weights are whole, and FSDP under a pipeline keeps them gathered for the step.
  ParallelPlan plan = with_zero(3, 8);
  CHECK(Sharding(plan).shard_is_master());
  plan.bf16_shards = true;
  CHECK_FALSE(Sharding(plan).shard_is_master());
  plan.bf16_shards = false;
  plan.offload_optimizer = true;
  CHECK_FALSE(Sharding(plan).shard_is_master());
  plan.offload_optimizer = false;
  plan.pp = 2;
  plan.fsdp2 = true;
  CHECK_FALSE(Sharding(plan).shard_is_master());
  CHECK_FALSE(Sharding(with_zero(2, 8)).shard_is_master());
}
