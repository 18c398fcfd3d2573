// The parallel layout of a training job as data: how its ranks split the model and the batch.
//
// What each field means for the ranks and their groups is rank_grid.hpp's; which combinations
// are allowed is rules.hpp's; the YAML key, default, label and output name of each field are
// dimensions.hpp's. Nothing else restates them.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

namespace fleetsim {

// The product of layout sizes in 64 bits, saturating at the largest int64: a scenario may give
// sizes whose product no integer holds, and a rule must still say so rather than wrap.
inline std::int64_t size_product(std::initializer_list<std::int64_t> sizes) {
  std::int64_t product = 1;
  for (const std::int64_t size : sizes) {
    if (__builtin_mul_overflow(product, size, &product)) {
      return std::numeric_limits<std::int64_t>::max();
    }
  }
  return product;
}

// none: keep every tensor a layer saves; selective: rerun the modules recompute_modules names,
// by default the attention core (scores, softmax, dropout, PV) instead of keeping the s x s
// probabilities (Korthikanti et al.; under FlashAttention the fused kernel, which keeps only
// its log-sum-exp beside its inputs and output); full: keep only each layer's
// input and rerun its forward before its backward (only the first recompute_layers of each
// chunk, where set); per_op: torchtitan's per-op policy
// (selective_ac_option "op"): each layer saves its inputs, attention's output and every
// matmul's but every second one's, and reruns the rest of its forward before its backward.
enum class Recompute { none, selective, per_op, full };
inline const char* to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::per_op: return "per_op";
    case Recompute::full: return "full";
  }
  return "?";
}

// The parts of each layer selective recomputation reruns before the layer's backward, keeping
// only their inputs (Megatron-Core's recompute_modules under recompute_granularity selective;
// default core_attn): core_attn, the attention core (its scores and softmax, or the fused
// attention kernel, whatever the backend); mlp, a dense MLP block; moe, a mixture of experts'
// block whole (router, dispatch, experts, combine); moe_act, the experts' activation only (its
// output, the down projection's input, discarded and recomputed); layernorm, the norm before a
// mixture of experts' block (its output, the router's input, discarded and recomputed; a dense
// layer's norms are fused into the projections after them, which keep their own inputs).
struct RecomputeModules {
  bool core_attn = true;
  bool mlp = false;
  bool moe = false;
  bool moe_act = false;
  bool layernorm = false;
  bool operator==(const RecomputeModules&) const = default;
};
// The modules by Megatron-Core's names, in its order.
inline constexpr std::array<std::pair<const char*, bool RecomputeModules::*>, 5>
    kRecomputeModuleNames = {{{"core_attn", &RecomputeModules::core_attn},
                              {"moe_act", &RecomputeModules::moe_act},
                              {"layernorm", &RecomputeModules::layernorm},
                              {"mlp", &RecomputeModules::mlp},
                              {"moe", &RecomputeModules::moe}}};
// "core_attn, mlp"; "none" for none.
inline std::string to_string(const RecomputeModules& modules) {
  std::string names;
  for (const auto& [name, member] : kRecomputeModuleNames) {
    if (modules.*member) names += (names.empty() ? "" : ", ") + std::string(name);
  }
  return names.empty() ? "none" : names;
}

// The order of micro-batches on each pipeline stage: GPipe runs every forward, then every
// backward; 1F1B (PipeDream-Flush, Megatron's default) runs pp - stage - 1 forwards, then
// alternates one forward and one backward, so a stage holds at most pp - stage micro-batches
// (interleaved over virtual stages when vpp > 1).
enum class PipelineSchedule { gpipe, one_f_one_b };
inline const char* to_string(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::gpipe ? "gpipe" : "1f1b";
}

// How context parallelism's attention meets the rest of the sequence (Megatron-Core's
// cp_comm_type): p2p, ring attention, the keys and values passed around the cp ranks beside
// the attention kernel; a2a, DeepSpeed-Ulysses' all-to-alls, which before attention trade the
// rank's tokens of every head for every token of heads / cp heads (Q, K and V), and after it
// trade the output back (Transformer Engine's AttnFuncWithCPAndQKVOA2A).
enum class ContextComm { p2p, a2a };
inline const char* to_string(ContextComm comm) {
  return comm == ContextComm::a2a ? "a2a" : "p2p";
}

struct ParallelPlan {
  // Megatron-style tensor parallelism: each layer's GEMMs and heads split over tp ranks of
  // consecutive GPUs. With sequence parallelism (the default) the activations between them are
  // sharded by sequence, an all-gather before and a reduce-scatter after each block; without
  // it (Megatron before 2022, Shoeybi et al.'s form) every rank runs the norms, dropouts and
  // residual adds on the whole sequence, and each block ends with an all-reduce in forward and
  // begins with one of its input gradient in backward.
  int tp = 1;
  bool sequence_parallel = true;
  // Context parallelism (Megatron's --context-parallel-size): each micro-batch's sequence is
  // cut into 2 x cp chunks and cp ranks each take two of them (chunks i and 2 cp - 1 - i, so
  // causal attention's work is even); every op but attention runs on the rank's s / cp tokens,
  // and attention exchanges keys and values around the cp ranks (ring attention), the exchange
  // running beside the attention kernel. The cp ranks hold the same parameters: gradients are
  // reduced, and ZeRO shards, over dp x cp (gradient_ranks). With cp_comm_type a2a attention
  // runs instead on every token of heads / cp heads, between two blocking all-to-alls.
  int cp = 1;
  ContextComm cp_comm_type = ContextComm::p2p;
  // Whether attention runs between Ulysses' all-to-alls.
  bool ulysses() const { return cp > 1 && cp_comm_type == ContextComm::a2a; }
  int dp = 1;
  // Pipeline parallelism: the layers split over pp stages, evenly or one fewer on the stages
  // at the ends (layout/stage_split.hpp), the embedding on the first, the output head on the
  // last; activations and their gradients sent between stages.
  int pp = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  // Virtual stages per rank (Megatron's interleaved 1F1B): each stage holds vpp chunks of
  // about layers / (pp x vpp) layers, chunk c of stage p being virtual stage c x pp + p; the
  // bubble shrinks vpp-fold for vpp times the transfers.
  int vpp = 1;
  // Under interleaving, the micro-batches each chunk runs in a row before the next chunk takes
  // over (Megatron-Core's microbatch_group_size_per_vp_stage, the N of Llama 3's tuned
  // schedule): the warm-up runs (vpp - 1) x N passes beyond the 1F1B one's, so N sets how many
  // passes a stage holds at once; between pp and the micro-batches a step. 0: pp, Megatron's
  // default.
  int microbatch_group = 0;
  // 0: plain DDP; 1: optimizer states sharded; 2: gradients too; 3: parameters too (FSDP)
  int zero_stage = 0;
  Recompute recompute = Recompute::none;
  // Under selective recomputation, what of each layer is rerun (Megatron-Core's
  // recompute_modules).
  RecomputeModules recompute_modules;
  // Under full recomputation, only the first N layers of each chunk (stage, or virtual stage)
  // recomputed, the rest keeping their activations (Megatron's recompute_method block,
  // recompute_num_layers N); 0: every layer.
  int recompute_layers = 0;
  double bucket_bytes = 25e6;  // gradient bucket (PyTorch DDP default 25 MB)
  // Megatron's --tp-comm-overlap (Transformer Engine's userbuffers): each tensor-parallel
  // all-gather runs beside the GEMM that reads it and each reduce-scatter beside the GEMM that
  // writes it, pipelined in chunks; without sequence parallelism, Megatron-LM's
  // --async-tensor-model-parallel-allreduce (from September 2021): each input gradient's
  // all-reduce beside the weight gradient. Off, the compute stream waits for every one.
  bool tp_comm_overlap = false;
  // Data-parallel gradient reduction beside the backward (PyTorch DDP's buckets, Megatron's
  // --overlap-grad-reduce): each bucket reduced as soon as its gradients are complete. Off
  // (ZeRO 0 and 1 only), as Megatron-LM's local DDP and DeepSpeed's pipeline engine did: every
  // bucket reduced after the step's whole backward, exposed.
  bool overlap_grad_reduce = true;
  // Megatron's --overlap-param-gather (ZeRO 1 and 2 only): the all-gather of the parameters
  // the optimizer updated runs at the start of the next step, unit by unit, each unit's first
  // forward waiting for its own; off, it runs after the optimizer step, exposed.
  bool overlap_param_gather = false;
  // ZeRO 3 as PyTorch's fully_shard (FSDP2) runs it: each parameter sharded on its own, so each
  // gathered unit is copied out of the all-gather's buffer into its parameters and each unit's
  // gradients are copied, cast to the reduce dtype, into the reduce-scatter's, both on the
  // compute stream, which first waits for the unit before's reduce-scatter.
  bool fsdp2 = false;
  // ZeRO 3 keeping a BF16 copy of each weight shard beside the optimizer's FP32 master
  // (DeepSpeed's ZeRO-3, Megatron FSDP's model and main weight buffers); false: the FP32 shard
  // is the parameter, cast to BF16 only as it is gathered (PyTorch's FSDP, FSDP2).
  bool bf16_shards = false;
  // Expert parallelism (Megatron's --expert-model-parallel-size, a mixture of experts): each
  // group of ep consecutive replicas (dp x cp), at one tp rank, splits the experts among its
  // ranks, each expert split over the tp ranks as Megatron-Core's default expert tensor
  // parallelism does, and sends each token to its experts' ranks by all-to-all. An expert's
  // gradients are reduced, and its optimizer states sharded, over the dp x cp / ep replicas
  // that hold it.
  int ep = 1;
  // The experts' own tensor parallelism (Megatron-Core's expert_tensor_parallel_size): 0, the
  // layout's tp (Megatron-Core's default), or 1: each expert whole on its rank, an expert
  // group ep consecutive ranks of the stage (rank_grid.hpp), each rank dispatching its own
  // sequence shard and nothing gathered over tp (Megatron Bridge's DeepSeek-V3, Qwen3 and
  // Kimi-K2 recipes). Its experts' gradients are reduced over tp x dp x cp / ep ranks.
  int expert_tp = 0;
  // Megatron-Core's overlap_moe_expert_parallel_comm (from core 0.14, after DeepSeek-V3's
  // DualPipe): in the steady state each forward is merged with the backward after it, layer by
  // layer (forward layer j beside backward layer L - 1 - j), and each one's all-to-alls run on
  // a communication stream of their own beside the other's compute: the backward's combine
  // beside the forward's attention and router, the forward's dispatch and then the backward's
  // beside the experts' backward and forward, the forward's combine beside the backward's
  // attention. The warm-up takes one more forward (pipeline_schedule), so that each pair's
  // passes are independent; as the forward saves its layer j the backward frees its layer
  // L - 1 - j, so a pair holds a layer's activations more at once.
  bool ep_comm_overlap = false;
  // The experts' tensor parallelism in effect.
  int experts_split() const { return expert_tp > 0 ? expert_tp : tp; }
  // The ranks that hold each expert, over which its gradients are reduced and ZeRO shards.
  int expert_gradient_ranks() const {
    const long long split = static_cast<long long>(ep) * experts_split();
    return split > 0 ? static_cast<int>(static_cast<long long>(tp) * dp * cp / split) : 0;
  }
  // DeepSpeed's ZeRO-Offload (offload_optimizer: cpu, with ZeRO 1-3): each rank's shard of the
  // FP32 master weights, Adam moments and gradients lives in host memory, where CPU Adam
  // updates it; the reduced gradients go to the host over PCIe and the updated BF16 shard comes
  // back.
  bool offload_optimizer = false;
  // Transformer Engine's CPU offloading of activations (Megatron-Core's cpu_offloading with
  // cpu_offloading_num_layers N, NeMo's activation_offload_layers): the first N decoder layers'
  // saved tensors are copied to pinned host memory after their forward and back before their
  // backward, on copy streams beside the compute; 0: none.
  int activation_offload_layers = 0;

  // Whether anything of a rank lives in host memory: an offloaded optimizer or activations.
  bool offloads_to_host() const { return offload_optimizer || activation_offload_layers > 0; }
  // The ranks that hold the same parameters, over which gradients are reduced and ZeRO shards.
  int gradient_ranks() const { return dp * cp; }
  // The ranks a sequence's tokens between blocks are split over: tp under sequence
  // parallelism, else none (every tensor-parallel rank holds them whole).
  int sequence_shards() const { return sequence_parallel ? tp : 1; }
  int world_size() const { return tp * cp * dp * pp; }
  // The interleaved schedule's micro-batch group, Megatron's default pp where unset.
  int microbatch_group_size() const { return microbatch_group > 0 ? microbatch_group : pp; }
  bool operator==(const ParallelPlan&) const = default;
};

}  // namespace fleetsim
