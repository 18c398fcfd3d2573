// A mixture of experts' MLP block as a decoder layer runs it: the router, the shared expert,
// the token dispatcher's exchanges and the routed experts, between the block's norm (and
// gather) and its output, which the layer builds around it (decoder_layer_ops).
//
// Mixture of experts (Mixtral): the router scores every expert for each token of the rank's
// sequence shard (a GEMM; Megatron-Core routes before gathering the sequence), a softmax and
// top-k over the FP32 scores choose k, and the routed tokens are permuted into expert order
// (each row read, k copies written): the rank's own tokens under the all-to-all dispatcher,
// the block's gathered ones under allgather. Each expert's MLP, split by tp like a dense one
// (or whole: expert_tp), runs on the t x k / E tokens a balanced router sends it; then the k
// outputs of each token are brought back and summed with the router's weights. Without
// expert parallelism every expert is on every rank.
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

// Whether the shared expert runs beside the dispatcher's all-to-alls (shared_expert_overlap):
// with a shared expert and more than one expert-parallel rank (one has no all-to-all).
bool shared_expert_overlapped(const ModelSpec& model, const TrainingSpec& training, int ep);

// Where the block runs: what it needs of the layer around it.
struct ExpertBlockPlace {
  double tokens = 0;        // the rank's tokens (the block's gathered ones)
  double local_tokens = 0;  // its sequence shard's (all of them without sequence parallelism)
  int tp = 1;
  int ep = 1;
  int expert_tp = 0;                 // the experts' tensor parallelism (0: tp)
  bool all_to_all_dispatch = false;  // the all-to-all dispatcher on the rank's sequence shard
  bool frozen = false;               // LoRA's frozen weights
  bool activation_rerun = false;     // selective recomputation reruns the experts' activation
};

// The block's ops, appended to `fwd` and, collected in forward order, to `backward`: the
// lists the layer's `mlp` builds its dense MLPs into (the shared expert and each expert are
// built through it, the shared one apart by swapping the lists' contents for a while).
void mixture_of_experts_ops(const ModelSpec& model, const TrainingSpec& training,
                            const ExpertBlockPlace& place, const DenseMlpBuilder& mlp,
                            std::vector<Op>& fwd, std::vector<Op>& backward);

}  // namespace fleetsim
