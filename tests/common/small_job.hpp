// A small job on an H100-like node and GPU with round numbers, for tests whose values matter
// only relative to each other.
#pragma once

#include "sim/step/step_inputs.hpp"

namespace fleetsim::testing {

// Llama-like, 8 layers, ZeRO-3 over the node's 8 GPUs.
inline StepInputs small_job() {
  StepInputs in;
  in.node.name = "test-node";
  in.node.gpus = 8;
  in.node.nvlink_bytes_per_s = 450e9;
  in.node.nvlink_latency = from_us(0.5);
  in.node.pcie_switches = 4;
  in.node.pcie_bytes_per_s = 64e9;
  in.node.host_bytes_per_s = 64e9;
  in.node.nics = 8;
  in.node.nic_bytes_per_s = 50e9;
  in.gpu.name = "test-gpu";
  in.gpu.sm_count = 132;
  in.gpu.dense_bf16_flops_per_s.value = 989e12;
  in.gpu.hbm_capacity_bytes.value = 80e9;
  in.gpu.hbm_bytes_per_s.value = 3.35e12;
  in.gpu.gemm_efficiency.value = 0.8;
  AttentionRates& fa2 = in.gpu.attention[AttentionKernel::fa2];
  fa2.fwd.efficiency.value = fa2.bwd.efficiency.value = 0.35;
  in.gpu.memory_efficiency.value = 0.87;
  in.gpu.kernel_launch_s.value = 4e-6;
  in.gpu.link_efficiency["nvlink"].value = 0.82;
  in.gpu.link_efficiency["infiniband"].value = 0.96;
  in.gpu.link_efficiency["pcie"].value = 0.8;
  in.gpu.collectives = CollectiveCosts::simple_only(from_us(8.4), from_us(3.4));
  in.model.name = "small";
  in.model.layers = 8;
  in.model.hidden = 2048;
  in.model.ffn = 7168;
  in.model.heads = 16;
  in.model.kv_heads = 4;
  in.model.vocab = 32000;
  in.training.seq_len = 2048;
  in.training.global_batch = 32;
  in.training.micro_batch = 2;
  in.plan.dp = 8;
  in.plan.zero_stage = 3;
  return in;
}

// The small job pipelined over 4 stages of 2 layers (tp 1, ZeRO-1), 2 replicas, 8 micro-batches
// each; a small vocabulary keeps the first and last stages' extra work (embedding, head)
// negligible, so the stages are balanced as the bubble formula assumes.
inline StepInputs pipelined_job(PipelineSchedule schedule = PipelineSchedule::one_f_one_b) {
  StepInputs in = small_job();
  in.model.vocab = 256;
  in.plan.pp = 4;
  in.plan.dp = 2;
  in.plan.zero_stage = 1;
  in.plan.schedule = schedule;
  return in;
}

// The small job on two 4-GPU trays of one NVLink domain (as a GB200 NVL72's), with 8 KV heads
// so that tp 8 divides them.
inline StepInputs two_trays() {
  StepInputs in = small_job();
  in.node.gpus = 4;
  in.node.nics = 4;
  in.node.pcie_switches = 2;
  in.node.nvlink_domain_nodes = 2;
  in.nodes = 2;
  in.model.kv_heads = 8;
  return in;
}

// The job as a mixture of experts (8 experts, 2 per token) with ZeRO-1, which expert
// parallelism runs with.
inline StepInputs with_experts(StepInputs in) {
  in.model.experts = 8;
  in.model.experts_per_token = 2;
  in.plan.zero_stage = 1;
  return in;
}

}  // namespace fleetsim::testing
