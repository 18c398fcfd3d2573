#include "workloads/lora_ops.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <tuple>

#include "sim/engine/errors.hpp"
#include "workloads/precision.hpp"

namespace fleetsim {
namespace {

constexpr double kBf16 = kBf16Bytes;

// The exchanges of an adapter's [rows, r] tensors and outputs: Megatron-Core's own linear
// layers' collectives, not Transformer Engine's userbuffers.
Op exchange(std::string name, CollectiveOp op, double size_bytes, bool beside_weight_gradient) {
  Op collective = tp_op(std::move(name), op, size_bytes);
  collective.collective->blocking = !beside_weight_gradient;
  collective.collective->beside_weight_gradient = beside_weight_gradient;
  return collective;
}

}  // namespace

std::pair<double, double> lora_module_shape(const ModelSpec& model, const std::string& module) {
  const double h = model.hidden;
  const double f = model.ffn;
  const double q = model.query_width();
  const double k = model.key_width();
  const double v = model.value_width();
  if (module == "q") return {h, q};
  if (module == "o") return {model.attention_width(), h};
  if (module == "k") return {h, k};
  if (module == "v") return {h, v};
  if (module == "qkv") return {h, q + k + v};
  if (module == "gate" || module == "up") return {h, f};
  if (module == "gate_up") return {h, 2 * f};
  if (module == "down") return {f, h};
  throw ModelError("unknown LoRA target " + module);
}

bool lora_targets(const TrainingSpec& training, const std::string& module) {
  if (!training.lora) return false;
  const auto& list = training.lora->targets;
  return std::find(list.begin(), list.end(), module) != list.end();
}

int lora_targets_among(const TrainingSpec& training, LoraModules modules) {
  return static_cast<int>(std::count_if(modules.begin(), modules.end(), [&](const char* module) {
    return lora_targets(training, module);
  }));
}

double lora_parameters_per_layer(const ModelSpec& model, const TrainingSpec& training) {
  if (!training.lora) return 0;
  double sum = 0;
  for (const std::string& module : training.lora->targets) {
    const auto [in, out] = lora_module_shape(model, module);
    // DoRA's magnitude: one per output feature.
    sum += training.lora->rank * (in + out) + (training.lora->weight_decomposed ? out : 0.0);
  }
  return sum;
}

double dora_weight_norm_bytes(const ModelSpec& model, const TrainingSpec& training, int tp) {
  if (!training.lora || !training.lora->weight_decomposed) return 0;
  double largest = 0;
  for (const std::string& module : training.lora->targets) {
    const auto [in, out] = lora_module_shape(model, module);
    largest = std::max(largest, in * out / tp);
  }
  return 2 * kBf16 * largest;
}

namespace {

// What an adapter reads beside its projection, as the rank holds it: rows x columns.
struct AdapterInput {
  double rows;
  double columns;
};
AdapterInput adapter_input(double in, const AdapterPlace& place) {
  if (place.row_parallel) return {place.rows, in / place.tp};  // its columns of the input
  // The block's gathered input, or its own sequence shard before it gathers it.
  return {place.own_gather ? place.rows / place.tp : place.rows, in};
}

// DoRA's weight norm beside one adapted projection, every forward: the factor of B A the
// rank lacks gathered (A beside a column-parallel projection, B beside a row-parallel one,
// each [r, whole side] in BF16: NeMo's _get_weight_norm), (s B) A as one GEMM (not model
// work; Python's `scaling * B @ A` scales the small B), then W + s B A and its row norms,
// memory-bound over the rank's [out, in] shard of W: after the GEMM writes the product, the
// add (two reads, a write) and the norm (a read), four passes. A 4-bit base is dequantized for
// it first. No backward: the norm is detached.
void dora_weight_norm(const LoraSpec& lora, const std::string& module, double in, double out,
                      const AdapterPlace& place, std::vector<Op>& forward) {
  const std::string name = module + ".lora_dora_";
  const double split = place.tp;
  const double rows = place.row_parallel ? out : out / split;
  const double columns = place.row_parallel ? in / split : in;
  if (place.tp > 1) {
    forward.push_back(exchange(name + "gather", CollectiveOp::all_gather,
                               kBf16 * lora.rank * (place.row_parallel ? out : in),
                               /*beside_weight_gradient=*/false));
  }
  if (lora.quantized_base) {
    forward.push_back(
        memory_op(name + "dequantize", (kNf4BytesPerParameter + kBf16) * rows * columns));
  }
  Op product = gemm_op(name + "weight", rows, columns, lora.rank);
  product.model_flops = 0;
  forward.push_back(std::move(product));
  forward.push_back(memory_op(name + "norm", 4 * kBf16 * rows * columns));
}

// With dropout DoRA runs the frozen projection a second time on the dropped input (NeMo's
// dropout_correction, (m / norm - 1) x W (dropout(x) - x); PEFT's W dropout(x)): a dropout
// of its own (read, write, its mask) and the difference (two reads, a write), the projection
// as the base runs it with its data gradient in backward, the correction scaled and added
// (five passes over the output); in backward the output's gradient scaled and the magnitude's
// share (four passes), then the dropout's backward (the gradient and mask read, written) and
// the difference's, added into the input's gradient (two reads, a write). (Modelled on one
// tensor-parallel rank: the job rule dora-dropout-without-tp.)
void dora_dropout_correction(const TrainingSpec& training, const std::string& name,
                             const AdapterInput& read, double in, double out, double added,
                             std::vector<Op>& forward, std::vector<Op>& backward) {
  const double input = read.rows * read.columns;
  const double dropout_and_difference = (5 * kBf16 + kMaskBytes) * input;
  forward.push_back(memory_op(name + "dora_correction_input", dropout_and_difference));
  backward.push_back(memory_op(name + "dora_correction_input.bwd", dropout_and_difference));
  // The model's work is the projection's once: the rerun is not counted as model FLOPs.
  const std::size_t forward_from = forward.size();
  const std::size_t backward_from = backward.size();
  projection_ops(name + "dora_correction", read.rows, out, in, training, /*frozen=*/true, forward,
                 backward);
  for (std::size_t i = forward_from; i < forward.size(); ++i) forward[i].model_flops = 0;
  for (std::size_t i = backward_from; i < backward.size(); ++i) backward[i].model_flops = 0;
  forward.push_back(memory_op(name + "dora_correction_add", 5 * kBf16 * added));
  backward.push_back(memory_op(name + "dora_correction_add.bwd", 4 * kBf16 * added));
}

}  // namespace

void lora_adapters(const ModelSpec& model, const TrainingSpec& training, LoraModules modules,
                   const AdapterPlace& place, std::vector<Op>& forward, std::vector<Op>& backward) {
  if (!training.lora) return;
  const LoraSpec& lora = *training.lora;
  const double r = lora.rank;
  const double rows = place.rows;
  const double split = place.tp;
  const bool parallel = place.tp > 1;
  const bool row_parallel = place.row_parallel;
  for (const char* module : modules) {
    if (!lora_targets(training, module)) continue;
    const auto [in, out] = lora_module_shape(model, module);
    const std::string name = std::string(module) + ".lora_";
    const AdapterInput read = adapter_input(in, place);
    // A's input columns (the projection's input as the rank holds it once gathered) and output
    // columns, B's output columns.
    const double input = row_parallel ? in / split : in;
    const double a_columns = row_parallel ? r : r / split;
    const double outputs = out / split;
    // The scaled output is added where the projection's output is: on the rank's sequence
    // shard after a row-parallel projection's reduce-scatter, whole after its all-reduce.
    const bool to_shards = row_parallel && parallel && place.sequence_parallel;
    const double added =
        row_parallel ? (to_shards ? rows / split * out : rows * out) : rows * outputs;
    const double dropped = lora.dropout > 0 ? read.rows * read.columns : 0.0;

    // Backward, in reverse: the dropout's backward (read the gradient and the mask, write);
    // the reduce-scatter of the input gradient back to the shard (own gather), or without
    // sequence parallelism its all-reduce beside A's weight gradient; A's gradients; B's with
    // the all-reduce of its [rows, r] input gradient; the output exchange's mirror; the
    // scale's.
    if (dropped > 0) {
      backward.push_back(memory_op(name + "dropout.bwd", (2 * kBf16 + kMaskBytes) * dropped));
      forward.push_back(memory_op(name + "dropout", (2 * kBf16 + kMaskBytes) * dropped));
    }
    if (place.own_gather) {
      forward.push_back(exchange(name + "input_gather", CollectiveOp::all_gather, kBf16 * rows * in,
                                 /*beside_weight_gradient=*/false));
      backward.push_back(exchange(name + "input_gather.bwd", CollectiveOp::reduce_scatter,
                                  kBf16 * rows * in, /*beside_weight_gradient=*/false));
    } else if (parallel && !row_parallel && !place.sequence_parallel) {
      backward.push_back(exchange(name + "a_input.bwd", CollectiveOp::all_reduce, kBf16 * rows * in,
                                  /*beside_weight_gradient=*/true));
    }
    forward.push_back(gemm_with_backward(name + "a", rows, a_columns, input, backward));
    if (parallel) {
      forward.push_back(exchange(name + "a_output",
                                 row_parallel ? CollectiveOp::all_reduce : CollectiveOp::all_gather,
                                 kBf16 * rows * r, /*beside_weight_gradient=*/false));
      backward.push_back(exchange(name + "b_input.bwd", CollectiveOp::all_reduce, kBf16 * rows * r,
                                  /*beside_weight_gradient=*/true));
    }
    forward.push_back(gemm_with_backward(name + "b", rows, outputs, r, backward));
    if (row_parallel && parallel) {
      // All-to-all: each rank's [rows, out / tp] becomes [rows / tp, out] (and back in
      // backward). All-gather: [rows, out] whole (its backward a split); under sequence
      // parallelism then split to the shard, whose backward all-gathers the gradient.
      const bool all_to_all = to_shards && lora.sequence_all_to_all;
      const double size = all_to_all ? kBf16 * rows * outputs : kBf16 * rows * out;
      const CollectiveOp op = all_to_all ? CollectiveOp::all_to_all : CollectiveOp::all_gather;
      forward.push_back(exchange(name + "b_output", op, size, /*beside_weight_gradient=*/false));
      if (to_shards) {
        backward.push_back(
            exchange(name + "b_output.bwd", op, size, /*beside_weight_gradient=*/false));
      }
    }
    if (lora.weight_decomposed) dora_weight_norm(lora, module, in, out, place, forward);
    if (lora.weight_decomposed && dropped > 0) {
      dora_dropout_correction(training, name, read, in, out, added, forward, backward);
    }
    forward.push_back(memory_op(name + "scale_add", 5 * kBf16 * added));
    backward.push_back(memory_op(name + "scale.bwd", 2 * kBf16 * added));
    if (lora.weight_decomposed) {
      // m / norm times the sum of the projection's and the adapter's outputs; in backward the
      // sum's gradient (read, write) and the magnitude's, the gradient times the saved sum
      // reduced over the rows (two reads).
      forward.push_back(memory_op(name + "dora_magnitude", 2 * kBf16 * added));
      backward.push_back(memory_op(name + "dora_magnitude.bwd", 4 * kBf16 * added));
    }
  }
}

void lora_input_gradient_adds(const ModelSpec& model, const TrainingSpec& training,
                              LoraModules modules, const AdapterPlace& place,
                              std::vector<Op>& backward) {
  if (!training.lora) return;
  for (const char* module : modules) {
    if (!lora_targets(training, module)) continue;
    const AdapterInput read = adapter_input(lora_module_shape(model, module).first, place);
    backward.push_back(memory_op(std::string(module) + ".lora_add_input_grad.bwd",
                                 3 * kBf16 * read.rows * read.columns));
  }
}

namespace {

// DoRA keeps, for its magnitude's gradient, the sum of each adapted projection's output and
// its adapter's, as the rank holds it (split over tp beside a column-parallel projection, and
// beside a row-parallel one on the sequence shard, whole on every rank without sequence
// parallelism); with dropout (one GPU: dora-dropout-without-tp) also the correction's output
// and its own mask of the input. A rerun MLP recomputes its adapters'.
double dora_saved_bytes_per_token(const ModelSpec& model, const TrainingSpec& training, int tp,
                                  bool sequence_parallel, bool mlp_rerun) {
  if (!training.lora->weight_decomposed) return 0;
  double kept = 0;
  // By the input the modules read: attention's (column-parallel), o (row), the MLP's.
  for (const auto& [modules, row_parallel, mlp] :
       {std::tuple{LoraModules(kLoraQkvModules), false, false},
        std::tuple{LoraModules(kLoraOutputModules), true, false},
        std::tuple{LoraModules(kLoraGateUpModules), false, true},
        std::tuple{LoraModules(kLoraDownModules), true, true}}) {
    if (mlp && mlp_rerun) continue;
    const double split = row_parallel && !sequence_parallel ? 1.0 : tp;
    for (const char* module : modules) {
      if (!lora_targets(training, module)) continue;
      const auto [in, out] = lora_module_shape(model, module);
      kept += kBf16 * out / split;
      if (training.lora->dropout > 0) kept += kBf16 * out / split + kMaskBytes * in;
    }
  }
  return kept;
}

}  // namespace

double lora_saved_bytes_per_token(const ModelSpec& model, const TrainingSpec& training, int tp,
                                  bool sequence_parallel, bool core_rerun, bool mlp_rerun,
                                  bool own_gather) {
  if (!training.lora) return 0;
  const double h = model.hidden;
  const double split = tp;
  const bool dropout = training.lora->dropout > 0;
  // A block's column adapters read its normed input, whole on every tp rank (gathered under
  // sequence parallelism): kept once, or by each adapter that gathers its own; with dropout
  // each adapter's dropped copy, and its mask on the rows it drops.
  const auto block_inputs = [&](LoraModules modules) {
    const int adapters = lora_targets_among(training, modules);
    if (adapters == 0) return 0.0;
    const double mask = kMaskBytes * h / (own_gather ? split : 1.0);
    if (dropout) return adapters * (kBf16 * h + mask);
    return (own_gather ? adapters : 1) * kBf16 * h;
  };
  const double dropped = kBf16 + kMaskBytes;  // a dropped input element and its mask
  double kept = block_inputs(kLoraQkvModules);
  if (!mlp_rerun) kept += block_inputs(kLoraGateUpModules);
  // o reads attention's output, which attention's backward keeps unless the core reruns.
  if (lora_targets(training, "o")) {
    const double q = model.attention_width();
    kept += dropout ? dropped * q / split : core_rerun ? kBf16 * q / split : 0.0;
  }
  if (lora_targets(training, "down") && !mlp_rerun) {
    kept += (dropout ? dropped : kBf16) * model.ffn / split;
  }
  // Each adapter's x A, whole on every tp rank (the MLP's recomputed with it).
  int adapters = lora_targets_among(training, kLoraQkvModules) +
                 lora_targets_among(training, kLoraOutputModules);
  if (!mlp_rerun) {
    adapters += lora_targets_among(training, kLoraGateUpModules) +
                lora_targets_among(training, kLoraDownModules);
  }
  return kept + adapters * kBf16 * training.lora->rank +
         dora_saved_bytes_per_token(model, training, tp, sequence_parallel, mlp_rerun);
}

}  // namespace fleetsim
