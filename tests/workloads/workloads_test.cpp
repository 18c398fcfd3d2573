// Model sizes, FLOPs, gradient traffic and memory of the workload model.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "common/memory_items.hpp"
#include "models.hpp"
#include "sim/engine/errors.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/task_graph.hpp"
#include "workloads/transformer_ops.hpp"

using namespace fleetsim;
using namespace fleetsim::testing;

TEST_CASE("parameter counts match the published checkpoints exactly") {
  // Hugging Face configs of Meta-Llama-3-8B and -70B report 8,030,261,248 and 70,553,706,496.
  CHECK(llama3_8b().parameters() == 8'030'261'248.0);
  CHECK(llama3_70b().parameters() == 70'553'706'496.0);
}

TEST_CASE("GPT-3 parameters follow Megatron-LM's formula") {
  // Narayanan et al. 2021, eq. (2): P = 12 l h^2 (1 + 13 / (12 h) + (V + s) / (12 l h)): per
  // layer four attention and eight MLP h^2 matrices, 9h biases and two LayerNorms (4h); token
  // and position embeddings (tied output head). The formula leaves out the final LayerNorm (2h).
  const ModelSpec m = gpt3_175b();
  const double l = 96, h = 12288, v = 51200, s = 2048;
  const double formula = 12 * l * h * h * (1 + 13 / (12 * h) + (v + s) / (12 * l * h));
  CHECK(m.parameters() == Approx(formula + 2 * h).epsilon(1e-12));
  CHECK(m.parameters() == Approx(174.6e9).epsilon(0.0005));  // their Table 1
}

TEST_CASE("model FLOPs per step are 6 N T plus causal attention") {
  // For one rank: T = accum * mb * s tokens. Dense part: 6 * N * T, the embedding lookup
  // excluded (it is a gather, not a GEMM). Attention: fwd 2*b*s^2*h per layer (causal half of
  // 4bs^2h), x3 for fwd + bwd.
  const ModelSpec m = llama3_8b();
  ParallelPlan plan;
  plan.dp = 8;
  const TaskGraph graph = build_data_parallel_step(m, training(4096, 256, 2), plan);
  CHECK(graph.micro_batches == 16);
  const double tokens_per_rank = 16.0 * 2 * 4096;
  const double dense = 6.0 * (m.parameters() - embedding_parameters(m)) * tokens_per_rank;
  const double attention = 3.0 * 2.0 * 2 * 4096.0 * 4096.0 * 4096 * 32 * 16;
  // Norm weights are parameters without GEMM FLOPs: 65 vectors of 4096, negligible.
  CHECK(graph.model_flops_per_rank == Approx(dense + attention).epsilon(1e-4));
  CHECK(sum_model_flops(graph) == Approx(graph.model_flops_per_rank));
  CHECK(graph.tokens_per_step == 256.0 * 4096);
}

TEST_CASE("recomputation adds hardware FLOPs, not model FLOPs") {
  ParallelPlan plan;
  plan.dp = 8;
  const TaskGraph plain = build_data_parallel_step(llama3_8b(), training(4096, 16, 2), plan);
  plan.recompute = Recompute::full;
  const TaskGraph recomputed = build_data_parallel_step(llama3_8b(), training(4096, 16, 2), plan);
  CHECK(recomputed.model_flops_per_rank == Approx(plain.model_flops_per_rank));
  CHECK(recomputed.hardware_flops_per_rank > plain.hardware_flops_per_rank * 1.25);
}

TEST_CASE("gradient traffic per step follows the ZeRO stage") {
  // Bytes of collective payload S per optimizer step, for one micro-batch per step:
  // ZeRO-0: all-reduce of all gradients (BF16: 2N); ZeRO-3: two all-gathers of the BF16
  // weights (forward, backward) plus a reduce-scatter of the gradients: 3 * 2N.
  const ModelSpec m = llama3_8b();
  auto payload = [&](int zero) { return collective_payload(m, 16, zero); };
  CHECK(payload(0) == Approx(2 * m.parameters()));
  CHECK(payload(1) == Approx(2 * 2 * m.parameters()));  // reduce-scatter + all-gather of weights
  CHECK(payload(2) == Approx(2 * 2 * m.parameters()));
  CHECK(payload(3) == Approx(3 * 2 * m.parameters()));
}

TEST_CASE("with gradient accumulation only sharded gradients are reduced every micro-batch") {
  // 4 micro-batches per step (global 64 = 4 x 2 x 8). ZeRO-0/1 accumulate locally and reduce
  // once; ZeRO-2 reduce-scatters 4 times (then gathers weights once); ZeRO-3 also gathers the
  // weights twice per micro-batch: 4 x 3 x 2N.
  const ModelSpec m = llama3_8b();
  const double n = m.parameters();
  auto payload = [&](int zero) { return collective_payload(m, 64, zero); };
  CHECK(payload(0) == Approx(2 * n));
  CHECK(payload(1) == Approx(2 * n + 2 * n));
  CHECK(payload(2) == Approx(4 * 2 * n + 2 * n));
  CHECK(payload(3) == Approx(4 * 3 * 2 * n));
}

TEST_CASE("gradient buckets hold at least the bucket size, in backward order") {
  // Llama-3-8B with BF16 gradients: the head (525M params, 1.05 GB) fills a 25 MB bucket alone,
  // then each layer (218M params, 436 MB) does, then the embedding: 34 buckets, the head first.
  ParallelPlan plan;
  plan.dp = 8;
  const TaskGraph graph = build_data_parallel_step(llama3_8b(), training(4096, 16, 2), plan);
  std::vector<std::string> names;
  std::vector<double> sizes;
  for (const Task& task : graph.stages[0]) {
    if (const auto* work = std::get_if<CollectiveWork>(&task.work)) {
      names.emplace_back(task.name);
      sizes.push_back(work->size_bytes);
    }
  }
  REQUIRE(names.size() == 34);
  CHECK(names.front() == "mb0.bucket0.all_reduce");
  CHECK(sizes.front() == Approx(2 * head_parameters(llama3_8b())));
  CHECK(sizes[1] == Approx(2 * decoder_layer_parameters(llama3_8b())));
  CHECK(sizes.back() == Approx(2 * embedding_parameters(llama3_8b())));
}

TEST_CASE("inconsistent jobs are rejected") {
  ParallelPlan plan;
  plan.dp = 8;
  CHECK_THROWS_AS(build_data_parallel_step(llama3_8b(), training(4096, 100, 2), plan), ModelError);
  CHECK_THROWS_AS(build_data_parallel_step(llama3_8b(), training(4096, 0, 2), plan), ModelError);
  ModelSpec odd = llama3_8b();
  odd.kv_heads = 5;
  CHECK_THROWS_AS(build_data_parallel_step(odd, training(4096, 16, 2), plan), ModelError);
}

TEST_CASE("memory: model states follow the ZeRO stage, its shards and the gradients' dtype") {
  const ModelSpec m = llama3_8b();
  const double n = m.parameters();
  auto states = [&](int zero, int reduce_bytes, bool bf16_shards = false) {
    ParallelPlan plan;
    plan.dp = 8;
    plan.zero_stage = zero;
    plan.bf16_shards = bf16_shards;
    TrainingSpec t = training(4096, 256, 2);
    t.grad_reduce_bytes = reduce_bytes;
    const MemoryBreakdown mem = estimate_memory(m, t, plan, {80e9});
    return mem.items[0].bytes + mem.items[1].bytes + mem.items[2].bytes;
  };
  // FP32 reduction (Megatron-LM's main gradients): BF16 weights, FP32 gradients, 12 bytes of
  // optimizer state, sharded by stage.
  CHECK(states(0, 4) == Approx(18 * n));
  CHECK(states(1, 4) == Approx(6 * n + 12 * n / 8));
  CHECK(states(2, 4) == Approx(2 * n + 16 * n / 8));
  // ZeRO-3 as DeepSpeed and Megatron FSDP keep it: a BF16 shard beside the FP32 master; as
  // PyTorch's FSDP keeps it, the FP32 shard is the parameter: 16 bytes over the shards.
  CHECK(states(3, 4, true) == Approx(18 * n / 8));
  CHECK(states(3, 4) == Approx(16 * n / 8));
  // BF16 reduction: a gradient buffer kept whole is BF16 (Megatron-Core's grad buffer takes the
  // parameters' dtype without grad_reduce_in_fp32); sharded gradients stay the FP32 shard's,
  // but beside a BF16 shard (Megatron FSDP's main gradient buffer) they are BF16 too.
  CHECK(states(0, 2) == Approx(16 * n));
  CHECK(states(1, 2) == Approx(4 * n + 12 * n / 8));
  CHECK(states(2, 2) == Approx(states(2, 4)));
  CHECK(states(3, 2) == Approx(states(3, 4)));
  CHECK(states(3, 2, true) == Approx(16 * n / 8));
}

TEST_CASE("memory: each schedule holds the passes and layers derived by hand") {
  // 7 layers over pp 2: 1F1B and GPipe split them 3 + 4 (the first stage one short); over
  // pp 2 x vpp 2 virtual stages 1, 2, 2, 2 (the first one short too): stage 0 runs chunks of 1
  // (virtual stage 0) and 2 layers (virtual stage 2), stage 1 two chunks of 2.
  ModelSpec m = llama3_8b();
  m.layers = 7;
  ParallelPlan plan;
  plan.pp = 2;
  const TrainingSpec four = training(4096, 4, 1);  // 4 micro-batches of 1 on dp 1
  const auto held = [&](const TrainingSpec& t, int stage) {
    const InFlight in = in_flight(m, t, plan, stage);
    return std::pair{in.passes, in.layers};
  };
  // 1F1B: stage s warms up with pp - s - 1 forwards, then holds one more: 2 of 3 layers on
  // stage 0, 1 of 4 on stage 1.
  REQUIRE(virtual_stage_layers(m, 2, 0).count() == 3);
  CHECK(held(four, 0) == std::pair{2, 6});
  CHECK(held(four, 1) == std::pair{1, 4});
  // GPipe: every forward before any backward.
  plan.schedule = PipelineSchedule::gpipe;
  CHECK(held(four, 0) == std::pair{4, 12});
  CHECK(held(four, 1) == std::pair{4, 16});
  // Interleaved, m = 4: stage 0 warms up (2 - 0 - 1) x 2 + (2 - 1) x 2 = 4 passes (micro-batches
  // 0, 1 through chunk 0, then through chunk 1: 2 x 1 + 2 x 2 layers), then forward, backward in
  // turn: + mb2 c0 (7 layers, 5 passes), - mb0 c1 (5), + mb3 c0 (4 x 1 + 1 x 2 = 6), ...:
  // the peak is 3 x 1 + 2 x 2 = 7 layers in 5 passes. Stage 1 warms up 0 x 2 + 1 x 2 = 2
  // passes and peaks at 3 passes of 2 layers.
  plan.schedule = PipelineSchedule::one_f_one_b;
  plan.vpp = 2;
  REQUIRE(virtual_stage_layers(m, 4, 0).count() == 1);
  REQUIRE(virtual_stage_layers(m, 4, 2).count() == 2);
  CHECK(held(four, 0) == std::pair{5, 7});
  CHECK(held(four, 1) == std::pair{3, 6});
  // m = pp = 2: Megatron-Core (0.10 on) warms up min(total, 2 (pp - s - 1) + (vpp - 1) pp):
  // stage 0 all 4 passes (6 layers), stage 1 only 2, then 1F1B: 3 passes at the peak.
  const TrainingSpec two = training(4096, 2, 1);
  CHECK(held(two, 0) == std::pair{4, 6});
  CHECK(held(two, 1) == std::pair{3, 6});
  // The activations follow the layers held by the fullest stage: 7 layers' worth on stage 0,
  // 6 on stage 1 (which also holds the logits).
  const MemoryBreakdown memory = estimate_memory(m, four, plan, {80e9});
  const double per_layer =
      decoder_layer_saved_bytes_per_token(m, four, Recompute::none, 1, true) * 4096;
  int checked = 0;
  for (const MemoryItem& item : memory.items) {
    if (item.name != "activations") continue;
    const bool first = item.basis.find("on stage 0 of 2") != std::string::npos;
    CHECK(item.bytes == Approx((first ? 7 : 6) * per_layer));
    ++checked;
  }
  CHECK(checked == 1);
}

TEST_CASE("recomputing the first N layers of each chunk costs N layers' rerun, saves N layers") {
  // Megatron's block method on Llama-3-8B (32 layers), dp 8, one micro-batch held: N layers
  // keep only their input (the boundary), the other 32 - N all their saved tensors. With every
  // layer rerun the layer in backward adds what its rerun saved but its input, the kept
  // boundary itself (so N = 31 holds as much as N = 32); with N < 32 the backward
  // reaches the rerun layers after freeing the 32 - N kept ones, so the peak is the forward's
  // end: no recomputation's 32 layers at N = 0. Each recomputed layer reruns its forward, so
  // the hardware FLOPs grow by N / 32 of full recomputation's extra.
  const ModelSpec m = llama3_8b();
  const TrainingSpec t = training(4096, 256, 2);
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 1;
  const auto activations = [&](Recompute mode, int layers) {
    ParallelPlan p = plan;
    p.recompute = mode;
    p.recompute_layers = layers;
    return layer_backward_activations(estimate_memory(m, t, p, {80e9}));
  };
  const auto flops = [&](Recompute mode, int layers) {
    ParallelPlan p = plan;
    p.recompute = mode;
    p.recompute_layers = layers;
    return build_data_parallel_step(m, t, p).hardware_flops_per_rank;
  };
  const double tokens = 2.0 * 4096;
  const double per_layer =
      decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 1, true) * tokens;
  const double boundary = 2.0 * m.hidden * tokens;
  CHECK(activations(Recompute::full, 0) == Approx(31 * boundary + per_layer));
  CHECK(activations(Recompute::full, 31) == Approx(activations(Recompute::full, 0)));
  CHECK(activations(Recompute::full, 32) == Approx(activations(Recompute::full, 0)));
  CHECK(activations(Recompute::full, 40) == Approx(activations(Recompute::full, 0)));
  CHECK(activations(Recompute::full, 12) == Approx(12 * boundary + 20 * per_layer));
  CHECK(activations(Recompute::none, 0) == Approx(32 * per_layer));
  CHECK(activations(Recompute::full, 1) == Approx(boundary + 31 * per_layer));
  const double extra = flops(Recompute::full, 0) - flops(Recompute::none, 0);
  CHECK(extra > 0);
  CHECK(flops(Recompute::full, 12) - flops(Recompute::none, 0) == Approx(extra * 12 / 32));
  // Model FLOPs do not count the rerun.
  ParallelPlan partial = plan;
  partial.recompute = Recompute::full;
  partial.recompute_layers = 12;
  CHECK(build_data_parallel_step(m, t, partial).model_flops_per_rank ==
        Approx(build_data_parallel_step(m, t, plan).model_flops_per_rank));
}

TEST_CASE("the replay and the memory model recompute the same first layers of each chunk") {
  // 7 layers over pp 2 x vpp 2 (virtual stages of 1, 2, 2, 2 layers: L0 | L1 L2 | L3 L4 |
  // L5 L6), the first layer of each chunk recomputed: stage 0 reruns L0 and L3, stage 1 L1
  // and L5, every micro-batch. Stage 0's peak (see the schedule test above) holds 3 passes
  // of chunk 0 (1 layer, recomputed) and 2 of chunk 1 (2 layers, 1 recomputed): 7 layers, 5
  // of them recomputed.
  ModelSpec m = llama3_8b();
  m.layers = 7;
  ParallelPlan plan;
  plan.pp = 2;
  plan.vpp = 2;
  plan.recompute = Recompute::full;
  plan.recompute_layers = 1;
  const TrainingSpec t = training(4096, 4, 1);
  const TaskGraph graph = build_data_parallel_step(m, t, plan);
  const auto rerun = [&](int stage) {
    std::set<std::string> layers;
    for (const Task& task : graph.stages[stage]) {
      const std::size_t at = task.name.find(".recompute.");
      if (task.name.rfind("mb0.", 0) == 0 && at != std::string::npos) {
        layers.emplace(task.name.substr(4, at - 4));
      }
    }
    return layers;
  };
  CHECK(rerun(0) == std::set<std::string>{"L0", "L3"});
  CHECK(rerun(1) == std::set<std::string>{"L1", "L5"});
  const InFlight held = in_flight(m, t, plan, 0, 0.1);
  CHECK(held.passes == 5);
  CHECK(held.layers == 7);
  CHECK(held.recomputed_layers == 5);
}

TEST_CASE("memory never decreases as sharding decreases or the micro-batch grows") {
  // Llama-3-8B at 4,096 tokens, global batch 256, over layouts of tp 1-8, pp 1-2 (interleaved
  // or not), dp 2-16, every ZeRO stage a pipeline allows, micro-batches 1-4: halving dp or
  // tp, lowering the ZeRO stage, or doubling the micro-batch never gives a rank less to hold.
  const ModelSpec m = llama3_8b();
  struct Point {
    int tp, pp, vpp, dp, zero, micro_batch;
  };
  const auto memory = [&](const Point& p) {
    ParallelPlan plan;
    plan.tp = p.tp;
    plan.pp = p.pp;
    plan.vpp = p.vpp;
    plan.dp = p.dp;
    plan.zero_stage = p.zero;
    return estimate_memory(m, training(4096, 256, p.micro_batch), plan, {80e9}).total_bytes;
  };
  int compared = 0;
  for (const int tp : {1, 2, 4, 8}) {
    for (const auto& [pp, vpp] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{2, 2}}) {
      for (const int dp : {2, 4, 8, 16}) {
        for (int zero = 0; zero <= (pp > 1 ? 1 : 3); ++zero) {
          for (const int mb : {1, 2, 4}) {
            const Point p{tp, pp, vpp, dp, zero, mb};
            const double here = memory(p);
            INFO("tp " << tp << " pp " << pp << " vpp " << vpp << " dp " << dp << " zero " << zero
                       << " micro-batch " << mb);
            if (dp > 2) CHECK(memory({tp, pp, vpp, dp / 2, zero, mb}) >= here);
            if (tp > 1) CHECK(memory({tp / 2, pp, vpp, dp, zero, mb}) >= here);
            if (zero > 0) CHECK(memory({tp, pp, vpp, dp, zero - 1, mb}) >= here);
            if (mb < 4) CHECK(memory({tp, pp, vpp, dp, zero, mb * 2}) >= here);
            ++compared;
          }
        }
      }
    }
  }
  CHECK(compared == 4 * 4 * 3 * (4 + 2 + 2));
}

namespace {

// Llama-3-8B on 8 GPUs, ZeRO-1, under FP8: BF16 weights with Transformer Engine's FP8 copies
// (fp8), or FP8 primary weights (primary).
struct Fp8Job {
  ModelSpec m = llama3_8b();
  ParallelPlan plan;
  TrainingSpec fp8, primary;
  double projections = m.layers * layer_projection_weights(m, 0);
  Fp8Job() : fp8(training(4096, 256, 2)) {
    plan.dp = 8;
    plan.zero_stage = 1;
    fp8.precision = Precision::fp8;
    primary = fp8;
    primary.fp8_params = true;
  }
};

}  // namespace

TEST_CASE("memory: FP8 primary weights drop the BF16 copy and half the FP8 copies") {
  // Under FP8 on Hopper, Transformer Engine keeps each projection weight cast to FP8 and
  // transposed (2 bytes beside its BF16 2); kept in FP8 as the model's own weight (fp8_params),
  // the weight is 1 byte and only its transpose is added: 2 bytes less per projection
  // parameter, nothing else changed.
  const auto [m, plan, fp8, primary, projections] = Fp8Job();
  const MemoryBreakdown cached = estimate_memory(m, fp8, plan, {80e9});
  const MemoryBreakdown kept = estimate_memory(m, primary, plan, {80e9});
  CHECK(memory_item(cached, "weights") == Approx(2 * m.parameters()));
  CHECK(memory_item(kept, "weights") == Approx(2 * m.parameters() - projections));
  CHECK(memory_item(cached, "FP8 weight copies") == Approx(2 * projections));
  CHECK(memory_item(kept, "FP8 weight copies") == Approx(projections));
  CHECK(cached.total_bytes - kept.total_bytes == Approx(2 * projections));
  // The distributed optimizer gathers the FP8 weights in FP8 (--fp8-param-gather): one byte
  // less per projection parameter on the wire, the rest as before.
  const auto gathered = [&](const TrainingSpec& t) {
    double bytes = 0;
    const TaskGraph graph = build_data_parallel_step(m, t, plan);
    for (const Task& task : graph.stages[0]) {
      const auto* work = std::get_if<CollectiveWork>(&task.work);
      if (work && work->op == CollectiveOp::all_gather) bytes += work->size_bytes;
    }
    return bytes;
  };
  CHECK(gathered(fp8) == Approx(2 * m.parameters()));
  CHECK(gathered(primary) == Approx(2 * m.parameters() - projections).epsilon(1e-4));
}

TEST_CASE("memory: where FP8 GEMMs read either layout, Transformer Engine keeps no transpose") {
  // On Hopper each projection weight has an FP8 cast and its transpose (2 bytes a projection
  // parameter); where FP8 GEMMs take either layout (Blackwell: is_non_tn_fp8_gemm_supported),
  // the cast alone (1 byte), and beside FP8 primary weights nothing. torchao's float8 linears
  // under FSDP2 transpose on every GPU: the same on both.
  const auto [m, plan, fp8, primary, projections] = Fp8Job();
  const MemoryDevice hopper{80e9, false};
  const MemoryDevice blackwell{80e9, true};
  const auto copies = [&](const TrainingSpec& t, const ParallelPlan& p, const MemoryDevice& gpu) {
    return memory_item(estimate_memory(m, t, p, gpu), "FP8 weight copies");
  };
  CHECK(copies(fp8, plan, hopper) == Approx(2 * projections));
  CHECK(copies(fp8, plan, blackwell) == Approx(projections));
  CHECK(copies(primary, plan, blackwell) == 0);
  CHECK(estimate_memory(m, fp8, plan, hopper).total_bytes -
            estimate_memory(m, fp8, plan, blackwell).total_bytes ==
        Approx(projections));  // kept all step, not a per-step allocation
  ParallelPlan fsdp2 = plan;
  fsdp2.zero_stage = 3;
  fsdp2.fsdp2 = true;
  CHECK(copies(fp8, fsdp2, blackwell) == Approx(copies(fp8, fsdp2, hopper)));
  CHECK(copies(fp8, fsdp2, blackwell) > 0);
}

TEST_CASE("8-bit Adam keeps 6 bytes of optimizer state per parameter and moves fewer bytes") {
  // bitsandbytes' block-wise 8-bit moments: 1 byte each plus an FP32 scale per 2048 values,
  // beside the FP32 master weight: K = 4 + 2 x (1 + 4/2048) in the ZeRO paper's 2 + 2 + K.
  const ModelSpec m = llama3_8b();
  const double n = m.parameters();
  const double k = 4 + 2 * (1 + 4.0 / 2048);
  TrainingSpec t = training(4096, 256, 2);
  t.optimizer = Optimizer::adam8bit;
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 1;
  const MemoryBreakdown mem = estimate_memory(m, t, plan, {80e9});
  CHECK(mem.items[2].name == "optimizer states");
  CHECK(mem.items[2].bytes == Approx(k * n / 8));
  // The step reads and writes master and moments, reads the FP32 gradient, writes BF16 weights.
  CHECK(adam_step_op(n, t).kernel.bytes == Approx((2 * k + 4 + 2) * n));
  t.optimizer = Optimizer::adam;
  CHECK(adam_step_op(n, t).kernel.bytes == Approx(30 * n));
  // FP16's dynamic loss scaling first checks and unscales the FP32 gradient: read and written.
  t.precision = Precision::fp16;
  CHECK(adam_step_op(n, t).kernel.bytes == Approx((30 + 8) * n));
}

TEST_CASE("Apex's distributed Adam keeps masters as remainders, each reduced shard beside") {
  // NeMo 1's distributed_fused_adam on a BF16 model: the FP32 master as the 16 bits the BF16
  // parameter lacks (2 bytes) and FP32 m, v, sharded: 10 bytes over dp. Gradients whole in the
  // contiguous buffer in the reduce dtype (r bytes), and each bucket's reduce-scattered shard
  // kept beside it (r bytes over dp): 2 + r + (10 + r) / dp in all.
  const ModelSpec m = llama3_8b();
  const double n = m.parameters();
  TrainingSpec t = training(4096, 256, 2);
  t.optimizer = Optimizer::distributed_fused_adam;
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 1;
  const auto states = [&](const TrainingSpec& recipe) {
    const MemoryBreakdown mem = estimate_memory(m, recipe, plan, {80e9});
    REQUIRE(mem.items[2].name == "optimizer states");
    return mem.items[0].bytes + mem.items[1].bytes + mem.items[2].bytes;
  };
  CHECK(states(t) == Approx((2 + 2 + (10 + 2) / 8.0) * n));
  t.grad_reduce_bytes = 4;
  CHECK(states(t) == Approx((2 + 4 + (10 + 4) / 8.0) * n));
  // The step rebuilds each master from the parameter: reads parameter, remainder, m, v and the
  // gradient shard in the reduce dtype, writes all but the gradient back: 2 x (2 + 2 + 8) + 4
  // = 28 bytes, 26 with BF16 reduction.
  CHECK(adam_step_op(n, t).kernel.bytes == Approx(28 * n));
  TrainingSpec bf16_reduction = t;
  bf16_reduction.grad_reduce_bytes = 2;
  CHECK(adam_step_op(n, bf16_reduction).kernel.bytes == Approx(26 * n));
  // With FP8 primary weights NeMo stores the FP32 master whole (store_params): 12 bytes.
  t.precision = Precision::fp8;
  t.fp8_params = true;
  CHECK(optimizer_state_bytes_held(t) == 12);
  CHECK(adam_step_op(n, t).kernel.bytes == Approx(30 * n));  // FP32 reduction: 2 x 12 + 4 + 2
  // A checkpoint writes the master whole either way.
  CHECK(optimizer_state_bytes_per_parameter(Optimizer::distributed_fused_adam) == 12);
}

TEST_CASE("memory: activations follow the saved tensors and recomputation") {
  // Llama-3-8B layer (h = 4096, kv = 1024, f = 14336), per token, bytes:
  //   inputs of the two RMSNorms, BF16           2 x 2h            = 16,384
  //   inputs of the QKV and gate/up GEMMs        2 x 2h            = 16,384
  //   Q, K, V for FlashAttention's backward      2 (h + 2 kv)      = 12,288
  //   attention output O and FP32 LSE per head   2h + 4 x 32       =  8,320
  //   gate/up output and SwiGLU output           2 (2f) + 2f       = 86,016
  //   total                                                        = 139,392
  const ModelSpec m = llama3_8b();
  CHECK(decoder_layer_saved_bytes_per_token(m, training(4096, 256, 2)) == 139'392.0);
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 3;
  const MemoryBreakdown full = estimate_memory(m, training(4096, 256, 2), plan, {80e9});
  CHECK(memory_item(full, "activations") == Approx(32 * 139'392.0 * 8192));
  plan.recompute = Recompute::full;
  const MemoryBreakdown recomputed = estimate_memory(m, training(4096, 256, 2), plan, {80e9});
  CHECK(memory_item(recomputed, "activations") == Approx(32 * 2.0 * 4096 * 8192));
  // The rerun layer's saved tensors but its input, the checkpoint kept already.
  CHECK(memory_item(recomputed, "recomputed layer") == Approx((139'392.0 - 8'192.0) * 8192));
  CHECK(memory_item(full, "logits") == Approx(6.0 * 8192 * 128256));
  // Two consecutive FSDP units gathered at most: embedding + first layer (or last layer + head),
  // (525,336,576 + 218,112,000) parameters x 2 bytes.
  CHECK(memory_item(full, "gathered parameters") == Approx(2.0 * (525'336'576 + 218'112'000)));
}

TEST_CASE("cross-entropy: each implementation's passes over the logits, fewer bytes when fused") {
  // Llama-3-8B's head at 8,192 tokens, vocabulary split over tp 2: 8192 x 64128 logits a rank.
  const ModelSpec m = llama3_8b();
  const double logits = 8192.0 * 128256 / 2;
  struct Traffic {
    int forward_kernels = 0, backward_kernels = 0;
    double forward_bytes = 0, backward_bytes = 0;
  };
  const auto traffic = [&](CrossEntropy cross_entropy, int tp = 2) {
    const LayerOps head = head_ops(m, 2, 4096, tp, false, cross_entropy);
    Traffic sum;
    for (const Op& op : head.forward) {
      if (op.name.rfind("cross_entropy.", 0) != 0) continue;
      CHECK(op.kernel.kind == KernelKind::memory_bound);
      ++sum.forward_kernels;
      sum.forward_bytes += op.kernel.bytes;
    }
    for (const Op& op : head.backward) {
      if (op.name.rfind("cross_entropy.", 0) != 0) continue;
      ++sum.backward_kernels;
      sum.backward_bytes += op.kernel.bytes;
    }
    return sum;
  };
  // Megatron-Core's vocab_parallel_cross_entropy: BF16 -> FP32 copy (2 + 4), max (4), shift,
  // exp and division in place (8 each), sum (4); backward: scale in place (8), cast (4 + 2).
  const Traffic unfused = traffic(CrossEntropy::unfused);
  CHECK(unfused.forward_kernels == 6);
  CHECK(unfused.backward_kernels == 2);
  CHECK(unfused.forward_bytes == Approx(38 * logits));
  CHECK(unfused.backward_bytes == Approx(14 * logits));
  // Fused: copy with max (6), shift-exp-sum (8), division (8); backward one kernel (4 + 4 + 2).
  const Traffic fused = traffic(CrossEntropy::fused);
  CHECK(fused.forward_kernels == 3);
  CHECK(fused.backward_kernels == 1);
  CHECK(fused.forward_bytes == Approx(22 * logits));
  CHECK(fused.backward_bytes == Approx(10 * logits));
  // In place on the BF16 logits: read for max and sum (2), read and overwrite with the gradient
  // (4); backward scales it in place (4).
  const Traffic in_place = traffic(CrossEntropy::in_place);
  CHECK(in_place.forward_bytes == Approx(6 * logits));
  CHECK(in_place.backward_bytes == Approx(4 * logits));
  CHECK(in_place.forward_bytes + in_place.backward_bytes <
        fused.forward_bytes + fused.backward_bytes);
  CHECK(fused.forward_bytes + fused.backward_bytes <
        unfused.forward_bytes + unfused.backward_bytes);
  // PyTorch's F.cross_entropy on one rank (twice the logits): BF16 -> FP32 copy (2 + 4),
  // log_softmax reading the row three times and writing it (16); backward: zero-filled NLL
  // gradient (4), log_softmax's backward reading it twice and the log-probabilities, writing
  // its own (16), cast (4 + 2).
  const Traffic log_softmax = traffic(CrossEntropy::log_softmax, 1);
  CHECK(log_softmax.forward_kernels == 2);
  CHECK(log_softmax.backward_kernels == 3);
  CHECK(log_softmax.forward_bytes == Approx(22 * 2 * logits));
  CHECK(log_softmax.backward_bytes == Approx(26 * 2 * logits));
  // Under tp, loss_parallel's ops: copy (6), max (4), shift (8), exp (8), sum (4), the
  // log-probabilities (8); backward zeros (4), exp (8), their sum (12), the product (8), cast
  // (6).
  const Traffic loss_parallel = traffic(CrossEntropy::log_softmax);
  CHECK(loss_parallel.forward_kernels == 6);
  CHECK(loss_parallel.backward_kernels == 5);
  CHECK(loss_parallel.forward_bytes == Approx(38 * logits));
  CHECK(loss_parallel.backward_bytes == Approx(38 * logits));
  // Compiled: the BF16 logits read for the max and for the sum (2 each); backward one kernel
  // reading them and writing the BF16 gradient (4).
  const Traffic compiled = traffic(CrossEntropy::compiled);
  CHECK(compiled.forward_kernels == 2);
  CHECK(compiled.backward_kernels == 1);
  CHECK(compiled.forward_bytes == Approx(4 * logits));
  CHECK(compiled.backward_bytes == Approx(4 * logits));

  // Memory: the FP32 copy (its gradient in place) beside the BF16 logits or their gradient (6
  // bytes a logit), or only the BF16 logits.
  ParallelPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  TrainingSpec t = training(4096, 256, 2);
  const auto logits_memory = [&](CrossEntropy cross_entropy) {
    t.cross_entropy = cross_entropy;
    return memory_item(estimate_memory(m, t, plan, {80e9}), "logits");
  };
  CHECK(logits_memory(CrossEntropy::unfused) == Approx(6 * logits));
  CHECK(logits_memory(CrossEntropy::fused) == Approx(6 * logits));
  CHECK(logits_memory(CrossEntropy::in_place) == Approx(2 * logits));
  // Compiled: the BF16 logits kept and their BF16 gradient.
  CHECK(logits_memory(CrossEntropy::compiled) == Approx(4 * logits));
  // PyTorch's loss_parallel (tp 2): four FP32 tensors as the backward starts (the
  // log-probabilities, the NLL's gradient, its sum with their exp, the product); on one rank
  // three (the log-probabilities, the NLL's gradient, the log-softmax's), twice Megatron's.
  CHECK(logits_memory(CrossEntropy::log_softmax) == Approx(16 * logits));
  plan.tp = 1;
  plan.dp = 8;
  CHECK(logits_memory(CrossEntropy::log_softmax) == Approx(12 * 2 * logits));
}

TEST_CASE("memory: totals add up and capacity decides the fit") {
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 0;
  const MemoryBreakdown mem = estimate_memory(llama3_70b(), training(4096, 256, 1), plan, {80e9});
  double sum = 0;
  for (const auto& item : mem.items) sum += item.bytes;
  CHECK(sum == Approx(mem.total_bytes));
  // The total is the allocator's peak reserved memory: what is allocated plus its
  // fragmentation, 5% of what the step allocates (activations and logits here).
  const auto fragmentation =
      std::find_if(mem.items.begin(), mem.items.end(),
                   [](const MemoryItem& i) { return i.name == "fragmentation"; });
  REQUIRE(fragmentation != mem.items.end());
  CHECK(mem.allocated_bytes() == Approx(mem.total_bytes - fragmentation->bytes));
  double dynamic = 0;
  for (const auto& item : mem.items) {
    if (item.name == "activations" || item.name == "logits") dynamic += item.bytes;
  }
  CHECK(fragmentation->bytes == Approx(0.05 * dynamic));
  CHECK(mem.peak == MemoryMoment::loss_backward);  // the logits, nothing recomputed
  CHECK_FALSE(mem.fits());  // 70B x 18 bytes is 1.27 TB: nowhere near one GPU
  CHECK(mem.headroom_fraction() < 0);
}

TEST_CASE("memory: the loss's backward and a recomputed layer's are not held at once") {
  // On a stage with the loss, its backward ends before the first layer's backward starts, so
  // its logits' tensors and what a recomputed layer saves again are never held together: the
  // total counts the larger, and every item held all along. Llama-3-8B at 2 x 4096 tokens
  // with full recomputation: one layer saves 139,392 bytes a token again (1.14 GB), the
  // unfused loss 6 bytes a logit of its 128,256 (6.3 GB): the loss's backward is the peak.
  // GPT-3 175B under tp 8 and sequence parallelism: its loss holds 6 x 51,200 / 8 = 38.4 kB a
  // token (the vocabulary padded as Megatron pads it), a layer about 34h / 8 = 52 kB (Korthikanti's
  // sbh 34 / t, FlashAttention keeping no scores): the layer's backward is.
  const ModelSpec m = llama3_8b();
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 1;
  plan.recompute = Recompute::full;
  const auto check_total = [](const MemoryBreakdown& mem) {
    double held = 0;
    for (const MemoryItem& item : mem.items) held += mem.at_peak(item) ? item.bytes : 0;
    CHECK(held == Approx(mem.total_bytes));
  };
  TrainingSpec t = training(4096, 256, 2);
  const MemoryBreakdown unfused = estimate_memory(m, t, plan, {80e9});
  CHECK(unfused.peak == MemoryMoment::loss_backward);
  check_total(unfused);
  const double logits = memory_item(unfused, "logits");
  const double layer = memory_item(unfused, "recomputed layer");
  CHECK(layer == Approx((139'392.0 - 8'192.0) * 8192));  // its input is the kept checkpoint
  CHECK(logits == Approx(6.0 * 8192 * 128256));
  // Without the layer's item the total would be the same: it is not held at the peak.
  double all_items = 0;
  for (const MemoryItem& item : unfused.items) all_items += item.bytes;
  CHECK(all_items - unfused.total_bytes == Approx(layer).epsilon(1e-9));
  // A loss that holds less than the layer: the layer's backward is the peak.
  const ModelSpec gpt = gpt3_175b();
  const TrainingSpec gpt_recipe = training(2048, 64, 1);
  ParallelPlan split_plan = plan;
  split_plan.tp = 8;
  split_plan.dp = 1;
  const MemoryBreakdown split = estimate_memory(gpt, gpt_recipe, split_plan, {80e9});
  CHECK(gpt.vocab == 51200);
  CHECK(memory_item(split, "logits") == Approx(6.0 * 2048 * 51200 / 8));
  CHECK(memory_item(split, "recomputed layer") ==
        Approx((decoder_layer_saved_bytes_per_token(gpt, gpt_recipe, Recompute::none, 8) -
                2.0 * 12288 / 8) *
               2048));
  CHECK(memory_item(split, "logits") < memory_item(split, "recomputed layer"));
  CHECK(split.peak == MemoryMoment::layer_backward);
  check_total(split);
  // Without recomputation only the loss holds anything at a moment of its own.
  plan.recompute = Recompute::none;
  const MemoryBreakdown kept = estimate_memory(m, t, plan, {80e9});
  CHECK(memory_item(kept, "recomputed layer") == -1);
  CHECK(kept.peak == MemoryMoment::loss_backward);
  check_total(kept);
}

TEST_CASE("memory: a GPT-3 layer keeps Korthikanti's sbh(34 + 5as/h) bytes") {
  // Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
  // arXiv:2205.05198, Section 4: 16-bit activations, 1-byte dropout masks, attention that keeps
  // its s x s probabilities, no recomputation: sbh(34 + 5as/h) per layer; with tensor and
  // sequence parallelism over t ranks, 1/t of that.
  const ModelSpec m = gpt3_175b();
  TrainingSpec t = training(2048, 1536, 1);
  t.attention = Attention::eager;
  t.dropout = 0.1;
  const double s = 2048, b = 1, h = 12288, a = 96, l = 96;
  const double korthikanti = s * b * h * (34 + 5 * a * s / h);
  CHECK(decoder_layer_saved_bytes_per_token(m, t) * s * b == korthikanti);

  ParallelPlan plan = tp8_dp8();
  plan.zero_stage = 1;
  const auto activations = [&](const TrainingSpec& recipe) {
    return memory_item(estimate_memory(m, recipe, plan, {80e9}), "activations");
  };
  CHECK(activations(t) == Approx(l * korthikanti / 8));
  // Selective recomputation drops the 5as/h term: 34sbh/t (their Table 2).
  plan.recompute = Recompute::selective;
  CHECK(activations(t) == Approx(l * s * b * h * 34 / 8));
  plan.recompute = Recompute::none;
  // FlashAttention without dropout keeps no s x s term: 32sbh + an FP32 log-sum-exp per head.
  TrainingSpec flash = training(2048, 1536, 1);
  CHECK(decoder_layer_saved_bytes_per_token(m, flash) == 32 * h + 4 * a);
  CHECK(activations(flash) < activations(t) / 3);
}

TEST_CASE("eager attention does the masked half too: more hardware, same model FLOPs") {
  const ModelSpec m = gpt3_175b();
  ParallelPlan plan = tp8_dp8();
  TrainingSpec flash = training(2048, 64, 1);
  TrainingSpec eager = flash;
  eager.attention = Attention::eager;
  const TaskGraph a = build_data_parallel_step(m, flash, plan);
  const TaskGraph b = build_data_parallel_step(m, eager, plan);
  CHECK(b.model_flops_per_rank == Approx(a.model_flops_per_rank).epsilon(1e-12));
  // Per layer and micro-batch the causal half of the attention GEMMs, 3 x 2bs^2h / tp, is done
  // again (FlashAttention's backward recomputes the scores, 2.5x not 2x of its forward: the
  // difference is 0.5 x 2bs^2h / tp less).
  const double attention_fwd = 2.0 * 2048 * 2048 * 12288 / 8;
  const double extra = 96 * (6 * attention_fwd - 3.5 * attention_fwd) * b.micro_batches;
  CHECK(b.hardware_flops_per_rank - a.hardware_flops_per_rank == Approx(extra).epsilon(1e-9));
}

TEST_CASE("model FLOPs of a GELU MLP layer are 6 N T plus causal attention") {
  // GPT-3: every parameter but the embeddings sits in a GEMM except biases and LayerNorms.
  const ModelSpec m = gpt3_175b();
  ParallelPlan plan = tp8_dp8();
  const TaskGraph graph = build_data_parallel_step(m, training(2048, 64, 1), plan);
  const double tokens = graph.micro_batches * 2048.0;
  const double layer_gemm_params = 12.0 * 12288 * 12288;
  const double logits_params = 51200.0 * 12288;
  const double dense = 6 * (96 * layer_gemm_params + logits_params) * tokens / 8;
  const double attention = 3.0 * 96 * 2.0 * 2048 * 2048 * 12288 / 8 * graph.micro_batches;
  CHECK(graph.model_flops_per_rank == Approx(dense + attention).epsilon(1e-12));
}

TEST_CASE("selective recomputation reruns eager attention's core, or the fused kernel") {
  const ModelSpec m = gpt3_175b();
  ParallelPlan plan = tp8_dp8();
  TrainingSpec eager = training(2048, 64, 1);
  eager.attention = Attention::eager;
  eager.dropout = 0.1;
  const TaskGraph kept = build_data_parallel_step(m, eager, plan);
  plan.recompute = Recompute::selective;
  const TaskGraph selective = build_data_parallel_step(m, eager, plan);
  CHECK(selective.model_flops_per_rank == Approx(kept.model_flops_per_rank).epsilon(1e-12));
  // Per layer and micro-batch: QK^T and PV over the full s x s, 2 x 2bs^2h / tp.
  const double core = 2 * 2.0 * 2048 * 2048 * 12288 / 8;
  CHECK(selective.hardware_flops_per_rank - kept.hardware_flops_per_rank ==
        Approx(96 * core * kept.micro_batches).epsilon(1e-9));
  // The rerun core comes right before the backward of PV, which needs its probabilities.
  const auto at = [&](const std::string& name) { return task_index(selective, name); };
  CHECK(at("mb0.L5.recompute.attn_values") + 1 == at("mb0.L5.attn_values.dgrad_v"));
  CHECK(at("mb0.L5.recompute.scores") < at("mb0.L5.recompute.softmax"));

  TrainingSpec flash = training(2048, 64, 1);
  const TaskGraph flash_selective = build_data_parallel_step(m, flash, plan);
  plan.recompute = Recompute::none;
  const TaskGraph flash_kept = build_data_parallel_step(m, flash, plan);
  // Megatron-Core checkpoints the fused kernel too: its forward, the causal half of 2 x
  // 2bs^2h / tp, once more a layer and micro-batch.
  CHECK(flash_selective.stages[0].size() ==
        flash_kept.stages[0].size() + 96 * flash_kept.micro_batches);
  CHECK(flash_selective.hardware_flops_per_rank - flash_kept.hardware_flops_per_rank ==
        Approx(96 * core / 2 * flash_kept.micro_batches).epsilon(1e-9));
}

TEST_CASE("per-op recomputation reruns K, O and up, and keeps what torchtitan's policy saves") {
  // torchtitan's policy saves every matmul's output but every second one's, in forward order
  // Q K V O gate up down: K, O and up rerun before the layer's backward, 2 T h (kv + h + f)
  // FLOPs a layer (Llama-3-8B: h 4096, kv 1024, f 14336), none of them model FLOPs.
  const ModelSpec m = llama3_8b();
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 3;
  const TrainingSpec recipe = training(4096, 64, 2);
  const TaskGraph kept = build_data_parallel_step(m, recipe, plan);
  plan.recompute = Recompute::per_op;
  const TaskGraph per_op = build_data_parallel_step(m, recipe, plan);
  CHECK(per_op.model_flops_per_rank == Approx(kept.model_flops_per_rank).epsilon(1e-12));
  const double tokens = 2.0 * 4096;
  const double rerun = 2 * tokens * 4096 * (1024 + 4096 + 14336);
  CHECK(per_op.hardware_flops_per_rank - kept.hardware_flops_per_rank ==
        Approx(32 * rerun * kept.micro_batches).epsilon(1e-9));
  // The rerun comes first in the layer's backward, in forward order.
  const auto at = [&](const std::string& name) { return task_index(per_op, name); };
  CHECK(at("mb0.L5.recompute.attn_norm") >= 0);
  CHECK(at("mb0.L5.recompute.attn_norm") < at("mb0.L5.recompute.o_proj"));
  CHECK(at("mb0.L5.recompute.swiglu") < at("mb0.L5.mlp_residual.bwd"));
  CHECK(at("mb0.L5.recompute.attention") == -1);  // attention's output is saved
  CHECK(at("mb0.L5.recompute.down") == -1);       // the seventh matmul's output too

  // Saved per token: the input 2h, Q 2h, V 2kv, O 2h and its FP32 LSE 4 x 32, the gate
  // output 2f, down's output 2h = 63,616 bytes; in backward one layer also holds the rest of
  // what it keeps without recomputation (139,392 bytes, the test above, which has no down
  // output: 139,392 - (63,616 - 8,192)).
  CHECK(decoder_layer_saved_bytes_per_token(m, recipe, Recompute::per_op) == 63'616.0);
  const auto activations = [](const MemoryBreakdown& mem) {
    return layer_backward_activations(mem);
  };
  CHECK(activations(estimate_memory(m, recipe, plan, {80e9})) ==
        Approx((32 * 63'616.0 + 139'392.0 - (63'616.0 - 8'192.0)) * tokens));

  // A GELU MLP's six matmuls (Q K V O up down) rerun K, O and down; under tp 8 each rank does
  // an eighth (GPT-3 175B: h = kv = 12288, f = 49152).
  const ModelSpec gpt = gpt3_175b();
  const TrainingSpec gpt_recipe = training(2048, 64, 1);
  const double gpt_rerun = 2.0 * 2048 * 12288 * (12288 + 12288 + 49152) / 8;
  double extra = 0;
  for (const Op& op : decoder_layer_ops(gpt, gpt_recipe, 8, Recompute::per_op).backward) {
    if (op.name.starts_with("recompute.") && op.kernel.kind == KernelKind::gemm) {
      extra += op.kernel.flops;
    }
  }
  CHECK(extra == Approx(gpt_rerun).epsilon(1e-12));
}

TEST_CASE("eager elementwise ops: each PyTorch op of torchtitan's modules a pass over HBM") {
  // One Llama-3-8B layer (h 4096, kv 1024, f 14336), bytes an element read and written:
  //   RMSNorm, twice: forward 36 (fused 4), backward 84 (fused 8)
  //   RoPE on Q and K (h + kv wide): forward 20 (fused 4), backward 20 (fused 4)
  //   SwiGLU (f wide): forward 10 (fused 6), backward 18 (fused 10)
  // more bytes a token: 2 (32 + 76) 4096 + 32 x 5120 + 12 x 14336 = 1,220,608.
  const ModelSpec m = llama3_8b();
  TrainingSpec fused = training(4096, 64, 2);
  TrainingSpec eager = fused;
  eager.elementwise = Elementwise::eager;
  const auto memory_bytes = [&](const TrainingSpec& recipe) {
    const LayerOps ops = decoder_layer_ops(m, recipe);
    double bytes = 0;
    for (const auto* list : {&ops.forward, &ops.backward}) {
      for (const Op& op : *list) {
        if (!op.collective && op.kernel.kind == KernelKind::memory_bound) bytes += op.kernel.bytes;
      }
    }
    return bytes;
  };
  const double tokens = 2.0 * 4096;
  CHECK(memory_bytes(eager) - memory_bytes(fused) == Approx(1'220'608.0 * tokens).epsilon(1e-12));
  // The same FLOPs, and nothing but memory-bound kernels added: 6 + 12 per norm, 3 + 3 for RoPE,
  // 2 + 3 for SwiGLU where fused runs one each way.
  const LayerOps e = decoder_layer_ops(m, eager);
  const LayerOps f = decoder_layer_ops(m, fused);
  CHECK(e.forward.size() + e.backward.size() ==
        f.forward.size() + f.backward.size() + 2 * (5 + 11) + (2 + 2) + (1 + 2));
  // A LayerNorm model's norms are nn.LayerNorm, one kernel either way.
  TrainingSpec gpt_eager = training(2048, 64, 1);
  gpt_eager.elementwise = Elementwise::eager;
  CHECK(decoder_layer_ops(gpt3_175b(), gpt_eager).forward.size() ==
        decoder_layer_ops(gpt3_175b(), training(2048, 64, 1)).forward.size());
}
