// A mixture of experts' MLP block as a decoder layer runs it: the router, the shared expert,
// the token dispatcher's exchanges and the routed experts, between the block's norm (and
// gather) and its output, which the layer builds around it (decoder_layer_ops).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "workloads/model_spec.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {

// Builds a dense MLP's ops into the layer's lists, as the layer builds its own: a prefix for
// their names, the rows it runs on, whether its first GEMM's weight gradient re-gathers its
// input, whether its activation reruns before its backward, its inner width and the ranks it
// is split over (0: tp). Returns where its down projection's ops begin in the forward and
// backward lists.
using DenseMlpBuilder = std::function<std::pair<std::size_t, std::size_t>(
    const std::string& prefix, double rows, bool regather, bool rerun_activation, double width,
    double over)>;

// What the block needs from the layer around it.
struct ExpertBlock {
  double tokens = 0;        // the rank's tokens (the block's gathered ones)
  double local_tokens = 0;  // its sequence shard's (all of them without sequence parallelism)
  int tp = 1;
  int ep = 1;
  int expert_tp = 0;                 // the experts' tensor parallelism (0: tp)
  bool all_to_all_dispatch = false;  // the all-to-all dispatcher on the rank's sequence shard
  bool frozen = false;               // LoRA's frozen weights
  bool activation_rerun = false;     // selective recomputation reruns the experts' activation
  DenseMlpBuilder mlp;
};

// The block's ops, appended to `fwd` and, collected in forward order, to `backward`.
void mixture_of_experts_ops(const ModelSpec& model, const TrainingSpec& training,
                            const ExpertBlock& block, std::vector<Op>& fwd,
                            std::vector<Op>& backward);

}  // namespace fleetsim
