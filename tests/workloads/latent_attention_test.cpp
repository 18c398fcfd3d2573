// Multi-head latent attention (DeepSeek-V2 and V3): its parameters, its projections' kernels
// and tensor-parallel gathers, its attention core with queries and keys wider than values, and
// what a layer keeps for backward.
#include <catch2/catch.hpp>

#include <string>

#include "models.hpp"
#include "workloads/flop_conventions.hpp"

namespace fleetsim {
namespace {

using testing::find_op;

// DeepSeek-V3's attention (config.json): 128 heads of 128 + 64 query and key, 128 value, from
// latents of 1,536 (queries) and 512 (keys and values) at hidden 7,168; a dense layer, to look
// at attention alone.
ModelSpec deepseek_attention() {
  ModelSpec m;
  m.name = "deepseek-v3-attention";
  m.layers = 4;
  m.hidden = 7168;
  m.ffn = 18432;
  m.heads = 128;
  m.kv_heads = 128;
  m.head_size = 128;
  m.vocab = 129280;
  m.q_lora_rank = 1536;
  m.kv_lora_rank = 512;
  m.rope_head_dim = 64;
  m.v_head_dim = 128;
  return m;
}

double gemm_flops(const std::vector<Op>& ops) {
  double flops = 0;
  for (const Op& op : ops) {
    if (!op.collective && op.kernel.kind == KernelKind::gemm) flops += op.kernel.flops;
  }
  return flops;
}

}  // namespace

TEST_CASE("latent attention's parameters are DeepSeek-V3's checkpoint tensors") {
  // q_a_proj 1,536 x 7,168 = 11,010,048; q_a_layernorm 1,536; q_b_proj 24,576 x 1,536 =
  // 37,748,736; kv_a_proj_with_mqa 576 x 7,168 = 4,128,768; kv_a_layernorm 512; kv_b_proj
  // 32,768 x 512 = 16,777,216; o_proj 7,168 x 16,384 = 117,440,512: 187,107,328 in all.
  const ModelSpec m = deepseek_attention();
  CHECK(m.query_width() == 128.0 * 192);
  CHECK(m.key_width() == 128.0 * 192);
  CHECK(m.value_width() == 128.0 * 128);
  CHECK(m.attention_width() == 128.0 * 128);
  CHECK(attention_projection_weights(m) == 187'107'328.0 - 1536 - 512);
  // The layer: attention, two norms of 7,168, the dense MLP's 3 x 7,168 x 18,432.
  CHECK(decoder_layer_parameters(m) == 187'107'328.0 + 2 * 7168 + 3.0 * 7168 * 18432);
  // The down projections, 7,168 x (1,536 + 576), are whole on every tensor-parallel rank.
  CHECK(tensor_replicated_weights(m) == 7168.0 * (1536 + 576));
  // On tp 4 a rank holds a quarter of a layer's parameters, and 3/4 of the down projections
  // more.
  CHECK(tensor_rank_layer_parameters(m, decoder_layer_parameters(m), 1, 4) ==
        decoder_layer_parameters(m) / 4 + 0.75 * 7168.0 * 2112);
  // Without a query latent (DeepSeek-V2-Lite) the queries come from the hidden state.
  ModelSpec lite = m;
  lite.q_lora_rank = 0;
  CHECK(attention_projection_weights(lite) ==
        attention_projection_weights(m) - 11'010'048.0 - 37'748'736.0 + 7168.0 * 24576);
}

TEST_CASE(
    "latent attention's kernels: down on the shard, latents gathered, queries and keys of 192") {
  // 8,192 tokens on tp 2 with sequence parallelism (the shard 4,096 tokens).
  const ModelSpec m = deepseek_attention();
  const TrainingSpec training = testing::training(8192, 8, 1);
  const LayerOps ops = decoder_layer_ops(m, training, 2);
  const double t = 8192;
  // Down projections on the shard, whole; up projections on every token, split by heads.
  const Op* q_down = find_op(ops.forward, "q_down");
  const Op* kv_down = find_op(ops.forward, "kv_down");
  const Op* q_up = find_op(ops.forward, "q_up");
  const Op* kv_up = find_op(ops.forward, "kv_up");
  const Op* o_proj = find_op(ops.forward, "o_proj");
  REQUIRE((q_down && kv_down && q_up && kv_up && o_proj));
  CHECK(q_down->kernel.m == t / 2);
  CHECK(q_down->kernel.n == 1536);
  CHECK(kv_down->kernel.n == 576);
  CHECK(q_up->kernel.m == t);
  CHECK(q_up->kernel.n == 64 * 192);
  CHECK(q_up->kernel.k == 1536);
  CHECK(kv_up->kernel.n == 64 * 256);
  CHECK(o_proj->kernel.k == 64 * 128);
  // Forward GEMM FLOPs: 2 m n k each, the attention projections' and the MLP's on this rank.
  const double attention_gemms = 2 * (t / 2) * 7168 * (1536 + 576) +
                                 2 * t * (1536 * 64 * 192.0 + 512 * 64 * 256.0 + 64 * 128.0 * 7168);
  const double mlp_gemms = 2 * t * 3 * 7168.0 * 18432 / 2;
  CHECK(gemm_flops(ops.forward) == Approx(attention_gemms + mlp_gemms));
  // The attention block gathers the two latents and the rotated key, not the hidden state; the
  // MLP block still gathers its T x hidden input. Each gather blocks.
  const Op* q_gather = find_op(ops.forward, "q_up_gather");
  const Op* kv_gather = find_op(ops.forward, "kv_up_gather");
  const Op* rope_gather = find_op(ops.forward, "k_rope_gather");
  REQUIRE((q_gather && kv_gather && rope_gather));
  CHECK(q_gather->collective->size_bytes == 2 * t * 1536);
  CHECK(kv_gather->collective->size_bytes == 2 * t * 512);
  CHECK(rope_gather->collective->size_bytes == 2 * t * 64);
  CHECK(q_gather->collective->blocking);
  CHECK(find_op(ops.forward, "attn_gather") == nullptr);
  CHECK(find_op(ops.forward, "mlp_gather") != nullptr);
  // Backward: each latent's gradient reduce-scattered, the latent gathered again for the up
  // projection's weight gradient.
  CHECK(find_op(ops.backward, "q_up_gather.bwd")->collective->op == CollectiveOp::reduce_scatter);
  CHECK(find_op(ops.backward, "kv_up.regather") != nullptr);
  // Attention: causal, 2 x s^2 / 2 pairs x (192 + 128) FLOPs per local head forward.
  const Op* attention = find_op(ops.forward, "attention");
  REQUIRE(attention);
  CHECK(attention->kernel.flops == Approx(2.0 * (t * t / 2) * 64 * (192 + 128)));
  // It reads Q, K (192 a head) and V (128), writes O (128).
  CHECK(attention->kernel.bytes == Approx(2.0 * t * 64 * (192 + 192 + 128 + 128)));
}

TEST_CASE("without a query latent the queries come first, from the block's gathered input") {
  // DeepSeek-V2-Lite's form on tp 2 under FP8: the block gathers its input as an ordinary layer
  // does (in FP8, cast on the shard), q_proj reads it and gathers it again for its weight
  // gradient; kv_down reads the shard. Backward runs the up projection's re-gather, its data
  // and weight gradients, then the latent's reduce-scatter, then kv_down's.
  ModelSpec lite = deepseek_attention();
  lite.q_lora_rank = 0;
  TrainingSpec training = testing::training(8192, 8, 1);
  training.precision = Precision::fp8;
  const LayerOps ops = decoder_layer_ops(lite, training, 2);
  const auto at = [](const std::vector<Op>& list, const std::string& name) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (list[i].name == name) return i;
    }
    FAIL("no op " << name);
    return list.size();
  };
  const auto& fwd = ops.forward;
  CHECK(at(fwd, "attn_gather") + 1 == at(fwd, "q_proj"));
  CHECK(fwd[at(fwd, "attn_gather")].collective->size_bytes == 8192.0 * 7168);  // FP8
  CHECK(at(fwd, "q_proj") < at(fwd, "kv_down"));
  CHECK(fwd[at(fwd, "q_proj")].kernel.m == 8192);
  CHECK(fwd[at(fwd, "kv_down")].kernel.m == 4096);
  CHECK(find_op(fwd, "q_up") == nullptr);
  const auto& bwd = ops.backward;
  CHECK(at(bwd, "q_proj.regather") < at(bwd, "q_proj.dgrad"));
  CHECK(at(bwd, "kv_up.regather") < at(bwd, "kv_up.dgrad"));
  CHECK(at(bwd, "kv_up.dgrad") < at(bwd, "kv_up_gather.bwd"));
  CHECK(at(bwd, "kv_up_gather.bwd") < at(bwd, "kv_down.dgrad"));
  CHECK(at(bwd, "kv_down.dgrad") < at(bwd, "attn_norm.bwd"));
}

TEST_CASE(
    "latent attention's model FLOPs are Megatron's count with its projections and head sizes") {
  // Per token, forward and backward: 6 x the layer's projection weights, 6 x s x heads x (192 +
  // 128) for attention over the whole sequence, halved by the causal mask in the ops.
  const ModelSpec m = deepseek_attention();
  const int s = 4096;
  const double per_layer =
      6 * (attention_projection_weights(m) + 3.0 * 7168 * 18432) + 6.0 * s * 128 * (192 + 128);
  CHECK(flops_per_token(m, s, FlopConvention::megatron) ==
        Approx(4 * per_layer + 6.0 * 129280 * 7168));
  const TrainingSpec training = testing::training(s, 8, 1);
  const LayerOps ops = decoder_layer_ops(m, training, 1);
  double model_flops = 0;
  for (const Op& op : ops.forward) model_flops += op.model_flops;
  for (const Op& op : ops.backward) model_flops += op.model_flops;
  const double causal = 6.0 * s * 128 * (192 + 128) / 2;
  CHECK(model_flops / s ==
        Approx(6 * (attention_projection_weights(m) + 3.0 * 7168 * 18432) + causal));
}

TEST_CASE("a latent attention layer keeps its latents, and Q, K and V of their own widths") {
  // Against the same layer's keeps with ordinary attention of 128 heads of 128: Q and K grow
  // from 128 to 192 a head; the latents' norm inputs and normed copies (1,536 + 512, BF16
  // each) are kept, sharded by sequence like the block input.
  const ModelSpec m = deepseek_attention();
  ModelSpec ordinary = m;
  ordinary.q_lora_rank = ordinary.kv_lora_rank = ordinary.rope_head_dim = ordinary.v_head_dim = 0;
  const TrainingSpec training = testing::training(4096, 8, 1);
  const auto kept = [&](const ModelSpec& model, int tp) {
    return decoder_layer_saved_bytes_per_token(model, training, Recompute::none, tp, true, {}, 1,
                                               false, false);
  };
  for (const int tp : {1, 4}) {
    CAPTURE(tp);
    const double wider_qk = 2.0 * 2 * 128 * 64 / tp;
    const double latents = 2.0 * 2 * (1536 + 512) / tp;
    CHECK(kept(m, tp) - kept(ordinary, tp) == Approx(wider_qk + latents));
  }
  // Rerunning the norms (recompute_modules layernorm) drops the normed input the down
  // projections read, 7,168 BF16 a token, and reruns the norm before the block's backward.
  RecomputeModules norms;
  norms.core_attn = false;  // (on by default)
  norms.layernorm = true;
  const auto kept_rerun = decoder_layer_saved_bytes_per_token(m, training, Recompute::selective, 1,
                                                              true, norms, 1, false, false);
  CHECK(kept(m, 1) - kept_rerun == 2.0 * 7168);
  const LayerOps rerun = decoder_layer_ops(m, training, 1, Recompute::selective, 1, 1, true, norms);
  CHECK(find_op(rerun.backward, "recompute.attn_norm") != nullptr);
  // Under FP8 each down projection keeps its own FP8 cast of it: as many bytes as one BF16.
  TrainingSpec fp8 = training;
  fp8.precision = Precision::fp8;
  const auto kept_fp8 =
      decoder_layer_saved_bytes_per_token(m, fp8, Recompute::none, 1, true, {}, 1, false, false);
  const auto kept_fp8_rerun = decoder_layer_saved_bytes_per_token(m, fp8, Recompute::selective, 1,
                                                                  true, norms, 1, false, false);
  CHECK(kept_fp8 - kept_fp8_rerun == 2.0 * 7168);
}

}  // namespace fleetsim
