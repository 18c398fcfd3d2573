// LoRA's adapters as they run beside a decoder layer's frozen projections: their kernels and
// tensor-parallel exchanges, and what they keep for backward.
#pragma once

#include <array>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "workloads/model_spec.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {

// The PEFT and Megatron-Core module names of a decoder layer's projections, by the input they
// read: the attention block's normed input (q, k, v, or the fused qkv), the MLP block's (gate
// and up, or the fused gate_up), and the two row-parallel projections.
inline constexpr std::array<const char*, 4> kLoraQkvModules = {"q", "k", "v", "qkv"};
inline constexpr std::array<const char*, 3> kLoraGateUpModules = {"gate", "up", "gate_up"};
inline constexpr std::array<const char*, 1> kLoraUpModules = {"up"};  // a GELU MLP's
inline constexpr std::array<const char*, 1> kLoraOutputModules = {"o"};
inline constexpr std::array<const char*, 1> kLoraDownModules = {"down"};
using LoraModules = std::span<const char* const>;

// A targeted projection's input and output sizes by its module name.
std::pair<double, double> lora_module_shape(const ModelSpec& model, const std::string& module);
// The LoRA recipe adapts `module`.
bool lora_targets(const TrainingSpec& training, const std::string& module);
// How many of `modules` it adapts.
int lora_targets_among(const TrainingSpec& training, LoraModules modules);
// Trainable adapter parameters of one decoder layer under LoRA (0 without), DoRA's
// magnitudes included.
double lora_parameters_per_layer(const ModelSpec& model, const TrainingSpec& training);
// The BF16 bytes DoRA holds at once while it takes a weight norm (dora_weight_norm in
// lora_ops.cpp), at its largest adapted projection's [out, in] shard on a tp rank: s B A and
// W + s B A (NeMo's _get_weight_norm). A quantized base's BF16 copy for it takes the buffer
// its GEMM's dequantized copy had (freed after that GEMM), which the memory model counts
// already. 0 without DoRA.
double dora_weight_norm_bytes(const ModelSpec& model, const TrainingSpec& training, int tp);

// Where a layer's adapters run: beside a row-parallel projection (o, down) or a column-parallel
// one; on `rows` tokens (the micro-batch's on the rank); over tp ranks, with or without
// sequence parallelism; and whether a column adapter gathers its own input (Transformer
// Engine's userbuffers overlap on: NeMo then asks for no gathered norm output and the adapter
// gathers its BF16 sequence shard itself, reduce-scattering its input gradient back).
struct AdapterPlace {
  bool row_parallel = false;
  double rows = 0;
  int tp = 1;
  bool sequence_parallel = true;
  bool own_gather = false;
};

// The adapters of the targeted modules among `modules`, which all read the same input: each
// projection W (k in, n out) frozen, the output y = x W + (s / r) dropout(x) A B added to it
// (PEFT's lora/layer.py, NeMo's ParallelLinearAdapter). Their kernels, after the projection:
// the dropout of the input (lora.dropout > 0), x A, x A B, the scale and the add (two
// elementwise kernels, five passes over the output); in backward the scale's gradient, B's and
// A's data and weight gradients and the dropout's backward. The input gradient's add to the
// projection's is lora_input_gradient_adds'.
// Under tensor parallelism the adapter splits as NeMo splits it (parallel_adapters.py, with
// sequence parallelism off inside the adapter): beside a column-parallel projection A by its
// rank (r / tp columns, its output all-gathered) and B by its outputs, on the whole gathered
// input; beside a row-parallel one A by its inputs (its output all-reduced) and B by its
// outputs, whose output goes back to the sequence shards by an all-to-all
// (lora.sequence_all_to_all, NeMo's a2a_experimental) or an all-gather (whole, then split), or
// is all-gathered whole without sequence parallelism. In backward each [rows, r] input gradient
// of B is all-reduced beside B's weight gradient; a column adapter's input gradient joins the
// projection's before its reduce-scatter under sequence parallelism (Transformer Engine's
// layernorm_linear.py), is reduce-scattered after its own gather, or is all-reduced beside A's
// weight gradient without sequence parallelism. The adapters' exchanges never overlap the GEMM
// they feed. Forward ops go to `forward`; backward ops are appended to `backward` in reverse
// (it is collected in forward order and reversed once the layer is built).
void lora_adapters(const ModelSpec& model, const TrainingSpec& training, LoraModules modules,
                   const AdapterPlace& place, std::vector<Op>& forward, std::vector<Op>& backward);
// Each adapter's input gradient added to its projection's (three passes over the input as the
// rank holds it), appended to `backward` before the projection's own backward ops so that it
// runs after the projection's data gradient.
void lora_input_gradient_adds(const ModelSpec& model, const TrainingSpec& training,
                              LoraModules modules, const AdapterPlace& place,
                              std::vector<Op>& backward);

// Bytes per token of a micro-batch one tensor-parallel rank keeps for a layer's adapters,
// beyond what the frozen layer keeps for its own backward: each adapter's x A ([rows, r], whole
// on every tp rank); without dropout the normed inputs the column adapters read (the gathered
// input, whole on every rank under tp, kept once for the block's adapters, or by each adapter
// that gathers its own), o's input where recomputation discards attention's output, down's
// input; with dropout each adapter's dropped input and its mask instead (the mask on the
// sequence shard where the adapter gathers its own input). `core_rerun`, `mlp_rerun`: selective
// recomputation reruns the attention core, the MLP block (whose adapters' inputs it then
// recomputes); `own_gather` as in AdapterPlace. Under DoRA also what its magnitude's gradient
// reads (dora_saved_bytes_per_token in lora_ops.cpp).
double lora_saved_bytes_per_token(const ModelSpec& model, const TrainingSpec& training, int tp,
                                  bool sequence_parallel, bool core_rerun, bool mlp_rerun,
                                  bool own_gather);

}  // namespace fleetsim
