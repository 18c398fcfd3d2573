// Multi-head latent attention's projections (DeepSeek-V2 and V3) as Megatron-Core trains them:
// from a block's normed input to the queries, keys and values of the rank's heads.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "workloads/model_spec.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {

// Where the projections run: on `tokens` (the rank's), the rank's sequence shard of them
// `shard_tokens` (tokens / tp under sequence parallelism), over tp ranks.
struct LatentAttentionPlace {
  double tokens = 0;
  double shard_tokens = 0;
  int tp = 1;
};
// Adds a norm over `elements` BF16 values to forward and backward, as the layer runs its norms.
using NormOps = std::function<void(const std::string& name, double elements)>;

// The ops of MLASelfAttention's projections (megatron/core/transformer/
// multi_latent_attention.py), appended to `fwd` and `backward` (backward in forward order, the
// caller reverses it). The down projections (linear_q_down_proj, linear_kv_down_proj) are
// duplicated on every tensor-parallel rank and run on its sequence shard; each latent is normed
// there and all-gathered for its column-parallel up projection (Transformer Engine's
// LayerNormColumnParallelLinear gathers its normed input under sequence parallelism, and again
// for the weight gradient), its gradient reduce-scattered back; the rotated key, 64 wide, is
// all-gathered on its own. Without a query latent (q_lora_rank 0) the queries come from the
// block's gathered input by a column-parallel projection, which the caller runs first, as the
// ordinary QKV projection. RoPE then turns each local head's rotated part of the query and the
// shared key, and the queries and keys are assembled from their two parts (torch.cat: the
// shared key copied to every head). The gathers are NCCL's, taken as blocking: nothing runs
// beside them (Transformer Engine may run the backward's re-gather beside the data gradient
// and the reduce-scatter beside the weight gradient).
void latent_attention_projections(const ModelSpec& model, const TrainingSpec& training,
                                  const LatentAttentionPlace& place, const NormOps& norm,
                                  std::vector<Op>& fwd, std::vector<Op>& backward);

}  // namespace fleetsim
