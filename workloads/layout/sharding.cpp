#include "workloads/layout/sharding.hpp"

#include "sim/engine/errors.hpp"

namespace fleetsim {

Sharding::Sharding(const ParallelPlan& plan)
    : zero_(plan.zero_stage),
      gathered_for_step_(fsdp_under_pipeline(plan)),
      overlap_param_gather_(plan.overlap_param_gather),
      overlap_grad_reduce_(plan.overlap_grad_reduce),
      bf16_shards_(plan.bf16_shards || plan.offload_optimizer),
      dense_ranks_(plan.gradient_ranks()),
      // An expert group holds every expert once: each expert (or its tp part) lies on
      // tp x dp x cp / (ep x its tensor parallelism) ranks.
      expert_ranks_(plan.expert_gradient_ranks()) {
  if (dense_ranks_ < 1 || expert_ranks_ < 1) {
    throw ModelError(
        "ZeRO shards over the ranks holding a parameter: dp x cp, and tp x dp x cp / (ep x "
        "expert_tp) for an expert, must be at least 1");
  }
}

double Sharding::optimizer_parameters(double dense, double experts) const {
  if (!optimizer_sharded()) return dense + experts;
  return dense / dense_ranks_ + experts / expert_ranks_;
}

}  // namespace fleetsim
