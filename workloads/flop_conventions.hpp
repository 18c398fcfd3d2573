// The FLOPs a published run counts per token, by the convention its source uses, so that a
// measured TFLOP/s or MFU compares with the simulated step on the source's own terms (fleetsim's
// own model FLOPs, StepResult::model_flops, halve causal attention; most sources do not).
//
// Per token, for L layers of hidden size h (= heads x head_dim), K/V width kv (= kv_heads x
// head_dim), MLP inner size F with m matrices (3 for SwiGLU, 2 for GELU), k experts a token
// visits (1 dense), vocabulary V and sequence length s; N the parameters a token uses (every
// parameter of a dense model; a mixture of experts' k experts of each layer, not all):
//   six_n                6 N                                   (Kaplan et al., arXiv:2001.08361)
//   six_n_attention      6 N + 12 L h s                        (PaLM's appendix B, nanoGPT,
//                        torchtitan, llm-foundry, fms-fsdp: attention over the full sequence)
//   six_n_causal         6 N + 6 L h s                         (the same, causal attention halved)
//   megatron             6 L (2 h^2 + 2 h kv + k m h F) + 12 L h s + 6 V h
//                        (Narayanan et al., arXiv:2104.04473 section 5.1, as NVIDIA's
//                        dgxc-benchmarking and NeMo count it for grouped-query attention and
//                        SwiGLU: the layers' GEMMs, attention and the output head; no embedding,
//                        norms or router)
//   megatron_recompute   megatron with the layers' terms x 4/3: the paper's count with full
//                        activation recomputation (one more forward of every layer)
#pragma once

#include <string_view>

#include "workloads/model_spec.hpp"

namespace fleetsim {

enum class FlopConvention { six_n, six_n_attention, six_n_causal, megatron, megatron_recompute };

// "6n", "6n_attention", "6n_causal", "megatron", "megatron_recompute": as a scenario names them.
std::string_view to_string(FlopConvention convention);
inline constexpr std::string_view kFlopConventionNames[] = {"6n", "6n_attention", "6n_causal",
                                                            "megatron", "megatron_recompute"};

// FLOPs a token costs, forward and backward, under `convention`, at sequence length `seq_len`.
double flops_per_token(const ModelSpec& model, int seq_len, FlopConvention convention);

// The parameters one token uses: all of a dense model's, a mixture of experts' with only the
// experts it visits in each layer.
double active_parameters(const ModelSpec& model);

}  // namespace fleetsim
