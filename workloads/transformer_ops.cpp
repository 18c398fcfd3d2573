#include "workloads/transformer_ops.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>

#include "sim/engine/errors.hpp"
#include "workloads/latent_attention_ops.hpp"
#include "workloads/lora_ops.hpp"
#include "workloads/moe_ops.hpp"
#include "workloads/precision.hpp"

namespace fleetsim {
namespace {

constexpr double kBf16 = kBf16Bytes;  // activations and weights
constexpr double kFp32 = kFp32Bytes;
constexpr double kFp8 = kFp8Bytes;

Kernel memory_kernel(double bytes) {
  Kernel kernel;
  kernel.kind = KernelKind::memory_bound;
  kernel.bytes = bytes;
  return kernel;
}

// Eager PyTorch runs each op of a module written in Python as its own kernel: one memory-bound
// kernel per entry of `bytes_per_element` (read and written, per element of `elements`).
void eager_ops(const std::string& name, std::span<const double> bytes_per_element, double elements,
               std::vector<Op>& ops) {
  int i = 0;
  for (const double bytes : bytes_per_element) {
    ops.push_back(memory_op(name + "." + std::to_string(i++), bytes * elements));
  }
}

// torchtitan's RMSNorm without torch.compile (torchtitan/models/norms.py: x.float(), pow(2),
// mean, x * rsqrt(. + eps), type_as(x), * weight): per element of a BF16 input, forward 6, 8,
// 4, 8, 6 and 4 bytes (36, where one fused kernel reads 2 and writes 2); its autograd backward
// 12 kernels: g * w 4, g * out 6 and its row sum 2 (the weight's gradient), to FP32 6, g *
// rstd 8, g * x 12 and its row sum 4, mean's backward 4, pow's 2x 8 and product 12, the two
// input gradients added 12, back to BF16 6 (84, where a fused kernel moves 8). The per-row
// rsqrt and its backward move no element-sized tensor.
constexpr std::array<double, 6> kEagerRmsNormForward = {6, 8, 4, 8, 6, 4};
constexpr std::array<double, 12> kEagerRmsNormBackward = {4, 6, 2, 6, 8, 12, 4, 4, 8, 12, 12, 6};
// Its apply_rotary_emb (torchtitan/models/llama/model.py) on Q and K: to FP32, the complex
// product with freqs_cis, back to BF16 (6, 8, 6 bytes an element); backward the same three.
constexpr std::array<double, 3> kEagerRopeForward = {6, 8, 6};
constexpr std::array<double, 3> kEagerRopeBackward = {6, 8, 6};
// Its SwiGLU, F.silu(w1(x)) * w3(x): silu 4, the product 6 bytes an element of the MLP's
// width; backward the product's two gradients 6 each, silu's 6.
constexpr std::array<double, 2> kEagerSwigluForward = {4, 6};
constexpr std::array<double, 3> kEagerSwigluBackward = {6, 6, 6};

// What of a layer of `model` selective recomputation reruns (RecomputeModules): its attention
// core, its MLP block (a dense one as mlp, a mixture of experts' as moe), the experts'
// activation, the norm before the experts' block, and under latent attention the norm before
// attention (its input_layernorm a module of its own, where Transformer Engine fuses an
// ordinary layer's into the QKV projection); nothing under other policies.
struct LayerReruns {
  bool core = false;
  bool mlp = false;
  bool activation = false;
  bool norm = false;
  bool attention_norm = false;
};
LayerReruns layer_reruns(const ModelSpec& model, Recompute recompute,
                         const RecomputeModules& modules) {
  if (recompute != Recompute::selective) return {};
  const bool moe = model.mixture_of_experts();
  return {modules.core_attn, moe ? modules.moe : modules.mlp, moe && modules.moe_act,
          moe && modules.layernorm, model.latent_attention() && modules.layernorm};
}

}  // namespace

double local_attention_pairs(const ModelSpec& model, double seq_len) {
  const double w = model.attention_window;
  if (w <= 0 || w >= seq_len) return 0.5 * seq_len * seq_len;
  if (model.local_attention == LocalAttention::sliding)
    return seq_len * mean_causal_keys(seq_len, w);
  const double rest = seq_len - w * std::floor(seq_len / w);
  return 0.5 * (w * w * std::floor(seq_len / w) + rest * rest);
}

Op memory_op(std::string name, double bytes) {
  return Op{std::move(name), memory_kernel(bytes), 0, std::nullopt};
}

Op gemm_op(std::string name, double m, double n, double k) {
  Kernel kernel = gemm_kernel(m, n, k, kBf16);
  return Op{std::move(name), kernel, kernel.flops, std::nullopt};
}

Op gemm_with_backward(const std::string& name, double m, double n, double k,
                      std::vector<Op>& backward, bool frozen) {
  if (!frozen) backward.push_back(gemm_op(name + ".wgrad", k, n, m));
  backward.push_back(gemm_op(name + ".dgrad", m, k, n));
  return gemm_op(name, m, n, k);
}

Op tp_op(std::string name, CollectiveOp op, double size_bytes, Userbuffers userbuffers) {
  return Op{std::move(name), Kernel{}, 0,
            LayerCollective{op, size_bytes, GroupKind::tensor, userbuffers}};
}

Op blocking_tp_op(std::string name, CollectiveOp op, double size_bytes) {
  Op collective = tp_op(std::move(name), op, size_bytes);
  collective.collective->blocking = true;
  return collective;
}

double per_op_outputs_kept_only(const ModelSpec& model, int tp, bool sequence_parallel) {
  const double h = model.hidden;
  const double reduced = tp == 1 ? 0.0 : 2 * kBf16 * h / (sequence_parallel ? tp : 1);
  return (model.gated_mlp() ? kBf16 * h : 0.0) + reduced;
}

double decoder_layer_saved_bytes_per_token(const ModelSpec& model, const TrainingSpec& training,
                                           Recompute recompute, int tp, bool sequence_parallel,
                                           const RecomputeModules& modules, int ep,
                                           bool tp_comm_overlap, bool ulysses, int expert_tp) {
  const double h = model.hidden;
  const double f = model.ffn;
  const double a = model.heads;
  const double s = training.seq_len;
  const bool dropout = training.dropout > 0;
  // Under FP8 each projection keeps its input's FP8 cast for the weight gradient, not BF16. A
  // frozen projection (LoRA's base) has no weight gradient and keeps nothing: its adapters keep
  // what they read (lora_saved_bytes_per_token).
  const bool fp8 = training.precision == Precision::fp8;
  const bool frozen = training.lora.has_value();
  const double gemm_input = frozen ? 0.0 : fp8 ? kFp8 : kBf16;
  // The residual stream into each norm, and with post-norms each block's output into its own
  // (its backward reads its input).
  const double norm_inputs = (model.post_norms ? 4 : 2) * kBf16 * h;
  const bool moe = model.mixture_of_experts();
  // A module selective recomputation reruns keeps its input.
  const auto [core_rerun, mlp_rerun, activation_rerun, norm_rerun, attention_norm_rerun] =
      layer_reruns(model, recompute, modules);
  // Normed inputs of the QKV and first MLP GEMMs. A rerun dense MLP keeps the residual stream
  // (its norm is fused into its first GEMM), not the normed copy. A mixture of experts' block
  // input feeds the router, which stays BF16; the block rerun keeps it as its input, unless
  // its norm discards it too.
  const double mlp_input = !moe ? (mlp_rerun ? 0.0 : gemm_input) : (norm_rerun ? 0.0 : kBf16);
  // Latent attention's two latents, sharded by sequence as the block input is: each norm's input
  // and its normed output, its up projection's input (Transformer Engine's LayerNormLinear
  // keeps the shard and gathers it again for the weight gradient).
  const double latents = (kBf16 + gemm_input) * (model.q_lora_rank + model.kv_lora_rank);
  // Its two down projections read the normed input: one BF16 tensor, under FP8 each its own
  // cast; a rerun norm discards it.
  const double attention_input = !model.latent_attention() ? gemm_input
                                 : attention_norm_rerun    ? 0.0
                                 : fp8                     ? 2 * kFp8
                                                           : gemm_input;
  const double gemm_inputs = (attention_input + mlp_input) * h + latents;
  const double o = model.attention_width();  // attention's output
  // Both attention backwards need Q, K, V; QK-norm's backward its input, the Q and K before it.
  const double qkv = kBf16 * (model.query_width() + model.key_width() + model.value_width()) +
                     (model.qk_norm ? kBf16 * (model.query_width() + model.key_width()) : 0.0);
  // O, which attention's backward reads in BF16 and which is o_proj's input (under FP8 also
  // kept as o_proj's FP8 cast); with the core rerun only o_proj keeps its input. Under Ulysses
  // o_proj's BF16 input is another tensor than attention's output (Transformer Engine saves
  // the output before its all-to-all).
  const double separate_input = ulysses && gemm_input == kBf16 ? kBf16 * o : 0.0;
  const double output =
      core_rerun ? gemm_input * o : kBf16 * o + gemm_input * (fp8 ? o : 0.0) + separate_input;
  // FlashAttention: an FP32 log-sum-exp per head. Eager: the BF16 probabilities (a x s per
  // token) for the softmax backward, and with dropout their mask and the dropped copy for PV.
  // A rerun core keeps neither.
  const double scores = core_rerun ? 0.0
                        : training.attention == Attention::flash
                            ? kFp32 * a
                            : (kBf16 + (dropout ? kMaskBytes + kBf16 : 0)) * a * s;
  if (recompute == Recompute::per_op) {
    // torchtitan's per-op policy (per_op_recomputation below) keeps the layer's input, Q, V,
    // attention's output and what attention saves, the first MLP matmul's output and, of a
    // SwiGLU MLP, down's (a row-parallel matmul's output, whole before its reduce-scatter),
    // and under tensor parallelism both reduce-scatters' outputs (its _save_list).
    return (kBf16 * (h + model.query_width() + model.value_width() + o) + scores) / tp +
           kBf16 * f / tp + per_op_outputs_kept_only(model, tp, sequence_parallel);
  }
  const double hidden_masks = dropout ? 2 * kMaskBytes * h : 0;  // after attention, after MLP
  // SwiGLU: gate/up output and its product (down's input); GELU: its input and output (down's
  // input). Down's input is its FP8 cast under FP8; an expert's activation rerun discards it.
  const double down_input = activation_rerun ? 0.0 : gemm_input * f;
  // The gated activation's input, in FP8 under activation_fp8_input.
  const double glu_input = training.activation_fp8_input ? kFp8 : kBf16;
  const double one_mlp =
      model.gated_mlp() ? glu_input * 2 * f + down_input : kBf16 * f + down_input;
  // A mixture of experts keeps each of a token's k experts' tensors and the router's FP32
  // scores (split over tp), and the token's k permuted copies (the experts' input), whole on
  // every tp rank (the rank's shard's where each expert is whole), and its k expert outputs (the
  // router weights' gradient reads them): whole on every tp rank under the allgather dispatcher,
  // the rank's sequence shard's under all-to-all (combined back before the unpermute), as the
  // shared expert's gated output is. (Under FP8 the permuted copies are kept as the experts' FP8
  // inputs.) The busiest expert-parallel rank, as every rank is replayed, keeps `load` times its
  // share of the experts' tensors and inputs; the outputs combined back are its own tokens'.
  const double k = model.experts_per_token;
  const double received = k * expert_rank_load(training, ep);
  // A shared expert keeps a dense MLP's tensors of its own size (and under FP8 its input's
  // cast), split over tp; under a gate its output, a partial sum whole on every tp rank.
  // Overlapped with the all-to-alls on a sharded block, its first GEMM keeps the input it
  // gathered itself, whole on every tp rank (under FP8 its cast), not the shard's cast.
  const double fs = model.shared_expert_ffn;
  const bool dispatches_shard =
      training.token_dispatcher == TokenDispatcher::alltoall && sequence_parallel;
  const bool shared_keeps_gathered =
      moe && shared_expert_overlapped(model, training, ep) && dispatches_shard && tp > 1;
  const double shared = moe && fs > 0
                            ? (model.gated_mlp() ? glu_input * 2 * fs : kBf16 * fs) +
                                  gemm_input * fs + (fp8 && !shared_keeps_gathered ? kFp8 * h : 0.0)
                            : 0.0;
  const double combined_split = dispatches_shard ? tp : 1;
  // The experts' input: whole on every tp rank where they split the experts, the rank's own
  // shard's copies where each expert is whole (expert_tp 1).
  const double received_split = dispatches_shard && expert_tp == 1 ? tp : 1;
  const double gate_output =
      moe && fs > 0 && model.shared_expert_gate ? kBf16 * h / combined_split : 0.0;
  const double mlp = mlp_rerun ? 0.0
                     : moe     ? received * one_mlp + kFp32 * model.experts + shared
                               : one_mlp;
  const double replicated =
      moe && !mlp_rerun ? (received * gemm_input / received_split + k * kBf16 / combined_split +
                           (shared_keeps_gathered ? gemm_input : 0.0)) *
                                  h +
                              gate_output
                        : 0.0;
  // Without sequence parallelism the tensors between the blocks' GEMMs are whole on every rank.
  const double between_blocks = norm_inputs + gemm_inputs + hidden_masks;
  const double sharded_between = sequence_parallel ? between_blocks / tp : between_blocks;
  return sharded_between + (qkv + output + scores + mlp) / tp + replicated +
         lora_saved_bytes_per_token(model, training, tp, sequence_parallel, core_rerun, mlp_rerun,
                                    tp_comm_overlap && sequence_parallel && tp > 1);
}

namespace {

// An op run again before its layer's backward: named as such, and not model FLOPs.
Op rerun(const Op& op) {
  Op again = op;
  again.name = "recompute." + op.name;
  again.model_flops = 0;
  return again;
}

// torchtitan's per-op checkpointing (activation_checkpoint.mode "selective" with
// selective_ac_option "op": _custom_policy in parallelize_llama.py): a layer's forward saves
// the outputs of its matmuls but every second one, counted in forward order with the
// projections apart (Q, K, V, O, then gate, up, down, or up, down), and attention's; the rest
// (those matmuls, norms, RoPE, activations, casts, residual adds and the tensor-parallel
// all-gathers; the reduce-scatters' outputs are saved too) runs again before the layer's
// backward. So K, O and up (SwiGLU) or down (GELU) rerun; Q, V and attention do not; the
// rerun gathers serve the weight gradients, which gather nothing again. Not model FLOPs.
std::vector<Op> per_op_recomputation(const ModelSpec& model, const std::vector<Op>& forward,
                                     double split) {
  std::vector<Op> again;
  for (const Op& op : forward) {
    if (op.collective) {
      // Ring attention's exchanges (attention is saved) and the reductions stay: their outputs
      // are saved.
      if (op.collective->group != GroupKind::tensor ||
          op.collective->op != CollectiveOp::all_gather) {
        continue;
      }
      again.push_back(rerun(op));
    } else if (op.kernel.kind == KernelKind::attention) {
      continue;
    } else if (op.kernel.kind == KernelKind::gemm) {
      const double columns = op.name == "qkv"       ? model.key_width() / split
                             : op.name == "o_proj"  ? op.kernel.n
                             : op.name == "gate_up" ? model.ffn / split
                             : op.name == "down" && model.mlp == Mlp::gelu ? op.kernel.n
                                                                           : 0.0;
      if (columns == 0) continue;
      Op gemm = rerun(op);
      gemm.kernel = op.kernel.fp8 ? fp8_gemm_kernel(op.kernel.m, columns, op.kernel.k)
                                  : gemm_kernel(op.kernel.m, columns, op.kernel.k, kBf16);
      again.push_back(std::move(gemm));
    } else {
      again.push_back(rerun(op));
    }
  }
  return again;
}

// FP8 GEMMs as Transformer Engine runs a projection: its input (m x k) cast to FP8 with the
// transpose the weight gradient reads (read BF16, write two FP8 copies), the forward GEMM; in
// backward the output gradient (m x n) cast the same way, then the data- and weight-gradient
// GEMMs. The FP8 weights (and their transposes) are cast once per step and kept
// (is_first_microbatch): no per-micro-batch cost here. A frozen weight (LoRA's base) has no
// weight gradient: each cast writes one FP8 copy, no transpose.
void fp8_projection(const std::string& name, double m, double n, double k, bool frozen,
                    std::vector<Op>& fwd, std::vector<Op>& backward) {
  const double cast_bytes_per_element = kBf16 + (frozen ? 1 : 2) * kFp8;
  const auto fp8_gemm = [](std::string op, double rows, double columns, double depth) {
    const Kernel kernel = fp8_gemm_kernel(rows, columns, depth);
    return Op{std::move(op), kernel, kernel.flops, std::nullopt};
  };
  fwd.push_back(memory_op(name + ".cast", cast_bytes_per_element * m * k));
  fwd.push_back(fp8_gemm(name, m, n, k));
  // Collected in forward order, reversed at the end: the cast runs first in backward, then the
  // data and the weight gradient.
  if (!frozen) backward.push_back(fp8_gemm(name + ".wgrad", k, n, m));
  backward.push_back(fp8_gemm(name + ".dgrad", m, k, n));
  backward.push_back(memory_op(name + ".grad_cast", cast_bytes_per_element * m * n));
}

// Under FP8 with sequence parallelism Transformer Engine casts a block's sequence shard to FP8
// and all-gathers the FP8 tensor (a norm's output, or in backward an output gradient; the
// re-gather for a weight gradient gathers the saved FP8 shard): each tensor-parallel all-gather
// followed by a cast and a GEMM becomes the cast, on the shard, then the all-gather of half the
// bytes beside the GEMM. A gather whose BF16 output a LoRA adapter reads too (`bf16_gathers`)
// stays BF16, cast after it (Transformer Engine returns the gathered norm output).
void cast_before_gathers(std::vector<Op>& ops, int tp,
                         const std::vector<std::string>& bf16_gathers = {}) {
  for (std::size_t i = 0; i + 2 < ops.size(); ++i) {
    Op& gather = ops[i];
    // The weight's own cast (fp8_weight_cache off) may come first: it stays before the gather.
    std::size_t c = i + 1;
    while (c + 1 < ops.size() && ops[c].name.ends_with(".weight_cast")) ++c;
    if (c + 1 >= ops.size()) continue;
    Op& cast = ops[c];
    const bool tensor_gather = gather.collective && gather.collective->group == GroupKind::tensor &&
                               gather.collective->op == CollectiveOp::all_gather;
    const bool casts = !cast.collective && cast.kernel.kind == KernelKind::memory_bound &&
                       cast.name.ends_with("cast");
    const bool gemm = !ops[c + 1].collective && ops[c + 1].kernel.fp8;
    if (!tensor_gather || !casts || !gemm) continue;
    if (std::find(bf16_gathers.begin(), bf16_gathers.end(), gather.name) != bf16_gathers.end()) {
      continue;
    }
    // A re-gather brings back the saved FP8 input, and the cast after it is of another tensor
    // (the output gradient); otherwise the cast is of what is gathered: now of the shard.
    if (!gather.name.ends_with(".regather")) cast.kernel.bytes /= tp;
    gather.collective->size_bytes *= kFp8 / kBf16;
    // The gather moves to just before the GEMM.
    std::rotate(ops.begin() + static_cast<std::ptrdiff_t>(i),
                ops.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                ops.begin() + static_cast<std::ptrdiff_t>(c) + 1);
  }
}

}  // namespace

void projection_ops(const std::string& name, double m, double n, double k,
                    const TrainingSpec& training, bool frozen, std::vector<Op>& fwd,
                    std::vector<Op>& backward) {
  if (training.precision == Precision::fp8) {
    // Without the weight cache each micro-batch casts a BF16 weight to FP8 again (its
    // transpose, on GPUs that need one, is not costed: limitations.md).
    if (!training.fp8_weight_cache && !training.fp8_params) {
      fwd.push_back(memory_op(name + ".weight_cast", (kBf16 + kFp8) * n * k));
    }
    fp8_projection(name, m, n, k, frozen, fwd, backward);
    return;
  }
  const bool quantized = training.lora && training.lora->quantized_base;
  const double dequantize_bytes = (kNf4BytesPerParameter + kBf16) * n * k;
  if (quantized) fwd.push_back(memory_op(name + ".dequantize", dequantize_bytes));
  fwd.push_back(gemm_with_backward(name, m, n, k, backward, frozen));
  // Pushed after the data gradient: it runs before it once backward is reversed.
  if (quantized) backward.push_back(memory_op(name + ".dequantize.bwd", dequantize_bytes));
}

// Transformer Engine's userbuffers defaults: num_sm 16 for pipeline and bulk (ring_exchange's
// one SM only signals the copies the copy engines make: use_ce); num_splits 4 for pipeline, tp
// for ring_exchange.
constexpr int kUserbuffersSms = 16;
constexpr int kPipelineChunks = 4;

std::optional<UserbuffersOverlap> userbuffers_collective(const std::vector<Op>& ops,
                                                         std::size_t i) {
  if (i >= ops.size() || !ops[i].collective || ops[i].collective->group != GroupKind::tensor ||
      !overlapped_kernel(ops, i)) {
    return std::nullopt;
  }
  switch (ops[i].collective->userbuffers) {
    case Userbuffers::ring_exchange: return UserbuffersOverlap{0, 0.0};
    case Userbuffers::pipeline: return UserbuffersOverlap{kUserbuffersSms, 1.0 / kPipelineChunks};
    case Userbuffers::bulk: return UserbuffersOverlap{kUserbuffersSms, 0.0};
    case Userbuffers::none: break;
  }
  return std::nullopt;
}

GemmLaunch userbuffers_gemm(const std::vector<Op>& ops, std::size_t i, int tp) {
  GemmLaunch launch{ops.at(i), 1};
  if (ops[i].collective || ops[i].kernel.kind != KernelKind::gemm) return launch;
  // The collective beside it: a gather just before, or a reduce-scatter just after. The GEMM
  // leaves its SMs free (set_sm_margin; a ring exchange holds none).
  std::optional<Userbuffers> method;
  int margin = 0;
  for (const std::size_t j : {i - 1, i + 1}) {
    const std::optional<UserbuffersOverlap> overlap =
        j < ops.size() ? userbuffers_collective(ops, j) : std::nullopt;
    if (!overlap || overlapped_kernel(ops, j) != i) continue;
    if (method) throw ModelError(ops[i].name + ": two userbuffers collectives beside one GEMM");
    method = ops[j].collective->userbuffers;
    margin = overlap->sms;
  }
  if (!method) return launch;
  const int chunks = *method == Userbuffers::ring_exchange ? std::max(1, tp)
                     : *method == Userbuffers::pipeline    ? kPipelineChunks
                                                           : 1;
  launch.chunks = chunks;
  launch.part.kernel = gemm_rows(ops[i].kernel, ops[i].kernel.m / chunks);
  launch.part.kernel.sm_margin = margin;
  launch.part.model_flops = ops[i].model_flops / chunks;
  return launch;
}

std::optional<std::size_t> overlapped_kernel(const std::vector<Op>& ops, std::size_t i) {
  if (i >= ops.size() || !ops[i].collective || ops[i].collective->blocking) return std::nullopt;
  const KernelKind beside =
      ops[i].collective->group == GroupKind::context ? KernelKind::attention : KernelKind::gemm;
  const auto is_beside = [&](std::size_t j) {
    return !ops[j].collective && ops[j].kernel.kind == beside;
  };
  switch (ops[i].collective->beside) {
    case Beside::next_gemm:
      return i + 2 < ops.size() && is_beside(i + 1) ? std::optional{i + 1} : std::nullopt;
    case Beside::previous_gemm:
      return i > 0 && is_beside(i - 1) ? std::optional{i - 1} : std::nullopt;
    case Beside::by_op: break;
  }
  const CollectiveOp op = ops[i].collective->op;
  // A reduce-scatter runs beside the GEMM before it: in forward the one that writes what it
  // reduces (pipelined), in backward the weight gradient after the data gradient it reduces;
  // so does an input gradient's all-reduce (a forward all-reduce waits for its GEMM's output).
  // A frozen weight (LoRA's base) has no weight gradient: the reduction then follows the data
  // gradient it reduces, and waits for it.
  const bool reduces =
      op == CollectiveOp::reduce_scatter ||
      (op == CollectiveOp::all_reduce && ops[i].collective->beside_weight_gradient);
  if (reduces && i > 0 && is_beside(i - 1) && !ops[i - 1].name.ends_with(".dgrad")) return i - 1;
  if (op == CollectiveOp::all_gather && i + 2 < ops.size() && is_beside(i + 1)) return i + 1;
  return std::nullopt;
}

std::optional<std::size_t> kernel_beside(const std::vector<Op>& ops, std::size_t i,
                                         bool tp_comm_overlap) {
  if (i >= ops.size() || !ops[i].collective) return std::nullopt;
  const LayerCollective& collective = *ops[i].collective;
  const bool overlaps = collective.group == GroupKind::context ||
                        collective.beside != Beside::by_op || tp_comm_overlap;
  return overlaps ? overlapped_kernel(ops, i) : std::nullopt;
}

LayerOps decoder_layer_ops(const ModelSpec& model, const TrainingSpec& training, int tp,
                           Recompute recompute, int ep, int cp, bool sequence_parallel,
                           const RecomputeModules& modules, bool attends_locally,
                           bool tp_comm_overlap, ContextComm cp_comm, int expert_tp) {
  const int micro_batch = training.micro_batch;
  const int seq_len = training.seq_len;
  const double t = static_cast<double>(micro_batch) * seq_len / cp;  // the rank's tokens
  const double mask = training.dropout > 0 ? kMaskBytes : 0;         // per element dropped
  const double h = model.hidden;
  const double f = model.ffn;
  // Attention reads the queries, keys and values and writes its output, o_proj's input.
  const double q = model.query_width();
  const double k = model.key_width();
  const double v = model.value_width();
  const double o = model.attention_width();
  const double split = tp;  // GEMM columns or rows, heads
  const bool parallel = tp > 1;
  const bool sharded = parallel && sequence_parallel;   // the tokens between blocks split by tp
  const double local_tokens = sharded ? t / split : t;  // norms, residuals, dropouts
  const double activation = kBf16 * t * h;              // the T x hidden tensor a block gathers
  const bool moe = model.mixture_of_experts();
  const auto [core_rerun, mlp_rerun, activation_rerun, norm_rerun, attention_norm_rerun] =
      layer_reruns(model, recompute, modules);
  LayerOps ops;
  std::vector<Op> backward;  // collected in forward order, reversed at the end

  auto& fwd = ops.forward;
  // A block (attention, MLP) starts with a norm on the rank's tokens (its sequence shard under
  // sequence parallelism) and, with sequence parallelism, an all-gather of the sequence; it
  // ends with a reduce-scatter back to the shard and the residual add. A column-split GEMM's
  // weight gradient needs its gathered input again: the re-gather runs before it in backward.
  // A block of Transformer Engine's projections (`projections`) overlaps them by userbuffers; a
  // mixture of experts' MLP block (its router a GEMM of Megatron's own) by NCCL. Without
  // sequence parallelism the block's input is whole: its input gradient is all-reduced in
  // backward (after the first GEMMs' weight gradients, beside which it may run), and its output
  // all-reduced in forward.
  const bool eager = training.elementwise == Elementwise::eager;
  std::size_t norm_end = 0;  // where the last block's norm ops end in fwd
  const auto norm_of = [&](const std::string& name, double elements) {
    if (eager && model.norm == Norm::rmsnorm) {
      eager_ops(name, kEagerRmsNormForward, elements, fwd);
      eager_ops(name + ".bwd", kEagerRmsNormBackward, elements, backward);
    } else {
      fwd.push_back(memory_op(name, 2 * kBf16 * elements));
      backward.push_back(memory_op(name + ".bwd", 4 * kBf16 * elements));
    }
  };
  const auto norm = [&](const std::string& name) { norm_of(name, local_tokens * h); };
  // `gathers`: the block's first GEMMs read its whole input (latent attention's down
  // projections read the rank's shard, and gather their latents themselves).
  const auto enter_block = [&](const std::string& block, bool projections, bool gathers = true) {
    norm(block + "_norm");
    norm_end = fwd.size();
    if (!parallel || !gathers) return;
    if (!sharded) {
      Op reduce = tp_op(block + "_input.bwd", CollectiveOp::all_reduce, activation);
      reduce.collective->beside_weight_gradient = true;
      backward.push_back(std::move(reduce));
      return;
    }
    fwd.push_back(tp_op(block + "_gather", CollectiveOp::all_gather, activation,
                        projections ? Userbuffers::ring_exchange : Userbuffers::none));
    backward.push_back(tp_op(block + "_gather.bwd", CollectiveOp::reduce_scatter, activation,
                             projections ? Userbuffers::bulk : Userbuffers::none));
  };
  const auto regather_for_wgrad = [&](const std::string& gemm) {
    if (sharded && recompute != Recompute::per_op)
      backward.push_back(
          tp_op(gemm + ".regather", CollectiveOp::all_gather, activation, Userbuffers::bulk));
  };
  // LoRA's adapters (lora_ops.hpp): beside a row-parallel projection, or a column-parallel one
  // over `rows` tokens; under userbuffers overlap a column adapter gathers its own input.
  const AdapterPlace row_adapters{true, t, tp, sequence_parallel, false};
  const bool own_gathers = tp_comm_overlap && sharded;
  const auto column_adapters = [&](double rows) {
    return AdapterPlace{false, rows, tp, sequence_parallel, own_gathers};
  };
  // A LoRA adapter beside the block's row-parallel projection (`adapted`) adds its output to
  // the block's once that is reduced.
  // `reduced`: the block's output is already its tokens' whole sum (a mixture of experts'
  // tokens combined back by the all-to-all dispatcher).
  const auto leave_block = [&](const std::string& block, bool projections, LoraModules adapted,
                               bool reduced = false) {
    if (!reduced && sharded) {
      fwd.push_back(tp_op(block + "_scatter", CollectiveOp::reduce_scatter, activation,
                          projections ? Userbuffers::pipeline : Userbuffers::none));
      backward.push_back(tp_op(block + "_scatter.bwd", CollectiveOp::all_gather, activation,
                               projections ? Userbuffers::ring_exchange : Userbuffers::none));
    } else if (!reduced && parallel) {
      fwd.push_back(tp_op(block + "_output", CollectiveOp::all_reduce, activation));
    }
    lora_adapters(model, training, adapted, row_adapters, fwd, backward);
    // Gemma's norm of the block's output, on the rank's tokens, before the residual add.
    if (model.post_norms) norm(block + "_post_norm");
    // Bias, dropout and residual add fused (Megatron's bias_dropout_add): the mask is written
    // in forward and read in backward.
    fwd.push_back(memory_op(block + "_residual", (3 * kBf16 + mask) * local_tokens * h));
    backward.push_back(memory_op(block + "_residual.bwd", (3 * kBf16 + mask) * local_tokens * h));
  };

  // Attention: QKV by columns (or latent attention's projections), RoPE (if the model
  // rotates) and attention on the local heads, o_proj by rows.
  const bool latent = model.latent_attention();
  enter_block("attn", true, !latent || model.q_lora_rank == 0);
  const bool frozen = training.lora.has_value();
  if (latent) {
    if (model.q_lora_rank == 0) {
      // The queries from the block's gathered input, first, as Megatron-Core computes them.
      projection_ops("q_proj", t, q / split, h, training, frozen, fwd, backward);
      regather_for_wgrad("q_proj");
    }
    latent_attention_projections(model, training, {t, local_tokens, tp}, norm_of, fwd, backward);
  } else {
    lora_input_gradient_adds(model, training, kLoraQkvModules, column_adapters(t), backward);
    projection_ops("qkv", t, (q + k + v) / split, h, training, frozen, fwd, backward);
    if (!frozen) regather_for_wgrad("qkv");
    lora_adapters(model, training, kLoraQkvModules, column_adapters(t), fwd, backward);
  }
  if (model.qk_norm) {
    // Each head's query and key normed (one fused kernel for both): read and write them in
    // forward; read them, their gradient and write theirs in backward, as a norm does.
    fwd.push_back(memory_op("qk_norm", 2 * kBf16 * t * (q + k) / split));
    backward.push_back(memory_op("qk_norm.bwd", 4 * kBf16 * t * (q + k) / split));
  }
  if (model.positions == Positions::rope && eager && !latent) {
    eager_ops("rope", kEagerRopeForward, t * (q + k) / split, fwd);
    eager_ops("rope.bwd", kEagerRopeBackward, t * (q + k) / split, backward);
  } else if (model.positions == Positions::rope && !latent) {
    fwd.push_back(memory_op("rope", 2 * kBf16 * t * (q + k) / split));
    backward.push_back(memory_op("rope.bwd", 2 * kBf16 * t * (q + k) / split));
  }

  // Causal attention: QK^T and PV are 2*b*s^2 FLOPs per query and value width, half of them
  // masked away (2 b pairs (q + o) with pairs = s^2 / 2 of a sequence's query-key pairs); cp
  // ranks share them evenly. Local attention meets fewer keys (local_attention_pairs).
  const bool local = attends_locally && model.has_local_layers(seq_len);
  const bool ulysses = cp > 1 && cp_comm == ContextComm::a2a;
  const bool ring = cp > 1 && !ulysses;
  if (local && ring) throw ModelError("local attention with ring attention is refused by its rule");
  const double pairs =
      local ? local_attention_pairs(model, seq_len) : 0.5 * double(seq_len) * seq_len;
  const double attention_fwd_flops = 2.0 * micro_batch * pairs * (q + o) / split / cp;
  // Ring attention: the whole sequence's keys and values of the local KV heads, gathered in
  // forward; in backward gathered again while their gradients are reduce-scattered. Listed
  // around attention in forward order (the backward list is reversed at the end).
  const double sequence_kv = kBf16 * micro_batch * double(seq_len) * (k + v) / split;
  const auto context_op = [&](std::string name, CollectiveOp op) {
    return Op{std::move(name), Kernel{}, 0, LayerCollective{op, sequence_kv, GroupKind::context}};
  };
  // Ulysses: the rank's Q, K and V (and its output) of every local head, (cp - 1) / cp of them
  // to other ranks.
  const auto trade = [&](std::string name, double width) {
    return Op{
        std::move(name), Kernel{}, 0,
        LayerCollective{CollectiveOp::all_to_all, kBf16 * t * width / split, GroupKind::context}};
  };
  if (cp > 1 && training.attention != Attention::flash) {
    throw ModelError("context parallelism runs its attention on FlashAttention");
  }
  if (ring) {
    fwd.push_back(context_op("kv_ring", CollectiveOp::all_gather));
    backward.push_back(context_op("kv_ring.dkv", CollectiveOp::reduce_scatter));
  }
  if (ulysses) {
    fwd.push_back(trade("qkv_a2a", q + k + v));
    backward.push_back(trade("qkv_a2a.bwd", q + k + v));
  }
  if (training.attention == Attention::flash) {
    // Read Q, the keys and values it meets (the whole sequence's under ring attention), write
    // O. Under Ulysses: every token of heads / cp heads, as many bytes as the rank's tokens.
    const double attention_io = kBf16 * (t * (q + o) + (ring ? cp : 1) * t * (k + v)) / split;
    Kernel attention_fwd;
    attention_fwd.kind = KernelKind::attention;
    attention_fwd.flops = attention_fwd_flops;
    attention_fwd.bytes = attention_io;
    attention_fwd.attention = training.attention_kernel;
    // Under ring attention each of the ring's steps is a block of seq / cp keys, full but for
    // the diagonal ones: taken as full-mask passes over seq / cp keys.
    attention_fwd.causal = !ring;
    attention_fwd.seq = ring ? double(seq_len) / cp : double(seq_len);
    if (local && model.local_attention == LocalAttention::sliding) {
      attention_fwd.window = model.attention_window;
    } else if (local) {
      // Each chunk a causal sequence of its own (a shorter last one taken as whole).
      attention_fwd.seq = std::min(attention_fwd.seq, double(model.attention_window));
    }
    fwd.push_back(Op{"attention", attention_fwd, attention_fwd_flops, std::nullopt});
    const Op attention = fwd.back();
    Kernel attention_bwd = attention_fwd;
    attention_bwd.flops = 2.5 * attention_fwd_flops;
    attention_bwd.backward = true;
    attention_bwd.bytes = 2 * attention_io;  // read Q, K, V, O, dO; write dQ, dK, dV
    backward.push_back(Op{"attention.bwd", attention_bwd, 2 * attention_fwd_flops, std::nullopt});
    if (ring) backward.push_back(context_op("kv_ring.bwd", CollectiveOp::all_gather));
    if (ulysses) {
      fwd.push_back(trade("o_a2a", o));
      backward.push_back(trade("o_a2a.bwd", o));
    }
    if (core_rerun) {
      // Megatron-Core checkpoints the core attention whatever its kernel: the fused kernel
      // runs forward again before its backward, beside the ring's exchange again, or between
      // Ulysses' all-to-alls again.
      if (ulysses) backward.push_back(rerun(trade("o_a2a", o)));
      backward.push_back(rerun(attention));
      if (ring) backward.push_back(rerun(context_op("kv_ring", CollectiveOp::all_gather)));
      if (ulysses) backward.push_back(rerun(trade("qkv_a2a", q + k + v)));
    }
  } else {
    // Eager: per head, batched over micro-batch x local heads, S = QK^T [s,s], P = softmax(S)
    // (scaled, masked, dropped out), O = PV; backward dP = dO V^T, dV = P^T dO, dS, then
    // dQ = dS K and dK = dS^T Q. Every GEMM does the full s x s, masked (a local window's mask
    // too); model FLOPs count the pairs the mask keeps.
    const double rows = micro_batch * (model.heads / split) * double(seq_len);
    const double d = model.qk_head_dim();      // scores: queries against keys
    const double dv = model.value_head_dim();  // values
    const double s = seq_len;
    const double elements = rows * s;  // probabilities on this rank
    const auto mask_counted = [&](Op op) {
      op.model_flops *= pairs / (s * s);
      return op;
    };
    const std::vector<Op> core = {
        mask_counted(gemm_op("scores", rows, s, d)),
        memory_op("softmax", (2 * kBf16 + (mask > 0 ? mask + kBf16 : 0)) * elements),
        mask_counted(gemm_op("attn_values", rows, dv, s))};
    fwd.insert(fwd.end(), core.begin(), core.end());
    backward.push_back(mask_counted(gemm_op("scores.dgrad_q", rows, d, s)));
    backward.push_back(mask_counted(gemm_op("scores.dgrad_k", rows, d, s)));
    backward.push_back(memory_op("softmax.bwd", (3 * kBf16 + mask) * elements));
    backward.push_back(mask_counted(gemm_op("attn_values.dgrad_p", rows, s, dv)));
    backward.push_back(mask_counted(gemm_op("attn_values.dgrad_v", rows, dv, s)));
    if (core_rerun) {
      // The core runs again just before its backward (this list is reversed at the end); the
      // dropout mask is regenerated from the saved RNG state. Not model FLOPs.
      for (auto op = core.rbegin(); op != core.rend(); ++op) backward.push_back(rerun(*op));
    }
  }
  lora_input_gradient_adds(model, training, kLoraOutputModules, row_adapters, backward);
  projection_ops("o_proj", t, h, o / split, training, frozen, fwd, backward);
  const std::size_t attention_norm_end = norm_end;
  leave_block("attn", true, kLoraOutputModules);
  // A rerun norm before attention runs again after the block's residual add's backward, before
  // the rest of the block's backward.
  std::vector<Op> norm_again;
  for (std::size_t i = 0; attention_norm_rerun && i < attention_norm_end; ++i) {
    norm_again.push_back(rerun(fwd[i]));
  }
  backward.insert(backward.end() - 1, norm_again.rbegin(), norm_again.rend());

  // MLP: gate/up (or up) by columns, the activation on the local columns, down by rows, over
  // `rows` tokens, `width` its inner size; `regather`: the first GEMM's weight gradient
  // re-gathers its input; `rerun_activation`: the activation's output discarded and recomputed
  // before down's backward (Megatron-Core's moe_act).
  // `over`: the ranks its columns split over (0: tp; an expert's own tensor parallelism).
  const auto mlp = [&](const std::string& prefix, double rows, bool regather, bool rerun_activation,
                       double width, double over = 0) {
    const double parts = over > 0 ? over : split;
    std::size_t activation_begin = 0;
    if (model.gated_mlp()) {
      lora_input_gradient_adds(model, training, kLoraGateUpModules, column_adapters(rows),
                               backward);
      projection_ops(prefix + "gate_up", rows, 2 * width / parts, h, training, frozen, fwd,
                     backward);
      if (regather && !frozen) regather_for_wgrad(prefix + "gate_up");
      lora_adapters(model, training, kLoraGateUpModules, column_adapters(rows), fwd, backward);
      activation_begin = fwd.size();
      // GeGLU's GELU (tanh form) is one elementwise kernel as SiLU is: the same passes.
      const std::string glu = prefix + (model.mlp == Mlp::geglu ? "geglu" : "swiglu");
      if (eager) {
        eager_ops(glu, kEagerSwigluForward, rows * width / parts, fwd);
        eager_ops(glu + ".bwd", kEagerSwigluBackward, rows * width / parts, backward);
      } else {
        fwd.push_back(memory_op(glu, 3 * kBf16 * rows * width / parts));
        backward.push_back(memory_op(glu + ".bwd", 5 * kBf16 * rows * width / parts));
        if (training.activation_fp8_input) {
          // Its 2 x width input cast to FP8 for backward, and back to BF16 before the
          // activation's backward (pushed after it: it runs first).
          const double input = 2 * rows * width / parts;
          fwd.push_back(memory_op(glu + ".fp8_store", (kBf16 + kFp8) * input));
          backward.push_back(memory_op(glu + ".fp8_load.bwd", (kFp8 + kBf16) * input));
        }
      }
    } else {
      lora_input_gradient_adds(model, training, kLoraUpModules, column_adapters(rows), backward);
      projection_ops(prefix + "up", rows, width / parts, h, training, frozen, fwd, backward);
      if (regather && !frozen) regather_for_wgrad(prefix + "up");
      lora_adapters(model, training, kLoraUpModules, column_adapters(rows), fwd, backward);
      activation_begin = fwd.size();
      fwd.push_back(memory_op(prefix + "gelu", 2 * kBf16 * rows * width / parts));
      backward.push_back(memory_op(prefix + "gelu.bwd", 3 * kBf16 * rows * width / parts));
    }
    const std::size_t activation_end = fwd.size();
    const std::size_t down_backward = backward.size();
    lora_input_gradient_adds(model, training, kLoraDownModules, row_adapters, backward);
    projection_ops(prefix + "down", rows, h, width / parts, training, frozen, fwd, backward);
    // Pushed after down's backward in reverse: it runs just before it, in forward order.
    for (std::size_t i = activation_end; rerun_activation && i-- > activation_begin;) {
      backward.push_back(rerun(fwd[i]));
    }
    return std::pair{activation_end, down_backward};  // where down's ops begin
  };
  const std::size_t mlp_begin = fwd.size();
  // The all-to-all dispatcher routes the rank's sequence shard: the block gathers nothing.
  const bool all_to_all_dispatch =
      moe && training.token_dispatcher == TokenDispatcher::alltoall && sharded;
  enter_block("mlp", !moe, !all_to_all_dispatch);
  const std::size_t mlp_norm_end = norm_end;
  if (moe) {
    const ExpertBlockPlace place{.tokens = t,
                                 .local_tokens = local_tokens,
                                 .tp = tp,
                                 .ep = ep,
                                 .expert_tp = expert_tp,
                                 .all_to_all_dispatch = all_to_all_dispatch,
                                 .frozen = frozen,
                                 .activation_rerun = activation_rerun};
    mixture_of_experts_ops(model, training, place, mlp, fwd, backward);
  } else {
    mlp("", t, /*regather=*/true, /*rerun_activation=*/false, f);
  }
  leave_block("mlp", !moe, kLoraDownModules, all_to_all_dispatch);
  // A rerun block runs forward again after its residual add's backward (the add is outside
  // Megatron-Core's checkpoint), before its own backward: a dense MLP from its fused norm on, a
  // mixture of experts' from its router on, after its norm when that is rerun too.
  std::vector<Op> block_again;
  for (std::size_t i = mlp_begin; norm_rerun && i < mlp_norm_end; ++i) {
    block_again.push_back(rerun(fwd[i]));
  }
  for (std::size_t i = moe ? mlp_norm_end : mlp_begin; mlp_rerun && i + 1 < fwd.size(); ++i) {
    block_again.push_back(rerun(fwd[i]));
  }
  backward.insert(backward.end() - 1, block_again.rbegin(), block_again.rend());
  if (recompute == Recompute::per_op) {
    if (moe || frozen) {
      throw ModelError("per_op recomputation is modelled for dense layers trained in full");
    }
    // Pushed last in reverse: once the list is reversed they run first, in forward order.
    const std::vector<Op> again = per_op_recomputation(model, fwd, split);
    backward.insert(backward.end(), again.rbegin(), again.rend());
  }

  std::reverse(backward.begin(), backward.end());
  ops.backward = std::move(backward);
  if (training.precision == Precision::fp8 && parallel) {
    // Column adapters that share their block's gather read it in BF16 (its rerun too), and the
    // all-to-all dispatcher gathers the experts' BF16 tokens and output gradients.
    std::vector<std::string> bf16_gathers = {"dispatch_gather", "recompute.dispatch_gather",
                                             "combine_scatter.bwd"};
    if (shared_expert_overlapped(model, training, ep)) {
      bf16_gathers.insert(bf16_gathers.end(),
                          {"shared_expert.gather", "recompute.shared_expert.gather"});
    }
    for (const auto& [block, modules] :
         {std::pair{std::string("attn_gather"), LoraModules(kLoraQkvModules)},
          std::pair{std::string("mlp_gather"), LoraModules(kLoraGateUpModules)}}) {
      if (own_gathers || lora_targets_among(training, modules) == 0) continue;
      bf16_gathers.push_back(block);
      bf16_gathers.push_back("recompute." + block);
    }
    cast_before_gathers(ops.forward, tp, bf16_gathers);
    cast_before_gathers(ops.backward, tp, bf16_gathers);
  }
  return ops;
}

}  // namespace fleetsim
