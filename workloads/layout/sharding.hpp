// How a layout shards each rank's training state, and over which ranks: ZeRO's stages as
// DeepSpeed defines them, FSDP's full sharding, Megatron's distributed optimizer.
//
// ZeRO 1 shards the optimizer states (FP32 master weights and moments), ZeRO 2 the gradients
// too, ZeRO 3 the parameters too (FSDP). A dense parameter's state is sharded over the data
// group of its rank (the dp x cp ranks that hold the same parameters, rank_grid.hpp), an
// expert's over its expert_data group (the replicas that hold that expert). Gradients are
// reduced over the same groups: all-reduced when they are not sharded, reduce-scattered when
// the optimizer is. The memory model counts bytes with it, the task-graph builder picks its
// collectives with it, and the planner's bound follows it.
//
// FSDP under a pipeline (ZeRO 3 with pp > 1 and fsdp2, as PyTorch's pipelining runs
// fully_shard for torchtitan) keeps parameters sharded between steps only: a stage's units are
// gathered at their first forward and kept for the step (reshard_after_forward off), their
// gradients accumulated whole over the micro-batches and reduce-scattered once the stage's
// last backward is done (torch.distributed.pipelining calls each group's post_backward then,
// since PyTorch 2.5), the optimizer stepping on the shards. Within a step that is the
// distributed optimizer's schedule and memory, ZeRO 1's, its parameter gather always ahead of
// the forward and its reductions held back as without overlap_grad_reduce.
//
// ZeRO 2 under a pipeline, as Llama 3's FSDP ran (optimizer states and gradients sharded,
// parameters not resharded after the forward, FP32 reduce-scatters; arXiv:2407.21783 Section
// 3.3.2), is ZeRO 2's schedule on each stage: every micro-batch's gradients reduce-scattered
// into the rank's FP32 shard, the updated shards gathered for the next step. The report does
// not say when it reduces; sharded gradients leave nothing whole to accumulate into, so every
// backward reduces, as FSDP's SHARD_GRAD_OP does outside no_sync.
#pragma once

#include "workloads/layout/parallel_plan.hpp"
#include "workloads/layout/rank_grid.hpp"

namespace fleetsim {

// ZeRO 3 under a pipeline as PyTorch's pipelining runs fully_shard (fsdp2): see above.
inline bool fsdp_under_pipeline(const ParallelPlan& plan) {
  return plan.zero_stage == 3 && plan.pp > 1 && plan.fsdp2;
}

class Sharding {
 public:
  explicit Sharding(const ParallelPlan& plan);

  bool optimizer_sharded() const { return zero_ >= 1; }
  // Within the step: gradients kept sharded (reduced every micro-batch: ZeRO 2, and 3 without
  // a pipeline), parameters gathered before each use (ZeRO 3 without a pipeline).
  bool gradients_sharded() const { return zero_ >= 2 && !gathered_for_step_; }
  bool parameters_sharded() const { return zero_ >= 3 && !gathered_for_step_; }
  // ZeRO 3 under a pipeline: sharded between steps, gathered for the step (see above).
  bool gathered_for_step() const { return gathered_for_step_; }
  // ZeRO 3's FP32 shard is the parameter itself, the optimizer's master weights, with no BF16
  // copy kept between gathers (PyTorch's FSDP); DeepSpeed's ZeRO-3 and Megatron FSDP
  // (bf16_shards), or an optimizer offloaded with the master to the host, keep a BF16 shard.
  bool shard_is_master() const { return parameters_sharded() && master_is_parameter(); }
  // Between steps the FP32 master is the parameter, no BF16 copy beside it: ZeRO 3 without a
  // BF16 shard, under a pipeline too (PyTorch's FSDP gathers BF16 copies for the step only).
  bool master_is_parameter() const { return zero_ == 3 && !bf16_shards_; }

  // The ranks a dense parameter's sharded state is split over (its data group), and an
  // expert's (its expert_data group).
  int dense_ranks() const { return dense_ranks_; }
  int expert_ranks() const { return expert_ranks_; }
  // Into how many parts each state of a dense parameter is split: its data group's ranks
  // where sharded, else 1 (every rank holds it whole).
  int weight_shards() const { return parameters_sharded() ? dense_ranks_ : 1; }
  int gradient_shards() const { return gradients_sharded() ? dense_ranks_ : 1; }

  // Of a rank's `dense` and `experts` parameters, those its optimizer updates: its shards of
  // both where the optimizer is sharded, else all of them.
  double optimizer_parameters(double dense, double experts) const;

  // Gradients leave the backward pass by reduce-scatter (each rank keeps the shard it
  // updates) where the optimizer is sharded, by all-reduce where it is not.
  bool reduces_by_scatter() const { return optimizer_sharded(); }
  // Gradients are reduced every micro-batch (none kept whole to accumulate into) under ZeRO
  // 2 and 3, once after the last micro-batch's backward otherwise.
  bool reduces_every_micro_batch() const { return gradients_sharded(); }
  // Under ZeRO 1 and 2 (and FSDP under a pipeline) each rank updates its shard of whole
  // parameters, which are then all-gathered for the next forward; ZeRO 3 gathers each unit
  // before every use instead.
  bool gathers_updated_shards() const { return zero_ == 1 || zero_ == 2 || gathered_for_step_; }
  // That gather runs ahead of each unit's first forward, beside compute, rather than after the
  // optimizer step: Megatron's overlap_param_gather, and always FSDP's.
  bool gathers_ahead() const {
    return gathers_updated_shards() && (overlap_param_gather_ || gathered_for_step_);
  }
  // The gradient buckets are reduced once the backward is done, not beside it: without
  // overlap_grad_reduce, and FSDP under a pipeline.
  bool holds_back_reductions() const { return !overlap_grad_reduce_ || gathered_for_step_; }

 private:
  int zero_ = 0;
  bool gathered_for_step_ = false;
  bool overlap_param_gather_ = false;
  bool overlap_grad_reduce_ = true;
  bool bf16_shards_ = false;  // a BF16 copy of each shard kept: bf16_shards, or offloaded
  int dense_ranks_ = 1;
  int expert_ranks_ = 1;
};

}  // namespace fleetsim
