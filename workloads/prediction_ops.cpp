// The ops at the model's ends, where it meets the vocabulary: the embedding, the output head
// with its cross-entropy, and the multi-token prediction modules between the last layer and
// the head.
#include <string>
#include <utility>
#include <vector>

#include "workloads/precision.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

constexpr double kBf16 = kBf16Bytes;  // activations and weights
constexpr double kFp32 = kFp32Bytes;

// The cross-entropy's passes over the local vocabulary shard of the logits, forward then
// backward, each a kernel with the bytes it reads plus writes per logit (BF16 2, FP32 4).
struct CrossEntropyPass {
  const char* name;
  double bytes_per_logit;
};
struct CrossEntropyPasses {
  std::vector<CrossEntropyPass> forward, backward;
};

CrossEntropyPasses cross_entropy_passes(CrossEntropy cross_entropy, bool loss_parallel) {
  switch (cross_entropy) {
    case CrossEntropy::unfused:
      // Megatron-Core's vocab_parallel_cross_entropy: an FP32 copy, its max, the max subtracted
      // in place, exp in place, the sum, the division in place (the softmax kept for backward);
      // backward scales the softmax in place by the loss gradient, and autograd casts it back
      // to the logits' BF16.
      return {{{"cast", kBf16 + kFp32},
               {"max", kFp32},
               {"shift", 2 * kFp32},
               {"exp", 2 * kFp32},
               {"sum", kFp32},
               {"normalize", 2 * kFp32}},
              {{"scale", 2 * kFp32}, {"cast", kFp32 + kBf16}}};
    case CrossEntropy::fused:
      // The same steps fused by the JIT into three kernels (the FP32 copy with its max; shift,
      // exp and sum; the division) and one backward kernel (scale in place, then BF16).
      return {{{"cast_max", kBf16 + kFp32}, {"exp_sum", 2 * kFp32}, {"normalize", 2 * kFp32}},
              {{"scale", 2 * kFp32 + kBf16}}};
    case CrossEntropy::in_place:
      // An online max and sum over the BF16 logits, then the loss and the gradient written over
      // them; backward scales that gradient in place.
      return {{{"max_sum", kBf16}, {"loss_grad", 2 * kBf16}}, {{"scale", 2 * kBf16}}};
    case CrossEntropy::log_softmax:
      if (loss_parallel) {
        // Under tensor parallelism PyTorch's loss_parallel (torch.distributed.tensor.parallel's
        // loss.py) decomposes it into separate ops on the vocabulary shard: the FP32 copy, its
        // max, the shift, exp and its sum, the log-probabilities; backward fuses the NLL's
        // and the log-softmax's as (zeros scattered + exp(log-probabilities)) x the loss's
        // gradient, each a new tensor, then the cast.
        return {{{"cast", kBf16 + kFp32},
                 {"max", kFp32},
                 {"shift", 2 * kFp32},
                 {"exp", 2 * kFp32},
                 {"sum", kFp32},
                 {"log_probabilities", 2 * kFp32}},
                {{"nll_grad", kFp32},
                 {"exp", 2 * kFp32},
                 {"add", 3 * kFp32},
                 {"scale", 2 * kFp32},
                 {"cast", kFp32 + kBf16}}};
      }
      // PyTorch's F.cross_entropy on the FP32 copy: log_softmax then nll_loss (a gather). ATen's
      // softmax kernels (SoftMax.cu) read a row too long for shared memory three times (its
      // max, its sum, the output) and write the log-probabilities. Backward: nll_loss_backward
      // zero-fills a gradient and scatters one value a row into it, log_softmax's backward
      // reads it twice (its row sum, then beside the log-probabilities) and writes a new
      // tensor, and autograd casts that to BF16.
      return {{{"cast", kBf16 + kFp32}, {"log_softmax", 4 * kFp32}},
              {{"nll_grad", kFp32}, {"log_softmax_grad", 4 * kFp32}, {"cast", kFp32 + kBf16}}};
    case CrossEntropy::compiled:
      // Inductor's partitioner keeps the BF16 logits and the rows' reductions rather than the
      // FP32 log-probabilities (functorch's min-cut, reductions not recomputed), so the forward
      // reads the logits for the max and again for the sum of exponentials; backward turns the
      // scatter into zeros into a pointwise select (optimize_scatter_upon_const_tensor) and
      // fuses the whole gradient into one kernel reading the logits and writing BF16. Under tp
      // loss_parallel's ops are traced and fused the same way: counted as on one rank.
      return {{{"max", kBf16}, {"sum_exp", kBf16}}, {{"gradient", 2 * kBf16}}};
  }
  return {};
}

}  // namespace

LayerOps embedding_ops(const ModelSpec& model, int micro_batch, int seq_len, int tp, bool frozen,
                       bool sequence_parallel) {
  const double t = static_cast<double>(micro_batch) * seq_len;
  const double h = model.hidden;
  LayerOps ops;
  // Vocabulary-parallel: each rank looks up the tokens its rows hold (zeros elsewhere); the
  // partial sums are reduce-scattered onto the sequence shards (all-reduced without sequence
  // parallelism).
  // Learned positions add a second row per token to read.
  const double rows_read = model.positions == Positions::learned ? 2 : 1;
  ops.forward.push_back(memory_op("embedding", (rows_read + 1) * kBf16 * t * h));
  if (tp > 1 && sequence_parallel) {
    ops.forward.push_back(tp_op("embedding_scatter", CollectiveOp::reduce_scatter, kBf16 * t * h));
    ops.backward.push_back(tp_op("embedding_scatter.bwd", CollectiveOp::all_gather, kBf16 * t * h));
  } else if (tp > 1) {
    ops.forward.push_back(tp_op("embedding_reduce", CollectiveOp::all_reduce, kBf16 * t * h));
  }
  // Scatter-add of the token gradients into the FP32 embedding gradient.
  // Each rank reads the whole gathered gradient; the FP32 rows it updates are its own share.
  // A frozen embedding has no gradient: its backward is nothing.
  if (frozen) return LayerOps{ops.forward, {}};
  ops.backward.push_back(memory_op("embedding.bwd", rows_read * t * h * (kBf16 + 2 * kFp32 / tp)));
  return ops;
}

namespace {

// One prediction's logits and loss from its normed hidden state: the (sequence-parallel)
// gather, the vocabulary-parallel logits GEMM, soft-capping and the cross-entropy; its ops'
// names begin with `prefix`.
LayerOps prediction_ops(const ModelSpec& model, double t, int tp, bool frozen,
                        CrossEntropy cross_entropy, bool sequence_parallel,
                        const std::string& prefix) {
  const double h = model.hidden;
  const double v = model.vocab;
  const double split = tp;
  const bool sharded = tp > 1 && sequence_parallel;  // the head's input split by sequence
  LayerOps ops;
  std::vector<Op> backward;
  if (sharded) {
    ops.forward.push_back(tp_op(prefix + "head_gather", CollectiveOp::all_gather, kBf16 * t * h));
  }
  ops.forward.push_back(gemm_with_backward(prefix + "logits", t, v / split, h, backward, frozen));
  // Cross-entropy on the local vocabulary shard (its max and sums across ranks are a few bytes
  // per token).
  const double logits = t * v / split;
  if (model.logit_softcap) {
    // cap * tanh(logits / cap) as one elementwise kernel: the BF16 logits read and written;
    // backward reads the gradient and the capped logits (tanh's derivative is 1 - tanh^2) and
    // writes the gradient.
    ops.forward.push_back(memory_op(prefix + "logit_softcap", 2 * kBf16 * logits));
  }
  const CrossEntropyPasses passes =
      cross_entropy_passes(cross_entropy, runs_loss_parallel(cross_entropy, tp));
  for (const CrossEntropyPass& pass : passes.forward) {
    ops.forward.push_back(
        memory_op(prefix + "cross_entropy." + pass.name, logits * pass.bytes_per_logit));
  }
  for (const CrossEntropyPass& pass : passes.backward) {
    ops.backward.push_back(
        memory_op(prefix + "cross_entropy." + pass.name + ".bwd", logits * pass.bytes_per_logit));
  }
  if (model.logit_softcap) {
    ops.backward.push_back(memory_op(prefix + "logit_softcap.bwd", 3 * kBf16 * logits));
  }
  if (sharded && !frozen) {
    // The logits GEMM is column-parallel on a sequence-parallel input: its weight gradient
    // needs the input gathered again.
    ops.backward.push_back(
        tp_op(prefix + "logits.regather", CollectiveOp::all_gather, kBf16 * t * h));
  }
  // The logits GEMM's input gradient, then its weight gradient (unless frozen).
  ops.backward.insert(ops.backward.end(), backward.rbegin(), backward.rend());
  if (sharded) {
    ops.backward.push_back(
        tp_op(prefix + "head_gather.bwd", CollectiveOp::reduce_scatter, kBf16 * t * h));
  } else if (tp > 1) {
    // The whole input's gradient, summed over the vocabulary shards, after the weight
    // gradient (a frozen head's waits for its data gradient: overlapped_kernel).
    Op reduce = tp_op(prefix + "head_input.bwd", CollectiveOp::all_reduce, kBf16 * t * h);
    reduce.collective->beside_weight_gradient = true;
    ops.backward.push_back(std::move(reduce));
  }
  return ops;
}

void append(std::vector<Op>& to, const std::vector<Op>& ops) {
  to.insert(to.end(), ops.begin(), ops.end());
}

}  // namespace

LayerOps head_ops(const ModelSpec& model, int micro_batch, int seq_len, int tp, bool frozen,
                  CrossEntropy cross_entropy, bool sequence_parallel) {
  const double t = static_cast<double>(micro_batch) * seq_len;
  const double norm_tokens = tp > 1 && sequence_parallel ? t / tp : t;
  const double h = model.hidden;
  // Megatron-Core's process_mtp_loss: each multi-token prediction module's logits and loss
  // first, from its own normed output, through the same output layer; then the main ones.
  std::vector<LayerOps> predictions;
  for (int module = 1; module <= model.mtp_layers; ++module) {
    predictions.push_back(prediction_ops(model, t, tp, frozen, cross_entropy, sequence_parallel,
                                         "mtp" + std::to_string(module) + "."));
  }
  predictions.push_back(prediction_ops(model, t, tp, frozen, cross_entropy, sequence_parallel, ""));
  LayerOps ops;
  ops.forward.push_back(memory_op("final_norm", 2 * kBf16 * norm_tokens * h));
  for (const LayerOps& prediction : predictions) append(ops.forward, prediction.forward);
  for (auto it = predictions.rbegin(); it != predictions.rend(); ++it) {
    append(ops.backward, it->backward);
  }
  ops.backward.push_back(memory_op("final_norm.bwd", 4 * kBf16 * norm_tokens * h));
  return ops;
}

LayerOps mtp_module_ops(const ModelSpec& model, const TrainingSpec& training, const LayerOps& layer,
                        int seq_len, int tp, bool sequence_parallel) {
  const double t = static_cast<double>(training.micro_batch) * seq_len;
  const double h = model.hidden;
  const bool sharded = tp > 1 && sequence_parallel;
  const double shard = sharded ? t / tp : t;  // the tokens a norm works on
  // A tensor-parallel all-gather of `width` BF16 values per token that the next op reads whole.
  const auto gathered = [&](const std::string& name, CollectiveOp op, double width) {
    return blocking_tp_op(name, op, kBf16 * t * width);
  };
  LayerOps ops;
  std::vector<Op> backward;  // the module's own ops' backward, in forward order
  // The next tokens' embeddings (Megatron-Core's _get_embeddings: the input rolled left by one,
  // through the model's embedding), on the sequence shard.
  const LayerOps embedding =
      embedding_ops(model, training.micro_batch, seq_len, tp, false, sequence_parallel);
  append(ops.forward, embedding.forward);
  backward.insert(backward.end(), embedding.backward.rbegin(), embedding.backward.rend());
  // enorm and hnorm, then the two concatenated into the 2 hidden wide input of eh_proj.
  for (const char* norm : {"enorm", "hnorm"}) {
    ops.forward.push_back(memory_op(norm, 2 * kBf16 * shard * h));
    backward.push_back(memory_op(std::string(norm) + ".bwd", 4 * kBf16 * shard * h));
  }
  ops.forward.push_back(memory_op("concat", 2 * kBf16 * shard * 2 * h));
  // eh_proj, column-parallel (Megatron-Core's ColumnParallelLinear, gather_output false): its
  // input gathered under sequence parallelism (re-gathered for its weight gradient, its
  // gradient reduce-scattered), else its input gradient all-reduced beside the weight gradient.
  if (sharded) {
    ops.forward.push_back(gathered("eh_proj_gather", CollectiveOp::all_gather, 2 * h));
    backward.push_back(gathered("eh_proj_gather.bwd", CollectiveOp::reduce_scatter, 2 * h));
  } else if (tp > 1) {
    Op reduce = tp_op("eh_proj_input.bwd", CollectiveOp::all_reduce, kBf16 * t * 2 * h);
    reduce.collective->beside_weight_gradient = true;
    backward.push_back(std::move(reduce));
  }
  projection_ops("eh_proj", t, h / tp, 2 * h, training, false, ops.forward, backward);
  if (sharded) backward.push_back(gathered("eh_proj.regather", CollectiveOp::all_gather, 2 * h));
  // Its output's hidden columns gathered whole (gather_from_tensor_model_parallel_region), and
  // under sequence parallelism split back to the shard: in backward the shard's gradient
  // gathered (scatter_to_sequence_parallel_region's), the split of the columns free.
  if (tp > 1) {
    ops.forward.push_back(gathered("eh_proj_output_gather", CollectiveOp::all_gather, h));
    if (sharded) {
      backward.push_back(gathered("eh_proj_output_scatter.bwd", CollectiveOp::all_gather, h));
    }
  }
  // The decoder layer, then the module's own final norm before the shared head.
  append(ops.forward, layer.forward);
  ops.forward.push_back(memory_op("final_norm", 2 * kBf16 * shard * h));
  ops.backward.push_back(memory_op("final_norm.bwd", 4 * kBf16 * shard * h));
  append(ops.backward, layer.backward);
  ops.backward.insert(ops.backward.end(), backward.rbegin(), backward.rend());
  return ops;
}

}  // namespace fleetsim
