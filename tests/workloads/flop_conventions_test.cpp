// The FLOP conventions published runs count by, each derived from its formula by hand.
#include <catch2/catch.hpp>

#include "workloads/flop_conventions.hpp"
#include "workloads/models.hpp"

using namespace fleetsim;

TEST_CASE("Megatron's count for Llama-3-8B is NVIDIA's per-token formula") {
  // dgxc-benchmarking's Llama formula, 12 L h^2 (1 + G/H + s/h) + 18 L F h + 6 V h, at L 32,
  // h 4096, G/H 8/32, s 8192, F 14336, V 128256: 20,937,965,568 + 33,822,867,456 +
  // 3,152,019,456 = 57,912,852,480 FLOPs a token.
  const ModelSpec model = testing::llama3_8b();
  CHECK(flops_per_token(model, 8192, FlopConvention::megatron) == Approx(57912852480.0));
}

TEST_CASE("Megatron's count with recomputation is the paper's formula for GPT-3") {
  // Narayanan et al. (arXiv:2104.04473), section 5.1: 96 B s l h^2 (1 + s / 6h + V / 16 l h)
  // FLOPs a batch of B sequences with full recomputation, so per token 96 l h^2 (...); without
  // it, 72 for 96 and V / 12 l h (the head is not recomputed).
  const ModelSpec model = testing::gpt3_175b();
  const double l = model.layers, h = model.hidden, s = 2048, v = model.vocab;
  CHECK(flops_per_token(model, 2048, FlopConvention::megatron_recompute) ==
        Approx(96 * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))).epsilon(1e-12));
  CHECK(flops_per_token(model, 2048, FlopConvention::megatron) ==
        Approx(72 * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))).epsilon(1e-12));
}

TEST_CASE("dgxc-benchmarking's Grok-1 count halves Megatron's attention") {
  // Grok-1 as dgxc-benchmarking's README counts it (development.yaml's Grok-1 rows: 64 layers,
  // hidden 6144, 48 heads, 8 query groups, experts of 32,768, 2 a token, vocabulary 128,256) at
  // 8,192 tokens: 4.27e15 FLOPs a sequence, "attention seq term halved, MLP x top-K 2". By hand:
  // 384 x 1,296,039,936 + 6 x 64 x 6144 x 8192 + 6 x 128,256 x 6144 = 521,734,717,440 a token.
  ModelSpec grok;
  grok.layers = 64;
  grok.hidden = 6144;
  grok.heads = 48;
  grok.kv_heads = 8;
  grok.ffn = 32768;
  grok.vocab = 128256;
  grok.experts = 8;
  grok.experts_per_token = 2;
  CHECK(8192 * flops_per_token(grok, 8192, FlopConvention::megatron_causal) ==
        Approx(4.27e15).epsilon(0.005));
  CHECK(flops_per_token(grok, 8192, FlopConvention::megatron_causal) == Approx(521734717440.0));
}

TEST_CASE("6N conventions add attention over the whole sequence, or half of it") {
  // PaLM (arXiv:2204.02311) appendix B: 6 N + 12 L H Q T a token; causal attention does half.
  const ModelSpec model = testing::llama3_8b();
  const double six_n = flops_per_token(model, 8192, FlopConvention::six_n);
  CHECK(six_n == Approx(6 * model.parameters()));
  const double attention = 12.0 * 32 * 4096 * 8192;
  CHECK(flops_per_token(model, 8192, FlopConvention::six_n_attention) == Approx(six_n + attention));
  CHECK(flops_per_token(model, 8192, FlopConvention::six_n_causal) ==
        Approx(six_n + attention / 2));
}

TEST_CASE("a mixture of experts counts the experts a token visits") {
  // Mixtral 8x7B (Jiang et al., arXiv:2401.04088): 46.7 B parameters, 12.9 B active a token.
  ModelSpec model = testing::llama3_8b();
  model.vocab = 32000;
  model.experts = 8;
  model.experts_per_token = 2;
  CHECK(model.parameters() == Approx(46.7e9).epsilon(0.005));
  CHECK(active_parameters(model) == Approx(12.9e9).epsilon(0.005));
  // Megatron's count: two of the eight MLPs a layer.
  ModelSpec dense = model;
  dense.experts = 0;
  dense.experts_per_token = 0;
  const double mlp = 6.0 * 32 * 3 * 4096 * 14336;
  CHECK(flops_per_token(model, 4096, FlopConvention::megatron) ==
        Approx(flops_per_token(dense, 4096, FlopConvention::megatron) + mlp));
}
