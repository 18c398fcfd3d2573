// The task graph of a step: pipelines, LoRA, overlap, offload and mixtures of experts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <variant>
#include <vector>

#include "common/memory_items.hpp"
#include "common/stop_guard.hpp"
#include "models.hpp"
#include "sim/engine/errors.hpp"
#include "workloads/lora_ops.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/task_graph.hpp"
#include "workloads/transformer_ops.hpp"

using namespace fleetsim;
using namespace fleetsim::testing;

TEST_CASE("a step's program is not built past a stop: a limit or a signal ends the build too") {
  // Thousands of micro-batches take seconds to build; the build polls the stop as the replay
  // does, so that --max-wall and --max-memory end it within their margin.
  const StopGuard guard;
  request_stop(StopReason::wall_limit);
  CHECK_THROWS_AS(build_data_parallel_step(llama3_8b(), training(4096, 16, 1), pipeline(4, 2)),
                  Stopped);
  clear_stop_request();
  CHECK(
      build_data_parallel_step(llama3_8b(), training(4096, 16, 1), pipeline(4, 2)).micro_batches ==
      8);
}

TEST_CASE("pipeline: every transfer has one sender and one receiver on neighbouring stages") {
  ParallelPlan plan = pipeline(4, 2);
  ModelSpec m = llama3_8b();
  const TaskGraph graph = build_data_parallel_step(m, training(4096, 16, 1), plan);
  REQUIRE(graph.grid.pp() == 4);
  REQUIRE(graph.micro_batches == 8);
  CHECK(graph.transfers == 2 * 3 * 8);
  std::vector<int> senders(graph.transfers, -1), receivers(graph.transfers, -1);
  std::vector<double> sent(graph.transfers, 0), received(graph.transfers, 0);
  for (int stage = 0; stage < graph.grid.pp(); ++stage) {
    for (const Task& task : graph.stages[stage]) {
      const auto* work = std::get_if<CollectiveWork>(&task.work);
      if (!work || work->group != GroupKind::pipeline) continue;
      auto& side = work->sends ? senders[work->transfer] : receivers[work->transfer];
      CHECK(side == -1);  // one task per side
      side = stage;
      (work->sends ? sent : received)[work->transfer] = work->size_bytes;
    }
  }
  for (int t = 0; t < graph.transfers; ++t) {
    CHECK(std::abs(senders[t] - receivers[t]) == 1);
    CHECK(sent[t] == 2.0 * 4096 * 4096);  // BF16 activations of one 4096-token micro-batch
    CHECK(received[t] == sent[t]);
  }
}

TEST_CASE("pipeline: 1F1B warms up pp - stage - 1 forwards, then alternates") {
  ParallelPlan plan = pipeline(4, 2);
  const TaskGraph graph = build_data_parallel_step(llama3_8b(), training(4096, 16, 1), plan);
  const auto passes = [&](int stage) {
    // The order of each micro-batch's first forward and backward kernel on the stage.
    std::string order;
    const std::string first_layer = "L" + std::to_string(stage * 8) + ".";
    for (const Task& task : graph.stages[stage]) {
      const auto at = task.name.find(first_layer);
      if (at == std::string::npos || task.stream != Stream::compute) continue;
      const std::string_view rest = task.name.substr(at + first_layer.size());
      const std::string mb(task.name.substr(2, task.name.find('.') - 2));
      if (rest == "attn_norm") order += "F" + mb;
      if (rest == "attn_norm.bwd") order += "B" + mb;
    }
    return order;
  };
  CHECK(passes(0) == "F0F1F2F3B0F4B1F5B2F6B3F7B4B5B6B7");
  CHECK(passes(2) == "F0F1B0F2B1F3B2F4B3F5B4F6B5F7B6B7");
  CHECK(passes(3) == "F0B0F1B1F2B2F3B3F4B4F5B5F6B6F7B7");
  plan.schedule = PipelineSchedule::gpipe;
  const TaskGraph gpipe = build_data_parallel_step(llama3_8b(), training(4096, 16, 1), plan);
  CHECK(gpipe.stages[1].size() == graph.stages[1].size());
  // Each layer's FLOPs are run once per micro-batch whatever the stage: the per-rank average is
  // the model's over the stages.
  ParallelPlan flat;
  flat.dp = 2;
  flat.zero_stage = 1;
  const TaskGraph unpipelined = build_data_parallel_step(llama3_8b(), training(4096, 16, 1), flat);
  CHECK(graph.model_flops_per_rank * 4 == Approx(unpipelined.model_flops_per_rank).epsilon(1e-12));
}

TEST_CASE("pipeline: a tied embedding is kept on the last stage too and its gradient exchanged") {
  // Megatron-LM: the last stage holds a copy of the word embedding as its output projection,
  // and the first and last stages all-reduce its gradient after the backward passes.
  ParallelPlan plan = tp8_dp8();
  plan.pp = 4;
  plan.zero_stage = 1;
  const ModelSpec m = gpt3_175b();
  const TaskGraph graph = build_data_parallel_step(m, training(2048, 64, 1), plan);
  CHECK(graph.transfers == 2 * 3 * graph.micro_batches + 2);
  const auto exchanged = [](const TaskGraph& step) {
    double bytes = 0;
    for (const int stage : {0, 3}) {
      for (const Task& task : step.stages[stage]) {
        if (task.name.rfind("embedding_grad.send", 0) == 0) {
          bytes += std::get<CollectiveWork>(task.work).size_bytes;
        }
      }
    }
    return bytes;
  };
  CHECK(exchanged(graph) == Approx(2 * 2.0 * 51200 * 12288 / 8));  // BF16 gradient, each way
  // Under ZeRO 2 each micro-batch's gradient was reduce-scattered over the 8 replicas: each
  // rank exchanges its shard.
  ParallelPlan sharded = plan;
  sharded.zero_stage = 2;
  CHECK(exchanged(build_data_parallel_step(m, training(2048, 64, 1), sharded)) ==
        Approx(exchanged(graph) / 8));
  // The last stage of 4 updates 24 layers, the final LayerNorm and the embedding copy: 30
  // bytes per parameter of its tp x dp shard.
  const double last_stage = 24 * decoder_layer_parameters(m) + 2 * 12288 + 51200.0 * 12288;
  double adam_bytes = 0;
  for (const Task& task : graph.stages[3]) {
    if (task.name == "optimizer.adam") {
      adam_bytes = std::get<ComputeWork>(task.work).kernel->bytes;
    }
  }
  CHECK(adam_bytes == Approx(30 * last_stage / 64));
}

TEST_CASE("pipeline: the interleaved schedule runs chunks in Megatron-LM's order") {
  // pp 2, vpp 2, m 4: forward passes go through chunk 0 for micro-batches 0-1, chunk 1 for
  // 0-1, chunk 0 for 2-3, chunk 1 for 2-3; stage 0 warms up (2 - 0 - 1) x 2 + (2 - 1) x 2 = 4
  // passes, stage 1 2 passes, then one forward and one backward in turn.
  const ParallelPlan plan = pipeline(2, 1, 2);
  ModelSpec m = llama3_8b();
  m.layers = 4;  // virtual stage v = chunk x pp + stage holds layer v: L0 and L2 on stage 0
  const TaskGraph graph = build_data_parallel_step(m, training(4096, 4, 1), plan);
  const auto passes = [&](int stage) {
    std::string order;
    for (const Task& task : graph.stages[stage]) {
      if (task.stream != Stream::compute) continue;
      for (const int chunk : {0, 1}) {
        const std::string layer = ".L" + std::to_string(chunk * 2 + stage) + ".attn_norm";
        const auto at = task.name.find(layer);
        if (at == std::string::npos) continue;
        const std::string_view rest = task.name.substr(at + layer.size());
        const std::string mb(task.name.substr(2, task.name.find('.') - 2));
        if (rest.empty()) order += "F" + mb + "c" + std::to_string(chunk) + " ";
        if (rest == ".bwd") order += "B" + mb + "c" + std::to_string(chunk) + " ";
      }
    }
    return order;
  };
  CHECK(passes(0) ==
        "F0c0 F1c0 F0c1 F1c1 F2c0 B0c1 F3c0 B1c1 F2c1 B0c0 F3c1 B1c0 B2c1 B3c1 "
        "B2c0 B3c0 ");
  CHECK(passes(1) ==
        "F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 F3c0 B1c0 F2c1 B2c1 F3c1 B3c1 "
        "B2c0 B3c0 ");
  CHECK(graph.transfers == 2 * 3 * 4);
}

TEST_CASE("pipeline: a micro-batch group of N runs Megatron-Core's table, N - pp passes more") {
  // Megatron-Core's own example (get_schedule_table, schedules.py): pp 2, vpp 2, N 3, m 5 runs
  // forwards as micro-batches 0 1 2 0 1 2 3 4 3 4 through chunks 0 0 0 1 1 1 0 0 1 1, the last
  // group taking the 2 that remain. Stage 0 warms up 2 (2 - 0 - 1) + (2 - 1) 3 = 5 passes,
  // stage 1 3; then forward k + warm-up and backward k in turn, backward chunks reversed.
  ParallelPlan plan = pipeline(2, 1, 2);
  plan.microbatch_group = 3;
  ModelSpec m = llama3_8b();
  m.layers = 4;
  const auto order = [&](int stage) {
    std::string text;
    for (const Pass& pass : pipeline_schedule(plan, stage, 5)) {
      text += (pass.forward ? "F" : "B") + std::to_string(pass.micro_batch) + "c" +
              std::to_string(pass.chunk) + " ";
    }
    return text;
  };
  CHECK(order(0) ==
        "F0c0 F1c0 F2c0 F0c1 F1c1 F2c1 B0c1 F3c0 B1c1 F4c0 B2c1 F3c1 B0c0 F4c1 B1c0 B2c0 "
        "B3c1 B4c1 B3c0 B4c0 ");
  CHECK(order(1) ==
        "F0c0 F1c0 F2c0 F0c1 B0c1 F1c1 B1c1 F2c1 B2c1 F3c0 B0c0 F4c0 B1c0 F3c1 B2c0 F4c1 "
        "B3c1 B4c1 B3c0 B4c0 ");
  // The stage holds its warm-up and one pass more: 6 passes on stage 0, 4 on stage 1.
  CHECK(in_flight(m, training(4096, 5, 1), plan, 0).passes == 6);
  CHECK(in_flight(m, training(4096, 5, 1), plan, 1).passes == 4);
  // The replay runs the same order, and every transfer still meets its peer.
  const TaskGraph graph = build_data_parallel_step(m, training(4096, 5, 1), plan);
  CHECK(graph.transfers == 2 * 3 * 5);
  // Each micro-batch above pp in the group adds vpp - 1 passes to the warm-up: on m = 6, N = 2
  // (the default), 3 and 6 hold 5, 6 and 9 passes on stage 0.
  for (const auto& [group, passes] : {std::pair{0, 5}, std::pair{3, 6}, std::pair{6, 9}}) {
    plan.microbatch_group = group;
    CHECK(in_flight(m, training(4096, 6, 1), plan, 0).passes == passes);
  }
}

TEST_CASE("LoRA: PEFT's trainable count, 4N model FLOPs per token, only adapters reduced") {
  // Hugging Face PEFT on Meta-Llama-3-8B, rank 16 on every linear layer, reports
  // "trainable params: 41,943,040": per layer 16 x (2(h + h) + 2(h + kv) + 2(h + f) + (f + h)).
  const ModelSpec m = llama3_8b();
  TrainingSpec t = training(4096, 16, 1);
  t.lora = LoraSpec{};
  CHECK(32 * lora_parameters_per_layer(m, t) == 41'943'040.0);

  ParallelPlan plan;
  plan.dp = 8;
  const TaskGraph lora = build_data_parallel_step(m, t, plan);
  const TaskGraph full = build_data_parallel_step(m, training(4096, 16, 1), plan);
  // Frozen weights need no weight gradients: the layers' GEMMs and the logits do 4 of their 6
  // FLOPs per parameter and token; the adapters all 6; attention is unchanged.
  const double tokens = lora.micro_batches * 4096.0;
  const double gemm_parameters = m.parameters() - embedding_parameters(m) - 65 * 4096.0;
  const double attention = 3.0 * 2.0 * 4096.0 * 4096.0 * 4096 * 32 * lora.micro_batches;
  CHECK(lora.model_flops_per_rank ==
        Approx(4 * gemm_parameters * tokens + 6 * 41'943'040.0 * tokens + attention).epsilon(1e-9));
  CHECK(lora.model_flops_per_rank < full.model_flops_per_rank);
  // DDP all-reduces the adapters' BF16 gradients, nothing else.
  double reduced = 0;
  for (const Task& task : lora.stages[0]) {
    const auto* work = std::get_if<CollectiveWork>(&task.work);
    if (work && work->op == CollectiveOp::all_reduce) reduced += work->size_bytes;
  }
  CHECK(reduced == Approx(2 * 41'943'040.0));
  // Weights stay whole; gradients and Adam states are the adapters'.
  plan.zero_stage = 3;
  const MemoryBreakdown mem = estimate_memory(m, t, plan, {80e9});
  CHECK(mem.items[0].bytes == Approx(2 * (m.parameters() + 41'943'040.0) / 8));
  CHECK(mem.items[1].bytes == Approx(4 * 41'943'040.0 / 8));
  CHECK(mem.items[2].bytes == Approx(12 * 41'943'040.0 / 8));
}

TEST_CASE("LoRA under ZeRO-3 never gathers the frozen embedding for a backward it skips") {
  const ModelSpec m = llama3_8b();
  TrainingSpec t = training(4096, 16, 1);
  t.lora = LoraSpec{};
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 3;
  const TaskGraph graph = build_data_parallel_step(m, t, plan);
  int embedding_gathers = 0;
  for (const Task& task : graph.stages[0]) {
    if (task.name.find("embed.") != std::string::npos && task.stream == Stream::gather) {
      ++embedding_gathers;
    }
  }
  CHECK(embedding_gathers == graph.micro_batches);  // its forward only
  // A GELU model has no gate to adapt, and a target listed twice is an error, not double
  // counting.
  t.lora->targets = {"q", "q"};
  CHECK_THROWS_WITH(build_data_parallel_step(m, t, plan), Catch::Contains("listed twice"));
  TrainingSpec gpt = training(2048, 16, 1);
  gpt.lora = LoraSpec{};
  gpt.lora->targets = {"gate"};
  CHECK_THROWS_WITH(build_data_parallel_step(gpt3_175b(), gpt, plan),
                    Catch::Contains("no gate projection"));
}

TEST_CASE("tp_comm_overlap: each tensor-parallel collective runs beside a GEMM, none is dropped") {
  ParallelPlan plan;
  plan.tp = 4;
  plan.dp = 2;
  plan.zero_stage = 1;
  const TaskGraph blocking = build_data_parallel_step(llama3_8b(), training(4096, 4, 1), plan);
  plan.tp_comm_overlap = true;
  const TaskGraph overlapped = build_data_parallel_step(llama3_8b(), training(4096, 4, 1), plan);
  const Program& program = overlapped.stages.front();
  // The same work: the same FLOPs, the same bytes communicated (below).
  CHECK(overlapped.model_flops_per_rank == Approx(blocking.model_flops_per_rank));
  CHECK(overlapped.hardware_flops_per_rank == Approx(blocking.hardware_flops_per_rank));
  // The same tasks, but per layer and micro-batch (32 layers, 2 micro-batches per replica) the
  // last chunk of the two pipelined reduce-scatters, and the GEMMs in chunks: 4 (tp) beside
  // each of the 4 ring exchanges (QKV and gate/up forward, o_proj's and down's input
  // gradients), 4 beside each of the 2 pipelined reduce-scatters (o_proj and down forward).
  REQUIRE(program.size() == blocking.stages.front().size() + 32 * 2 * (2 + 4 * 3 + 2 * 3));
  const auto chunk_of = [&](TaskIndex t) {
    const std::string_view name = program[t].name;
    const std::size_t at = name.rfind(".chunk");
    return at == std::string::npos ? std::string_view{} : name.substr(0, at);
  };
  // The last of a GEMM's chunks from its first.
  const auto gemm_end = [&](TaskIndex t) {
    while (!chunk_of(t).empty() && t + 1 < program.size() && chunk_of(t + 1) == chunk_of(t)) ++t;
    return t;
  };
  int ring_exchange_chunks = 0, pipeline_chunks = 0, bulk_gemms = 0;
  for (const Task& task : program) {
    const auto* work = std::get_if<ComputeWork>(&task.work);
    if (!work || work->kernel->kind != KernelKind::gemm) continue;
    if (task.name.find(".chunk") != std::string::npos) {
      // Ring exchange chunks plan for the whole GPU; pipelined ones leave the reduction's 16.
      CHECK(work->kernel->m == Approx(4096.0 / 4));
      (work->kernel->sm_margin == 0 ? ring_exchange_chunks : pipeline_chunks) += 1;
      CHECK((work->kernel->sm_margin == 0 || work->kernel->sm_margin == 16));
    } else if (work->kernel->sm_margin == 16) {
      ++bulk_gemms;  // beside a bulk re-gather or reduce-scatter
    }
  }
  CHECK(ring_exchange_chunks == 32 * 2 * 4 * 4);
  CHECK(pipeline_chunks == 32 * 2 * 2 * 4);
  CHECK(bulk_gemms == 32 * 2 * 4);
  const auto is_tensor = [](const Task& task) {
    const auto* work = std::get_if<CollectiveWork>(&task.work);
    return work && work->group == GroupKind::tensor;
  };
  const auto is_gemm = [](const Task& task) {
    const auto* work = std::get_if<ComputeWork>(&task.work);
    return work && work->kernel->kind == KernelKind::gemm;
  };
  const auto tensor_bytes = [&](const Program& tasks) {
    double bytes = 0;
    for (const Task& task : tasks) {
      if (is_tensor(task)) bytes += std::get<CollectiveWork>(task.work).size_bytes;
    }
    return bytes;
  };
  CHECK(tensor_bytes(program) == Approx(tensor_bytes(blocking.stages.front())));
  const auto ends_with = [](std::string_view name, std::string_view end) {
    return name.ends_with(end);
  };
  int gathers = 0, scatters = 0, last_chunks = 0;
  for (TaskIndex t = 0; t + 2 < program.size(); ++t) {
    if (!is_tensor(program[t])) continue;
    INFO(program[t].name);
    const auto& work = std::get<CollectiveWork>(program[t].work);
    const auto op = work.op;
    const bool in_layer = program[t].name.find(".L") != std::string::npos;  // "mb0.L3.attn_gather"
    const std::string_view name = program[t].name;
    // Transformer Engine's userbuffers: ring exchanges on copy engines (the gathers a GEMM
    // reads), 16 SMs for pipelined and bulk ones; NCCL's (outside the layers) say nothing.
    if (in_layer) {
      const bool ring_exchange = ends_with(name, "_gather") || ends_with(name, "_scatter.bwd");
      CHECK(work.sms_held == (ring_exchange ? 0 : 16));
    } else {
      CHECK_FALSE(work.sms_held);
    }
    if (ends_with(name, ".last")) {
      // A pipelined reduce-scatter's last quarter: after the GEMM and the three before it.
      const TaskIndex gemm = t - 2;
      REQUIRE(is_gemm(program[gemm]));
      const auto& deps = program[t].deps;
      CHECK(std::find(deps.begin(), deps.end(), gemm) != deps.end());
      CHECK(std::find(deps.begin(), deps.end(), t - 1) != deps.end());
      CHECK(work.size_bytes ==
            Approx(std::get<CollectiveWork>(program[t - 1].work).size_bytes / 3));
      const auto& next_deps = program[t + 1].deps;
      CHECK(std::find(next_deps.begin(), next_deps.end(), t) != next_deps.end());
      ++last_chunks;
    } else if (op == CollectiveOp::reduce_scatter && is_gemm(program[t - 1])) {
      // Beside the GEMM before it: it waits for what that GEMM waits for, not for the GEMM;
      // pipelined, for the GEMM's first chunk. In backward that GEMM is a weight gradient,
      // after the data gradient it reduces, which it waits for.
      const auto& deps = program[t].deps;
      CHECK(std::find(deps.begin(), deps.end(), t - 1) == deps.end());
      if (ends_with(program[t - 1].name, ".chunk3")) {
        CHECK(std::find(deps.begin(), deps.end(), t - 4) != deps.end());
      }
      if (ends_with(name, ".bwd")) {
        CHECK(ends_with(program[t - 1].name, ".wgrad"));
        CHECK(ends_with(program[t - 2].name, ".dgrad"));
        CHECK(std::find(deps.begin(), deps.end(), t - 2) != deps.end());
      }
      scatters += in_layer;
    } else if (op != CollectiveOp::reduce_scatter && is_gemm(program[t + 1])) {
      // Beside the GEMM after it: the GEMM does not wait for it, the op after the GEMM does;
      // in chunks (a ring exchange), only the last chunk waits for it.
      const TaskIndex end = gemm_end(t + 1);
      for (TaskIndex g = t + 1; g <= end; ++g) {
        const bool waits =
            std::find(program[g].deps.begin(), program[g].deps.end(), t) != program[g].deps.end();
        CHECK(waits == (g == end && end > t + 1));
      }
      const auto& next_deps = program[end + 1].deps;
      CHECK(std::find(next_deps.begin(), next_deps.end(), t) != next_deps.end());
      gathers += in_layer;
    } else {
      // Next to no GEMM (the embedding's lookup): it blocks as before.
      CHECK_FALSE(in_layer);
      const auto& next_deps = program[t + 1].deps;
      CHECK(std::find(next_deps.begin(), next_deps.end(), t) != next_deps.end());
    }
  }
  // Per layer and micro-batch: 2 gathers and 2 scatters forward; backward the mirror images
  // and the two re-gathers for weight gradients (32 layers, 2 micro-batches per replica).
  CHECK(gathers == 32 * 2 * (2 + 2 + 2));
  CHECK(scatters == 32 * 2 * (2 + 2));
  CHECK(last_chunks == 32 * 2 * 2);
}

TEST_CASE("QLoRA: decoder layers at 4.127 bits, dequantized before each GEMM that reads them") {
  const ModelSpec m = llama3_70b();
  TrainingSpec lora = training(4096, 16, 1);
  lora.lora = LoraSpec{};
  TrainingSpec qlora = lora;
  qlora.lora->quantized_base = true;
  // NF4 4 bits + an 8-bit scale per 64 weights + an FP32 scale per 256 scales (the paper's
  // 0.127 bits of double-quantized constants per weight).
  CHECK(kNf4BytesPerParameter * 8 == Approx(4.127).epsilon(1e-3));
  ParallelPlan plan;
  plan.recompute = Recompute::full;
  const MemoryBreakdown full = estimate_memory(m, lora, plan, {80e9});
  const MemoryBreakdown quantized = estimate_memory(m, qlora, plan, {80e9});
  const double layers = decoder_layer_parameters(m) * m.layers;
  CHECK(full.items[0].bytes - quantized.items[0].bytes ==
        Approx((2 - kNf4BytesPerParameter) * layers));
  CHECK_FALSE(full.fits());  // 141 GB of BF16 weights
  CHECK(quantized.fits());   // about 40 GB of weights
  // The same model FLOPs; the dequantization adds memory traffic, not FLOPs, and time.
  const TaskGraph plain = build_data_parallel_step(m, lora, plan);
  const TaskGraph dequantized = build_data_parallel_step(m, qlora, plan);
  CHECK(dequantized.model_flops_per_rank == Approx(plain.model_flops_per_rank));
  CHECK(dequantized.hardware_flops_per_rank == Approx(plain.hardware_flops_per_rank));
  // Each of the four projections: forward, the recomputed forward, and before the backward's
  // data gradient.
  const LayerOps ops = decoder_layer_ops(m, qlora, 1, Recompute::full);
  const auto dequantizations = [](const std::vector<Op>& list) {
    return std::count_if(list.begin(), list.end(), [](const Op& op) {
      return op.name.find(".dequantize") != std::string::npos;
    });
  };
  CHECK(dequantizations(ops.forward) == 4);
  CHECK(dequantizations(ops.backward) == 4);
  for (std::size_t i = 0; i + 1 < ops.backward.size(); ++i) {
    if (ops.backward[i].name.find(".dequantize") == std::string::npos) continue;
    const std::string gemm = ops.backward[i].name.substr(0, ops.backward[i].name.find('.'));
    CHECK(ops.backward[i + 1].name == gemm + ".dgrad");
  }
}

TEST_CASE("overlap_param_gather: one gather per unit before its first forward, none at the end") {
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 1;
  plan.overlap_param_gather = true;
  const ModelSpec m = llama3_8b();
  const TaskGraph graph = build_data_parallel_step(m, training(4096, 32, 2), plan);
  const Program& program = graph.stages.front();
  double gathered = 0;
  int gathers = 0;
  for (TaskIndex t = 0; t < program.size(); ++t) {
    const auto* work = std::get_if<CollectiveWork>(&program[t].work);
    if (!work || work->op != CollectiveOp::all_gather) continue;
    INFO(program[t].name);
    CHECK(program[t].name.find("param_gather") != std::string::npos);
    CHECK(program[t].deps.empty());  // at the start of the step
    gathered += work->size_bytes;
    ++gathers;
    // The unit's first forward kernel waits for it.
    bool awaited = false;
    for (TaskIndex d = t + 1; d < program.size() && !awaited; ++d) {
      const auto& deps = program[d].deps;
      awaited = std::find(deps.begin(), deps.end(), t) != deps.end();
    }
    CHECK(awaited);
  }
  CHECK(gathers == 32 + 2);  // the embedding, every layer, the head
  CHECK(gathered == Approx(2 * m.parameters()));
  // Interleaved: each chunk's units gathered once, by the first forward of that chunk.
  plan.dp = 2;
  plan.pp = 4;
  plan.vpp = 2;
  const TaskGraph interleaved = build_data_parallel_step(m, training(4096, 16, 1), plan);
  for (const Program& stage : interleaved.stages) {
    int stage_gathers = 0;
    for (TaskIndex t = 0; t < stage.size(); ++t) {
      const auto* work = std::get_if<CollectiveWork>(&stage[t].work);
      if (!work || work->op != CollectiveOp::all_gather) continue;
      ++stage_gathers;
      // Waited for by exactly one task: that unit's first forward in its chunk.
      int waiting = 0;
      for (TaskIndex d = t + 1; d < stage.size(); ++d) {
        waiting += std::count(stage[d].deps.begin(), stage[d].deps.end(), t) > 0;
      }
      CHECK(waiting == 1);
    }
    CHECK(stage_gathers >= 8);  // 32 layers over 8 chunks: 4 per chunk, 2 chunks per stage
  }
}

TEST_CASE("overlap_grad_reduce: false reduces every bucket after the last backward kernel") {
  // Llama-3-8B on dp 8 with ZeRO 1, two micro-batches, 25 MB buckets. Overlapped, the first
  // bucket's reduction waits for the head's backward only, long before the step's last
  // backward kernel; held back, every bucket waits for that kernel (the embedding's backward,
  // last of the schedule), the same buckets and bytes, then the optimizer.
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 1;
  const ModelSpec m = llama3_8b();
  const auto buckets_of = [&](bool overlap) {
    plan.overlap_grad_reduce = overlap;
    const TaskGraph graph = build_data_parallel_step(m, training(4096, 16, 1), plan);
    const Program& program = graph.stages.front();
    TaskIndex last_backward = 0;
    for (TaskIndex t = 0; t < program.size(); ++t) {
      if (std::holds_alternative<ComputeWork>(program[t].work) &&
          program[t].name.find(".bwd") != std::string::npos) {
        last_backward = t;
      }
    }
    std::vector<std::pair<TaskIndex, double>> buckets;
    for (TaskIndex t = 0; t < program.size(); ++t) {
      const auto* work = std::get_if<CollectiveWork>(&program[t].work);
      if (work && program[t].name.find("bucket") != std::string::npos) {
        buckets.push_back({t, work->size_bytes});
      }
    }
    return std::tuple{graph.stages.front(), last_backward, buckets};
  };
  const auto [overlapped, overlapped_end, early] = buckets_of(true);
  const auto [held, held_end, late] = buckets_of(false);
  REQUIRE(early.size() > 4);
  REQUIRE(late.size() == early.size());
  double early_bytes = 0, late_bytes = 0;
  for (std::size_t b = 0; b < early.size(); ++b) {
    early_bytes += early[b].second;
    late_bytes += late[b].second;
    // Held back: issued after the last backward kernel, each on it.
    CHECK(late[b].first > held_end);
    CHECK(std::find(held[late[b].first].deps.begin(), held[late[b].first].deps.end(), held_end) !=
          held[late[b].first].deps.end());
  }
  CHECK(late_bytes == Approx(early_bytes));
  // The whole model's gradients, once, in the reduce dtype.
  CHECK(late_bytes == Approx(m.parameters() * training(4096, 16, 1).grad_reduce_bytes));
  CHECK(early.front().first < overlapped_end);  // overlapped: the first starts in the backward
}

TEST_CASE("optimizer offload: Adam on the host, each reduced shard copied there, the update back") {
  const ModelSpec m = llama3_8b();
  for (const int zero : {1, 2, 3}) {
    INFO("zero " << zero);
    ParallelPlan plan;
    plan.dp = 8;
    plan.zero_stage = zero;
    plan.offload_optimizer = true;
    const TrainingSpec t = training(4096, 32, 2);  // 2 micro-batches per rank
    const TaskGraph graph = build_data_parallel_step(m, t, plan);
    CHECK(graph.host_work);
    double to_host = 0, to_gpu = 0, adam_parameters = 0;
    int adam_steps = 0;
    for (const Task& task : graph.stages[0]) {
      CHECK(task.name != "optimizer.adam");  // no optimizer kernel on the GPU
      const auto* work = std::get_if<HostWork>(&task.work);
      if (!work) continue;
      CHECK(task.stream == (work->op == HostOp::cpu ? Stream::cpu : Stream::host_copy));
      if (work->op == HostOp::copy_to_host) to_host += work->bytes;
      if (work->op == HostOp::copy_to_gpu) to_gpu += work->bytes;
      if (work->parameters > 0) {
        adam_parameters += work->parameters;
        ++adam_steps;
      }
    }
    const double shard = m.parameters() / 8;
    // ZeRO-3 sends each micro-batch's BF16 shard, the CPU adding it up; ZeRO-2 an FP32 shard
    // each micro-batch, the second one's sum so far fetched back to be added on the GPU;
    // ZeRO-1 one FP32 shard. The updated BF16 shard comes back once.
    const double sent[] = {0, 4 * shard, 2 * 4 * shard, 2 * 2 * shard};
    const double fetched[] = {0, 0, 4 * shard, 0};
    CHECK(to_host == Approx(sent[zero]));
    CHECK(to_gpu == Approx(fetched[zero] + 2 * shard));
    CHECK(adam_steps == 1);
    CHECK(adam_parameters == Approx(shard));
  }
  ParallelPlan plain;
  plain.dp = 8;
  plain.offload_optimizer = true;
  CHECK_THROWS_AS(build_data_parallel_step(m, training(4096, 32, 2), plain), ModelError);
}

TEST_CASE("Mixtral 8x7B: 46.7 B parameters, 12.9 B active, its experts' FLOPs those of k MLPs") {
  // Jiang et al., arXiv:2401.04088: 46.7 B parameters, 12.9 B used per token (2 of 8 experts).
  const ModelSpec m = mixtral_8x7b();
  CHECK(m.parameters() == Approx(46.7e9).epsilon(0.005));
  CHECK(m.parameters() == 46'702'792'704.0);  // the zoo's mixtral-8x7b, counted by hand
  const double idle_experts = m.layers * (m.experts - m.experts_per_token) * mlp_parameters(m);
  CHECK(m.parameters() - idle_experts == Approx(12.9e9).epsilon(0.005));
  // A layer's forward GEMMs do 2 FLOPs per token and active weight: attention projections,
  // the router and k experts' MLPs (attention itself aside).
  const TrainingSpec t = training(4096, 8, 1);
  const double tokens = 4096;
  double gemm_flops = 0;
  for (const Op& op : decoder_layer_ops(m, t).forward) {
    if (op.kernel.kind == KernelKind::gemm) gemm_flops += op.model_flops;
  }
  const double attention = 4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096;
  const double active = attention + m.hidden * m.experts + m.experts_per_token * mlp_parameters(m);
  CHECK(gemm_flops == Approx(2 * tokens * active).epsilon(1e-9));
  // A dense model with k times the MLP does the same MLP FLOPs.
  ModelSpec dense = m;
  dense.experts = 0;
  dense.experts_per_token = 0;
  dense.ffn = m.ffn * m.experts_per_token;
  double dense_flops = 0;
  for (const Op& op : decoder_layer_ops(dense, t).forward) {
    if (op.kernel.kind == KernelKind::gemm) dense_flops += op.model_flops;
  }
  CHECK(gemm_flops - 2 * tokens * m.hidden * m.experts == Approx(dense_flops).epsilon(1e-9));
  // A second expert per token keeps its SwiGLU tensors (3 f BF16), one more permuted copy of
  // the token and one more output (h BF16 each).
  ModelSpec one_expert = m;
  one_expert.experts_per_token = 1;
  CHECK(decoder_layer_saved_bytes_per_token(m, t) -
            decoder_layer_saved_bytes_per_token(one_expert, t) ==
        2.0 * 3 * m.ffn + 2 * 2.0 * m.hidden);
  // Tensor parallelism splits all but the k copies, which each rank keeps whole as the experts'
  // gathered input; the k outputs too under the allgather dispatcher, which combines them
  // before the block's reduce-scatter (under all-to-all they are the rank's shard's).
  const double copies = 2 * 2.0 * m.hidden;
  CHECK(decoder_layer_saved_bytes_per_token(m, t, Recompute::none, 2) ==
        Approx((decoder_layer_saved_bytes_per_token(m, t) - copies) / 2 + copies));
  TrainingSpec gathering = t;
  gathering.token_dispatcher = TokenDispatcher::allgather;
  CHECK(decoder_layer_saved_bytes_per_token(m, gathering, Recompute::none, 2) ==
        Approx((decoder_layer_saved_bytes_per_token(m, gathering) - 2 * copies) / 2 + 2 * copies));
  // Each expert split over 2 tp ranks; the router on the rank's sequence shard; the experts
  // keep their gathered input, so no re-gather in backward.
  const LayerOps split = decoder_layer_ops(m, t, 2);
  int regathers = 0;
  for (const Op& op : split.backward) {
    regathers += op.collective && op.name.find("regather") != std::string::npos;
    if (op.name == "router.wgrad") CHECK(op.kernel.n == Approx(m.experts));
  }
  CHECK(regathers == 1);  // the attention's QKV only
  for (const Op& op : split.forward) {
    if (op.name == "router") CHECK(op.kernel.m == Approx(tokens / 2));
    if (op.name == "expert0.gate_up") CHECK(op.kernel.n == Approx(2.0 * m.ffn / 2));
  }
  // Each layer runs every expert's GEMMs on its t x k / E tokens.
  int expert_gemms = 0;
  for (const Op& op : decoder_layer_ops(m, t).forward) {
    if (op.name.rfind("expert", 0) != 0 || op.kernel.kind != KernelKind::gemm) continue;
    ++expert_gemms;
    CHECK(op.kernel.m == Approx(tokens * 2 / 8));
  }
  CHECK(expert_gemms == 2 * 8);  // gate_up and down of each
}

TEST_CASE(
    "expert parallelism: a rank runs experts / ep experts on ep times the tokens, between two "
    "all-to-alls") {
  const ModelSpec m = mixtral_8x7b();
  const TrainingSpec t = training(4096, 8, 1);
  const LayerOps ops = decoder_layer_ops(m, t, 1, Recompute::none, 4);
  int experts = 0;
  std::vector<std::string> exchanges;
  for (const Op& op : ops.forward) {
    if (op.collective) {
      CHECK(op.collective->group == GroupKind::expert);
      CHECK(op.collective->op == CollectiveOp::all_to_all);
      CHECK(op.collective->size_bytes == 2.0 * 4096 * 2 * m.hidden);
      exchanges.push_back(op.name);
    }
    if (op.name.rfind("expert", 0) == 0 && op.name.find("gate_up") != std::string::npos &&
        op.kernel.kind == KernelKind::gemm) {
      ++experts;
      CHECK(op.kernel.m == Approx(4 * 4096.0 * 2 / 8));
    }
  }
  CHECK(experts == 2);
  CHECK(exchanges == std::vector<std::string>{"dispatch", "combine"});
  // Backward: the combine's mirror first, the dispatch's last.
  std::vector<std::string> back;
  for (const Op& op : ops.backward) {
    if (op.collective) back.push_back(op.name);
  }
  CHECK(back == std::vector<std::string>{"combine.bwd", "dispatch.bwd"});
  // The same model FLOPs as without expert parallelism.
  CHECK(layer_model_flops(ops) == Approx(layer_model_flops(decoder_layer_ops(m, t))));
  ParallelPlan plan;
  plan.dp = 8;
  plan.ep = 3;
  CHECK_THROWS_AS(build_data_parallel_step(m, t, plan), ModelError);
  plan.ep = 4;
  plan.tp = 2;
  plan.dp = 4;
  CHECK_NOTHROW(build_data_parallel_step(m, t, plan));
}

TEST_CASE("pipeline: stages that do not divide the layers hold one fewer at the ends") {
  // The Llama 3 405B run's split: 126 layers over 16 stages, 7 on the first and the last, 8 on
  // the others (arXiv:2407.21783, Section 3.3.2).
  ModelSpec m = llama3_8b();
  m.layers = 126;
  const ParallelPlan plan = pipeline(16, 1);
  int next = 0;
  double parameters = 0;
  for (int stage = 0; stage < 16; ++stage) {
    INFO("stage " << stage);
    const LayerRange layers = virtual_stage_layers(m, 16, stage);
    CHECK(layers.first == next);  // contiguous, in order
    next = layers.end;
    CHECK(layers.count() == (stage == 0 || stage == 15 ? 7 : 8));
    CHECK(stage_layers(m, plan, stage) == layers.count());
    parameters += stage_parameters(m, plan, stage);
  }
  CHECK(next == 126);
  CHECK(parameters == Approx(m.parameters()));  // every parameter on exactly one stage
  // The order goes on inwards: 13 layers over 4 stages is 3, 3, 4, 3 (the first, the last,
  // then the second lose one).
  m.layers = 13;
  const int expected[] = {3, 3, 4, 3};
  for (int v = 0; v < 4; ++v) CHECK(virtual_stage_layers(m, 4, v).count() == expected[v]);
  // Interleaved, each stage holds its chunks' layers: 13 over 2 stages x 2 chunks.
  CHECK(stage_layers(m, pipeline(2, 1, 2), 0) == 3 + 4);
  CHECK(stage_layers(m, pipeline(2, 1, 2), 1) == 3 + 3);
}

TEST_CASE("fsdp2: each gathered unit copied out on the compute stream, each gradient copied in") {
  // PyTorch's fully_shard (_fsdp_collectives.py): a unit's BF16 parameters are copied out of
  // the all-gather's buffer before its forward and again before its backward (read and
  // written: 4 bytes a parameter each time), its BF16 gradients copied and cast into the
  // reduce-scatter's FP32 input after its backward (2 read + 4 written: 6 bytes a parameter),
  // 14 bytes a parameter a micro-batch. The copy-in waits for the reduce-scatter before it.
  const ModelSpec m = llama3_8b();
  TrainingSpec t = training(4096, 16, 1);
  t.grad_reduce_bytes = 4;
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 3;
  const TaskGraph plain = build_data_parallel_step(m, t, plan);
  plan.fsdp2 = true;
  const TaskGraph fsdp2 = build_data_parallel_step(m, t, plan);
  const Program& program = fsdp2.stages.front();
  const std::size_t units = fsdp_unit_parameters(m).size();
  REQUIRE(fsdp2.micro_batches == 2);
  CHECK(program.size() == plain.stages.front().size() + 2 * 3 * units);
  CHECK(fsdp2.hardware_flops_per_rank == plain.hardware_flops_per_rank);
  double parameters = 0;
  for (const double p : fsdp_unit_parameters(m)) parameters += p;
  double copied = 0;
  int copies_in = 0, waiting = 0;
  for (std::size_t i = 0; i < program.size(); ++i) {
    const Task& task = program[i];
    const bool out = task.name.ends_with(".copy_out"), in = task.name.ends_with(".copy_in");
    if (!out && !in) continue;
    CHECK(task.stream == Stream::compute);
    copied += std::get<ComputeWork>(task.work).kernel->bytes;
    if (out) {
      // After its unit's all-gather; the unit's first kernel, next on the stream, after it.
      const bool after_gather = std::any_of(task.deps.begin(), task.deps.end(), [&](TaskIndex d) {
        const auto* work = std::get_if<CollectiveWork>(&program[d].work);
        return work && work->op == CollectiveOp::all_gather;
      });
      CHECK(after_gather);
      CHECK(std::ranges::equal(program[i + 1].deps,
                               std::vector<TaskIndex>{static_cast<TaskIndex>(i)}));
    }
    if (!in) continue;
    ++copies_in;
    for (const TaskIndex dep : task.deps) {
      const auto* work = std::get_if<CollectiveWork>(&program[dep].work);
      if (work && work->op == CollectiveOp::reduce_scatter) ++waiting;
    }
    // Its reduce-scatter reads what it wrote.
    const std::span<const TaskIndex> next_deps = program[i + 1].deps;
    CHECK(std::get<CollectiveWork>(program[i + 1].work).op == CollectiveOp::reduce_scatter);
    CHECK(std::find(next_deps.begin(), next_deps.end(), static_cast<TaskIndex>(i)) !=
          next_deps.end());
  }
  CHECK(copied == Approx(14 * parameters * fsdp2.micro_batches).epsilon(1e-12));
  CHECK(copies_in == static_cast<int>(units) * fsdp2.micro_batches);
  CHECK(waiting == copies_in - 1);  // all but the step's first
  // The end of a backward waits for its last reduce-scatter (FSDP2's root post-backward): the
  // second micro-batch's first copy-out waits for the first's.
  const long copy = task_index(fsdp2, "mb1.embed.fwd.copy_out");
  REQUIRE(copy >= 0);
  const bool after_reduction =
      std::any_of(program[copy].deps.begin(), program[copy].deps.end(), [&](TaskIndex d) {
        return program[d].name.starts_with("mb0.") && program[d].name.ends_with("reduce_scatter");
      });
  CHECK(after_reduction);
}

TEST_CASE(
    "FSDP under a pipeline: the distributed optimizer's step, gathered ahead, reduced after") {
  // PyTorch's pipelining runs each stage's fully_shard units with reshard_after_forward off and
  // gradient sync off until the stage's last backward, after which it calls each group's
  // post_backward (torch.distributed.pipelining's stage, since PyTorch 2.5): each unit gathered
  // once a step before its first forward, its gradients accumulated whole and reduce-scattered
  // once the backward is done, the optimizer on the shards. Its kernels are ZeRO 1's with
  // overlap_param_gather, kernel for kernel, and so are its collectives' bytes; its gathers
  // are ahead of the forward, its reductions after the stage's last backward kernel; its
  // memory is the distributed optimizer's but for the gradients, accumulated in the reduce
  // dtype: the weights whole for the step, the optimizer states sharded.
  const ModelSpec m = llama3_8b();
  const TrainingSpec t = training(4096, 32, 2);
  ParallelPlan fsdp;
  fsdp.dp = 4;
  fsdp.pp = 2;
  fsdp.zero_stage = 3;
  fsdp.fsdp2 = true;
  ParallelPlan distributed = fsdp;
  distributed.zero_stage = 1;
  distributed.fsdp2 = false;
  distributed.overlap_param_gather = true;
  const TaskGraph a = build_data_parallel_step(m, t, fsdp);
  const TaskGraph b = build_data_parallel_step(m, t, distributed);
  REQUIRE(a.stages.size() == 2);
  REQUIRE(a.micro_batches == 4);
  const auto kernels = [](const Program& program) {
    std::vector<Kernel> all;
    for (const Task& task : program) {
      if (const auto* work = std::get_if<ComputeWork>(&task.work)) all.push_back(*work->kernel);
    }
    return all;
  };
  const auto data_bytes = [](const Program& program, CollectiveOp op) {
    double bytes = 0;
    for (const Task& task : program) {
      const auto* work = std::get_if<CollectiveWork>(&task.work);
      if (work && work->group == GroupKind::data && work->op == op) bytes += work->size_bytes;
    }
    return bytes;
  };
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    INFO("stage " << s);
    const Program& program = a.stages[s];
    CHECK(kernels(program) == kernels(b.stages[s]));
    for (const CollectiveOp op : {CollectiveOp::all_gather, CollectiveOp::reduce_scatter}) {
      CHECK(data_bytes(program, op) == Approx(data_bytes(b.stages[s], op)));
    }
    TaskIndex last_backward = 0;
    for (TaskIndex i = 0; i < program.size(); ++i) {
      if (std::holds_alternative<ComputeWork>(program[i].work) &&
          program[i].name.find("optimizer") == std::string::npos) {
        last_backward = i;
      }
    }
    int gathers = 0, reductions = 0;
    for (TaskIndex i = 0; i < program.size(); ++i) {
      const auto* work = std::get_if<CollectiveWork>(&program[i].work);
      if (!work || work->group != GroupKind::data) continue;
      INFO(program[i].name);
      if (work->op == CollectiveOp::all_gather) {
        ++gathers;
        CHECK(program[i].deps.empty());  // at the start of the step, ahead of the forward
      } else {
        ++reductions;
        CHECK(i > last_backward);  // after the stage's last backward kernel
      }
    }
    // The stage's units gathered once each, not once a micro-batch.
    CHECK(gathers == stage_layers(m, fsdp, static_cast<int>(s)) + 1);
    CHECK(reductions >= 1);
  }
  TrainingSpec fp32_reduce = t;
  fp32_reduce.grad_reduce_bytes = 4;  // torchtitan's default reduce dtype, Megatron's main grads
  const MemoryBreakdown fsdp_memory = estimate_memory(m, fp32_reduce, fsdp, {80e9});
  const MemoryBreakdown distributed_memory = estimate_memory(m, fp32_reduce, distributed, {80e9});
  CHECK(fsdp_memory.total_bytes == distributed_memory.total_bytes);
  CHECK_THAT(fsdp_memory.items.front().basis, Catch::Contains("gathered whole for the step"));
  // BF16 reduction: the whole gradients kept in BF16, half the FP32 main gradients.
  TrainingSpec bf16_reduce = t;
  bf16_reduce.grad_reduce_bytes = 2;
  CHECK(memory_item(estimate_memory(m, bf16_reduce, fsdp, {80e9}), "gradients") ==
        Approx(memory_item(distributed_memory, "gradients") / 2));
}

TEST_CASE("ZeRO 2 under a pipeline: every micro-batch's gradients reduce-scattered, kept sharded") {
  // Llama 3's FSDP under its pipeline (arXiv:2407.21783 Section 3.3.2): optimizer states and
  // gradients sharded, parameters whole for the step. Each stage reduce-scatters each chunk's
  // gradients after every micro-batch's backward, where ZeRO 1 does it once after the last: m
  // times the bytes (m = 8 here, dp 4), each micro-batch's backward reducing every bucket ZeRO 1
  // reduces in the last one's; the gradients then take an FP32 shard of memory (1/dp) instead
  // of the whole buffer, the rest alike.
  const ModelSpec m = llama3_8b();
  TrainingSpec t = training(4096, 64, 2);
  t.grad_reduce_bytes = 4;
  const ParallelPlan distributed = pipeline(2, 4, 2);
  ParallelPlan sharded = distributed;
  sharded.zero_stage = 2;
  const TaskGraph a = build_data_parallel_step(m, t, sharded);
  const TaskGraph b = build_data_parallel_step(m, t, distributed);
  REQUIRE(a.micro_batches == 8);
  // The bytes and the count of the data group's reduce-scatters, of micro-batch `tag` or all.
  const auto scattered = [](const Program& program, const std::string& tag = "") {
    std::pair<double, int> total{0, 0};
    for (const Task& task : program) {
      const auto* work = std::get_if<CollectiveWork>(&task.work);
      if (work && work->group == GroupKind::data && work->op == CollectiveOp::reduce_scatter &&
          task.name.starts_with(tag)) {
        total.first += work->size_bytes;
        ++total.second;
      }
    }
    return total;
  };
  for (std::size_t s = 0; s < a.stages.size(); ++s) {
    INFO("stage " << s);
    const auto [once_bytes, once] = scattered(b.stages[s]);
    REQUIRE(once >= 2);  // a bucket of each chunk at least
    CHECK(scattered(a.stages[s]).first == Approx(a.micro_batches * once_bytes));
    for (int i = 0; i < a.micro_batches; ++i) {
      INFO("micro-batch " << i);
      CHECK(scattered(a.stages[s], "mb" + std::to_string(i) + ".").second == once);
    }
  }
  const MemoryBreakdown z2 = estimate_memory(m, t, sharded, {80e9});
  const MemoryBreakdown z1 = estimate_memory(m, t, distributed, {80e9});
  CHECK(memory_item(z2, "gradients") == Approx(memory_item(z1, "gradients") / 4));
  CHECK(memory_item(z2, "weights") == memory_item(z1, "weights"));
  CHECK(memory_item(z2, "optimizer states") == memory_item(z1, "optimizer states"));
  CHECK(memory_item(z2, "activations") == memory_item(z1, "activations"));
}

TEST_CASE("a step says whether its data-parallel collectives are all reduce-scatters and gathers") {
  // Each ZeRO stage's data-parallel collectives: ZeRO 0 all-reduces the gradients, ZeRO 1-3
  // reduce-scatter them and all-gather the parameters (so they run as rings).
  for (const int zero : {0, 1, 2, 3}) {
    CAPTURE(zero);
    ParallelPlan plan = pipeline(1, 8);
    plan.zero_stage = zero;
    const TaskGraph graph = build_data_parallel_step(llama3_8b(), training(4096, 16, 1), plan);
    bool rings_only = true;
    for (const Task& task : graph.stages.front()) {
      const auto* work = std::get_if<CollectiveWork>(&task.work);
      if (work && work->group == GroupKind::data) {
        rings_only = rings_only && (work->op == CollectiveOp::reduce_scatter ||
                                    work->op == CollectiveOp::all_gather);
      }
    }
    CHECK(graph.data_parallel_rings_only == rings_only);
    CHECK(graph.data_parallel_rings_only == (zero > 0));
  }
}
