#include "workloads/moe_ops.hpp"

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "calibration/kernel_cost.hpp"
#include "workloads/precision.hpp"

namespace fleetsim {
namespace {

constexpr double kBf16 = kBf16Bytes;
constexpr double kFp32 = kFp32Bytes;

}  // namespace

bool shared_expert_overlapped(const ModelSpec& model, const TrainingSpec& training, int ep) {
  return model.shared_expert_ffn > 0 && training.shared_expert_overlap && ep > 1;
}

void mixture_of_experts_ops(const ModelSpec& model, const TrainingSpec& training,
                            const ExpertBlockPlace& place, const DenseMlpBuilder& mlp,
                            std::vector<Op>& fwd, std::vector<Op>& backward) {
  const double t = place.tokens;
  const double local_tokens = place.local_tokens;
  const double h = model.hidden;
  const double f = model.ffn;
  const double activation = kBf16 * t * h;  // the T x hidden tensor a block gathers
  const int tp = place.tp;
  const int ep = place.ep;
  const int expert_tp = place.expert_tp;
  const bool all_to_all_dispatch = place.all_to_all_dispatch;
  const bool frozen = place.frozen;
  const bool activation_rerun = place.activation_rerun;
  const double experts = model.experts;
  const double k = model.experts_per_token;
  const double routed = all_to_all_dispatch ? local_tokens : t;
  fwd.push_back(gemm_with_backward("router", local_tokens, experts, h, backward, frozen));
  const double route_bytes = 2 * kFp32 * local_tokens * experts + (1 + k) * kBf16 * routed * h;
  fwd.push_back(memory_op("route", route_bytes));
  backward.push_back(memory_op("route.bwd", route_bytes));
  const bool overlap_shared = shared_expert_overlapped(model, training, ep);
  // Expert parallelism: the rank's routed x k token copies go to the ranks of their experts
  // (an all-to-all of the expert group; in backward, their gradients come back). Under
  // tensor parallelism the all-to-all dispatcher then all-gathers what each tp rank received
  // (its tp ranks split the same experts), so each of the rank's experts / ep experts gets
  // ep x t x k / E tokens; with each expert whole on its rank (expert_tp 1) nothing is
  // gathered, and it gets ep x t / tp x k / E. With several experts on the rank they arrive
  // by source rank and are sorted into expert order (sort_chunks_by_idxs: each row read and
  // written), and back after the experts, before a reduce-scatter over tp sums each token's
  // partial outputs (where the experts split over tp). Under an
  // imbalanced router every rank is replayed as the group's busiest, which gates each
  // all-to-all: its experts get `load` times that (expert_rank_load), and it receives load
  // times the bytes, while the model FLOPs stay the balanced ones.
  const double load = expert_rank_load(training, ep);
  const int etp = expert_tp > 0 ? expert_tp : tp;
  const bool gathers_over_tp = all_to_all_dispatch && etp > 1;
  // The tokens whose copies reach the rank's experts: its shard's, gathered over the
  // experts' tensor parallelism under all-to-all; the block's gathered ones under allgather.
  const double expert_tokens = all_to_all_dispatch ? local_tokens * etp : t;
  const double received = load * k * kBf16 * expert_tokens * h;
  const auto all_to_all = [&](const std::string& name) {
    if (ep == 1) return;
    LayerCollective exchange{CollectiveOp::all_to_all, load * k * kBf16 * routed * h,
                             GroupKind::expert};
    if (overlap_shared) exchange.beside = Beside::next_gemm;
    fwd.push_back(Op{name, Kernel{}, 0, exchange});
    if (overlap_shared) exchange.beside = Beside::previous_gemm;
    backward.push_back(Op{name + ".bwd", Kernel{}, 0, exchange});
  };
  // A shared expert: a dense MLP of its own inner size over the block's t gathered tokens,
  // split by tp as a dense one (its first GEMM's weight gradient re-gathers its input), and
  // Qwen2-MoE's gate scoring each token (an n = 1 GEMM on every tp rank). Megatron-Core runs
  // it before the router on the layer's stream (moe_layer.py at d98e8a64); here after the
  // router, the same time on one stream. Under the all-to-all dispatcher the block gathers
  // nothing: the shared expert gathers its input and reduce-scatters its output itself, as
  // its column- and row-parallel GEMMs do under sequence parallelism (SharedExpertMLP).
  // These collectives are NCCL's, outside Transformer Engine's userbuffers: each blocks.
  // With shared_expert_overlap its first GEMM runs beside the dispatch's all-to-all and its
  // second beside the combine's, in backward their exchanges beside its weight gradients (the
  // GEMM's own part: its activation and tensor-parallel exchanges wait for the all-to-all);
  // its MLP's ops are built apart for that, split where down's begin.
  // Overlapped, Megatron-Core's shared expert gathers its input itself, in BF16, and its
  // first GEMM keeps what it gathered (its linears run without their own tensor-parallel
  // exchanges: shared_experts.py): no re-gather for the weight gradient.
  LayerOps shared;
  std::pair<std::size_t, std::size_t> shared_down{0, 0};  // where down's ops begin
  const bool shared_expert = model.shared_expert_ffn > 0;
  if (shared_expert) {
    std::swap(fwd, shared.forward);
    std::swap(backward, shared.backward);
    shared_down = mlp("shared_expert.", t, /*regather=*/!overlap_shared,
                      /*rerun_activation=*/false, model.shared_expert_ffn, 0);
    std::swap(fwd, shared.forward);
    std::swap(backward, shared.backward);
    if (all_to_all_dispatch) {
      fwd.push_back(blocking_tp_op("shared_expert.gather", CollectiveOp::all_gather, activation));
      backward.push_back(
          blocking_tp_op("shared_expert.gather.bwd", CollectiveOp::reduce_scatter, activation));
    }
  }
  // The shared expert's ops from `begin` to `end` (its forward's, its backward's), and with
  // an `exchange` named the all-to-all issued just before the first GEMM among them.
  const auto shared_part = [&](std::size_t fwd_begin, std::size_t fwd_end, std::size_t bwd_begin,
                               std::size_t bwd_end, const std::string& exchange = {}) {
    std::size_t gemm = fwd_begin;
    while (!exchange.empty() && gemm < fwd_end &&
           shared.forward[gemm].kernel.kind != KernelKind::gemm) {
      ++gemm;
    }
    const auto at = [&](std::size_t i) {
      return shared.forward.begin() + static_cast<std::ptrdiff_t>(i);
    };
    fwd.insert(fwd.end(), at(fwd_begin), at(gemm));
    if (!exchange.empty()) all_to_all(exchange);
    fwd.insert(fwd.end(), at(gemm), at(fwd_end));
    backward.insert(backward.end(),
                    shared.backward.begin() + static_cast<std::ptrdiff_t>(bwd_begin),
                    shared.backward.begin() + static_cast<std::ptrdiff_t>(bwd_end));
  };
  const auto shared_output = [&] {
    if (all_to_all_dispatch) {
      fwd.push_back(
          blocking_tp_op("shared_expert.scatter", CollectiveOp::reduce_scatter, activation));
      backward.push_back(
          blocking_tp_op("shared_expert.scatter.bwd", CollectiveOp::all_gather, activation));
    }
    // The gate scores the tokens the shared expert's output is then on: the rank's shard
    // under all-to-all, after the reduce-scatter (SharedExpertMLP), else the gathered ones.
    if (model.shared_expert_gate) {
      fwd.push_back(gemm_with_backward("shared_expert_gate", routed, 1, h, backward, frozen));
    }
  };
  if (shared_expert && !overlap_shared) {
    shared_part(0, shared.forward.size(), 0, shared.backward.size());
    shared_output();
  }
  // (With one source rank the sort is the identity, still a copy: Megatron-Core runs it
  // wherever a rank holds several experts.)
  const bool sorts =
      training.token_dispatcher == TokenDispatcher::alltoall && model.experts / ep > 1;
  if (overlap_shared) {
    shared_part(0, shared_down.first, 0, shared_down.second, "dispatch");
  } else {
    all_to_all("dispatch");
  }
  if (gathers_over_tp) {
    fwd.push_back(blocking_tp_op("dispatch_gather", CollectiveOp::all_gather, received));
    backward.push_back(
        blocking_tp_op("dispatch_gather.bwd", CollectiveOp::reduce_scatter, received));
  }
  if (sorts) {
    fwd.push_back(memory_op("sort_by_expert", 2 * received));
    backward.push_back(memory_op("sort_by_expert.bwd", 2 * received));
  }
  // The experts keep their permuted input, so their weight gradients need no re-gather.
  // Grouped, one expert's ops stand for the `groups` experts of the rank, each launched once.
  const std::size_t experts_fwd = fwd.size();
  const std::size_t experts_bwd = backward.size();
  const bool grouped_gemm = training.expert_gemm == ExpertGemm::grouped;
  const double groups = grouped_gemm ? experts / ep : 1.0;
  for (int e = 0; e < (grouped_gemm ? 1 : model.experts / ep); ++e) {
    mlp(grouped_gemm ? "experts." : "expert" + std::to_string(e) + ".",
        load * ep * expert_tokens * k / experts, /*regather=*/false, activation_rerun, f, etp);
  }
  const auto as_launched = [&](Op& op) {
    op.kernel = grouped(op.kernel, groups);
    op.model_flops *= groups / load;
  };
  for (std::size_t i = experts_fwd; i < fwd.size(); ++i) as_launched(fwd[i]);
  for (std::size_t i = experts_bwd; i < backward.size(); ++i) as_launched(backward[i]);
  if (sorts) {
    fwd.push_back(memory_op("unsort_by_expert", 2 * received));
    backward.push_back(memory_op("unsort_by_expert.bwd", 2 * received));
  }
  if (gathers_over_tp) {
    fwd.push_back(blocking_tp_op("combine_scatter", CollectiveOp::reduce_scatter, received));
    backward.push_back(blocking_tp_op("combine_scatter.bwd", CollectiveOp::all_gather, received));
  }
  if (overlap_shared) {
    shared_part(shared_down.first, shared.forward.size(), shared_down.second,
                shared.backward.size(), "combine");
    shared_output();
  } else {
    all_to_all("combine");
  }
  // Unpermute: read the k outputs, write the weighted sum; backward reads its gradient and
  // the k saved outputs (for the router weights' gradient) and writes k gradients.
  fwd.push_back(memory_op("unroute", (k + 1) * kBf16 * routed * h));
  backward.push_back(memory_op("unroute.bwd", (2 * k + 1) * kBf16 * routed * h));
  if (model.shared_expert_ffn > 0) {
    // The shared expert's output (under allgather a partial sum on each tp rank, as the
    // experts' is) added to theirs in one elementwise pass, scaled there by the gate; the
    // gate's backward reads the output gradient and the shared output and writes the scaled
    // gradient.
    if (model.shared_expert_gate) {
      backward.push_back(memory_op("shared_expert_add.bwd", 3 * kBf16 * routed * h));
    }
    fwd.push_back(memory_op("shared_expert_add", 3 * kBf16 * routed * h));
  }
}

}  // namespace fleetsim
