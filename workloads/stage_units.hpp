// A pipeline stage's units as the task graph runs them: the embedding, each decoder layer
// (and multi-token prediction module) and the head of one tensor-parallel rank of a virtual
// stage, with their parameters and their ops.
#pragma once

#include <string>
#include <vector>

#include "workloads/layout/parallel_plan.hpp"
#include "workloads/model_spec.hpp"
#include "workloads/precision.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {

struct Unit {
  std::string name;
  double parameters;  // held (and gathered under ZeRO-3)
  double trainable;   // with gradients and optimizer states: all, or LoRA's adapters
  LayerOps ops;
  // Its forward rerun before its backward: a decoder layer under full recomputation (every
  // layer of the chunk, or its first recompute_layers).
  bool recomputed = false;
  // Under expert parallelism, the part of `trainable` that is the rank's experts: reduced and
  // sharded over the expert's data-parallel group, the rest over all replicas.
  double expert_trainable = 0;
  // The share of its parameters kept in FP8 (fp8_params: a layer's projections; its norms and
  // router, a rounding error, counted with them).
  double fp8_share = 0;
  // Under activation offload, its saved tensors, copied to host memory after its forward and
  // back before its backward (a decoder layer among the first activation_offload_layers).
  double offloaded_bytes = 0;
  // Its place among the chunk's decoder layers and multi-token prediction modules; -1: the
  // embedding or the head.
  int layer = -1;
  // The share of its parameters in QLoRA's 4-bit NF4: a decoder layer's frozen base, not its
  // adapters.
  double nf4_share = 0;
  // Under expert parallelism, the part of `parameters` that is the rank's experts: gathered
  // over the replicas holding them where parameters are sharded.
  double experts = 0;
  double dense_trainable() const { return trainable - expert_trainable; }
  // What an all-gather moves of `count` of its parameters: FP8 primary weights are gathered in
  // FP8 (Megatron-Core's --fp8-param-gather), QLoRA's base packed in NF4, the rest BF16.
  double gathered_bytes(double count) const {
    return weight_gather_bytes(count, count * fp8_share, count * nf4_share);
  }
};

// The units of one tensor-parallel rank of virtual pipeline stage `stage` (of pp x vpp): its
// share of each unit's parameters (norms and a router, which Megatron replicates, are a
// rounding error and counted split too) and its ops. The first virtual stage has the
// embedding, the last the multi-token prediction modules and the head, each its share of the
// layers.
std::vector<Unit> stage_units(const ModelSpec& model, const TrainingSpec& training,
                              const ParallelPlan& plan, int stage);

}  // namespace fleetsim
