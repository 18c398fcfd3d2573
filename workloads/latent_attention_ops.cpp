#include "workloads/latent_attention_ops.hpp"

#include "workloads/precision.hpp"

namespace fleetsim {

void latent_attention_projections(const ModelSpec& model, const TrainingSpec& training,
                                  const LatentAttentionPlace& place, const NormOps& norm,
                                  std::vector<Op>& fwd, std::vector<Op>& backward) {
  const double h = model.hidden;
  const double t = place.tokens;
  const double shard = place.shard_tokens;
  const double split = place.tp;
  const bool gathers = place.tp > 1 && shard < t;
  const double rope = model.rope_head_dim;
  const double local_heads = model.heads / split;
  // A tensor-parallel all-gather of `width` BF16 values per token, blocking (in backward its
  // mirror, a reduce-scatter of the gradient).
  const auto gather = [&](const std::string& name, CollectiveOp op, double width) {
    return blocking_tp_op(name, op, kBf16Bytes * t * width);
  };
  // A latent normed on the shard, gathered, and projected up to `columns` of the rank's heads.
  const auto up = [&](const std::string& name, double latent, double columns) {
    norm(name + "_norm", shard * latent);
    if (gathers) {
      fwd.push_back(gather(name + "_gather", CollectiveOp::all_gather, latent));
      backward.push_back(gather(name + "_gather.bwd", CollectiveOp::reduce_scatter, latent));
    }
    projection_ops(name, t, columns, latent, training, false, fwd, backward);
    if (gathers) backward.push_back(gather(name + ".regather", CollectiveOp::all_gather, latent));
  };
  if (model.q_lora_rank > 0) {
    projection_ops("q_down", shard, model.q_lora_rank, h, training, false, fwd, backward);
  }
  projection_ops("kv_down", shard, model.kv_lora_rank + rope, h, training, false, fwd, backward);
  if (gathers && rope > 0) {
    fwd.push_back(gather("k_rope_gather", CollectiveOp::all_gather, rope));
    backward.push_back(gather("k_rope_gather.bwd", CollectiveOp::reduce_scatter, rope));
  }
  if (model.q_lora_rank > 0) up("q_up", model.q_lora_rank, model.query_width() / split);
  up("kv_up", model.kv_lora_rank, model.latent_key_value_width() / split);
  if (rope > 0) {
    // Read and written: each local head's rotated query part and the shared key; backward the
    // same on their gradients.
    const double rotated = 2 * kBf16Bytes * t * (local_heads + 1) * rope;
    fwd.push_back(memory_op("rope", rotated));
    backward.push_back(memory_op("rope.bwd", rotated));
  }
  // The queries and keys written whole from their parts, read once; their gradients split back.
  const double assembled = 2 * kBf16Bytes * t * (model.query_width() + model.key_width()) / split;
  fwd.push_back(memory_op("qk_assemble", assembled));
  backward.push_back(memory_op("qk_assemble.bwd", assembled));
}

}  // namespace fleetsim
