// The FLOPs a published run counts per token, by the convention its source uses, so that a
// measured TFLOP/s or MFU compares with the simulated step on the source's own terms (fleetsim's
// own model FLOPs, StepResult::model_flops, halve causal attention and count only the pairs a
// local attention window keeps; most sources do neither, and these conventions count every
// layer's attention over the whole sequence).
//
// Per token, for L layers of hidden size h, attention width q (= heads x head_dim: h unless the
// model gives a head_dim of its own), K/V width kv (= kv_heads x head_dim), the layer's
// attention projection weights W (2 h q + 2 h kv; latent attention's down and up projections
// and o_proj, where its queries are heads x 192 wide and its output heads x 128), MLP inner size F
// with m matrices (3 for SwiGLU and GeGLU, 2 for GELU), k experts a token
// visits (1 dense) and a shared expert's inner size Fs (0 without), vocabulary V and sequence
// length s; N the parameters a token uses: every parameter, embedding tables and norms included (as
// torchtitan at 157a12c5 and llm-foundry count; newer torchtitan and Kaplan et al. leave the
// embeddings out, about 5% less for Llama-3-8B), a mixture of experts' k visited experts of each
// layer only. With D multi-token prediction modules (DeepSeek-V3) L counts each module's layer
// (of the last layer's kind) and N its parameters; megatron adds its norms and eh_proj,
// 6 D (3 h + 2 h^2), and its logits, 6 D V h, as Megatron-LM's num_floating_point_operations
// does:
//   six_n                6 N
//   six_n_attention      6 N + 12 L q s                        (PaLM's appendix B, nanoGPT,
//                        torchtitan, llm-foundry, fms-fsdp: attention over the full sequence;
//                        under latent attention 6 L (q + o) s, its scores q wide and values o)
//   six_n_causal         6 N + 6 L q s                         (the same, causal attention halved)
//   megatron             6 L (W + k m h F + m h Fs) + 12 L q s + 6 V h
//                        (Narayanan et al., arXiv:2104.04473 section 5.1, as NVIDIA's
//                        dgxc-benchmarking and NeMo count it for grouped-query attention and
//                        SwiGLU: the layers' GEMMs, attention and the output head; no embedding,
//                        norms or router)
//   megatron_causal      megatron with the attention term halved (12 L q s / 2): the
//                        dgxc-benchmarking recipes of mixtures of experts (Grok-1)
//   megatron_recompute   megatron with the layers' terms x 4/3: the paper's count with full
//                        activation recomputation (one more forward of every layer)
#pragma once

#include <cstddef>
#include <iterator>
#include <string_view>

#include "workloads/model_spec.hpp"

namespace fleetsim {

enum class FlopConvention {
  six_n,
  six_n_attention,
  six_n_causal,
  megatron,
  megatron_causal,
  megatron_recompute
};

// As a scenario names them, in the enum's order.
inline constexpr std::string_view kFlopConventionNames[] = {
    "6n", "6n_attention", "6n_causal", "megatron", "megatron_causal", "megatron_recompute"};
static_assert(std::size(kFlopConventionNames) ==
              static_cast<std::size_t>(FlopConvention::megatron_recompute) + 1);
std::string_view to_string(FlopConvention convention);

// FLOPs a token costs, forward and backward, under `convention`, at sequence length `seq_len`.
double flops_per_token(const ModelSpec& model, int seq_len, FlopConvention convention);

// The parameters one token uses: all of a dense model's, a mixture of experts' with only the
// experts it visits in each layer.
double active_parameters(const ModelSpec& model);

}  // namespace fleetsim
