// Models, recipes and layouts the workload tests build on: the Llama 3 and GPT-3 dimensions as
// published, and sums over a task graph.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <variant>
#include <vector>

#include "workloads/memory_model.hpp"
#include "workloads/task_graph.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim::testing {

inline ModelSpec llama3_8b() {
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

inline ModelSpec llama3_70b() {
  ModelSpec m = llama3_8b();
  m.layers = 80;
  m.hidden = 8192;
  m.ffn = 28672;
  m.heads = 64;
  return m;
}

// GPT-3 175B as Megatron-LM trains it (Narayanan et al. 2021, Table 1).
inline ModelSpec gpt3_175b() {
  ModelSpec m;
  m.name = "gpt3-175b";
  m.layers = 96;
  m.hidden = 12288;
  m.ffn = 4 * 12288;
  m.heads = 96;
  m.kv_heads = 96;
  m.vocab = 51200;
  m.tied_embeddings = true;
  m.mlp = Mlp::gelu;
  m.norm = Norm::layernorm;
  m.linear_bias = true;
  m.positions = Positions::learned;
  m.max_positions = 2048;
  return m;
}

// Mixtral 8x7B (Jiang et al., arXiv:2401.04088): Llama 3 8B's layer shapes with 8 experts in
// each MLP, 2 a token, and Mistral's 32 K vocabulary.
inline ModelSpec mixtral_8x7b() {
  ModelSpec m = llama3_8b();
  m.name = "mixtral-8x7b";
  m.vocab = 32000;
  m.experts = 8;
  m.experts_per_token = 2;
  return m;
}

// Megatron's tensor-parallel layout for GPT-3 within a node, over 8 replicas.
inline ParallelPlan tp8_dp8() {
  ParallelPlan plan;
  plan.tp = 8;
  plan.dp = 8;
  return plan;
}

// A pipelined layout with ZeRO-1, as Megatron-LM runs pipelines.
inline ParallelPlan pipeline(int pp, int dp, int vpp = 1) {
  ParallelPlan plan;
  plan.pp = pp;
  plan.dp = dp;
  plan.vpp = vpp;
  plan.zero_stage = 1;
  return plan;
}

// The op of `ops` named `name`, or null.
inline const Op* find_op(const std::vector<Op>& ops, const std::string& name) {
  for (const Op& op : ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

inline TrainingSpec training(int seq, int global_batch, int micro_batch) {
  TrainingSpec t;
  t.seq_len = seq;
  t.global_batch = global_batch;
  t.micro_batch = micro_batch;
  return t;
}

// Where the task `name` is in stage 0's program, -1 where it is not.
inline long task_index(const TaskGraph& graph, const std::string& name) {
  for (std::size_t i = 0; i < graph.stages[0].size(); ++i) {
    if (graph.stages[0][i].name == name) return static_cast<long>(i);
  }
  return -1L;
}

// The bytes of the memory item named `name` (0, and a failed check, when there is none).
inline double item_bytes(const MemoryBreakdown& memory, const std::string& name) {
  for (const MemoryItem& item : memory.items) {
    if (item.name == name) return item.bytes;
  }
  FAIL_CHECK("no memory item " << name);
  return 0;
}

// A layer's model FLOPs, forward and backward.
inline double layer_model_flops(const LayerOps& layer) {
  double sum = 0;
  for (const Op& op : layer.forward) sum += op.model_flops;
  for (const Op& op : layer.backward) sum += op.model_flops;
  return sum;
}

inline double sum_model_flops(const TaskGraph& graph) {
  double total = 0;
  for (const Task& task : graph.stages[0]) {
    if (const auto* work = std::get_if<ComputeWork>(&task.work)) total += work->model_flops;
  }
  return total;
}

// Sum of the nccl-tests message sizes S of every collective of one step, for ZeRO stage `zero`
// with 8 data-parallel ranks and micro-batch 2 at sequence 4096.
inline double collective_payload(const ModelSpec& model, int global_batch, int zero) {
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = zero;
  const TaskGraph graph = build_data_parallel_step(model, training(4096, global_batch, 2), plan);
  double bytes = 0;
  for (const Task& task : graph.stages[0]) {
    if (const auto* work = std::get_if<CollectiveWork>(&task.work)) bytes += work->size_bytes;
  }
  return bytes;
}

}  // namespace fleetsim::testing
