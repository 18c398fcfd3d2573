// LoRA's adapters beside frozen projections: split over tensor parallelism as NeMo splits them,
// beside FP8 base GEMMs, and what they keep for backward.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "models.hpp"
#include "workloads/lora_ops.hpp"

namespace fleetsim {

using testing::find_op;
using testing::llama3_8b;
using testing::training;

namespace {

// The FLOPs of the ops whose names contain `part`.
double flops_of(const std::vector<Op>& ops, const std::string& part) {
  double flops = 0;
  for (const Op& op : ops) {
    if (!op.collective && op.name.find(part) != std::string::npos) flops += op.kernel.flops;
  }
  return flops;
}

TrainingSpec lora_training() {
  TrainingSpec t = training(4096, 8, 1);
  t.lora = LoraSpec{};
  return t;
}

}  // namespace

TEST_CASE("LoRA under tensor parallelism: the tp ranks' adapter FLOPs sum to one GPU's") {
  // NeMo splits A by its rank beside a column-parallel projection and by its inputs beside a
  // row-parallel one, B by its outputs: each adapter GEMM's FLOPs divide by tp exactly, forward
  // and backward, and the frozen projections' as well.
  const ModelSpec m = llama3_8b();
  const TrainingSpec t = lora_training();
  const LayerOps whole = decoder_layer_ops(m, t, 1);
  for (const int tp : {2, 4, 8}) {
    CAPTURE(tp);
    for (const bool sequence_parallel : {true, false}) {
      const LayerOps split = decoder_layer_ops(m, t, tp, Recompute::none, 1, 1, sequence_parallel);
      for (const std::string module :
           {"q.lora_", "k.lora_", "o.lora_", "gate.lora_", "down.lora_"}) {
        CAPTURE(module);
        // The adapter's GEMMs (the elementwise ops beside them divide by tp only where the
        // output is split).
        for (const std::string& gemm : {module + "a", module + "b"}) {
          CHECK(tp * flops_of(split.forward, gemm) == Approx(flops_of(whole.forward, gemm)));
          CHECK(tp * flops_of(split.backward, gemm) == Approx(flops_of(whole.backward, gemm)));
        }
      }
      CHECK(tp * flops_of(split.backward, "qkv.dgrad") ==
            Approx(flops_of(whole.backward, "qkv.dgrad")));
    }
  }
}

TEST_CASE("LoRA under tensor parallelism: NeMo's exchanges of the rank dimension and outputs") {
  const ModelSpec m = llama3_8b();
  TrainingSpec t = lora_training();
  const double tokens = 4096;
  const double r = 16;
  const LayerOps ops = decoder_layer_ops(m, t, 4);
  // Beside QKV (column): A's [T, r] output all-gathered; B's input gradient all-reduced.
  const Op* gather = find_op(ops.forward, "q.lora_a_output");
  REQUIRE(gather);
  CHECK(gather->collective->op == CollectiveOp::all_gather);
  CHECK(gather->collective->size_bytes == 2 * tokens * r);
  CHECK(gather->collective->blocking);
  // Beside o_proj (row): A's output all-reduced, B's [T, h / tp] output gathered whole (then
  // split to the sequence shard, whose gradient is all-gathered back).
  const Op* reduce = find_op(ops.forward, "o.lora_a_output");
  REQUIRE(reduce);
  CHECK(reduce->collective->op == CollectiveOp::all_reduce);
  const Op* output = find_op(ops.forward, "o.lora_b_output");
  REQUIRE(output);
  CHECK(output->collective->op == CollectiveOp::all_gather);
  CHECK(output->collective->size_bytes == 2 * tokens * m.hidden);
  REQUIRE(find_op(ops.backward, "o.lora_b_output.bwd"));
  // NeMo's a2a_experimental: one all-to-all of the rank's [T, h / tp], a quarter of the bytes.
  t.lora->sequence_all_to_all = true;
  const LayerOps a2a = decoder_layer_ops(m, t, 4);
  const Op* exchange = find_op(a2a.forward, "o.lora_b_output");
  REQUIRE(exchange);
  CHECK(exchange->collective->op == CollectiveOp::all_to_all);
  CHECK(exchange->collective->size_bytes == 2 * tokens * m.hidden / 4);
  // Without sequence parallelism a column adapter's input gradient is all-reduced (A's
  // allreduce_dgrad) beside A's weight gradient; under it, it joins the projection's
  // reduce-scatter.
  const LayerOps whole = decoder_layer_ops(m, t, 4, Recompute::none, 1, 1, false);
  REQUIRE(find_op(whole.backward, "q.lora_a_input.bwd"));
  CHECK(find_op(whole.backward, "q.lora_a_input.bwd")->collective->beside_weight_gradient);
  CHECK_FALSE(find_op(ops.backward, "q.lora_a_input.bwd"));
}

TEST_CASE("a frozen projection's input gradient is reduced after its data gradient, not beside") {
  // A trained layer reduce-scatters QKV's input gradient beside QKV's weight gradient; a frozen
  // one has none, so under userbuffers the reduce-scatter waits for the data gradient.
  const ModelSpec m = llama3_8b();
  const auto reduce_beside = [](const LayerOps& ops) {
    for (std::size_t i = 0; i < ops.backward.size(); ++i) {
      if (ops.backward[i].name == "attn_gather.bwd") return overlapped_kernel(ops.backward, i);
    }
    FAIL("no reduce-scatter of the attention block's input gradient");
    return std::optional<std::size_t>{};
  };
  const LayerOps trained = decoder_layer_ops(m, training(4096, 8, 1), 4);
  const std::optional<std::size_t> beside = reduce_beside(trained);
  REQUIRE(beside);
  CHECK(trained.backward[*beside].name == "qkv.wgrad");
  CHECK_FALSE(reduce_beside(decoder_layer_ops(m, lora_training(), 4)));
}

TEST_CASE("LoRA on an FP8 base: frozen projections run FP8 without weight gradients") {
  // The base's forward and data-gradient GEMMs in FP8, each cast writing one FP8 copy (no
  // transpose: there is no weight gradient); the adapters' GEMMs BF16.
  const ModelSpec m = llama3_8b();
  TrainingSpec t = lora_training();
  t.precision = Precision::fp8;
  const LayerOps ops = decoder_layer_ops(m, t, 1);
  const Op* qkv = find_op(ops.forward, "qkv");
  REQUIRE(qkv);
  CHECK(qkv->kernel.fp8);
  REQUIRE(find_op(ops.backward, "qkv.dgrad"));
  CHECK(find_op(ops.backward, "qkv.dgrad")->kernel.fp8);
  CHECK_FALSE(find_op(ops.backward, "qkv.wgrad"));
  const Op* cast = find_op(ops.forward, "qkv.cast");
  REQUIRE(cast);
  CHECK(cast->kernel.bytes == Approx((2.0 + 1.0) * 4096 * m.hidden));
  REQUIRE(find_op(ops.forward, "q.lora_a"));
  CHECK_FALSE(find_op(ops.forward, "q.lora_a")->kernel.fp8);
  // Under sequence parallelism the block's input is gathered in BF16 for the adapters to read,
  // and cast after; with no adapter on the block, cast first and gathered in FP8.
  const LayerOps split = decoder_layer_ops(m, t, 4);
  const Op* gather = find_op(split.forward, "attn_gather");
  REQUIRE(gather);
  CHECK(gather->collective->size_bytes == 2.0 * 4096 * m.hidden);
  t.lora->targets = {"o"};
  const LayerOps output_only = decoder_layer_ops(m, t, 4);
  const Op* fp8_gather = find_op(output_only.forward, "attn_gather");
  REQUIRE(fp8_gather);
  CHECK(fp8_gather->collective->size_bytes == 1.0 * 4096 * m.hidden);
}

TEST_CASE("LoRA keeps what its adapters read, and a frozen projection keeps nothing") {
  // Llama-3-8B, one GPU, BF16, no dropout anywhere. Full training keeps per token the norms'
  // inputs 4h, the QKV and first MLP GEMMs' normed inputs 4h, Q, K, V 2(h + 2kv), O 2h, the
  // log-sum-exp 4a, gate/up outputs 4f and down's input 2f. A frozen layer with every
  // projection adapted keeps the same but for the normed inputs, kept once per block (2h + 2h),
  // and each of its 7 adapters' x A (2r): only 7 x 32 bytes more. Adapting q alone drops the
  // MLP's normed input and down's input: 2h + 2f less, 2r more.
  const ModelSpec m = llama3_8b();
  const double h = m.hidden, f = m.ffn, kv = 1024, r = 16;
  const double full = decoder_layer_saved_bytes_per_token(m, training(4096, 8, 1));
  CHECK(full == Approx(4 * h + 4 * h + 2 * (h + 2 * kv) + 2 * h + 4 * 32 + 4 * f + 2 * f));
  TrainingSpec t = lora_training();
  CHECK(decoder_layer_saved_bytes_per_token(m, t) == Approx(full + 7 * 2 * r));
  t.lora->targets = {"q"};
  CHECK(decoder_layer_saved_bytes_per_token(m, t) == Approx(full - 2 * h - 2 * f + 2 * r));
  // Dropout on q's and v's inputs: each keeps its dropped copy and mask, 3h, instead of the one
  // shared normed input.
  t.lora->targets = {"q", "v"};
  t.lora->dropout = 0.1;
  CHECK(decoder_layer_saved_bytes_per_token(m, t) ==
        Approx(full - 2 * h - 2 * h - 2 * f + 2 * 3 * h + 2 * 2 * r));
  // Under tp 4 with sequence parallelism the adapters read the gathered input: kept whole.
  t.lora->dropout = 0;
  t.lora->targets = {"q"};
  const double split = decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 4);
  const double split_full =
      decoder_layer_saved_bytes_per_token(m, training(4096, 8, 1), Recompute::none, 4);
  CHECK(split == Approx(split_full - (2 * h + 2 * h) / 4 - 2 * f / 4 + 2 * h + 2 * r));
}

TEST_CASE("the adapters' output scale and add and their input gradient's add are costed") {
  // PEFT's result + lora_B(lora_A(dropout(x))) * scaling: a multiply (2 passes over the T x n
  // output) and an add (3); backward the scaled gradient (2) and the input gradients added
  // (3 over T x k). One GPU, q only: n = k = h.
  const ModelSpec m = llama3_8b();
  TrainingSpec t = lora_training();
  t.lora->targets = {"q"};
  const LayerOps ops = decoder_layer_ops(m, t, 1);
  const double elements = 4096.0 * m.hidden;
  REQUIRE(find_op(ops.forward, "q.lora_scale_add"));
  CHECK(find_op(ops.forward, "q.lora_scale_add")->kernel.bytes == Approx(5 * 2 * elements));
  CHECK(find_op(ops.backward, "q.lora_scale.bwd")->kernel.bytes == Approx(2 * 2 * elements));
  CHECK(find_op(ops.backward, "q.lora_add_input_grad.bwd")->kernel.bytes ==
        Approx(3 * 2 * elements));
  CHECK_FALSE(find_op(ops.forward, "q.lora_dropout"));
  t.lora->dropout = 0.1;
  const LayerOps dropped = decoder_layer_ops(m, t, 1);
  REQUIRE(find_op(dropped.forward, "q.lora_dropout"));
  CHECK(find_op(dropped.forward, "q.lora_dropout")->kernel.bytes == Approx(5 * elements));
}

}  // namespace fleetsim

namespace fleetsim {

TEST_CASE("under userbuffers overlap a column adapter gathers its own input, as NeMo's does") {
  // NeMo asks Transformer Engine for the gathered norm output only without userbuffers overlap;
  // with it the adapter drops and gathers its own BF16 sequence shard and reduce-scatters its
  // input gradient, while the block's gather stays the projection's (FP8 under FP8).
  const ModelSpec m = testing::llama3_8b();
  TrainingSpec t = testing::training(4096, 8, 1);
  t.lora = LoraSpec{};
  t.lora->targets = {"qkv"};
  t.lora->dropout = 0.1;
  t.precision = Precision::fp8;
  const LayerOps ops = decoder_layer_ops(m, t, 4, Recompute::none, 1, 1, true, {}, false, true);
  const double activation = 2.0 * 4096 * m.hidden;
  REQUIRE(find_op(ops.forward, "qkv.lora_input_gather"));
  CHECK(find_op(ops.forward, "qkv.lora_input_gather")->collective->size_bytes == activation);
  REQUIRE(find_op(ops.backward, "qkv.lora_input_gather.bwd"));
  CHECK(find_op(ops.backward, "qkv.lora_input_gather.bwd")->collective->op ==
        CollectiveOp::reduce_scatter);
  CHECK(find_op(ops.forward, "attn_gather")->collective->size_bytes == activation / 2);
  // The dropout runs on the shard: 5 bytes an element of T / 4 x h.
  CHECK(find_op(ops.forward, "qkv.lora_dropout")->kernel.bytes == Approx(5 * activation / 2 / 4));
  // Kept: the gathered dropped input whole, its mask on the shard.
  const double shared =
      decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 4, true, {}, 1, false);
  const double own =
      decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 4, true, {}, 1, true);
  CHECK(shared - own == Approx(m.hidden * (1.0 - 1.0 / 4)));
}

TEST_CASE("fp8_weight_cache off: each micro-batch casts the weights again and saves the casts") {
  // Megatron-Core's disable_parameter_transpose_cache: a cast kernel per projection and
  // micro-batch (read BF16, write FP8: 3 bytes a weight), its output saved for the data
  // gradient (1 byte a weight a layer, per micro-batch in flight); FP8 primary weights need no
  // cast. The block's gather still moves FP8 beside its GEMM.
  const ModelSpec m = testing::llama3_8b();
  TrainingSpec t = testing::training(4096, 8, 1);
  t.precision = Precision::fp8;
  t.fp8_weight_cache = false;
  const LayerOps ops = decoder_layer_ops(m, t, 4);
  const Op* cast = find_op(ops.forward, "qkv.weight_cast");
  REQUIRE(cast);
  const double qkv_weights = (m.hidden + 2.0 * 1024) / 4 * m.hidden;
  CHECK(cast->kernel.bytes == Approx(3 * qkv_weights));
  std::vector<std::string> order;
  for (const Op& op : ops.forward) order.push_back(op.name);
  const auto at = [&](const std::string& name) {
    return std::find(order.begin(), order.end(), name) - order.begin();
  };
  CHECK(at("qkv.weight_cast") < at("qkv.cast"));
  CHECK(at("qkv.cast") + 1 == at("attn_gather"));
  CHECK(at("attn_gather") + 1 == at("qkv"));
  CHECK(find_op(ops.forward, "attn_gather")->collective->size_bytes == 1.0 * 4096 * m.hidden);
  ParallelPlan plan;
  plan.tp = 4;
  plan.dp = 2;
  plan.zero_stage = 1;
  TrainingSpec cached = t;
  cached.fp8_weight_cache = true;
  CHECK(layer_saved_bytes(m, t, plan) - layer_saved_bytes(m, cached, plan) ==
        Approx(rank_layer_projection_weights(m, plan)));
  t.fp8_params = true;
  const LayerOps primary = decoder_layer_ops(m, t, 4);
  CHECK_FALSE(find_op(primary.forward, "qkv.weight_cast"));
  CHECK(layer_saved_bytes(m, t, plan) == Approx(layer_saved_bytes(m, cached, plan)));
  // Only FP8 has weight casts to cache.
  TrainingSpec bf16 = testing::training(4096, 8, 1);
  bf16.fp8_weight_cache = false;
  const auto problems = recipe_problems(m, bf16);
  REQUIRE_FALSE(problems.empty());
  CHECK(problems.front().rule == "fp8-weight-cache-needs-fp8");
}

TEST_CASE("activation_fp8_input keeps the SwiGLU input in FP8, one cast each way") {
  // Megatron-Core's activation_func_fp8_input_store: 2f bytes a token less (one byte, not two,
  // for each of the 2f inputs); a cast of 2f elements forward (read 2, write 1) and back.
  const ModelSpec m = testing::llama3_8b();
  TrainingSpec t = testing::training(4096, 8, 1);
  const double plain = decoder_layer_saved_bytes_per_token(m, t);
  t.activation_fp8_input = true;
  CHECK(plain - decoder_layer_saved_bytes_per_token(m, t) == Approx(2.0 * m.ffn));
  const LayerOps ops = decoder_layer_ops(m, t);
  REQUIRE(find_op(ops.forward, "swiglu.fp8_store"));
  CHECK(find_op(ops.forward, "swiglu.fp8_store")->kernel.bytes == Approx(3 * 2.0 * 4096 * m.ffn));
  REQUIRE(find_op(ops.backward, "swiglu.fp8_load.bwd"));
  // Megatron passes the flag to its fused SwiGLU alone: a GELU MLP, or eager ops, are refused.
  t.seq_len = 2048;  // GPT-3's learned positions
  const auto problems = recipe_problems(testing::gpt3_175b(), t);
  REQUIRE_FALSE(problems.empty());
  CHECK(problems.front().rule == "activation-fp8-input-needs-fused-swiglu");
}

}  // namespace fleetsim

namespace fleetsim {

using testing::item_bytes;

TEST_CASE("FSDP-QLoRA gathers each layer's 4-bit base packed, its adapters in BF16") {
  // QLoRA under ZeRO-3 on 8 GPUs: a decoder layer's all-gather moves its base at 4.127 bits a
  // weight (NF4 with double-quantized scales, packed as FSDP stores it) and its adapters at 16;
  // the weights each GPU keeps are an eighth of that.
  const ModelSpec m = testing::llama3_8b();
  TrainingSpec t = testing::training(4096, 16, 1);
  t.lora = LoraSpec{};
  t.lora->quantized_base = true;
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 3;
  REQUIRE(job_problems(job_subject(m, t), plan).empty());
  const double base = decoder_layer_parameters(m);
  const double adapters = lora_parameters_per_layer(m, t);
  const double layer_gather = kNf4BytesPerParameter * base + 2 * adapters;
  const TaskGraph graph = build_data_parallel_step(m, t, plan);
  bool found = false;
  for (const Task& task : graph.stages[0]) {
    if (!task.name.ends_with("L3.fwd.all_gather")) continue;
    found = true;
    CHECK(std::get<CollectiveWork>(task.work).size_bytes == Approx(layer_gather));
  }
  CHECK(found);
  const MemoryBreakdown memory = estimate_memory(m, t, plan, {80e9});
  const double layers = 32 * base;
  const double held = m.parameters() + 32 * adapters;
  CHECK(item_bytes(memory, "weights") ==
        Approx((2 * (held - layers) + kNf4BytesPerParameter * layers) / 8));
  // Gathered at once: two consecutive units at most, the largest pair the head (BF16, with the
  // final norm) and the last layer.
  CHECK(item_bytes(memory, "gathered parameters") == Approx(2 * head_parameters(m) + layer_gather));
}

}  // namespace fleetsim
