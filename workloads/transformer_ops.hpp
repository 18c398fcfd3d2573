// The kernels of a decoder layer (Llama or GPT style), the embedding, the output head and the
// multi-token prediction modules (the last three in prediction_ops.cpp), for one micro-batch of
// T = micro_batch x seq_len tokens, and the tensors each op saves for backward.
//
// Forward GEMM C[m,n] = A[m,k] B[k,n] has backward dgrad [m,k] = dC[m,n] B^T and wgrad
// [k,n] = A^T dC. FlashAttention's forward on a causal mask does half of 4*b*s^2*h FLOPs; its
// backward does 2.5x the forward (it recomputes the scores), while model FLOPs count 2x. Eager
// attention computes the whole s x s score matrix and masks it: twice FlashAttention's forward
// FLOPs, counted as the same model FLOPs. Linear biases are fused into the GEMMs' epilogues.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "calibration/kernel_cost.hpp"
#include "topology/collective_op.hpp"
#include "workloads/layout/rank_grid.hpp"
#include "workloads/layout/stage_split.hpp"
#include "workloads/model_spec.hpp"

namespace fleetsim {

// How Transformer Engine's userbuffers run a decoder layer's tensor-parallel collective beside
// its GEMM under --tp-comm-overlap (the defaults of TE's initialize_ub). ring_exchange, for the
// all-gathers a GEMM reads (the QKV and first MLP GEMMs' inputs forward, the o_proj and down
// input gradients' output gradients backward): tp chunks sent peer to peer on copy engines
// while the GEMM runs chunk by chunk, no SMs taken. pipeline, for the reduce-scatters after
// o_proj and down forward: the GEMM in 4 chunks on the SMs the 16 of the reduction leave, each
// chunk reduced once done, the last after the GEMM. bulk, for the backward's input re-gathers
// and the reduce-scatters of the QKV and first MLP GEMMs' input gradients: whole beside the
// other backward GEMM, on 16 SMs. none: not userbuffers' (NCCL's kernels, the GPU profile's
// comm_sms, when overlapped at all).
enum class Userbuffers { none, ring_exchange, pipeline, bulk };
// The SMs a userbuffers method's kernels hold (the GEMM beside leaves them free, Transformer
// Engine's set_sm_margin, but for a ring exchange, which takes none), and the share of the
// collective left after its GEMM (pipeline: the last of its 4 chunks).
struct UserbuffersOverlap {
  int sms = 0;
  double after_gemm_share = 0;
};

// Which kernel a collective runs beside: as its op decides (overlapped_kernel), or, for an
// expert-parallel all-to-all beside the shared expert (TrainingSpec::shared_expert_overlap),
// the GEMM after it (forward) or the weight gradient before it (backward).
enum class Beside { by_op, next_gemm, previous_gemm };

// A collective in the middle of a layer: of the tensor group (tensor parallelism), of the
// expert group (a mixture of experts' token all-to-alls), or of the context group (ring
// attention's keys and values).
struct LayerCollective {
  CollectiveOp op;
  double size_bytes = 0;  // nccl-tests message size S
  GroupKind group = GroupKind::tensor;
  Userbuffers userbuffers = Userbuffers::none;
  // A column-parallel GEMM's input gradient, all-reduced (without sequence parallelism) once
  // its data gradient is done: it may run beside the weight gradient (Megatron's
  // --async-tensor-model-parallel-allreduce, under tp_comm_overlap).
  bool beside_weight_gradient = false;
  // Runs alone between the ops around it whatever the overlap: the GEMM after it reads all of
  // it (a LoRA adapter's gathered [tokens, rank]).
  bool blocking = false;
  // The kernel it runs beside where its op does not decide (an all-to-all's does not).
  Beside beside = Beside::by_op;
};

// One of a mixture of experts' all-to-alls (the dispatch, the combine, their backward's):
// what ep_comm_overlap runs beside another micro-batch's compute.
inline bool is_expert_exchange(const LayerCollective& collective) {
  return collective.group == GroupKind::expert && collective.op == CollectiveOp::all_to_all;
}

struct Op {
  std::string name;
  Kernel kernel;
  double model_flops = 0;
  std::optional<LayerCollective> collective;  // set: this op is that collective, not a kernel
};

struct LayerOps {
  std::vector<Op> forward;
  std::vector<Op> backward;
};

inline constexpr double kMaskBytes = 1;  // a dropout mask element (torch.bool)

// A BF16 GEMM C[m,n] = A[m,k] B[k,n].
Op gemm_op(std::string name, double m, double n, double k);
// A forward GEMM and, appended to `backward` (collected in forward order, reversed at the
// end), its backward GEMMs: the input gradient first, as frameworks run them (the gradient can
// go on to the layer before, and Transformer Engine overlaps its reduction with the weight
// gradient), then the weight gradient unless the weight is frozen.
Op gemm_with_backward(const std::string& name, double m, double n, double k,
                      std::vector<Op>& backward, bool frozen = false);
// A projection's GEMM (m x n from k) with its backward as the training runs it: under FP8 as
// Transformer Engine casts and runs it; under QLoRA its 4-bit weight first dequantized to BF16
// (read 4.127 bits, write 16 per weight), in forward and again before the backward's
// data-gradient GEMM, which reads it too; `frozen`, no weight gradient.
void projection_ops(const std::string& name, double m, double n, double k,
                    const TrainingSpec& training, bool frozen, std::vector<Op>& fwd,
                    std::vector<Op>& backward);
// A collective of the tensor-parallel group (nccl-tests' size S: the gathered size of an
// all-gather, the size reduced of a reduce-scatter or all-reduce).
// blocking_tp_op: one NCCL issues outside Transformer Engine's userbuffers, which the op after
// it waits for whatever the overlap.
Op blocking_tp_op(std::string name, CollectiveOp op, double size_bytes);
Op tp_op(std::string name, CollectiveOp op, double size_bytes,
         Userbuffers userbuffers = Userbuffers::none);

// The ops of one tensor-parallel rank of `tp` (1: no tensor parallelism). With tp > 1 each GEMM
// is split Megatron's way (QKV and gate/up by columns, o_proj and down by rows), attention by
// heads, the embedding and logits by vocabulary; with sequence parallelism (below, the
// default) activations between blocks are sharded by sequence, so norms, residuals and
// elementwise ops do 1/tp of the work, and each block is entered by an all-gather and left by a
// reduce-scatter of the T x hidden activations (in backward the mirror images, plus the
// re-gather of a sharded input for its weight gradient).
// Selective recomputation reruns each of `modules` just before its backward: the attention
// core (eager attention's scores, softmax and PV, or the fused attention kernel, with ring
// attention's exchange under cp), a dense MLP block or a mixture of experts' whole (with its
// tensor-parallel collectives and all-to-alls), the experts' activations, the norm before the
// experts' block; full recomputation is the caller's. Under LoRA the layer's projections are
// frozen (no weight gradients) and each targeted one has its adapter beside it (lora_ops.hpp:
// a column-parallel projection's after it, a row-parallel one's after its block's reduction;
// under `tp_comm_overlap` with sequence parallelism a column adapter gathers its own input).
// With expert parallelism over `ep` ranks each rank holds experts / ep of the experts, each
// split over the tp ranks (`expert_tp` 0) or whole (`expert_tp` 1); the permuted tokens go to their
// experts' ranks and come back by two all-to-alls of the expert-parallel group, in forward and in
// backward, and under the all-to-all dispatcher with tp > 1 what arrives is all-gathered over tp
// and the experts' outputs reduce-scattered back (TokenDispatcher). With context parallelism over
// `cp` ranks every op but attention runs on the rank's micro_batch x seq_len / cp tokens, and
// attention does 1 / cp of the causal work (two balanced chunks of queries against the keys before
// them). Its keys and values travel around the cp ranks beside it (ring attention, as Transformer
// Engine runs it): in forward the bytes of an all-gather of the whole sequence's K and V, in
// backward those again and a reduce-scatter's of their gradients. With `cp_comm` a2a (Ulysses) two
// blocking all-to-alls of the context group trade instead the rank's tokens of every head for every
// token of heads / cp heads: Q, K and V before attention, the output after it (in backward the
// output's gradient before, Q's, K's and V's after); attention then runs causal over the whole
// sequence, local attention included.
// Without sequence parallelism (`sequence_parallel` false, Shoeybi et al.'s form) the norms,
// residual adds and dropouts run on the whole sequence on every rank, each block ends in
// forward with an all-reduce of its T x hidden output (o_proj's, down's) and begins in backward
// with one of its input gradient (QKV's and the first MLP GEMM's), after that GEMM's weight
// gradient, beside which it may run (beside_weight_gradient); no input is gathered again.
// A layer that attends locally (`attends_locally`, ModelSpec::attends_locally) runs attention
// over the pairs of local_attention_pairs: a sliding window as a kernel with that window,
// chunks as causal kernels over a chunk each (ring attention is refused with it). `expert_tp`:
// the ranks each expert splits over, 0 for tp (ParallelPlan::expert_tp).
LayerOps decoder_layer_ops(const ModelSpec& model, const TrainingSpec& training, int tp = 1,
                           Recompute recompute = Recompute::none, int ep = 1, int cp = 1,
                           bool sequence_parallel = true, const RecomputeModules& modules = {},
                           bool attends_locally = false, bool tp_comm_overlap = false,
                           ContextComm cp_comm = ContextComm::p2p, int expert_tp = 0);
// The (query, key) pairs of one sequence of `seq_len` tokens a layer that attends locally
// computes, per head: s^2 / 2 under the causal mask alone (a window as long as the sequence);
// under a sliding window w < s, s x mean_causal_keys(s, w) = w s - w^2 / 2; chunked, each
// chunk of w tokens a causal sequence of its own: floor(s / w) w^2 / 2 + r^2 / 2 of the
// remainder r.
double local_attention_pairs(const ModelSpec& model, double seq_len);
// The kernel the collective ops[i] runs beside, when it overlaps: for an all-gather the kernel
// after it, when another op follows that kernel in the list (the op that waits for both); for
// a reduce-scatter the kernel before it, and for an input gradient's all-reduce
// (beside_weight_gradient) the weight gradient before it. The kernel is a GEMM for a
// tensor-parallel collective (under ParallelPlan::tp_comm_overlap; the caller decides), attention
// for a context-parallel one (always). None for a kernel, another collective, or one next to no
// such kernel (the embedding's, which then blocks), for a blocking collective (a LoRA
// adapter's), and for a reduction after the data gradient it reduces (a frozen projection's,
// which has no weight gradient to run beside). A collective whose `beside` is set runs beside
// the GEMM it names: after it (with another op after that GEMM) or before it.
std::optional<std::size_t> overlapped_kernel(const std::vector<Op>& ops, std::size_t i);
// The kernel the collective ops[i] runs beside in a step: ring attention's exchanges and an
// all-to-all beside the shared expert always overlap theirs, tensor-parallel collectives only
// under `tp_comm_overlap` (Transformer Engine's userbuffers with sequence parallelism,
// Megatron's asynchronous all-reduce of input gradients without); none for a collective that
// blocks (or a kernel).
std::optional<std::size_t> kernel_beside(const std::vector<Op>& ops, std::size_t i,
                                         bool tp_comm_overlap);
// Under tp_comm_overlap, how userbuffers run ops[i] when it is a decoder layer's
// tensor-parallel collective beside a GEMM; none for any other op (NCCL's kernels, which hold
// the GPU profile's comm_sms where they overlap).
std::optional<UserbuffersOverlap> userbuffers_collective(const std::vector<Op>& ops, std::size_t i);
// Under tp_comm_overlap, the GEMM ops[i] as userbuffers launch it beside their collective: in
// `chunks` equal parts by rows (its m, the tokens: tp beside a ring exchange, 4 beside a
// pipelined reduce-scatter), each with the collective's SMs as its margin (pipeline, bulk);
// ops[i] itself, once, for any other op.
struct GemmLaunch {
  Op part;
  int chunks = 1;
};
GemmLaunch userbuffers_gemm(const std::vector<Op>& ops, std::size_t i, int tp);

// A frozen embedding or head (LoRA) computes no weight gradient. Without sequence parallelism
// the embedding's partial lookups are all-reduced (not reduce-scattered) and the head's input
// gradient all-reduced (its input is whole: not gathered). With multi-token prediction the
// head computes each module's logits and loss too, through the same output projection, before
// the main ones (its ops named mtp1., mtp2., ...); the final norm is the main prediction's.
LayerOps embedding_ops(const ModelSpec& model, int micro_batch, int seq_len, int tp = 1,
                       bool frozen = false, bool sequence_parallel = true);
LayerOps head_ops(const ModelSpec& model, int micro_batch, int seq_len, int tp = 1,
                  bool frozen = false, CrossEntropy cross_entropy = CrossEntropy::unfused,
                  bool sequence_parallel = true);
// One multi-token prediction module of a tensor-parallel rank on `seq_len` tokens of each
// sequence (Megatron-Core's MultiTokenPredictionLayer): the next tokens' embedding lookup
// through the model's embedding, enorm and hnorm on the sequence shard, their concatenation,
// eh_proj (2 hidden -> hidden / tp, column-parallel: its input gathered under sequence
// parallelism, its output's columns gathered whole and split back to the shard), then `layer`
// (the decoder layer's ops, of the last layer's kind) and the module's final norm.
LayerOps mtp_module_ops(const ModelSpec& model, const TrainingSpec& training, const LayerOps& layer,
                        int seq_len, int tp, bool sequence_parallel);
// QLoRA's stored bytes per frozen decoder-layer weight: 4-bit NF4, an 8-bit scale per block of
// 64 weights and an FP32 scale per 256 such scales (double quantization): 4.127 bits
// (Dettmers et al., arXiv:2305.14314, Section 3).
inline constexpr double kNf4BytesPerParameter = (4.0 + 8.0 / 64 + 32.0 / (64 * 256)) / 8;
// Master weights and Adam moments, bytes per parameter: 12 (FP32), about 6 (8-bit moments).
double optimizer_state_bytes_per_parameter(Optimizer optimizer);
// Whether the optimizer keeps each FP32 master weight as the 16 bits its BF16 parameter lacks
// (Optimizer::distributed_fused_adam with BF16 parameters).
bool master_weights_as_remainders(const TrainingSpec& training);
// What of the states the optimizer holds in memory: 2 bytes fewer a parameter where the master
// weight is kept as remainders; a checkpoint still writes it whole.
double optimizer_state_bytes_held(const TrainingSpec& training);
// The memory traffic of one parameter's optimizer step, on the GPU or on the host's CPU:
// Adam's update, and under FP16's dynamic loss scaling first the check for infinities and the
// unscale of its FP32 gradient, one pass that reads and writes it (8 bytes:
// torch._amp_foreach_non_finite_check_and_unscale_, Megatron-LM's
// _unscale_main_grads_and_check_for_nan).
double optimizer_step_bytes_per_parameter(const TrainingSpec& training);
Op adam_step_op(double local_parameters, const TrainingSpec& training);
// A memory-bound kernel moving `bytes` through HBM (read and written together).
Op memory_op(std::string name, double bytes);

double decoder_layer_parameters(const ModelSpec& model);
// A decoder layer's attention projection weights: Q, K, V and the output projection, or under
// latent attention its down and up projections and the output projection.
double attention_projection_weights(const ModelSpec& model);
// The weights of a decoder layer every tensor-parallel rank holds whole: latent attention's
// down projections (Megatron-Core's duplicated linear_q_down_proj and linear_kv_down_proj, run
// on each rank's sequence shard).
double tensor_replicated_weights(const ModelSpec& model);
// What one rank of `tp` holds of `parameters` of `layers` decoder layers: their share, and
// the replicated weights whole.
double tensor_rank_layer_parameters(const ModelSpec& model, double parameters, double layers,
                                    int tp);
// A decoder layer's projection weights (QKV, output, each MLP's or expert's matrices of
// `experts_held` experts, a shared expert's): what FP8 casts, without norms, biases, the router
// and a shared expert's gate.
double layer_projection_weights(const ModelSpec& model, double experts_held);
// A rank's share of them: split over tp, with the experts expert parallelism leaves it.
double rank_layer_projection_weights(const ModelSpec& model, const ParallelPlan& plan);
// What an all-gather of `parameters` weights moves when `fp8` of them are FP8 primary weights
// (fp8_params, gathered in FP8 as Megatron-Core's --fp8-param-gather does) and `nf4` QLoRA's
// 4-bit base (gathered packed with its scales, as FSDP-QLoRA's quant_storage does), the rest
// BF16.
double weight_gather_bytes(double parameters, double fp8, double nf4 = 0);
// One MLP's parameters: the dense layer's, or one expert's in a mixture of experts.
double mlp_parameters(const ModelSpec& model);
// A decoder layer's experts' parameters (0 without a mixture of experts): its routed experts,
// which expert parallelism splits; a shared expert is held as a dense MLP.
double layer_expert_parameters(const ModelSpec& model);
// A mixture of experts' shared expert and its gate (0 without).
double shared_expert_parameters(const ModelSpec& model);
double embedding_parameters(const ModelSpec& model);  // token embeddings (vocab x hidden)
double position_parameters(const ModelSpec& model);   // the learned position table, if any
double head_parameters(const ModelSpec& model);       // final norm plus output projection if untied
// Split over pp > 1 pipeline stages, the last stage keeps its own copy of the embedding, as
// the output projection under tied embeddings and for the multi-token prediction modules'
// input tokens, with any learned position table (Megatron-Core's: embedding built where
// pre_process or mtp_process, its gradient all-reduced with the first stage's); 0 otherwise.
double embedding_copy_parameters(const ModelSpec& model, int pp);
// One multi-token prediction module's parameters: its decoder layer, eh_proj (2 hidden x
// hidden) and its three norms; the embedding and output head it uses are the model's.
double mtp_module_parameters(const ModelSpec& model);
// Parameters of each unit that is gathered (and, when all of it trains, reduced and bucketed)
// as a whole, in forward order: the embedding, each decoder layer, each multi-token prediction
// module, the head (an FSDP wrapping of one module per layer).
std::vector<double> fsdp_unit_parameters(const ModelSpec& model);
// The slots [first, end) of virtual pipeline stage v of `virtual_stages` (at most the layers)
// among the model's decoder layers followed by its multi-token prediction modules, split as
// split_stage_slots does (workloads/layout/stage_split.hpp): a module weighs as a layer, so
// the last stage holds one layer fewer per module than it would without (a rule keeps every
// module on the last stage, as Megatron-Core places them).
LayerRange virtual_stage_slots(const ModelSpec& model, int virtual_stages, int v);
// Of those, the decoder layers, and the number of modules.
LayerRange virtual_stage_layers(const ModelSpec& model, int virtual_stages, int v);
int virtual_stage_mtp_layers(const ModelSpec& model, int virtual_stages, int v);
// The decoder layers pipeline stage `stage` holds, over all its vpp chunks, each multi-token
// prediction module's counted as one.
int stage_layers(const ModelSpec& model, const ParallelPlan& plan, int stage);
// Of those, the layers that route to experts (ModelSpec::layer_has_experts).
int stage_expert_layers(const ModelSpec& model, const ParallelPlan& plan, int stage);
// The projection weights of a rank of pipeline stage `stage`: each of its layers' kind's.
double stage_projection_weights(const ModelSpec& model, const ParallelPlan& plan, int stage);
// The units virtual pipeline stage v of `virtual_stages` holds, as indices into
// fsdp_unit_parameters (0 the embedding, 1..layers the layers, then the multi-token prediction
// modules, the head last) in forward order: its layers, the embedding on the first, the
// modules and the head on the last.
std::vector<std::size_t> virtual_stage_units(const ModelSpec& model, int virtual_stages, int v);

// Bytes one tensor-parallel rank of `tp` keeps for backward per token of the micro-batch, in
// one decoder layer: BF16 activations, one-byte dropout masks, FP32 log-sum-exp
// (FlashAttention) or BF16 probabilities (eager attention), and under a mixture of experts each
// token's k permuted copies and k expert outputs, the experts' tensors and the router's
// scores. Tensor and sequence parallelism split all of it tp ways except the permuted copies,
// which every tp rank holds for the whole sequence (its own shard's under `expert_tp` 1: 0 is
// tp), and the expert outputs, which it holds so under the allgather dispatcher (the rank's
// tokens' under all-to-all); without sequence
// parallelism every rank also keeps the norms' inputs, the first GEMMs' normed inputs and the
// dropout masks whole. For a GPT layer with eager attention and dropout this is Korthikanti et
// al.'s (34h + 5as) / tp, or without sequence parallelism 10h + (24h + 5as) / tp.
// Selective recomputation keeps of each module it reruns (`modules`) only the module's input.
// Under expert parallelism over `ep` ranks the experts' tensors are the busiest rank's
// (expert_rank_load). Under Ulysses (`ulysses`: cp > 1, cp_comm_type a2a) attention keeps its
// output before the all-to-all sends it back, and o_proj the tensor the all-to-all returns.
double decoder_layer_saved_bytes_per_token(const ModelSpec& model, const TrainingSpec& training,
                                           Recompute recompute = Recompute::none, int tp = 1,
                                           bool sequence_parallel = true,
                                           const RecomputeModules& modules = {}, int ep = 1,
                                           bool tp_comm_overlap = false, bool ulysses = false,
                                           int expert_tp = 0);
// What torchtitan's per-op policy keeps per token that no recomputation keeps as such: down's
// whole output (SwiGLU) and, under tp > 1, the two reduce-scatters' outputs (all-reduces',
// whole, without sequence parallelism).
double per_op_outputs_kept_only(const ModelSpec& model, int tp, bool sequence_parallel = true);

}  // namespace fleetsim
