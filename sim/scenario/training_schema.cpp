// training: the recipe (method, precision, optimizer, batch, sequence, attention, LoRA).
#include <algorithm>
#include <string>

#include "sim/scenario/loader.hpp"

namespace fleetsim {

using namespace fields;

namespace {

// A dropout probability: in [0, 1).
double read_probability(const Field& dropout) {
  const double p = read_number(dropout);
  if (p < 0 || p >= 1) {
    fail(dropout, "expected a probability in [0, 1), got " + describe(dropout.node),
         "dropout is the probability of zeroing an activation; 0 turns it off");
  }
  return p;
}

const Keys kTrainingKeys = {"method",
                            "precision",
                            "optimizer",
                            "seq_len",
                            "global_batch",
                            "micro_batch",
                            "grad_reduce_dtype",
                            "tokens",
                            "attention",
                            "dropout",
                            "lora",
                            "cross_entropy",
                            "elementwise",
                            "fp8_params",
                            "fp8_weight_cache",
                            "activation_fp8_input",
                            "expert_load_imbalance",
                            "expert_capacity_factor",
                            "expert_gemm",
                            "token_dispatcher",
                            "shared_expert_overlap"};

}  // namespace

TrainingSpec parse_training(const Field& f) {
  expect_map(f, kTrainingKeys);
  const std::string method =
      find(f, "method")
          ? read_choice(*find(f, "method"), {"full", "lora", "qlora", "dora", "qdora"})
          : "full";
  const bool lora = method != "full";
  TrainingSpec t;
  if (auto precision = find(f, "precision")) {
    const std::string name = read_choice(*precision, {"bf16", "fp16", "fp8"});
    t.precision = name == "fp8"    ? Precision::fp8
                  : name == "fp16" ? Precision::fp16
                                   : Precision::bf16;
  }
  if (auto optimizer = find(f, "optimizer")) {
    const std::string name =
        read_choice(*optimizer, {"adam", "adam8bit", "distributed_fused_adam"});
    t.optimizer = name == "adam8bit"                 ? Optimizer::adam8bit
                  : name == "distributed_fused_adam" ? Optimizer::distributed_fused_adam
                                                     : Optimizer::adam;
  }
  if (lora) {
    t.lora = LoraSpec{};
    t.lora->quantized_base = method == "qlora" || method == "qdora";
    t.lora->weight_decomposed = method == "dora" || method == "qdora";
    if (auto spec = find(f, "lora")) {
      expect_map(*spec, {"rank", "targets", "dropout", "sequence_all_to_all"});
      if (auto rank = find(*spec, "rank")) t.lora->rank = read_int(*rank, 1);
      if (auto dropout = find(*spec, "dropout")) t.lora->dropout = read_probability(*dropout);
      if (auto all_to_all = find(*spec, "sequence_all_to_all")) {
        t.lora->sequence_all_to_all = read_bool(*all_to_all);
      }
      if (auto targets = find(*spec, "targets")) {
        t.lora->targets.clear();
        for (const Field& target : read_list(*targets, 0, "module names")) {
          const std::string name =
              read_choice(target, {"q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up"});
          if (std::find(t.lora->targets.begin(), t.lora->targets.end(), name) ==
              t.lora->targets.end()) {
            t.lora->targets.push_back(name);
          }
        }
      }
    }
  } else if (auto spec = find(f, "lora")) {
    fail(*spec, "lora settings without a low-rank method (lora, qlora, dora or qdora)",
         "set method: lora (or qlora, dora, qdora), or remove lora");
  }
  t.seq_len = read_int(require(f, "seq_len"), 1);
  t.global_batch = read_int(require(f, "global_batch"), 1);
  t.micro_batch = read_int(require(f, "micro_batch"), 1);
  if (auto dtype = find(f, "grad_reduce_dtype")) {
    t.grad_reduce_bytes = read_choice(*dtype, {"bf16", "fp32"}) == "fp32" ? 4 : 2;
  }
  if (auto fp8_params = find(f, "fp8_params")) t.fp8_params = read_bool(*fp8_params);
  if (auto cache = find(f, "fp8_weight_cache")) t.fp8_weight_cache = read_bool(*cache);
  if (auto store = find(f, "activation_fp8_input")) t.activation_fp8_input = read_bool(*store);
  if (auto attention = find(f, "attention")) {
    // flash: the GPU profile's default kernel; or a kernel by name, checked against the
    // profile once the cluster is known (check_attention_kernel).
    const std::string choice =
        read_choice(*attention, {"flash", "eager", "fa2", "fa3", "cudnn", "ck"});
    t.attention = choice == "eager" ? Attention::eager : Attention::flash;
    t.attention_kernel = attention_kernel_named(choice);
  }
  if (auto cross_entropy = find(f, "cross_entropy")) {
    const std::string choice =
        read_choice(*cross_entropy, {"unfused", "fused", "in_place", "log_softmax", "compiled"});
    t.cross_entropy = choice == "fused"         ? CrossEntropy::fused
                      : choice == "in_place"    ? CrossEntropy::in_place
                      : choice == "log_softmax" ? CrossEntropy::log_softmax
                      : choice == "compiled"    ? CrossEntropy::compiled
                                                : CrossEntropy::unfused;
  }
  if (auto elementwise = find(f, "elementwise")) {
    t.elementwise = read_choice(*elementwise, {"fused", "eager"}) == "eager" ? Elementwise::eager
                                                                             : Elementwise::fused;
  }
  if (auto dropout = find(f, "dropout")) t.dropout = read_probability(*dropout);
  if (auto imbalance = find(f, "expert_load_imbalance")) {
    t.expert_load_imbalance = read_number(*imbalance);
  }
  if (auto capacity = find(f, "expert_capacity_factor")) {
    t.expert_capacity_factor = read_number(*capacity);
  }
  if (auto expert_gemm = find(f, "expert_gemm")) {
    t.expert_gemm = read_choice(*expert_gemm, {"sequential", "grouped"}) == "grouped"
                        ? ExpertGemm::grouped
                        : ExpertGemm::sequential;
  }
  if (auto overlap = find(f, "shared_expert_overlap")) {
    t.shared_expert_overlap = read_bool(*overlap);
  }
  if (auto dispatcher = find(f, "token_dispatcher")) {
    t.token_dispatcher = read_choice(*dispatcher, {"alltoall", "allgather"}) == "allgather"
                             ? TokenDispatcher::allgather
                             : TokenDispatcher::alltoall;
  }
  // Only a run needs the token budget; a step simulation checks it and moves on.
  if (auto tokens = find(f, "tokens")) {
    if (read_number(*tokens) <= 0) {
      fail(*tokens, "expected a positive number of tokens");
    }
  }
  return t;
}

void check_attention_kernel(const Field& training, const StepInputs& in) {
  if (!in.training.attention_kernel || in.gpu.attention.count(*in.training.attention_kernel)) {
    return;
  }
  fail(require(training, "attention"),
       "the " + in.gpu.name + " profile has no " +
           attention_kernel_name(*in.training.attention_kernel) + " attention",
       "use one it calibrates (" + attention_kernels_of(in.gpu) + "), or flash for its default (" +
           attention_kernel_name(in.gpu.attention_default) + ")");
}

// A GELU MLP has no gate projection: LoRA's default targets leave it out, and a gate a scenario
// lists is reported where it is listed.
void fit_lora_targets(const Field& training, StepInputs& in) {
  auto& targets = in.training.lora->targets;
  const auto gate = std::find(targets.begin(), targets.end(), "gate");
  if (in.model.gated_mlp() || gate == targets.end()) return;
  const auto spec = find(training, "lora");
  if (const auto listed = spec ? find(*spec, "targets") : std::nullopt) {
    for (const Field& target : read_list(*listed, 0, "module names")) {
      if (read_string(target) == "gate") {
        fail(target, "a GELU MLP has no gate projection to adapt",
             "target q, k, v, o, up and down");
      }
    }
  }
  targets.erase(gate);
}

}  // namespace fleetsim
