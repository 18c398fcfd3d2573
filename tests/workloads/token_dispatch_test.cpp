// A mixture of experts' token dispatch under tensor parallelism: Megatron-Core's all-to-all
// dispatcher (token_dispatcher.py, MoEAlltoAllTokenDispatcher) against its allgather one.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "models.hpp"
#include "workloads/transformer_ops.hpp"

using namespace fleetsim;
using namespace fleetsim::testing;

TEST_CASE(
    "expert parallelism under tp: the all-to-all dispatcher routes the sequence shard and "
    "gathers what arrives over tp") {
  const ModelSpec m = mixtral_8x7b();
  const TrainingSpec t = training(4096, 8, 1);
  const double h = m.hidden;
  // tp 2, ep 4: each rank routes its 2,048 tokens and sends their k = 2 copies over the
  // expert group (2 x 2,048 x 2 h bytes); the tp pair all-gathers what each received, 2 x the
  // bytes, so each of its 8 / 4 experts gets 4 x 4,096 x 2 / 8 = 4,096 tokens, split by columns
  // over tp. A rank's two experts' tokens arrive by source rank: sorted by expert after the
  // gather (the rows read and written: 2 x 2 x 4,096 x 2 h) and back before the reduce-scatter.
  // The block gathers nothing and reduces nothing of its own.
  const LayerOps ops = decoder_layer_ops(m, t, 2, Recompute::none, 4);
  const double received = 2.0 * 4096 * 2 * h;
  std::vector<std::string> collectives;
  int sorts = 0, unsorts = 0, expert_gemms = 0;
  for (const Op& op : ops.forward) {
    if (op.collective) {
      if (op.collective->group == GroupKind::tensor && op.name.rfind("mlp", 0) == 0) FAIL(op.name);
      if (op.collective->group == GroupKind::expert) {
        CHECK(op.collective->size_bytes == 2.0 * 2048 * 2 * h);
        collectives.push_back(op.name);
      }
      if (op.name == "dispatch_gather" || op.name == "combine_scatter") {
        CHECK(op.collective->group == GroupKind::tensor);
        CHECK(op.collective->size_bytes == received);
        collectives.push_back(op.name);
      }
    }
    if (op.name == "router") CHECK(op.kernel.m == Approx(2048));
    if (op.name == "sort_by_expert" || op.name == "unsort_by_expert") {
      CHECK(op.kernel.bytes == Approx(2 * received));
      ++(op.name == "sort_by_expert" ? sorts : unsorts);
    }
    if (op.name == "expert0.gate_up" && op.kernel.kind == KernelKind::gemm) {
      CHECK(op.kernel.m == Approx(4096));
      CHECK(op.kernel.n == Approx(2.0 * m.ffn / 2));
      ++expert_gemms;
    }
  }
  CHECK(sorts == 1);
  CHECK(unsorts == 1);
  CHECK(expert_gemms == 1);
  CHECK(collectives ==
        std::vector<std::string>{"dispatch", "dispatch_gather", "combine_scatter", "combine"});
  std::vector<std::string> back;
  for (const Op& op : ops.backward) {
    if (op.collective && op.name.find("regather") == std::string::npos &&
        op.name.rfind("attn", 0) != 0)
      back.push_back(op.name);
  }
  CHECK(back == std::vector<std::string>{"combine.bwd", "combine_scatter.bwd",
                                         "dispatch_gather.bwd", "dispatch.bwd"});
  // Half the model FLOPs of one rank with every expert and the whole sequence.
  CHECK(layer_model_flops(ops) * 2 == Approx(layer_model_flops(decoder_layer_ops(m, t))));
  // The allgather dispatcher with ep 1 gathers the block's input (4,096 x h BF16) instead, and
  // with several experts a rank needs no sort: the gathered tokens are routed in expert order.
  TrainingSpec gathering = t;
  gathering.token_dispatcher = TokenDispatcher::allgather;
  int gathers = 0;
  for (const Op& op : decoder_layer_ops(m, gathering, 2).forward) {
    CHECK(op.name.find("sort") == std::string::npos);
    if (op.name == "mlp_gather") {
      ++gathers;
      CHECK(op.collective->size_bytes == 2.0 * 4096 * h);
    }
  }
  CHECK(gathers == 1);
}

TEST_CASE(
    "the dispatcher's tensor-parallel collectives block and stay BF16, and a shared expert "
    "gathers its own input") {
  // Mixtral's shape with a shared expert of 4,096, FP8, tp 2 and ep 8: one expert a rank, so
  // no sort sits between the dispatcher's all-gather and the expert's first GEMM, nor between
  // its last and the reduce-scatter. Megatron-Core issues them as NCCL calls on BF16 tokens:
  // they block (no userbuffers overlap with the expert's GEMMs) and are not cast to FP8 first,
  // unlike the shared expert's column-parallel gather, which Transformer Engine runs on its FP8
  // cast (half of 4,096 x h BF16), blocking too.
  ModelSpec m = mixtral_8x7b();
  m.shared_expert_ffn = 4096;
  TrainingSpec t = training(4096, 8, 1);
  t.precision = Precision::fp8;
  const double h = m.hidden;
  const double received = 2.0 * 4096 * 2 * h;
  const LayerOps ops = decoder_layer_ops(m, t, 2, Recompute::none, 8);
  int seen = 0;
  for (const std::vector<Op>* pass : {&ops.forward, &ops.backward}) {
    for (const Op& op : *pass) {
      if (!op.collective || op.collective->group != GroupKind::tensor) continue;
      CHECK(op.name.rfind("mlp_", 0) != 0);  // the block gathers and scatters nothing
      if (op.name.rfind("dispatch_gather", 0) == 0 || op.name.rfind("combine_scatter", 0) == 0) {
        CHECK(op.collective->blocking);
        CHECK(op.collective->size_bytes == received);
        ++seen;
      }
      if (op.name == "shared_expert.gather") {
        CHECK(op.collective->blocking);
        CHECK(op.collective->size_bytes == 4096 * h);
        ++seen;
      }
      if (op.name == "shared_expert.scatter") {
        CHECK(op.collective->blocking);
        CHECK(op.collective->size_bytes == 2.0 * 4096 * h);
        ++seen;
      }
    }
  }
  CHECK(seen == 6);
}

TEST_CASE("each expert whole (expert_tp 1): each rank dispatches its shard and gathers nothing") {
  // tp 2, ep 4, experts whole: each rank routes its 2,048 tokens and sends their 2 copies over
  // its expert group (2 x 2,048 x 2 h bytes, as with the experts split); nothing is gathered
  // over tp, so each of its 2 experts gets 4 x 2,048 x 2 / 8 = 2,048 tokens at the full width
  // (2 f gate_up columns): the same FLOPs as 4,096 tokens at half the width.
  const ModelSpec m = mixtral_8x7b();
  const TrainingSpec t = training(4096, 8, 1);
  const double h = m.hidden;
  const auto layer = [&](int expert_tp) {
    return decoder_layer_ops(m, t, 2, Recompute::none, 4, 1, true, {}, false, false,
                             ContextComm::p2p, expert_tp);
  };
  const LayerOps whole = layer(1);
  int all_to_alls = 0, expert_gemms = 0;
  for (const Op& op : whole.forward) {
    if (op.collective) {
      CHECK(op.name.find("dispatch_gather") == std::string::npos);
      CHECK(op.name.find("combine_scatter") == std::string::npos);
      if (op.collective->group == GroupKind::expert) {
        CHECK(op.collective->size_bytes == 2.0 * 2048 * 2 * h);
        ++all_to_alls;
      }
    }
    if (op.name == "expert0.gate_up" && op.kernel.kind == KernelKind::gemm) {
      CHECK(op.kernel.m == Approx(2048));
      CHECK(op.kernel.n == Approx(2.0 * m.ffn));
      ++expert_gemms;
    }
  }
  CHECK(all_to_alls == 2);
  CHECK(expert_gemms == 1);
  CHECK(layer_model_flops(whole) == Approx(layer_model_flops(layer(2))));
  // It keeps its own tokens' k copies as the experts' input, not every token's: k x 2 bytes
  // x h a token less, halved.
  const auto saved = [&](int expert_tp) {
    return decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 2, true, {}, 4, false, false,
                                               expert_tp);
  };
  CHECK(saved(2) - saved(1) == Approx(2 * 2.0 * h / 2));
}
