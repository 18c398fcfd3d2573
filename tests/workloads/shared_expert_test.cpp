// A mixture of experts' shared expert: a dense MLP every token goes through beside its routed
// experts, as Qwen2-MoE (gated), DeepSeek and Llama 4 have it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "common/memory_items.hpp"
#include "models.hpp"
#include "workloads/flop_conventions.hpp"
#include "workloads/precision.hpp"

namespace fleetsim {
namespace {

// Qwen1.5-MoE-A2.7B's layer: 60 experts of 1,408, 4 a token, a gated shared expert of 5,632.
ModelSpec qwen_moe() {
  ModelSpec m;
  m.name = "qwen1.5-moe-a2.7b";
  m.layers = 24;
  m.hidden = 2048;
  m.ffn = 1408;
  m.heads = 16;
  m.kv_heads = 16;
  m.vocab = 151936;
  m.qkv_bias = true;
  m.experts = 60;
  m.experts_per_token = 4;
  m.shared_expert_ffn = 5632;
  m.shared_expert_gate = true;
  return m;
}

// Qwen's experts over 8 replicas, 4 to an expert-parallel group, under ZeRO `zero`.
ParallelPlan experts_over_8(int zero) {
  ParallelPlan plan;
  plan.dp = 8;
  plan.ep = 4;
  plan.zero_stage = zero;
  return plan;
}

// 2 micro-batches of 4,096 tokens a replica, gradients reduced in FP32.
TrainingSpec fp32_reductions() {
  TrainingSpec t = testing::training(4096, 16, 1);
  t.grad_reduce_bytes = 4;
  return t;
}

// The nccl-tests sizes of a step's collectives `op` over groups of `group`, every stage's.
double collective_bytes(const TaskGraph& graph, GroupKind group, CollectiveOp op) {
  double bytes = 0;
  for (const Program& program : graph.stages) {
    for (const Task& task : program) {
      const auto* work = std::get_if<CollectiveWork>(&task.work);
      if (work && work->group == group && work->op == op) bytes += work->size_bytes;
    }
  }
  return bytes;
}

double flops_of(const std::vector<Op>& ops) {
  double flops = 0;
  for (const Op& op : ops) flops += op.kernel.flops;
  return flops;
}

}  // namespace

TEST_CASE("a shared expert's parameters: a dense MLP of its size and a gate, held as dense") {
  // 3 x 2,048 x 5,632 = 34,603,008 for the MLP and 2,048 for the gate, a layer; routed experts
  // alone are what expert parallelism splits.
  const ModelSpec m = qwen_moe();
  ModelSpec without = m;
  without.shared_expert_ffn = 0;
  without.shared_expert_gate = false;
  CHECK(shared_expert_parameters(m) == 34'603'008.0 + 2048);
  CHECK(decoder_layer_parameters(m) == decoder_layer_parameters(without) + 34'605'056.0);
  CHECK(layer_expert_parameters(m) == layer_expert_parameters(without));
  CHECK(layer_projection_weights(m, 60) == layer_projection_weights(without, 60) + 34'603'008.0);
  // Active: every layer's shared expert counts, 56 of its 60 routed experts do not.
  CHECK(active_parameters(m) == m.parameters() - 24.0 * 56 * 3 * 2048 * 1408);
}

TEST_CASE("a shared expert's kernels run on every token beside the routed experts") {
  // 4,096 tokens on tp 2: gate_up writes 2 x 5,632 / 2 columns from 2,048 over all 4,096
  // tokens, down reads 5,632 / 2; each GEMM does 2 m n k FLOPs forward and twice that
  // backward, the gate, on the rank's 2,048 tokens of the sequence (the all-to-all dispatcher
  // gathers nothing for the block), 2 x 2,048 x 2,048 each way and its two backward GEMMs.
  const ModelSpec m = qwen_moe();
  ModelSpec without = m;
  without.shared_expert_ffn = 0;
  without.shared_expert_gate = false;
  const TrainingSpec t = testing::training(4096, 8, 1);
  const LayerOps with_shared = decoder_layer_ops(m, t, 2);
  const LayerOps routed_only = decoder_layer_ops(without, t, 2);
  const double mlp = 2.0 * 4096 * (2 * 5632 / 2) * 2048 + 2.0 * 4096 * 2048 * (5632 / 2);
  const double gate = 2.0 * 2048 * 1 * 2048;
  CHECK(flops_of(with_shared.forward) - flops_of(routed_only.forward) == Approx(mlp + gate));
  CHECK(flops_of(with_shared.backward) - flops_of(routed_only.backward) ==
        Approx(2 * (mlp + gate)));
  bool found = false;
  for (const Op& op : with_shared.forward) {
    if (op.name != "shared_expert.gate_up") continue;
    found = true;
    CHECK(op.kernel.m == 4096);
    CHECK(op.kernel.n == 5632);
    CHECK(op.kernel.k == 2048);
  }
  CHECK(found);
  // Its tensors add to what the layer keeps: the activation's input and output and down's
  // input (2 x 5,632 + 5,632 BF16 a token), split by tp, and the gate's input, the shared
  // output (2,048 BF16): reduce-scattered to the rank's tokens under the all-to-all
  // dispatcher, a partial sum whole on each tp rank under allgather.
  CHECK(decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 2) ==
        Approx(decoder_layer_saved_bytes_per_token(without, t, Recompute::none, 2) +
               (2.0 * 2 * 5632 + 2 * 5632) / 2 + 2 * 2048 / 2));
  TrainingSpec gathering = t;
  gathering.token_dispatcher = TokenDispatcher::allgather;
  ModelSpec gathered_without = without;
  CHECK(
      decoder_layer_saved_bytes_per_token(m, gathering, Recompute::none, 2) ==
      Approx(decoder_layer_saved_bytes_per_token(gathered_without, gathering, Recompute::none, 2) +
             (2.0 * 2 * 5632 + 2 * 5632) / 2 + 2 * 2048));
  // Megatron's count adds the shared expert's three GEMMs, 6 x 3 h Fs a token and layer.
  CHECK(flops_per_token(m, 4096, FlopConvention::megatron) ==
        Approx(flops_per_token(without, 4096, FlopConvention::megatron) +
               6.0 * 24 * 3 * 2048 * 5632));
}

TEST_CASE("under expert parallelism the shared expert is reduced as a dense layer is") {
  // ep 4 over 8 ranks: a layer holds 15 of the 60 routed experts, their gradients reduced over
  // the 2 ranks holding them; the shared expert is on every rank, reduced over all 8 with the
  // attention.
  const ModelSpec m = qwen_moe();
  ParallelPlan plan;
  plan.dp = 8;
  plan.ep = 4;
  plan.zero_stage = 1;
  const TrainingSpec t = testing::training(4096, 8, 1);
  const RankParameters held = rank_parameters(m, plan, 0);
  CHECK(held.experts == Approx(m.layers * layer_expert_parameters(m) / 4));
  CHECK(held.dense == Approx(m.parameters() - m.layers * layer_expert_parameters(m)));
  CHECK_NOTHROW(build_data_parallel_step(m, t, plan));
}

TEST_CASE("ZeRO 2 under expert parallelism: an expert's gradients sharded over its replicas") {
  // The same layout with gradients sharded: FP32 main gradients, the dense ones split over the
  // 8 replicas, the experts' over the 2 that hold them; every micro-batch's reduce-scattered,
  // the experts' over their expert_data group, as many bytes as ZeRO 1 reduces once, times
  // the 2 micro-batches.
  const ModelSpec m = qwen_moe();
  const ParallelPlan plan = experts_over_8(2);
  const TrainingSpec t = fp32_reductions();
  const RankParameters held = rank_parameters(m, plan, 0);
  const MemoryBreakdown memory = estimate_memory(m, t, plan, {80e9});
  CHECK(testing::memory_item(memory, "gradients") ==
        Approx(4 * (held.dense / 8 + held.experts / 2)));
  ParallelPlan once = plan;
  once.zero_stage = 1;
  const auto expert_bytes = [&](const ParallelPlan& p) {
    const TaskGraph graph = build_data_parallel_step(m, t, p);
    std::pair<double, CollectiveOp> total{0, CollectiveOp::all_reduce};
    for (const Task& task : graph.stages.front()) {
      const auto* work = std::get_if<CollectiveWork>(&task.work);
      if (!work || work->group != GroupKind::expert_data || task.name.starts_with("optimizer"))
        continue;
      total.first += work->size_bytes;
      total.second = work->op;
    }
    return total;
  };
  const auto [sharded_bytes, sharded_op] = expert_bytes(plan);
  CHECK(sharded_op == CollectiveOp::reduce_scatter);
  CHECK(sharded_bytes == Approx(2 * expert_bytes(once).first));
  CHECK(sharded_bytes == Approx(2 * 4 * held.experts));
}

TEST_CASE("ZeRO 3 under expert parallelism: experts gathered and reduced over their replicas") {
  // torchtitan's FSDP with expert parallelism: each unit's dense parameters are gathered and
  // their gradients reduce-scattered over the 8 replicas, an experts' layer's experts (a
  // quarter of them on each rank, ep 4) over the 2 replicas that hold them. Between gathers a
  // rank keeps its FP32 shard of both (the shard is the parameter), its gradients likewise;
  // gathered, two units' dense parameters and the rank's experts. Per micro-batch the experts'
  // gathers move their BF16 bytes twice (forward and backward) and their reduce-scatters once,
  // in the reduce dtype: with ZeRO 3 every one of the 2 micro-batches does.
  const ModelSpec m = qwen_moe();
  const ParallelPlan plan = experts_over_8(3);
  const TrainingSpec t = fp32_reductions();
  const RankParameters held = rank_parameters(m, plan, 0);
  const MemoryBreakdown memory = estimate_memory(m, t, plan, {80e9});
  CHECK(testing::memory_item(memory, "weights") == 0);
  CHECK(testing::memory_item(memory, "optimizer states") ==
        Approx(12 * (held.dense / 8 + held.experts / 2)));
  CHECK(testing::memory_item(memory, "gradients") ==
        Approx(4 * (held.dense / 8 + held.experts / 2)));
  // Gathered at once at most: the last layer, its dense part and a quarter of its experts
  // (181 M, where the whole layer is 570 M), and the head (151,936 x 2,048 and its norm), the
  // largest two consecutive units.
  const double layer = decoder_layer_parameters(m) - layer_expert_parameters(m) * 3 / 4;
  CHECK(testing::memory_item(memory, "gathered parameters") ==
        Approx(kBf16Bytes * (layer + head_parameters(m))));

  // A BF16 shard kept beside the FP32 one (Megatron FSDP's): the same split.
  ParallelPlan bf16 = plan;
  bf16.bf16_shards = true;
  CHECK(testing::memory_item(estimate_memory(m, t, bf16, {80e9}), "weights") ==
        Approx(kBf16Bytes * (held.dense / 8 + held.experts / 2)));

  const TaskGraph graph = build_data_parallel_step(m, t, plan);
  using enum CollectiveOp;
  CHECK(collective_bytes(graph, GroupKind::expert_data, all_gather) ==
        Approx(2 * 2 * kBf16Bytes * held.experts));
  CHECK(collective_bytes(graph, GroupKind::expert_data, reduce_scatter) ==
        Approx(2 * 4 * held.experts));
  CHECK(collective_bytes(graph, GroupKind::data, all_gather) ==
        Approx(2 * 2 * kBf16Bytes * held.dense));
  CHECK(collective_bytes(graph, GroupKind::data, reduce_scatter) == Approx(2 * 4 * held.dense));
  // With ep = dp (4 replicas, 4 micro-batches each) each replica holds its experts alone:
  // nothing of theirs to gather or reduce.
  ParallelPlan own = plan;
  own.dp = 4;
  const TaskGraph alone = build_data_parallel_step(m, t, own);
  const RankParameters own_held = rank_parameters(m, own, 0);
  CHECK(collective_bytes(alone, GroupKind::expert_data, all_gather) == 0);
  CHECK(collective_bytes(alone, GroupKind::expert_data, reduce_scatter) == 0);
  CHECK(collective_bytes(alone, GroupKind::data, all_gather) ==
        Approx(4 * 2 * kBf16Bytes * own_held.dense));
  // Under a pipeline (FSDP2, gathered once a step): each stage's dense parameters over the 4
  // replicas, its experts over the 2 holding them, once.
  ParallelPlan piped = plan;
  piped.pp = 2;
  piped.dp = 4;
  piped.ep = 2;
  piped.fsdp2 = true;
  const TaskGraph pipelined = build_data_parallel_step(m, t, piped);
  const double stage_experts = rank_parameters(m, piped, 0).experts;
  double expert_gathers = 0;
  for (const Task& task : pipelined.stages.front()) {
    const auto* work = std::get_if<CollectiveWork>(&task.work);
    if (work && work->group == GroupKind::expert_data &&
        task.name.ends_with(".param_gather.experts")) {
      expert_gathers += work->size_bytes;
    }
  }
  CHECK(expert_gathers == Approx(kBf16Bytes * stage_experts));
}

TEST_CASE("shared_expert_overlap: the dispatcher's all-to-alls beside the shared expert's GEMMs") {
  // Megatron-Core's moe_shared_expert_overlap: the dispatch all-to-all is issued just before
  // the shared expert's first GEMM and runs beside it, the combine beside its second; in
  // backward each all-to-all runs beside the weight gradient of that GEMM. On one tp rank the
  // layer's ops are the same, in another order; under tp (below) the shared expert gathers in
  // BF16 and keeps what it gathered.
  const ModelSpec m = qwen_moe();
  for (const int tp : {1, 2}) {
    for (const Precision precision : {Precision::bf16, Precision::fp8}) {
      CAPTURE(tp, precision == Precision::fp8);
      TrainingSpec t = testing::training(4096, 16, 1);
      t.precision = precision;
      const LayerOps plain = decoder_layer_ops(m, t, tp, Recompute::none, 4);
      t.shared_expert_overlap = true;
      const LayerOps overlapped = decoder_layer_ops(m, t, tp, Recompute::none, 4);
      const auto index = [](const std::vector<Op>& ops, const std::string& name) {
        const auto at =
            std::find_if(ops.begin(), ops.end(), [&](const Op& op) { return op.name == name; });
        REQUIRE(at != ops.end());
        return static_cast<std::size_t>(at - ops.begin());
      };
      const auto beside = [&](const std::vector<Op>& ops, const std::string& name) {
        const std::optional<std::size_t> kernel = kernel_beside(ops, index(ops, name), false);
        return kernel ? ops[*kernel].name : std::string("none");
      };
      CHECK(beside(overlapped.forward, "dispatch") == "shared_expert.gate_up");
      CHECK(beside(overlapped.forward, "combine") == "shared_expert.down");
      CHECK(beside(overlapped.backward, "dispatch.bwd") == "shared_expert.gate_up.wgrad");
      CHECK(beside(overlapped.backward, "combine.bwd") == "shared_expert.down.wgrad");
      CHECK(beside(plain.forward, "dispatch") == "none");
      CHECK(beside(plain.backward, "combine.bwd") == "none");
      // The routed experts wait for the dispatch: they come after the shared expert's first
      // GEMM and activation; its second GEMM after theirs.
      CHECK(index(overlapped.forward, "expert0.gate_up") >
            index(overlapped.forward, "shared_expert.swiglu"));
      CHECK(index(overlapped.forward, "shared_expert.down") >
            index(overlapped.forward, "expert14.down"));
      const auto names = [](const std::vector<Op>& ops) {
        std::vector<std::string> sorted;
        for (const Op& op : ops) sorted.push_back(op.name);
        std::sort(sorted.begin(), sorted.end());
        return sorted;
      };
      if (tp == 1) {
        CHECK(names(overlapped.forward) == names(plain.forward));
        CHECK(names(overlapped.backward) == names(plain.backward));
      }
      CHECK(flops_of(overlapped.forward) == Approx(flops_of(plain.forward)));
      // One expert-parallel rank: no all-to-all, nothing moves, not even the order.
      const auto sequence = [](const std::vector<Op>& ops) {
        std::vector<std::pair<std::string, double>> listed;
        for (const Op& op : ops) {
          listed.emplace_back(op.name, op.collective ? op.collective->size_bytes : op.kernel.bytes);
        }
        return listed;
      };
      const LayerOps alone = decoder_layer_ops(m, t, tp, Recompute::none, 1);
      TrainingSpec serial = t;
      serial.shared_expert_overlap = false;
      const LayerOps alone_serial = decoder_layer_ops(m, serial, tp, Recompute::none, 1);
      CHECK(sequence(alone.forward) == sequence(alone_serial.forward));
      CHECK(sequence(alone.backward) == sequence(alone_serial.backward));
      if (tp == 2) {
        // Overlapped, Megatron-Core's shared expert gathers its BF16 input itself (all of the
        // block's 4,096 x 2,048 tokens) and its first GEMM keeps it, whole on each rank: no
        // re-gather for the weight gradient, and 2 (BF16) or 1 (FP8) bytes a token x hidden
        // more kept, less the FP8 shard's cast the GEMM kept otherwise.
        const double gathered = 2.0 * 4096 * m.hidden;
        CHECK(
            testing::find_op(overlapped.forward, "shared_expert.gather")->collective->size_bytes ==
            gathered);
        CHECK(testing::find_op(plain.backward, "shared_expert.gate_up.regather"));
        CHECK_FALSE(testing::find_op(overlapped.backward, "shared_expert.gate_up.regather"));
        const bool fp8 = precision == Precision::fp8;
        CHECK(
            decoder_layer_saved_bytes_per_token(m, t, Recompute::none, tp, true, {}, 4) -
                decoder_layer_saved_bytes_per_token(m, serial, Recompute::none, tp, true, {}, 4) ==
            Approx((fp8 ? 1.0 - 1.0 / tp : 2.0) * m.hidden));
      }
    }
  }
}

TEST_CASE("shared_expert_overlap in the step's tasks: what waits for each all-to-all") {
  // The shared expert's first GEMM does not wait for the dispatch beside it; its activation
  // and the routed experts do. Its second GEMM does not wait for the combine; the op after it
  // (Qwen's gate, then the unpermute) does. In backward each exchange waits for the data gradient
  // before the weight gradient it runs beside, not for that weight gradient.
  const ModelSpec m = qwen_moe();
  TrainingSpec t = fp32_reductions();
  t.shared_expert_overlap = true;
  const TaskGraph graph = build_data_parallel_step(m, t, experts_over_8(1));
  const Program& program = graph.stages[0];
  const auto task = [&](const std::string& name) {
    const long at = testing::task_index(graph, "mb0.L0." + name);
    INFO(name);
    REQUIRE(at >= 0);
    return static_cast<TaskIndex>(at);
  };
  const auto waits = [&](const std::string& name, const std::string& on) {
    const auto& deps = program[task(name)].deps;
    return std::find(deps.begin(), deps.end(), task(on)) != deps.end();
  };
  CHECK_FALSE(waits("shared_expert.gate_up", "dispatch"));
  CHECK(waits("shared_expert.swiglu", "dispatch"));
  CHECK_FALSE(waits("shared_expert.down", "combine"));
  const auto& after_down = program[task("shared_expert.down") + 1].deps;
  CHECK(std::find(after_down.begin(), after_down.end(), task("combine")) != after_down.end());
  CHECK(waits("dispatch.bwd", "shared_expert.gate_up.dgrad"));
  CHECK_FALSE(waits("dispatch.bwd", "shared_expert.gate_up.wgrad"));
  CHECK(waits("combine.bwd", "shared_expert.down.dgrad"));
  CHECK_FALSE(waits("combine.bwd", "shared_expert.down.wgrad"));
}

}  // namespace fleetsim
