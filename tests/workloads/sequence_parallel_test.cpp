// Tensor parallelism without sequence parallelism (Shoeybi et al.'s form, Megatron before 2022):
// the collectives a layer runs, the work its memory-bound kernels do, and what it keeps.
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/memory_items.hpp"
#include "models.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/task_graph.hpp"
#include "workloads/transformer_ops.hpp"

using namespace fleetsim;
using namespace fleetsim::testing;

namespace {

struct Collectives {
  std::vector<std::string> names;
  std::vector<CollectiveOp> ops;
  double bytes = 0;
};

Collectives collectives_of(const std::vector<Op>& ops) {
  Collectives found;
  for (const Op& op : ops) {
    if (!op.collective) continue;
    found.names.push_back(op.name);
    found.ops.push_back(op.collective->op);
    found.bytes += op.collective->size_bytes;
  }
  return found;
}

double memory_bytes(const std::vector<Op>& ops) {
  double bytes = 0;
  for (const Op& op : ops) {
    if (!op.collective && op.kernel.kind == KernelKind::memory_bound) bytes += op.kernel.bytes;
  }
  return bytes;
}

}  // namespace

TEST_CASE("without sequence parallelism a layer all-reduces each block's output and input grad") {
  // Llama-3-8B at tp 4, 4096 tokens: each block ends in forward with an all-reduce of its
  // 4096 x 4096 BF16 output (o_proj's, down's) and begins in backward with one of its input
  // gradient (QKV's, gate/up's), 33.5 MB each; nothing is gathered, nothing re-gathered, and
  // the same bytes cross the group as sequence parallelism's gathers and reduce-scatters (four
  // of each forward and backward, plus the weight gradients' two re-gathers).
  const ModelSpec m = llama3_8b();
  const TrainingSpec t = training(4096, 8, 1);
  const LayerOps sp = decoder_layer_ops(m, t, 4);
  const LayerOps whole = decoder_layer_ops(m, t, 4, Recompute::none, 1, 1, false);
  const double activation = 2.0 * 4096 * 4096;
  const Collectives forward = collectives_of(whole.forward);
  CHECK(forward.names == std::vector<std::string>{"attn_output", "mlp_output"});
  CHECK(forward.ops ==
        std::vector<CollectiveOp>{CollectiveOp::all_reduce, CollectiveOp::all_reduce});
  CHECK(forward.bytes == 2 * activation);
  const Collectives backward = collectives_of(whole.backward);
  CHECK(backward.names == std::vector<std::string>{"mlp_input.bwd", "attn_input.bwd"});
  CHECK(backward.bytes == 2 * activation);
  CHECK(collectives_of(sp.forward).bytes == 4 * activation);
  CHECK(collectives_of(sp.backward).bytes == 6 * activation);
  // Each input gradient's all-reduce comes after its GEMM's data and weight gradients; under
  // tp_comm_overlap it runs beside the weight gradient (Megatron's asynchronous all-reduce),
  // otherwise it blocks.
  for (std::size_t i = 0; i < whole.backward.size(); ++i) {
    if (!whole.backward[i].collective) continue;
    CHECK(whole.backward[i].collective->beside_weight_gradient);
    CHECK_FALSE(kernel_beside(whole.backward, i, false));
    const std::optional<std::size_t> beside = kernel_beside(whole.backward, i, true);
    REQUIRE(beside);
    CHECK(*beside == i - 1);
    CHECK(whole.backward[*beside].name.ends_with(".wgrad"));
    CHECK(whole.backward[*beside - 1].name.ends_with(".dgrad"));
  }
  // The forward all-reduces block the compute stream, overlap or not: they wait for their
  // GEMM's output and the residual add reads them.
  for (std::size_t i = 0; i < whole.forward.size(); ++i) {
    if (whole.forward[i].collective) CHECK_FALSE(kernel_beside(whole.forward, i, true));
  }
}

TEST_CASE("without sequence parallelism the norms and residuals run on the whole sequence") {
  // The memory-bound kernels between the blocks' GEMMs (two norms, two residual adds, forward
  // and backward) move tp times the bytes they move on a sequence shard; those inside the
  // blocks (RoPE on the local heads, SwiGLU on the local columns) the same.
  const ModelSpec m = llama3_8b();
  const TrainingSpec t = training(4096, 8, 1);
  const LayerOps sp = decoder_layer_ops(m, t, 4);
  const LayerOps whole = decoder_layer_ops(m, t, 4, Recompute::none, 1, 1, false);
  const auto between_blocks = [](const std::vector<Op>& ops) {
    std::vector<Op> kept;
    for (const Op& op : ops) {
      if (op.name.find("_norm") != std::string::npos ||
          op.name.find("_residual") != std::string::npos) {
        kept.push_back(op);
      }
    }
    return kept;
  };
  CHECK(memory_bytes(between_blocks(whole.forward)) ==
        Approx(4 * memory_bytes(between_blocks(sp.forward))));
  CHECK(memory_bytes(between_blocks(whole.backward)) ==
        Approx(4 * memory_bytes(between_blocks(sp.backward))));
  CHECK(memory_bytes(whole.forward) - memory_bytes(between_blocks(whole.forward)) ==
        Approx(memory_bytes(sp.forward) - memory_bytes(between_blocks(sp.forward))));
}

TEST_CASE("memory: without sequence parallelism a GPT-3 layer keeps sbh(10 + 24/t + 5as/ht)") {
  // Korthikanti et al., arXiv:2205.05198, Table 2, "tensor parallel (baseline)": 16-bit
  // activations, 1-byte dropout masks, eager attention keeping its probabilities, tp t: the
  // norms' inputs, the first GEMMs' inputs and the dropout masks (10sbh) whole on every rank,
  // the rest split. GPT-3 175B at t = 8.
  const ModelSpec m = gpt3_175b();
  TrainingSpec t = training(2048, 1536, 1);
  t.attention = Attention::eager;
  t.dropout = 0.1;
  const double s = 2048, h = 12288, a = 96, tp = 8;
  CHECK(decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 8, false) * s ==
        Approx(s * h * (10 + 24 / tp + 5 * a * s / (h * tp))));
  // With sequence parallelism the 10sbh is split too: sbh(34/t + 5as/ht).
  CHECK(decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 8) * s ==
        Approx(s * h * (34 / tp + 5 * a * s / (h * tp))));
  // Under full recomputation a layer keeps its input: whole on every rank, 2sbh.
  ParallelPlan plan = tp8_dp8();
  plan.zero_stage = 1;
  plan.recompute = Recompute::full;
  const auto activations = [&](bool sequence_parallel) {
    plan.sequence_parallel = sequence_parallel;
    return layer_backward_activations(estimate_memory(m, t, plan, {80e9}));
  };
  // 96 layers' inputs, one micro-batch; the rerun layer's input among them is not counted again.
  const double layer_inputs = 95 * 2 * s * h;
  CHECK(activations(false) - activations(true) ==
        Approx(layer_inputs * (1 - 1 / tp) +
               s * (decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 8, false) -
                    decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 8))));
}

TEST_CASE("without sequence parallelism the embedding all-reduces, the head gathers nothing") {
  // Vocabulary-parallel embedding: the partial lookups all-reduced in forward (no backward
  // collective); the column-parallel head on the whole input: no gather, no re-gather, its
  // input gradient all-reduced beside its weight gradient.
  const ModelSpec m = llama3_8b();
  const double activation = 2.0 * 4096 * 4096;
  const LayerOps embed = embedding_ops(m, 1, 4096, 4, false, false);
  CHECK(collectives_of(embed.forward).ops == std::vector<CollectiveOp>{CollectiveOp::all_reduce});
  CHECK(collectives_of(embed.forward).bytes == activation);
  CHECK(collectives_of(embed.backward).ops.empty());
  const LayerOps head = head_ops(m, 1, 4096, 4, false, CrossEntropy::fused, false);
  CHECK(collectives_of(head.forward).ops.empty());
  const Collectives back = collectives_of(head.backward);
  CHECK(back.ops == std::vector<CollectiveOp>{CollectiveOp::all_reduce});
  CHECK(back.bytes == activation);
}

TEST_CASE("without sequence parallelism full recomputation reruns each block's all-reduce") {
  // A layer's forward runs again before its backward, its two output all-reduces with it: per
  // layer and micro-batch two in forward, two again recomputed, two input-gradient ones.
  ParallelPlan plan;
  plan.tp = 4;
  plan.dp = 2;
  plan.zero_stage = 1;
  plan.sequence_parallel = false;
  plan.recompute = Recompute::full;
  const TaskGraph graph = build_data_parallel_step(llama3_8b(), training(4096, 4, 1), plan);
  int forward = 0, recomputed = 0, backward = 0;
  for (const Task& task : graph.stages.front()) {
    const auto* work = std::get_if<CollectiveWork>(&task.work);
    if (!work || work->group != GroupKind::tensor || task.name.find(".L") == std::string::npos)
      continue;
    CHECK(work->op == CollectiveOp::all_reduce);
    if (task.name.find(".recompute.") != std::string::npos) {
      ++recomputed;
    } else if (task.name.ends_with(".bwd")) {
      ++backward;
    } else {
      ++forward;
    }
  }
  CHECK(forward == 32 * 2 * 2);  // 32 layers, 2 micro-batches per replica
  CHECK(recomputed == forward);
  CHECK(backward == forward);
}
