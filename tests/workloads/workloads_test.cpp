#include <catch2/catch.hpp>
#include <variant>

#include "sim/engine/errors.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/task_graph.hpp"
#include "workloads/transformer_ops.hpp"

using namespace fleetsim;

namespace {

ModelSpec llama3_8b() {
  ModelSpec m;
  m.name = "llama3-8b";
  m.layers = 32;
  m.hidden = 4096;
  m.ffn = 14336;
  m.heads = 32;
  m.kv_heads = 8;
  m.vocab = 128256;
  return m;
}

ModelSpec llama3_70b() {
  ModelSpec m = llama3_8b();
  m.layers = 80;
  m.hidden = 8192;
  m.ffn = 28672;
  m.heads = 64;
  return m;
}

TrainingSpec training(int seq, int global_batch, int micro_batch) {
  TrainingSpec t;
  t.seq_len = seq;
  t.global_batch = global_batch;
  t.micro_batch = micro_batch;
  return t;
}

double sum_model_flops(const TaskGraph& graph) {
  double total = 0;
  for (const Task& task : graph.program) {
    if (const auto* work = std::get_if<ComputeWork>(&task.work))
      total += work->model_flops;
  }
  return total;
}

}  // namespace

TEST_CASE("parameter counts match the published checkpoints exactly") {
  // Hugging Face configs of Meta-Llama-3-8B and -70B report 8,030,261,248 and 70,553,706,496.
  CHECK(llama3_8b().parameters() == 8'030'261'248.0);
  CHECK(llama3_70b().parameters() == 70'553'706'496.0);
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
  auto payload = [&](int zero) {
    ParallelPlan plan;
    plan.dp = 8;
    plan.zero_stage = zero;
    const TaskGraph graph = build_data_parallel_step(m, training(4096, 16, 2), plan);
    double bytes = 0;
    for (const Task& task : graph.program) {
      if (const auto* work = std::get_if<CollectiveWork>(&task.work))
        bytes += work->size_bytes;
    }
    return bytes;
  };
  CHECK(payload(0) == Approx(2 * m.parameters()));
  CHECK(payload(1) == Approx(2 * 2 * m.parameters()));  // reduce-scatter + all-gather of weights
  CHECK(payload(3) == Approx(3 * 2 * m.parameters()));
}

TEST_CASE("a batch that does not divide over micro-batches and ranks is rejected") {
  ParallelPlan plan;
  plan.dp = 8;
  CHECK_THROWS_AS(build_data_parallel_step(llama3_8b(), training(4096, 100, 2), plan), ModelError);
}

TEST_CASE("memory: model states follow the ZeRO sharding of 2 + 4 + 12 bytes per parameter") {
  const ModelSpec m = llama3_8b();
  const double n = m.parameters();
  auto states = [&](int zero) {
    ParallelPlan plan;
    plan.dp = 8;
    plan.zero_stage = zero;
    const MemoryBreakdown mem = estimate_memory(m, training(4096, 256, 2), plan, 80e9);
    return mem.items[0].bytes + mem.items[1].bytes + mem.items[2].bytes;
  };
  CHECK(states(0) == Approx(18 * n));
  CHECK(states(1) == Approx(6 * n + 12 * n / 8));
  CHECK(states(2) == Approx(2 * n + 16 * n / 8));
  CHECK(states(3) == Approx(18 * n / 8));
}

TEST_CASE("memory: activations follow the saved tensors and recomputation") {
  // Llama-3-8B layer, per token, BF16: 2 norm inputs (2h each), 2 GEMM inputs (2h each),
  // Q,K,V (2*(h + 2*kv) = 2*6144), O (2h) + LSE (4 * heads), gate/up (2*2f), SwiGLU out (2f):
  // 8*4096*2 ... = 16384 + 16384 + 12288 + 8192 + 128 + 86016 = 139,392 bytes.
  const ModelSpec m = llama3_8b();
  CHECK(decoder_layer_saved_bytes_per_token(m) == 139'392.0);
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 3;
  const auto find = [](const MemoryBreakdown& mem, const std::string& name) {
    for (const auto& item : mem.items) {
      if (item.name == name)
        return item.bytes;
    }
    return -1.0;
  };
  const MemoryBreakdown full = estimate_memory(m, training(4096, 256, 2), plan, 80e9);
  CHECK(find(full, "activations") == Approx(32 * 139'392.0 * 8192));
  plan.recompute = Recompute::full;
  const MemoryBreakdown recomputed = estimate_memory(m, training(4096, 256, 2), plan, 80e9);
  CHECK(find(recomputed, "activations") == Approx(32 * 2.0 * 4096 * 8192 + 139'392.0 * 8192));
  CHECK(find(full, "logits") == Approx(8.0 * 8192 * 128256));
}

TEST_CASE("memory: totals add up and capacity decides the fit") {
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 0;
  const MemoryBreakdown mem = estimate_memory(llama3_70b(), training(4096, 256, 1), plan, 80e9);
  double sum = 0;
  for (const auto& item : mem.items)
    sum += item.bytes;
  CHECK(sum == Approx(mem.total_bytes));
  CHECK_FALSE(mem.fits());  // 70B x 18 bytes is 1.27 TB: nowhere near one GPU
  CHECK(mem.headroom_fraction() < 0);
}
