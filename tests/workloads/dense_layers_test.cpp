// Dense layers among a mixture of experts' layers (Llama 4 Maverick, DeepSeek's first layers,
// Qwen-MoE's mlp_only_layers): each layer built, counted and kept as its own kind.
#include <catch2/catch.hpp>

#include <string>

#include "models.hpp"

namespace fleetsim {

using testing::item_bytes;

TEST_CASE("half the layers dense: every per-layer figure is the mean of the two uniform models") {
  // A 32-layer mixture of experts (8 experts, 2 a token) with every other layer dense, its
  // dense MLP twice the experts' width; against the same model with experts in every layer and
  // the dense model of that width. The embedding and head are the same in all three, so the
  // mixed model's parameters, model FLOPs, hardware FLOPs, weights and activations are the
  // two uniform models' means, exactly.
  ModelSpec moe = testing::llama3_8b();
  moe.experts = 8;
  moe.experts_per_token = 2;
  ModelSpec mixed = moe;
  mixed.moe_layer_every = 2;
  mixed.dense_ffn = 2 * moe.ffn;
  const ModelSpec dense = mixed.dense_layer_model();
  CHECK(dense.ffn == 2 * moe.ffn);
  CHECK_FALSE(dense.mixture_of_experts());
  CHECK(mixed.expert_layers() == 16);
  CHECK(mixed.parameters() == Approx((moe.parameters() + dense.parameters()) / 2));

  const TrainingSpec t = testing::training(4096, 16, 1);
  ParallelPlan plan;
  plan.dp = 8;
  plan.ep = 2;
  plan.zero_stage = 1;
  const auto graph = [&](const ModelSpec& m) { return build_data_parallel_step(m, t, plan); };
  const TaskGraph g_mixed = graph(mixed), g_moe = graph(moe);
  ParallelPlan dense_plan = plan;
  dense_plan.ep = 1;  // expert parallelism needs experts
  const TaskGraph g_dense = build_data_parallel_step(dense, t, dense_plan);
  CHECK(g_mixed.model_flops_per_rank ==
        Approx((g_moe.model_flops_per_rank + g_dense.model_flops_per_rank) / 2));
  CHECK(g_mixed.hardware_flops_per_rank ==
        Approx((g_moe.hardware_flops_per_rank + g_dense.hardware_flops_per_rank) / 2));
  // Only the experts' layers route: 16 routers a micro-batch.
  int routers = 0;
  for (const Task& task : g_mixed.stages[0]) {
    if (task.name.ends_with(".router")) ++routers;
  }
  CHECK(routers == 16 * g_mixed.micro_batches);

  const MemoryDevice device{192e9};
  const MemoryBreakdown m_mixed = estimate_memory(mixed, t, plan, device);
  const MemoryBreakdown m_moe = estimate_memory(moe, t, plan, device);
  const MemoryBreakdown m_dense = estimate_memory(dense, t, dense_plan, device);
  // Weights: the dense layers whole on every rank, the experts' layers' experts split by ep.
  CHECK(item_bytes(m_mixed, "weights") ==
        Approx((item_bytes(m_moe, "weights") + item_bytes(m_dense, "weights")) / 2));
  CHECK(item_bytes(m_mixed, "activations") ==
        Approx((item_bytes(m_moe, "activations") + item_bytes(m_dense, "activations")) / 2));
  // Under FP8 each layer keeps its own kind's FP8 weight copies.
  TrainingSpec fp8 = t;
  fp8.precision = Precision::fp8;
  const auto copies = [&](const ModelSpec& m, const ParallelPlan& p) {
    return item_bytes(estimate_memory(m, fp8, p, device), "FP8 weight copies");
  };
  CHECK(copies(mixed, plan) == Approx((copies(moe, plan) + copies(dense, dense_plan)) / 2));
}

TEST_CASE("dense-layer settings are a mixture of experts', and leave it an experts' layer") {
  ModelSpec m = testing::llama3_8b();
  m.dense_ffn = 28672;
  auto problems = model_problems(m);
  REQUIRE_FALSE(problems.empty());
  CHECK(problems.front().rule == "dense-layers-need-experts");
  m.experts = 8;
  m.experts_per_token = 2;
  m.first_dense_layers = 32;
  problems = model_problems(m);
  REQUIRE_FALSE(problems.empty());
  CHECK(problems.front().rule == "some-expert-layer");
  // DeepSeek-V3's first three dense layers: layers 3 to 31 are the experts'.
  m.first_dense_layers = 3;
  CHECK(model_problems(m).empty());
  CHECK(m.expert_layers() == 29);
  CHECK_FALSE(m.layer_has_experts(2));
  CHECK(m.layer_has_experts(3));
}

}  // namespace fleetsim
