// The training job as data: the model, the training recipe and the parallel layout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fleetsim {

// The MLP of a decoder layer: SwiGLU (gate and up projections, then down; Llama) or a GELU MLP
// (up, GELU, down; GPT-2/3).
enum class Mlp { swiglu, gelu };
// RMSNorm has a weight per channel; LayerNorm a weight and a bias.
enum class Norm { rmsnorm, layernorm };
// Rotary position embeddings have no parameters; learned ones are a table of max_positions rows;
// ALiBi (BLOOM) is a bias the attention kernel adds to its scores, with neither.
enum class Positions { rope, learned, alibi };

// A decoder-only transformer: the Llama family (RMSNorm, RoPE, SwiGLU, grouped-query attention)
// by default, the GPT-2/3 family (LayerNorm, learned positions, GELU MLP, biases) by its keys.
struct ModelSpec {
  std::string name;
  std::string source;
  int layers = 0;
  int hidden = 0;
  int ffn = 0;  // MLP inner size
  int heads = 0;
  int kv_heads = 0;
  int vocab = 0;
  bool tied_embeddings = false;
  Mlp mlp = Mlp::swiglu;
  Norm norm = Norm::rmsnorm;
  bool linear_bias = false;  // the QKV, output and MLP projections have biases
  Positions positions = Positions::rope;
  int max_positions = 0;  // rows of the learned position table
  // Mixture of experts (Mixtral): each layer's MLP is `experts` MLPs of size ffn, a router
  // sending each token to `experts_per_token` of them. 0: one dense MLP.
  int experts = 0;
  int experts_per_token = 0;

  int head_dim() const { return hidden / heads; }
  bool mixture_of_experts() const { return experts > 0; }
  // Parameters: embeddings, per layer (QKV, output projection, the MLP's matrices or every
  // expert's and the router's, biases, two norms), final norm and the output head (unless tied).
  double parameters() const;
  bool operator==(const ModelSpec&) const = default;
};

// The precision of a layer's projection GEMMs: BF16, or FP8 as Transformer Engine runs them
// (delayed scaling: E4M3 inputs and weights forward, E5M2 gradients backward, BF16 outputs;
// attention, norms, the embedding and the output head stay BF16; FP32 master weights and
// optimizer as with BF16).
enum class Precision { bf16, fp8 };
inline const char* to_string(Precision precision) {
  return precision == Precision::fp8 ? "fp8" : "bf16";
}
// Adam with FP32 moments, or with moments quantised block-wise to 8 bits (bitsandbytes'
// Adam8bit; Dettmers et al., arXiv:2110.02861: blocks of 2048 values, one FP32 scale each).
enum class Optimizer { adam, adam8bit };
// none: keep every tensor a layer saves; selective: recompute the attention core (scores,
// softmax, dropout, PV) in backward instead of keeping the s x s probabilities (Korthikanti et
// al.; nothing to drop under FlashAttention, which keeps none); full: keep only each layer's
// input and rerun its forward before its backward.
enum class Recompute { none, selective, full };
inline const char* to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
  }
  return "?";
}
// FlashAttention keeps Q, K, V, O and the log-sum-exp for backward and recomputes the scores;
// eager attention (two batched GEMMs around a softmax) keeps the s x s probabilities.
enum class Attention { flash, eager };
// How the loss's softmax cross-entropy runs over the logits (head_ops counts its passes):
// unfused: PyTorch ops on an FP32 copy, as Megatron-Core's vocab_parallel_cross_entropy does by
// default (and Hugging Face models' upcast, log-softmax and NLL loss about as much);
// fused: Megatron-Core's --cross-entropy-loss-fusion (the same steps in three fused kernels,
// NeMo 2's default); in_place: one kernel computing the loss and writing the gradient over the
// BF16 logits in forward (Transformer Engine's Triton cross-entropy, Liger's): no FP32 copy.
enum class CrossEntropy { unfused, fused, in_place };

// Low-rank adapters (Hu et al., arXiv:2106.09685): the model's weights frozen, each targeted
// projection W (k in, n out) given a trainable pair A (k x rank), B (rank x n) beside it. Targets
// use Hugging Face PEFT's module names: q, k, v, o, gate, up, down.
struct LoraSpec {
  int rank = 16;
  std::vector<std::string> targets = {"q", "k", "v", "o", "gate", "up", "down"};
  // QLoRA (Dettmers et al., arXiv:2305.14314): the frozen decoder-layer weights stored in 4-bit
  // NormalFloat with double-quantized block scales, dequantized to BF16 for each GEMM that
  // reads them; adapters, embedding, head and norms stay BF16.
  bool quantized_base = false;
  bool operator==(const LoraSpec&) const = default;
};

struct TrainingSpec {
  Precision precision = Precision::bf16;
  Optimizer optimizer = Optimizer::adam;
  int seq_len = 0;
  int global_batch = 0;  // sequences per optimizer step
  int micro_batch = 0;   // sequences per forward/backward on one rank
  // Bytes per element of the gradient reduction (2: BF16, 4: FP32 as Llama 3 did).
  int grad_reduce_bytes = 2;
  Attention attention = Attention::flash;
  CrossEntropy cross_entropy = CrossEntropy::unfused;
  std::optional<LoraSpec> lora;  // set: LoRA fine-tuning; unset: every weight trained
  // Dropout after attention and after the MLP (and on the attention probabilities): above 0,
  // each keeps a one-byte mask for backward. FlashAttention regenerates its own from the seed.
  double dropout = 0;
  bool operator==(const TrainingSpec&) const = default;
};

// The order of micro-batches on each pipeline stage: GPipe runs every forward, then every
// backward; 1F1B (PipeDream-Flush, Megatron's default) runs pp - stage - 1 forwards, then
// alternates one forward and one backward, so a stage holds at most pp - stage micro-batches
// (interleaved over virtual stages when vpp > 1).
enum class PipelineSchedule { gpipe, one_f_one_b };
inline const char* to_string(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::gpipe ? "gpipe" : "1f1b";
}

struct ParallelPlan {
  // Megatron-style tensor parallelism with sequence parallelism: each layer's GEMMs and heads
  // split over tp ranks of consecutive GPUs, activations between them sharded by sequence, an
  // all-gather before and a reduce-scatter after each block. Ranks are tp x cp x dp x pp, tp
  // innermost (Megatron's order).
  int tp = 1;
  // Context parallelism (Megatron's --context-parallel-size): each micro-batch's sequence is
  // cut into 2 x cp chunks and cp ranks each take two of them (chunks i and 2 cp - 1 - i, so
  // causal attention's work is even); every op but attention runs on the rank's s / cp tokens,
  // and attention exchanges keys and values around the cp ranks (ring attention), the exchange
  // running beside the attention kernel. The cp ranks hold the same parameters: gradients are
  // reduced, and ZeRO shards, over dp x cp (gradient_ranks).
  int cp = 1;
  int dp = 1;
  // Pipeline parallelism: the layers split over pp stages, evenly or one fewer on the stages
  // at the ends (virtual_stage_layers), the embedding on the first, the output head on the
  // last; activations and their gradients sent between stages.
  int pp = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  // Virtual stages per rank (Megatron's interleaved 1F1B): each stage holds vpp chunks of
  // about layers / (pp x vpp) layers, chunk c of stage p being virtual stage c x pp + p; the bubble
  // shrinks vpp-fold for vpp times the transfers.
  int vpp = 1;
  // 0: plain DDP; 1: optimizer states sharded; 2: gradients too; 3: parameters too (FSDP)
  int zero_stage = 0;
  Recompute recompute = Recompute::none;
  double bucket_bytes = 25e6;  // gradient bucket (PyTorch DDP default 25 MB)
  // Megatron's --tp-comm-overlap (Transformer Engine's userbuffers): each tensor-parallel
  // all-gather runs beside the GEMM that reads it and each reduce-scatter beside the GEMM that
  // writes it, pipelined in chunks; off, the compute stream waits for every one.
  bool tp_comm_overlap = false;
  // Megatron's --overlap-param-gather (ZeRO 1 and 2 only): the all-gather of the parameters
  // the optimizer updated runs at the start of the next step, unit by unit, each unit's first
  // forward waiting for its own; off, it runs after the optimizer step, exposed.
  bool overlap_param_gather = false;
  // Expert parallelism (Megatron's --expert-model-parallel-size, a mixture of experts, tp 1):
  // each group of ep consecutive data-parallel replicas splits the experts among its ranks and
  // sends each token to its experts' ranks by all-to-all. An expert's gradients are reduced,
  // and its optimizer states sharded, over the dp / ep replicas that hold it.
  int ep = 1;
  // DeepSpeed's ZeRO-Offload (offload_optimizer: cpu, with ZeRO 1-3): each rank's shard of the
  // FP32 master weights, Adam moments and gradients lives in host memory, where CPU Adam
  // updates it; the reduced gradients go to the host over PCIe and the updated BF16 shard comes
  // back.
  bool offload_optimizer = false;

  // The ranks that hold the same parameters, over which gradients are reduced and ZeRO shards.
  int gradient_ranks() const { return dp * cp; }
  int world_size() const { return tp * cp * dp * pp; }
  bool operator==(const ParallelPlan&) const = default;
};

// What keeps the plan's expert parallelism from running, with a hint, or nothing (ep 1 always
// runs): the model must be a mixture of experts whose experts and dp ep divides, with tp 1,
// ZeRO 0 or 1, no optimizer offload and no overlap_param_gather (what it is modelled with).
struct PlanProblem {
  std::string problem;
  std::string hint;
};
std::optional<PlanProblem> expert_parallelism_problem(const ModelSpec& model,
                                                      const ParallelPlan& plan);
// What keeps the plan's context parallelism from running, or nothing (cp 1 always runs): the
// sequence must split into 2 x cp chunks that tp splits again, attention must be
// FlashAttention's (ring attention is built on it), and expert parallelism is not modelled
// with it.
std::optional<PlanProblem> context_parallelism_problem(const TrainingSpec& training,
                                                       const ParallelPlan& plan);

// Throws ModelError when the job is inconsistent: a model without layers or with heads that do
// not divide, a batch that does not split into micro-batches over the data-parallel ranks.
void validate_job(const ModelSpec& model, const TrainingSpec& training, const ParallelPlan& plan);

}  // namespace fleetsim
