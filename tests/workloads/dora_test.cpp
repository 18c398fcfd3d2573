// DoRA: LoRA's adapters with each adapted projection's output scaled by a trained magnitude
// over the row norm of W + s B A, that norm taken again at every forward (NeMo's DoRALinear,
// PEFT's DoraLinearLayer).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "models.hpp"
#include "workloads/layout/rules.hpp"
#include "workloads/lora_ops.hpp"
#include "workloads/memory_model.hpp"

namespace fleetsim {

using testing::find_op;
using testing::llama3_8b;
using testing::training;

namespace {

TrainingSpec adapted(bool decomposed, bool quantized = false) {
  TrainingSpec t = training(4096, 8, 1);
  t.lora = LoraSpec{};
  t.lora->weight_decomposed = decomposed;
  t.lora->quantized_base = quantized;
  return t;
}

// The HBM bytes of the ops whose names contain `part`.
double bytes_of(const std::vector<Op>& ops, const std::string& part) {
  double bytes = 0;
  for (const Op& op : ops) {
    if (!op.collective && op.name.find(part) != std::string::npos) bytes += op.kernel.bytes;
  }
  return bytes;
}

bool any_named(const std::vector<Op>& ops, const std::string& part) {
  for (const Op& op : ops) {
    if (op.name.find(part) != std::string::npos) return true;
  }
  return false;
}

// Llama-3-8B's projections, each (in, out): q, k, v, o, gate, up, down.
constexpr double kH = 4096, kKv = 1024, kF = 14336;
constexpr double kOutputs = kH + kKv + kKv + kH + kF + kF + kH;  // 43,008
constexpr double kWeights = kH * (kH + kKv + kKv + kH + kF + kF) + kF * kH;

}  // namespace

TEST_CASE("DoRA trains one magnitude per output feature beside LoRA's adapters") {
  // PEFT's lora_magnitude_vector holds out_features values per adapted module: Llama-3-8B at
  // rank 16 on every linear layer trains LoRA's 41,943,040 and 32 x 43,008 = 1,376,256 more.
  const ModelSpec m = llama3_8b();
  CHECK(32 * lora_parameters_per_layer(m, adapted(false)) == 41'943'040.0);
  CHECK(32 * lora_parameters_per_layer(m, adapted(true)) == 41'943'040.0 + 1'376'256.0);
}

TEST_CASE("DoRA takes each adapted weight's norm every forward, memory-bound, with no backward") {
  // On one GPU: (s B) A is a GEMM of [out, r] x [r, in] per module (not model FLOPs) writing
  // the product, then W + s B A (two reads, a write) and its row norms (a read): four BF16
  // passes over [out, in], 8 bytes a weight of every adapted projection, which on Llama's
  // seven targets is the layer's projection weights.
  const ModelSpec m = llama3_8b();
  const LayerOps lora = decoder_layer_ops(m, adapted(false), 1);
  const LayerOps dora = decoder_layer_ops(m, adapted(true), 1);
  CHECK(bytes_of(dora.forward, "dora_norm") == Approx(8 * kWeights));
  const Op* product = find_op(dora.forward, "down.lora_dora_weight");
  REQUIRE(product);
  CHECK(product->kernel.flops == Approx(2 * kH * kF * 16));
  CHECK(product->model_flops == 0);
  CHECK_FALSE(any_named(dora.backward, "dora_norm"));
  CHECK_FALSE(any_named(dora.backward, "dora_weight"));
  CHECK_FALSE(any_named(lora.forward, "dora"));
  // The same model FLOPs as LoRA: the norm is overhead, not the model's work.
  CHECK(testing::layer_model_flops(dora) == Approx(testing::layer_model_flops(lora)));
  // The magnitude's scale: two passes over each output forward, four backward.
  CHECK(bytes_of(dora.forward, "dora_magnitude") == Approx(2 * 2 * 4096 * kOutputs));
  CHECK(bytes_of(dora.backward, "dora_magnitude.bwd") == Approx(4 * 2 * 4096 * kOutputs));
}

TEST_CASE("DoRA under tensor parallelism: each rank's norm over its shard, after one gather") {
  // NeMo gathers A ([r, in], BF16) beside a column-parallel projection and B ([out, r]) beside
  // a row-parallel one; each rank's B A and norm passes are its 1 / tp of W's.
  const ModelSpec m = llama3_8b();
  const LayerOps whole = decoder_layer_ops(m, adapted(true), 1);
  for (const int tp : {2, 4, 8}) {
    CAPTURE(tp);
    const LayerOps split = decoder_layer_ops(m, adapted(true), tp);
    CHECK(tp * bytes_of(split.forward, "dora_norm") ==
          Approx(bytes_of(whole.forward, "dora_norm")));
    const Op* column = find_op(split.forward, "gate.lora_dora_gather");
    const Op* row = find_op(split.forward, "down.lora_dora_gather");
    REQUIRE(column);
    REQUIRE(row);
    CHECK(column->collective->op == CollectiveOp::all_gather);
    CHECK(column->collective->size_bytes == 2 * 16 * kH);
    CHECK(row->collective->size_bytes == 2 * 16 * kH);
    CHECK(find_op(split.forward, "q.lora_dora_gather")->collective->size_bytes == 2 * 16 * kH);
    CHECK(find_op(split.forward, "o.lora_dora_gather")->collective->size_bytes == 2 * 16 * kH);
    // Down's A is [r, f / tp] on each rank, its B gathered to [h, r]: [h, f / tp] per rank.
    CHECK(find_op(split.forward, "down.lora_dora_weight")->kernel.flops ==
          Approx(2 * kH * kF / tp * 16));
  }
  CHECK_FALSE(any_named(whole.forward, "dora_gather"));
}

TEST_CASE("QDoRA dequantizes the 4-bit base again for each norm") {
  const ModelSpec m = llama3_8b();
  const LayerOps qdora = decoder_layer_ops(m, adapted(true, true), 1);
  // Read 4.127 bits and write 16 per weight, for every adapted weight: as much again as the
  // frozen GEMMs' own dequantization in forward.
  CHECK(bytes_of(qdora.forward, "dora_dequantize") ==
        Approx((kNf4BytesPerParameter + 2) * kWeights));
  CHECK(bytes_of(qdora.forward, ".dequantize") ==
        Approx(bytes_of(qdora.forward, "dora_dequantize")));
}

TEST_CASE("DoRA keeps the outputs' sum for its magnitude's gradient, and a norm's matrices") {
  const ModelSpec m = llama3_8b();
  // Per token and layer, each adapted projection's output in BF16: 2 x 43,008 bytes on one
  // GPU; under tp 4 with sequence parallelism a quarter (column outputs split, row outputs on
  // the shard); without it the row-parallel ones (o, down) are whole on every rank.
  const double lora = decoder_layer_saved_bytes_per_token(m, adapted(false));
  CHECK(decoder_layer_saved_bytes_per_token(m, adapted(true)) - lora == Approx(2 * kOutputs));
  const double lora4 = decoder_layer_saved_bytes_per_token(m, adapted(false), Recompute::none, 4);
  CHECK(decoder_layer_saved_bytes_per_token(m, adapted(true), Recompute::none, 4) - lora4 ==
        Approx(2 * kOutputs / 4));
  const double lora4_whole =
      decoder_layer_saved_bytes_per_token(m, adapted(false), Recompute::none, 4, false);
  CHECK(decoder_layer_saved_bytes_per_token(m, adapted(true), Recompute::none, 4, false) -
            lora4_whole ==
        Approx(2 * ((kOutputs - 2 * kH) / 4 + 2 * kH)));
  // Selective recomputation of the MLP recomputes its adapters' sums: q, k, v, o's stay.
  const RecomputeModules mlp{.core_attn = false, .mlp = true};
  const double lora_mlp =
      decoder_layer_saved_bytes_per_token(m, adapted(false), Recompute::selective, 1, true, mlp);
  CHECK(decoder_layer_saved_bytes_per_token(m, adapted(true), Recompute::selective, 1, true, mlp) -
            lora_mlp ==
        Approx(2 * (kH + kKv + kKv + kH)));

  // While a norm is taken: s B A and W + s B A of the largest adapted projection (gate or up,
  // [f, h]) in BF16; under QDoRA the base's BF16 copy for it reuses the buffer the GEMMs'
  // dequantized copy had (the "dequantized weight" item), so the norm's item is the same.
  ParallelPlan plan;
  CHECK(testing::item_bytes(estimate_memory(m, adapted(true), plan, {80e9}), "DoRA weight norm") ==
        2 * 2 * kF * kH);
  CHECK(testing::item_bytes(estimate_memory(m, adapted(true, true), plan, {80e9}),
                            "DoRA weight norm") == 2 * 2 * kF * kH);
  plan.tp = 2;
  CHECK(testing::item_bytes(estimate_memory(m, adapted(true), plan, {80e9}), "DoRA weight norm") ==
        2 * 2 * kF * kH / 2);
  // A DoRA step needs more than LoRA's.
  CHECK(estimate_memory(m, adapted(true), plan, {80e9}).total_bytes >
        estimate_memory(m, adapted(false), plan, {80e9}).total_bytes);
}

TEST_CASE("DoRA's norms rerun with the MLP that selective recomputation reruns") {
  // Selective recomputation of the MLP reruns gate, up and down's norms (and under tp their
  // gathers) before the block's backward, not attention's. (Full recomputation replays the
  // whole forward list, the norms with it.)
  const ModelSpec m = llama3_8b();
  const LayerOps mlp = decoder_layer_ops(m, adapted(true), 2, Recompute::selective, 1, 1, true,
                                         {.core_attn = false, .mlp = true});
  CHECK(find_op(mlp.backward, "recompute.down.lora_dora_norm"));
  CHECK(find_op(mlp.backward, "recompute.gate.lora_dora_gather"));
  CHECK_FALSE(any_named(mlp.backward, "recompute.q.lora_dora"));
  CHECK_FALSE(any_named(mlp.backward, "recompute.o.lora_dora"));
}

TEST_CASE("DoRA with dropout reruns the frozen projection on the dropped input, on one rank") {
  const ModelSpec m = llama3_8b();
  TrainingSpec t = adapted(true);
  t.lora->dropout = 0.05;
  const LayerOps ops = decoder_layer_ops(m, t, 1);
  // The correction's forward GEMM and its data gradient, no weight gradient, no model FLOPs.
  const Op* correction = find_op(ops.forward, "down.lora_dora_correction");
  REQUIRE(correction);
  CHECK(correction->kernel.flops == Approx(2 * 4096 * kF * kH));
  CHECK(correction->model_flops == 0);
  CHECK(find_op(ops.backward, "down.lora_dora_correction.dgrad"));
  CHECK_FALSE(find_op(ops.backward, "down.lora_dora_correction.wgrad"));
  TrainingSpec lora = t;
  lora.lora->weight_decomposed = false;
  CHECK(testing::layer_model_flops(ops) ==
        Approx(testing::layer_model_flops(decoder_layer_ops(m, lora, 1))));
  // Kept beyond DoRA without dropout: the correction's output (BF16, out) and its own mask of
  // the input (one byte, in), per adapted projection and token.
  const double ins = 5 * kH + kH + kF;  // q, k, v, gate, up read h; o reads h; down reads f
  CHECK(decoder_layer_saved_bytes_per_token(m, t) - decoder_layer_saved_bytes_per_token(m, lora) ==
        Approx(2 * kOutputs + 2 * kOutputs + ins));

  // Under tensor parallelism it is refused, at the dropout.
  ParallelPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  const std::optional<JobProblem> problem = first_job_problem(job_subject(m, t), plan);
  REQUIRE(problem);
  CHECK(problem->rule == "dora-dropout-without-tp");
  CHECK(problem->fields.front() == "training.lora.dropout");
  plan.tp = 1;
  plan.dp = 8;
  CHECK_FALSE(first_job_problem(job_subject(m, t), plan));
}

}  // namespace fleetsim
