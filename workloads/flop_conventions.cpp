#include "workloads/flop_conventions.hpp"

#include <algorithm>

#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

// A token's experts: all of the one dense MLP, or the router's pick.
double experts_visited(const ModelSpec& model) {
  return model.mixture_of_experts() ? model.experts_per_token : 1;
}

double mlp_matrices(const ModelSpec& model) {
  return model.gated_mlp() ? 3 : 2;
}

// The layers that route to experts, a multi-token prediction module's among them when it does.
double routed_layers(const ModelSpec& model) {
  return model.expert_layers() + (model.mtp_layer_has_experts() ? model.mtp_layers : 0);
}

}  // namespace

std::string_view to_string(FlopConvention convention) {
  return kFlopConventionNames[static_cast<int>(convention)];
}

double active_parameters(const ModelSpec& model) {
  const double idle_experts =
      model.mixture_of_experts() ? std::max(0, model.experts - model.experts_per_token) : 0;
  return model.parameters() - routed_layers(model) * idle_experts * mlp_parameters(model);
}

double flops_per_token(const ModelSpec& model, int seq_len, FlopConvention convention) {
  // Megatron-LM's num_floating_point_operations counts each multi-token prediction module's
  // layer as a layer (of the last layer's kind), its norms and eh_proj, and its logits.
  const double layers = model.layers + model.mtp_layers;
  const double h = model.hidden;
  // The score and value GEMMs of a token against the whole sequence, forward and backward:
  // 2 x 3 x seq_len FLOPs per query and value width.
  const double attention = 6 * layers * (model.query_width() + model.attention_width()) * seq_len;
  switch (convention) {
    case FlopConvention::six_n: return 6 * active_parameters(model);
    case FlopConvention::six_n_attention: return 6 * active_parameters(model) + attention;
    case FlopConvention::six_n_causal: return 6 * active_parameters(model) + attention / 2;
    case FlopConvention::megatron:
    case FlopConvention::megatron_causal:
    case FlopConvention::megatron_recompute: {
      // An experts' layer's MLPs: the experts a token visits and the shared expert; a dense
      // layer's (among experts' layers, dense_ffn wide).
      const double expert_layers = routed_layers(model);
      const double expert_mlps = experts_visited(model) * mlp_matrices(model) * h * model.ffn +
                                 mlp_matrices(model) * h * model.shared_expert_ffn;
      const double dense_ffn = model.has_dense_layers() ? model.dense_layer_model().ffn : model.ffn;
      const double dense_mlp = mlp_matrices(model) * h * dense_ffn;
      const double gemms =
          6 * (layers * attention_projection_weights(model) +
               (model.mixture_of_experts()
                    ? expert_layers * expert_mlps + (layers - expert_layers) * dense_mlp
                    : layers * dense_mlp));
      const double mtp_glue = 6.0 * model.mtp_layers * (3 * h + 2 * h * h);
      const double head = 6.0 * model.vocab * h * (1 + model.mtp_layers) + mtp_glue;
      const double layer_terms =
          gemms + (convention == FlopConvention::megatron_causal ? attention / 2 : attention);
      return (convention == FlopConvention::megatron_recompute ? layer_terms * 4 / 3
                                                               : layer_terms) +
             head;
    }
  }
  return 0;
}

}  // namespace fleetsim
