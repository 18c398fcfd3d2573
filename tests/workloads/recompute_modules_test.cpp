// Selective recomputation by module (Megatron-Core's recompute_modules): what each module's
// rerun keeps of a layer's saved tensors, derived by hand, and the kernels it runs again.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "common/memory_items.hpp"
#include "models.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/task_graph.hpp"
#include "workloads/transformer_ops.hpp"

using namespace fleetsim;
using namespace fleetsim::testing;

namespace {

double saved(const ModelSpec& m, const TrainingSpec& t, const RecomputeModules& modules) {
  return decoder_layer_saved_bytes_per_token(m, t, Recompute::selective, 1, true, modules);
}

}  // namespace

TEST_CASE("recompute_modules: a dense layer keeps what its rerun modules do not") {
  // Llama-3-8B, BF16, FlashAttention, tp 1, bytes a token (h 4096, f 14336, kv 1024, 32
  // heads). Without recomputation: both norms' inputs 4h, the QKV and gate/up GEMMs' normed
  // inputs 4h, Q, K, V 2(h + 2kv), O 2h, the FP32 log-sum-exp 4 x 32, gate/up's output and
  // down's input 6f: 139,392.
  const ModelSpec m = llama3_8b();
  TrainingSpec t = training(4096, 64, 2);
  CHECK(decoder_layer_saved_bytes_per_token(m, t) == 139'392);
  // core_attn keeps Q, K, V (its input) and, as o_proj's input, O; not the log-sum-exp.
  CHECK(saved(m, t, {.core_attn = true}) == 139'392 - 128);
  // mlp keeps the block's input (the residual stream, counted with the norms' inputs), not
  // the normed copy gate/up reads (2h) nor the 6f inside.
  CHECK(saved(m, t, {.core_attn = false, .mlp = true}) == 139'392 - 8'192 - 86'016);
  CHECK(saved(m, t, {.core_attn = true, .mlp = true}) == 139'392 - 128 - 8'192 - 86'016);
  // Under FP8 the GEMMs keep their inputs' FP8 casts (1 byte): 4h + 2h + 2(h + 2kv) + O in
  // BF16 and FP8 3h + 128 + 5f = 120,960. core_attn drops attention's BF16 O and the LSE.
  t.precision = Precision::fp8;
  CHECK(decoder_layer_saved_bytes_per_token(m, t) == 120'960);
  CHECK(saved(m, t, {.core_attn = true}) == 120'960 - 8'192 - 128);
}

TEST_CASE("recompute_modules: a mixture of experts' block, its activation and its norm") {
  // Mixtral-8x7B, BF16, tp 1, bytes a token: the dense part as Llama-3-8B's but the block's
  // BF16 router input (2h), each of the 2 experts' 6f, the router's FP32 scores 4 x 8, and
  // each of the 2 permuted copies and expert outputs 4h: 258,208.
  const ModelSpec m = mixtral_8x7b();
  const TrainingSpec t = training(4096, 64, 2);
  const double none = decoder_layer_saved_bytes_per_token(m, t);
  CHECK(none == 258'208);
  const RecomputeModules nothing{.core_attn = false};
  CHECK(saved(m, t, nothing) == none);
  // moe keeps only its input, the normed router input: 2 x 6f + 32 + 2 x 4h go.
  CHECK(saved(m, t, {.core_attn = false, .moe = true}) == none - 172'032 - 32 - 32'768);
  // moe_act discards each expert's activation output, down's input: 2 x 2f.
  CHECK(saved(m, t, {.core_attn = false, .moe_act = true}) == none - 57'344);
  // layernorm discards the norm's output, the router's input: 2h.
  CHECK(saved(m, t, {.core_attn = false, .layernorm = true}) == none - 8'192);
  CHECK(saved(m, t, {.core_attn = false, .moe = true, .layernorm = true}) ==
        none - 172'032 - 32 - 32'768 - 8'192);
  // On a dense model the MoE modules keep what they would keep anyway.
  const ModelSpec dense = llama3_8b();
  CHECK(saved(dense, t, {.core_attn = false, .moe = true, .moe_act = true, .layernorm = true}) ==
        decoder_layer_saved_bytes_per_token(dense, t));
}

TEST_CASE("recompute_modules: each rerun module's forward runs again, just before its backward") {
  const ModelSpec m = llama3_8b();
  const TrainingSpec t = training(4096, 64, 2);
  ParallelPlan plan;
  plan.dp = 8;
  const TaskGraph kept = build_data_parallel_step(m, t, plan);
  plan.recompute = Recompute::selective;
  plan.recompute_modules = {.core_attn = true, .mlp = true};
  const TaskGraph rerun = build_data_parallel_step(m, t, plan);
  CHECK(rerun.model_flops_per_rank == Approx(kept.model_flops_per_rank).epsilon(1e-12));
  // Per layer and micro-batch of T = 8,192 tokens: causal attention's forward, 2 T s h (half
  // of 4 T s h), and the MLP's GEMMs, 2 T h 2f + 2 T f h.
  const double tokens = 8192, s = 4096, h = 4096, f = 14336;
  const double again = 2 * tokens * s * h + 6 * tokens * h * f;
  CHECK(rerun.hardware_flops_per_rank - kept.hardware_flops_per_rank ==
        Approx(32 * again * kept.micro_batches).epsilon(1e-9));
  const auto at = [&](const std::string& name) { return task_index(rerun, name); };
  // The fused attention kernel right before its backward.
  CHECK(at("mb0.L5.recompute.attention") + 1 == at("mb0.L5.attention.bwd"));
  // The MLP block after its residual add's backward, from its norm (fused into gate/up) to
  // down, then down's backward.
  CHECK(at("mb0.L5.mlp_residual.bwd") < at("mb0.L5.recompute.mlp_norm"));
  CHECK(at("mb0.L5.recompute.mlp_norm") < at("mb0.L5.recompute.gate_up"));
  CHECK(at("mb0.L5.recompute.gate_up") < at("mb0.L5.recompute.swiglu"));
  CHECK(at("mb0.L5.recompute.down") + 1 == at("mb0.L5.down.dgrad"));
  CHECK(at("mb0.L5.recompute.mlp_residual") == -1);  // outside Megatron-Core's checkpoint
  CHECK(at("mb0.L5.recompute.qkv") == -1);

  // moe_act: each expert's SwiGLU again right before its down's backward, nothing else.
  const ModelSpec moe = mixtral_8x7b();
  plan.recompute = Recompute::none;
  plan.recompute_modules = {};
  const TaskGraph moe_kept = build_data_parallel_step(moe, t, plan);
  plan.recompute = Recompute::selective;
  plan.recompute_modules = {.core_attn = false, .moe_act = true};
  const TaskGraph moe_act = build_data_parallel_step(moe, t, plan);
  CHECK(moe_act.hardware_flops_per_rank == moe_kept.hardware_flops_per_rank);  // no GEMM again
  CHECK(moe_act.stages[0].size() == moe_kept.stages[0].size() + 32 * 8 * moe_kept.micro_batches);
  CHECK(task_index(moe_act, "mb0.L5.expert3.recompute.swiglu") == -1);
  CHECK(task_index(moe_act, "mb0.L5.recompute.expert3.swiglu") + 1 ==
        task_index(moe_act, "mb0.L5.expert3.down.dgrad"));
}

TEST_CASE("recompute_modules: a rerun module's tensors are held again in its layer's backward") {
  // What the layer in backward holds beyond the activations in flight: what the modules
  // discarded, rebuilt for one layer (Llama-3-8B, one micro-batch of 8,192 tokens).
  const ModelSpec m = llama3_8b();
  const TrainingSpec t = training(4096, 64, 2);
  ParallelPlan plan;
  plan.dp = 8;
  plan.recompute = Recompute::selective;
  plan.recompute_modules = {.core_attn = true, .mlp = true};
  const MemoryBreakdown memory = estimate_memory(m, t, plan, {80e9});
  const double tokens = 8192;
  CHECK(memory_item(memory, "activations") == Approx(32 * (139'392 - 94'336) * tokens));
  CHECK(memory_item(memory, "recomputed layer") == Approx(94'336 * tokens));
  plan.recompute = Recompute::none;
  plan.recompute_modules = {};
  CHECK(estimate_memory(m, t, plan, {80e9}).total_bytes > memory.total_bytes);
}

TEST_CASE("recompute_modules: a rerun block keeps its collectives' order, under tp, FP8 and cp") {
  // Llama-3-8B at tp 2 with sequence parallelism and FP8, cp 2: the MLP block's rerun casts its
  // sequence shard to FP8 before gathering it, as the forward does, and reduce-scatters down's
  // output; the fused attention's rerun has ring attention's exchange beside it again.
  const ModelSpec m = llama3_8b();
  TrainingSpec t = training(4096, 64, 2);
  t.precision = Precision::fp8;
  const RecomputeModules modules{.core_attn = true, .mlp = true};
  const LayerOps layer = decoder_layer_ops(m, t, 2, Recompute::selective, 1, 2, true, modules);
  const auto at = [&](const std::string& name) {
    for (std::size_t i = 0; i < layer.backward.size(); ++i) {
      if (layer.backward[i].name == name) return static_cast<long>(i);
    }
    return -1L;
  };
  CHECK(at("mlp_residual.bwd") < at("recompute.gate_up.cast"));
  CHECK(at("recompute.gate_up.cast") + 1 == at("recompute.mlp_gather"));
  CHECK(at("recompute.mlp_gather") + 1 == at("recompute.gate_up"));
  CHECK(at("recompute.down") + 1 == at("recompute.mlp_scatter"));
  // Then the block's backward: down's output gradient cast to FP8, then gathered.
  CHECK(at("recompute.mlp_scatter") + 1 == at("down.grad_cast"));
  CHECK(at("down.grad_cast") + 1 == at("mlp_scatter.bwd"));
  // The FP8 shard gathered, half the BF16 bytes down's output reduce-scatters, as in forward.
  const auto bytes = [&](long i) { return layer.backward[i].collective->size_bytes; };
  CHECK(bytes(at("recompute.mlp_gather")) == bytes(at("recompute.mlp_scatter")) / 2);
  CHECK(at("recompute.kv_ring") + 1 == at("recompute.attention"));
  CHECK(at("recompute.attention") + 1 == at("kv_ring.bwd"));
  CHECK(at("kv_ring.bwd") + 1 == at("attention.bwd"));
  // Each exchange runs beside its attention kernel.
  CHECK(overlapped_kernel(layer.backward, at("recompute.kv_ring")) == at("recompute.attention"));
  CHECK(overlapped_kernel(layer.backward, at("kv_ring.bwd")) == at("attention.bwd"));
}

TEST_CASE("Ulysses: its all-to-alls block, in order around attention, and rerun with the core") {
  // Llama-3-8B at tp 2, cp 2 under cp_comm_type a2a: forward trades Q, K and V, runs attention
  // and trades its output back; backward, with the core attention rerun, trades Q, K and V and
  // runs attention and the output's trade again, then trades the output's gradient in, runs
  // attention's backward and trades Q's, K's and V's gradients back. Nothing runs beside them.
  const ModelSpec m = llama3_8b();
  const TrainingSpec t = training(4096, 64, 2);
  const RecomputeModules modules{.core_attn = true};
  const LayerOps layer = decoder_layer_ops(m, t, 2, Recompute::selective, 1, 2, true, modules,
                                           false, false, ContextComm::a2a);
  const auto at = [](const std::vector<Op>& ops, const std::string& name) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].name == name) return static_cast<long>(i);
    }
    return -1L;
  };
  const std::vector<Op>& fwd = layer.forward;
  const std::vector<Op>& bwd = layer.backward;
  REQUIRE(at(fwd, "qkv_a2a") >= 0);
  CHECK(at(fwd, "qkv_a2a") + 1 == at(fwd, "attention"));
  CHECK(at(fwd, "attention") + 1 == at(fwd, "o_a2a"));
  CHECK(at(bwd, "recompute.qkv_a2a") + 1 == at(bwd, "recompute.attention"));
  CHECK(at(bwd, "recompute.attention") + 1 == at(bwd, "recompute.o_a2a"));
  CHECK(at(bwd, "recompute.o_a2a") + 1 == at(bwd, "o_a2a.bwd"));
  CHECK(at(bwd, "o_a2a.bwd") + 1 == at(bwd, "attention.bwd"));
  CHECK(at(bwd, "attention.bwd") + 1 == at(bwd, "qkv_a2a.bwd"));
  CHECK(at(fwd, "kv_ring") == -1);
  for (const std::vector<Op>* ops : {&fwd, &bwd}) {
    for (std::size_t i = 0; i < ops->size(); ++i) {
      if ((*ops)[i].name.find("a2a") == std::string::npos) continue;
      INFO((*ops)[i].name);
      CHECK_FALSE(overlapped_kernel(*ops, i).has_value());
    }
  }
  // Q, K, V of the rank's 4,096 x 2 / 2 tokens and its 32 / 2 query and 8 / 2 KV heads.
  const double traded = 2.0 * 4096 * 2 / 2 * (32 + 2 * 8) * 128 / 2;
  CHECK(fwd[at(fwd, "qkv_a2a")].collective->size_bytes == Approx(traded));
}
