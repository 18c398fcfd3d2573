// A mixture of experts' expert GEMMs launched one expert after another, or grouped: each GEMM
// of the experts' MLP one launch over all the rank's experts.
#include <catch2/catch.hpp>

#include <string>

#include "models.hpp"

namespace fleetsim {

TEST_CASE("grouped expert GEMMs are one launch each, with the experts' FLOPs and bytes") {
  // Mixtral-like: 8 experts, 2 a token, on ep 2: 4 experts a rank. Sequential: four
  // expert*.gate_up GEMMs; grouped: one experts.gate_up of 4 groups of the same shape, the same
  // FLOPs, bytes and model FLOPs in all.
  ModelSpec m = testing::llama3_8b();
  m.experts = 8;
  m.experts_per_token = 2;
  TrainingSpec t = testing::training(4096, 8, 1);
  const LayerOps sequential = decoder_layer_ops(m, t, 1, Recompute::none, 2);
  t.expert_gemm = ExpertGemm::grouped;
  const LayerOps grouped_ops = decoder_layer_ops(m, t, 1, Recompute::none, 2);
  const auto totals = [](const std::vector<Op>& ops, const std::string& part) {
    double flops = 0, bytes = 0, model_flops = 0;
    int launches = 0;
    for (const Op& op : ops) {
      if (op.name.find(part) == std::string::npos || op.name.rfind("expert", 0) != 0) continue;
      flops += op.kernel.flops;
      bytes += op.kernel.bytes;
      model_flops += op.model_flops;
      ++launches;
    }
    return std::tuple{flops, bytes, model_flops, launches};
  };
  for (const std::string part : {"gate_up", "swiglu", "down"}) {
    CAPTURE(part);
    const auto [flops, bytes, model_flops, launches] = totals(sequential.forward, part);
    const auto [g_flops, g_bytes, g_model, g_launches] = totals(grouped_ops.forward, part);
    CHECK(launches == 4);
    CHECK(g_launches == 1);
    CHECK(g_flops == Approx(flops));
    CHECK(g_bytes == Approx(bytes));
    CHECK(g_model == Approx(model_flops));
    const auto [b_flops, b_bytes, b_model, b_launches] = totals(sequential.backward, part);
    const auto [gb_flops, gb_bytes, gb_model, gb_launches] = totals(grouped_ops.backward, part);
    CHECK(gb_flops == Approx(b_flops));
    CHECK(gb_launches * 4 == b_launches);
  }
  for (const Op& op : grouped_ops.forward) {
    if (op.name == "experts.gate_up") {
      CHECK(op.kernel.groups == 4);
      CHECK(op.kernel.m == 4096.0 * 2 * 2 / 8);  // ep x t x k / E tokens an expert
    }
  }
}

}  // namespace fleetsim
