#include "workloads/stage_units.hpp"

#include <cstddef>
#include <string>
#include <vector>

#include "workloads/lora_ops.hpp"
#include "workloads/memory_model.hpp"

namespace fleetsim {

// The units of one tensor-parallel rank of virtual pipeline stage `stage` (of pp x vpp): its
// share of each unit's parameters (norms and a router, which Megatron replicates, are a
// rounding error and counted split too) and its ops. The first virtual stage has the
// embedding, the last the multi-token prediction modules and the head, each its share of the
// layers.
std::vector<Unit> stage_units(const ModelSpec& model, const TrainingSpec& training,
                              const ParallelPlan& plan, int stage) {
  const int tp = plan.tp;
  const int mb = training.micro_batch;
  const int s = training.seq_len / plan.cp;  // the rank's share of each sequence
  const std::vector<double> parameters = fsdp_unit_parameters(model);
  const std::size_t head_index = parameters.size() - 1;
  // Under LoRA only each layer's adapters train; the embedding and head are frozen.
  const bool frozen = training.lora.has_value();
  const bool quantized = frozen && training.lora->quantized_base;
  const double adapters = lora_parameters_per_layer(model, training) / tp;
  // A layer of each kind, built once: an experts' layer or a dense one (a mixture of experts'
  // dense layers, every layer of a dense model), its ops attending fully or within the model's
  // window. Under expert parallelism an experts' layer holds experts / ep of its experts.
  struct LayerKind {
    LayerOps full;
    LayerOps local;
    double experts = 0;  // the rank's experts' parameters
    // What tensor_rank_layer_parameters counts of the layer's experts (a tp part of every
    // one) beyond the rank's own (negative where each expert is whole and ep < tp).
    double absent_experts = 0;
    double fp8 = 0;  // FP8 primary weights a distributed optimizer gathers
    double saved_bytes = 0;
  };
  const auto build_kind = [&](const ModelSpec& kind) {
    const auto layer_ops = [&](bool attends_locally) {
      return decoder_layer_ops(kind, training, tp, plan.recompute, plan.ep, plan.cp,
                               plan.sequence_parallel, plan.recompute_modules, attends_locally,
                               plan.tp_comm_overlap, plan.cp_comm_type, plan.experts_split());
    };
    LayerKind built;
    built.full = layer_ops(false);
    built.local = kind.has_local_layers(training.seq_len) ? layer_ops(true) : built.full;
    built.experts =
        plan.ep > 1 ? layer_expert_parameters(kind) / plan.ep / plan.experts_split() : 0.0;
    built.absent_experts =
        plan.ep > 1 ? layer_expert_parameters(kind) / plan.tp - built.experts : 0.0;
    // (A LoRA's frozen FP8 base is not gathered: only its BF16 adapters train.)
    built.fp8 = training.fp8_params && !frozen ? rank_layer_projection_weights(kind, plan) : 0.0;
    // (Only activation offload copies them.)
    built.saved_bytes =
        plan.activation_offload_layers > 0 ? layer_saved_bytes(kind, training, plan) : 0.0;
    return built;
  };
  std::optional<LayerKind> expert_layer, dense_layer;
  const auto kind_of = [&](int layer) -> const LayerKind& {
    if (model.layer_has_experts(layer)) {
      if (!expert_layer) expert_layer = build_kind(model);
      return *expert_layer;
    }
    if (!dense_layer) {
      dense_layer = build_kind(model.has_dense_layers() ? model.dense_layer_model() : model);
    }
    return *dense_layer;
  };
  std::vector<Unit> units;
  int layers_before = 0;  // the chunk's layers before this one
  for (const std::size_t index : virtual_stage_units(model, plan.pp * plan.vpp, stage)) {
    if (index == 0) {
      const double embed = parameters.front() / tp;
      units.push_back({"embed", embed, frozen ? 0.0 : embed,
                       embedding_ops(model, mb, s, tp, frozen, plan.sequence_parallel), false});
    } else if (index == head_index) {
      const double head = (parameters.back() + embedding_copy_parameters(model, plan.pp)) / tp;
      units.push_back(
          {"head", head, frozen ? 0.0 : head,
           head_ops(model, mb, s, tp, frozen, training.cross_entropy, plan.sequence_parallel),
           false});
    } else {
      // A decoder layer, or after the last a multi-token prediction module around a layer of
      // the last one's kind.
      const int layer = static_cast<int>(index) - 1;
      const int module = layer - model.layers + 1;  // 1, 2, ... for the modules
      const int kind_layer = module > 0 ? model.layers - 1 : layer;
      const LayerKind& kind = kind_of(kind_layer);
      const LayerOps& layer_ops = model.attends_locally(kind_layer) ? kind.local : kind.full;
      const double held = tensor_rank_layer_parameters(model, parameters[index], 1, tp) -
                          kind.absent_experts + adapters;
      const bool recomputed = plan.recompute == Recompute::full &&
                              (plan.recompute_layers == 0 || layers_before < plan.recompute_layers);
      const bool offloaded = layers_before < plan.activation_offload_layers;
      ++layers_before;
      Unit unit{module > 0 ? "mtp" + std::to_string(module) : "L" + std::to_string(layer),
                held,
                frozen ? adapters : held,
                module > 0
                    ? mtp_module_ops(model, training, layer_ops, s, tp, plan.sequence_parallel)
                    : layer_ops,
                recomputed,
                frozen ? 0.0 : kind.experts,
                kind.fp8 / held,
                offloaded ? kind.saved_bytes : 0.0,
                layers_before - 1};
      if (quantized) unit.nf4_share = (held - adapters) / held;
      unit.experts = kind.experts;
      units.push_back(std::move(unit));
    }
  }
  return units;
}

}  // namespace fleetsim
