// The training job as data: the model, the training recipe and the parallel layout.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "calibration/gpu_profile.hpp"
#include "workloads/layout/parallel_plan.hpp"
#include "workloads/layout/rules.hpp"

namespace fleetsim {

// The MLP of a decoder layer: SwiGLU (gate and up projections, then down; Llama), GeGLU (the
// same with GELU's tanh form for SiLU; Gemma) or a GELU MLP (up, GELU, down; GPT-2/3).
enum class Mlp { swiglu, geglu, gelu };
// Local attention: a query meets only the `window` keys up to and including its own (sliding:
// Mistral, Gemma 2 and 3, GPT-OSS), or only those of its own chunk, the sequence cut into
// chunks of `window` tokens (chunked: Llama 4).
enum class LocalAttention { sliding, chunked };
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
  // The size of an attention head, where it is not hidden / heads (Qwen3-32B: 128 at hidden
  // 5120 and 64 heads): the query and output projections are then heads x head_dim wide. 0:
  // hidden / heads.
  int head_size = 0;
  // Biases on the query, key and value projections only (Qwen2).
  bool qkv_bias = false;
  // An RMSNorm over each head's query and key before RoPE (Qwen3): a head_dim weight each; or,
  // qk_norm_weights false, an L2 norm with no weight (Llama 4's Llama4TextL2Norm, after RoPE).
  bool qk_norm = false;
  bool qk_norm_weights = true;
  Positions positions = Positions::rope;
  int max_positions = 0;  // rows of the learned position table
  // Mixture of experts (Mixtral): each layer's MLP is `experts` MLPs of size ffn, a router
  // sending each token to `experts_per_token` of them. 0: one dense MLP.
  int experts = 0;
  int experts_per_token = 0;
  // A shared expert (Qwen2-MoE, DeepSeek, Llama 4): an MLP of this inner size that every token
  // goes through beside its routed experts (0: none), with shared_expert_gate its output scaled
  // by a learned sigmoid gate per token (Qwen2-MoE's h x 1 shared_expert_gate).
  int shared_expert_ffn = 0;
  bool shared_expert_gate = false;
  // A per-expert bias on the router's scores for picking experts (DeepSeek-V3's
  // auxiliary-loss-free balancing, e_score_correction_bias): held with the weights, moved by
  // the balancing rule rather than by gradients.
  bool expert_score_bias = false;
  // Dense layers among a mixture of experts' layers: the first `first_dense_layers` (DeepSeek's
  // first_k_dense_replace), and after them all but every moe_layer_every-th, the last of each
  // group, counted from layer 0 (Llama 4's interleave_moe_layer_step and Qwen2-MoE's
  // decoder_sparse_step: 2 makes layers 1, 3, 5, ... the experts' layers; DeepSeek's and
  // Megatron-Core's moe_layer_freq take the first of each group instead, the same at 1). A dense
  // layer's MLP is dense_ffn wide (0: ffn), with no router, experts or shared expert.
  int first_dense_layers = 0;
  int moe_layer_every = 1;
  int dense_ffn = 0;
  // Local attention in some or all layers: the window in tokens (0: every layer attends to the
  // whole causal prefix), its kind, and which layers still attend fully: every
  // full_attention_every-th, the last of each group (layers N - 1, 2N - 1, ... counted from 0:
  // Gemma 2 and GPT-OSS 2, Gemma 3 6, Llama 4 4); 0: none (Mistral 7B).
  int attention_window = 0;
  LocalAttention local_attention = LocalAttention::sliding;
  int full_attention_every = 0;
  // A learned logit per head joining each row's softmax (GPT-OSS): a parameter per head.
  bool attention_sinks = false;
  // A norm after attention and after the MLP too, before each residual add (Gemma 2 and 3):
  // four norms a layer.
  bool post_norms = false;
  // The logits soft-capped, cap * tanh(logits / cap), before the loss (Gemma 2).
  bool logit_softcap = false;
  // Multi-head latent attention (DeepSeek-V2 and V3, arXiv:2405.04434 sec. 2.1): the queries
  // come up from a latent of q_lora_rank (normed; 0: projected from the hidden state directly),
  // the keys' and values' per-head parts up from one shared latent of kv_lora_rank (normed),
  // projected down together with a key of rope_head_dim that RoPE rotates and every head
  // shares. A head's query and key are head_dim (the part without RoPE) + rope_head_dim wide,
  // its value v_head_dim. kv_lora_rank 0: ordinary attention.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int rope_head_dim = 0;
  int v_head_dim = 0;
  // Multi-token prediction (DeepSeek-V3, arXiv:2412.19437 sec. 2.2; Megatron-Core's
  // mtp_num_layers): after the last layer, each of `mtp_layers` modules predicts one token
  // further from the hidden state before it joined with the next token's embedding (both
  // normed, concatenated and projected 2 hidden -> hidden), through a decoder layer of the last
  // layer's kind and a norm of its own, into the shared output head and a loss of its own.
  int mtp_layers = 0;

  int head_dim() const { return head_size > 0 ? head_size : hidden / heads; }
  bool latent_attention() const { return kv_lora_rank > 0; }
  // A head's query and key, and its value: head_dim, or under latent attention head_dim +
  // rope_head_dim and v_head_dim.
  int qk_head_dim() const { return head_dim() + (latent_attention() ? rope_head_dim : 0); }
  int value_head_dim() const { return latent_attention() ? v_head_dim : head_dim(); }
  // What attention reads per token: the queries (heads x qk_head_dim), the keys (kv_heads x
  // qk_head_dim) and the values (kv_heads x value_head_dim); latent attention's kv_heads are
  // its heads.
  double query_width() const { return static_cast<double>(heads) * qk_head_dim(); }
  // Latent attention's query up projection's input (its latent, or without one the hidden
  // state), and its key-value up projection's output: every head's key part without RoPE and
  // its value.
  double query_projection_input() const { return q_lora_rank > 0 ? q_lora_rank : hidden; }
  double latent_key_value_width() const {
    return static_cast<double>(heads) * (head_dim() + value_head_dim());
  }
  double key_width() const { return static_cast<double>(kv_heads) * qk_head_dim(); }
  double value_width() const { return static_cast<double>(kv_heads) * value_head_dim(); }
  // The MLP has a gate projection beside its up projection (SwiGLU, GeGLU).
  bool gated_mlp() const { return mlp != Mlp::gelu; }
  // Layer `layer` (from 0) attends within the window.
  bool attends_locally(int layer) const {
    return attention_window > 0 &&
           (full_attention_every == 0 || (layer + 1) % full_attention_every != 0);
  }
  // Some layer's window is shorter than the sequence, so that it attends to fewer keys than
  // the causal mask allows (a window as long as the sequence changes nothing).
  bool has_local_layers(int seq_len) const {
    return attention_window > 0 && attention_window < seq_len && full_attention_every != 1;
  }
  // Attention's output and the output projection's input: heads x value_head_dim.
  double attention_width() const { return static_cast<double>(heads) * value_head_dim(); }
  bool mixture_of_experts() const { return experts > 0; }
  // Layer `layer` (from 0) routes its tokens to experts.
  bool layer_has_experts(int layer) const {
    return mixture_of_experts() && layer >= first_dense_layers &&
           (layer + 1) % std::max(1, moe_layer_every) == 0;
  }
  // How many of the layers do.
  int expert_layers() const;
  // Some layers of a mixture of experts have a dense MLP instead.
  bool has_dense_layers() const { return mixture_of_experts() && expert_layers() < layers; }
  // A dense layer of this model as a model of its own: no experts, its MLP dense_ffn wide.
  ModelSpec dense_layer_model() const;
  // The decoder layer of a multi-token prediction module routes to experts: it is of the last
  // layer's kind (Megatron-Core builds it from the decoder's last layer spec).
  bool mtp_layer_has_experts() const { return layer_has_experts(layers - 1); }
  // Parameters: embeddings, per layer (QKV, output projection, the MLP's matrices or every
  // expert's and the router's, biases, two norms), final norm and the output head (unless
  // tied), and each multi-token prediction module (its layer, projection and three norms).
  double parameters() const;
  bool operator==(const ModelSpec&) const = default;
};

// The precision of a layer's projection GEMMs: BF16, or FP8 as Transformer Engine runs them
// (delayed scaling: E4M3 inputs and weights forward, E5M2 gradients backward, BF16 outputs;
// attention, norms, the embedding and the output head stay BF16; FP32 master weights and
// optimizer as with BF16).
// BF16 mixed precision; FP16 with dynamic loss scaling (the same tensor-core rates, and each
// step's check and unscale of the FP32 gradients before the optimizer, as Megatron-LM and
// DeepSpeed run it); FP8 as Transformer Engine runs it.
enum class Precision { bf16, fp16, fp8 };
inline const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    case Precision::fp8: return "fp8";
  }
  return "?";
}
// Adam with FP32 moments, or with moments quantised block-wise to 8 bits (bitsandbytes'
// Adam8bit; Dettmers et al., arXiv:2110.02861: blocks of 2048 values, one FP32 scale each), or
// Apex's DistributedFusedAdam as NeMo 1 runs it (optim.name distributed_fused_adam): FP32
// moments sharded over the replicas, the FP32 master weight of a BF16 parameter kept as the 16
// low bits the parameter lacks (store_param_remainders, which NeMo's megatron_base_model.py
// sets for a BF16 model and an FP32 optimizer; whole with FP8 or FP16 parameters), gradients
// in its contiguous buffer in the reduce dtype with each bucket's reduce-scattered shard kept
// beside it (apex/contrib/optimizers/distributed_fused_adam.py).
enum class Optimizer { adam, adam8bit, distributed_fused_adam };
// FlashAttention keeps Q, K, V, O and the log-sum-exp for backward and recomputes the scores;
// eager attention (two batched GEMMs around a softmax) keeps the s x s probabilities.
enum class Attention { flash, eager };
// How the loss's softmax cross-entropy runs over the logits (head_ops counts its passes):
// unfused: PyTorch ops on an FP32 copy, as Megatron-Core's vocab_parallel_cross_entropy does by
// default (and Hugging Face models' upcast, log-softmax and NLL loss about as much);
// fused: Megatron-Core's --cross-entropy-loss-fusion (the same steps in three fused kernels,
// NeMo 2's default); in_place: one kernel computing the loss and writing the gradient over the
// BF16 logits in forward (Transformer Engine's Triton cross-entropy, Liger's): no FP32 copy;
// log_softmax: PyTorch's eager F.cross_entropy on FP32 logits (torchtitan's loss, Hugging Face
// models' and autocast's upcast): the log-probabilities kept out of place, the NLL's gradient
// and the log-softmax's each a new FP32 tensor beside them; compiled: that loss under
// torch.compile, which Inductor fuses: the BF16 logits and each row's max and sum kept, the
// BF16 gradient written by one kernel in backward.
enum class CrossEntropy { unfused, fused, in_place, log_softmax, compiled };
// PyTorch's eager F.cross_entropy over a vocabulary split by tensor parallelism runs as
// loss_parallel's decomposition into separate ops (torch.distributed.tensor.parallel's loss.py;
// torchtitan enables it with tp).
inline bool runs_loss_parallel(CrossEntropy cross_entropy, int tp) {
  return cross_entropy == CrossEntropy::log_softmax && tp > 1;
}
// How a layer's elementwise ops run: fused, one kernel each for a norm, RoPE and the MLP's
// activation, as Megatron-Core and Transformer Engine run them and torch.compile fuses them;
// eager: each PyTorch op of a module written in Python its own kernel and pass over HBM, as
// torchtitan's RMSNorm, rotary embedding and SwiGLU run without torch.compile (their chains in
// transformer_ops.cpp). nn.LayerNorm and F.gelu are one kernel either way.
enum class Elementwise { fused, eager };

// How a mixture of experts' expert GEMMs launch: one after another, each expert's its own
// kernels (Megatron-Core's SequentialMLP, Hugging Face's loop over experts), or each of the
// MLP's GEMMs as one grouped GEMM over the rank's experts (Megatron-Core's --moe-grouped-gemm,
// Transformer Engine's GroupedLinear), the activation one kernel over all their tokens.
enum class ExpertGemm { sequential, grouped };

// How a mixture of experts' tokens reach their experts (Megatron-Core's
// moe_token_dispatcher_type; token_dispatcher.py). alltoall: each rank routes its own tokens
// (its sequence shard under tensor parallelism), sends each token's k copies to their experts'
// ranks by an all-to-all of the expert group, and all-gathers what arrives over tp, whose ranks
// split each expert; after the experts a reduce-scatter over tp and an all-to-all bring them
// back (every NeMo mixture-of-experts recipe). allgather: the block gathers its whole input
// over tp, as a dense MLP does, and permutes all of it (the router still scoring the rank's
// shard); with ep 1 only (Megatron-Core's default, which under expert parallelism gathers over
// tp x ep).
enum class TokenDispatcher { alltoall, allgather };

// Low-rank adapters (Hu et al., arXiv:2106.09685): the model's weights frozen, each targeted
// projection W (k in, n out) given a trainable pair A (k x rank), B (rank x n) beside it. Targets
// use Hugging Face PEFT's module names: q, k, v, o, gate, up, down; or Megatron-Core's fused
// projections, as NeMo adapts them: qkv (linear_qkv: one adapter for the three), gate_up
// (linear_fc1). The adapters run in BF16 whatever the precision of the frozen projections
// (NeMo builds them from Megatron-Core's own linear layers, outside Transformer Engine's FP8).
struct LoraSpec {
  int rank = 16;
  std::vector<std::string> targets = {"q", "k", "v", "o", "gate", "up", "down"};
  // Dropout on each adapter's input (PEFT's lora_dropout; NeMo's adapter dropout at position
  // pre): a mask and the dropped copy kept for backward. 0: none.
  double dropout = 0;
  // Under sequence parallelism, a row-parallel projection's adapter output goes to the
  // sequence shards by one all-to-all (NeMo's a2a_experimental), not an all-gather of the
  // whole output then a split.
  bool sequence_all_to_all = false;
  // QLoRA (Dettmers et al., arXiv:2305.14314): the frozen decoder-layer weights stored in 4-bit
  // NormalFloat with double-quantized block scales, dequantized to BF16 for each GEMM that
  // reads them; adapters, embedding, head and norms stay BF16.
  bool quantized_base = false;
  // DoRA (Liu et al., arXiv:2402.09353): each adapted projection's output scaled per output
  // feature by a trained magnitude over the row norm of W + s B A, that norm recomputed every
  // forward (detached: no gradient through it) as NeMo's DoRALinear (nemo/collections/llm/peft/
  // dora.py at 8cfedd7) and PEFT's DoraLinearLayer (src/peft/tuners/lora/dora.py at 5d602fd)
  // compute it, neither caching it while training. With a quantized base (QDoRA) the weight is
  // dequantized for the norm as well (PEFT's dequantize_module_weight).
  bool weight_decomposed = false;
  bool operator==(const LoraSpec&) const = default;
};

struct TrainingSpec {
  Precision precision = Precision::bf16;
  Optimizer optimizer = Optimizer::adam;
  int seq_len = 0;
  int global_batch = 0;  // sequences per optimizer step
  int micro_batch = 0;   // sequences per forward/backward on one rank
  // Tokens an optimizer step trains: global_batch x seq_len, in a double (the product of two
  // ints may pass an int's range).
  double tokens_per_step() const { return static_cast<double>(global_batch) * seq_len; }
  // Bytes per element of the gradient reduction (2: BF16, 4: FP32 as Llama 3 did), and of the
  // gradient buffer a replica accumulates whole (Megatron-Core's grad_reduce_in_fp32 sets both).
  int grad_reduce_bytes = 2;
  // Under FP8, the projection weights kept in FP8 as the model's own (Megatron-Core's fp8_param,
  // NeMo 2's FP8 recipes): no BF16 copy beside them, and the distributed optimizer gathers them
  // in FP8. Off: BF16 weights with FP8 copies cast once a step (Transformer Engine's default).
  bool fp8_params = false;
  // Under FP8, Transformer Engine's FP8 weight casts (and their transposes, where the GPU needs
  // them) made at a step's first micro-batch and kept for the others (is_first_microbatch).
  // Off: Megatron-Core's disable_parameter_transpose_cache, which passes no is_first_microbatch:
  // each micro-batch casts each weight again (a BF16 weight read, an FP8 one written), the cast
  // saved for the data gradient until the layer's backward; an FP8 primary weight's transpose
  // is made as its GEMM runs.
  bool fp8_weight_cache = true;
  // Megatron-Core's activation_func_fp8_input_store: the fused SwiGLU keeps its input (the
  // gate/up GEMM's output, 2 x ffn a token) for backward cast to FP8 (a plain cast to E4M3,
  // one byte an element) instead of BF16: one cast kernel in forward and one back in backward
  // (megatron/core/fusions/fused_bias_swiglu.py).
  bool activation_fp8_input = false;
  Attention attention = Attention::flash;
  // The fused kernel flash attention runs (fa2, cudnn, ...); none: the GPU profile's default.
  std::optional<AttentionKernel> attention_kernel;
  CrossEntropy cross_entropy = CrossEntropy::unfused;
  Elementwise elementwise = Elementwise::fused;
  std::optional<LoraSpec> lora;  // set: LoRA fine-tuning; unset: every weight trained
  // Dropout after attention and after the MLP (and on the attention probabilities): above 0,
  // each keeps a one-byte mask for backward. FlashAttention regenerates its own from the seed.
  double dropout = 0;
  // A mixture of experts' routing as it trains: the tokens the busiest expert-parallel rank's
  // experts receive, over the mean (1: balanced, as a load-balancing loss aims for), and the
  // capacity factor capping it (Megatron-Core's moe_expert_capacity_factor: tokens past an
  // expert's capacity of factor x its balanced share are dropped, not computed; 0: none).
  double expert_load_imbalance = 1;
  double expert_capacity_factor = 0;
  ExpertGemm expert_gemm = ExpertGemm::sequential;
  TokenDispatcher token_dispatcher = TokenDispatcher::alltoall;
  // Megatron-Core's moe_shared_expert_overlap: the shared expert runs on a stream of its own
  // beside the all-to-all dispatcher's exchanges, its first GEMM and activation while the
  // tokens are dispatched, its second GEMM while they are combined (shared_experts.py,
  // token_dispatcher.py at d98e8a64). Modelled: each GEMM alone beside its all-to-all, in
  // backward each gradient exchange beside that GEMM's weight gradient (moe_ops.hpp). Off: on
  // the layer's one stream, after the router and before the dispatch (Megatron-Core runs it
  // before the router: the same work in order).
  bool shared_expert_overlap = false;
  // The busiest expert-parallel rank's load: the imbalance, capped by the capacity factor.
  double busiest_expert_load() const {
    return expert_capacity_factor > 0 ? std::min(expert_load_imbalance, expert_capacity_factor)
                                      : expert_load_imbalance;
  }
  bool operator==(const TrainingSpec&) const = default;
};

// What the busiest rank of an expert-parallel group of `ep` computes and receives of its
// experts' tokens, over a balanced router's share: the load imbalance, capped by the capacity
// factor where there is one; 1 without expert parallelism, where every rank runs every expert
// on all of its tokens whatever their split.
double expert_rank_load(const TrainingSpec& training, int ep);

// The facts of the model and recipe that the job rules read (workloads/layout/rules.hpp); the
// caller adds the cluster where there is one.
JobSubject job_subject(const ModelSpec& model, const TrainingSpec& training);

// The rules a model must satisfy for its op graph to be built, with fields named by the model's
// keys ("heads", "experts_per_token"); and those of a training recipe on it, with fields from
// the scenario's top ("training.seq_len"). In the order they are checked.
std::vector<JobProblem> model_problems(const ModelSpec& model);
std::vector<JobProblem> recipe_problems(const ModelSpec& model, const TrainingSpec& training);

// Throws ModelError with the first problem of the job: the model's, the recipe's, then the
// layout's (job_problems, without a cluster).
void validate_job(const ModelSpec& model, const TrainingSpec& training, const ParallelPlan& plan);

}  // namespace fleetsim
