#include "sim/plan/planner.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "calibration/kernel_cost.hpp"
#include "sim/engine/errors.hpp"
#include "sim/step/collective_benchmark.hpp"
#include "sim/step/step_executor.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

constexpr std::array kMicroBatches = {1, 2, 4, 8};
constexpr int kMaxVirtualStages = 8;
constexpr std::array kRecomputeModes = {Recompute::none, Recompute::selective, Recompute::full};

std::vector<int> divisors(int n) {
  std::vector<int> found;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) found.push_back(d);
  }
  return found;
}

// Every layout of the search, in a fixed order, with the base's recipe and cluster.
std::vector<StepInputs> enumerate_layouts(const StepInputs& base) {
  const int gpus = base.node.gpus * base.nodes;
  std::vector<StepInputs> layouts;
  for (int tp = 1; tp <= base.node.gpus; tp *= 2) {
    if (gpus % tp != 0) continue;
    for (const int pp : divisors(base.model.layers)) {
      if (gpus % (tp * pp) != 0) continue;
      std::vector<int> virtual_stages{1};
      if (pp > 1) {
        for (const int v : divisors(base.model.layers / pp)) {
          if (v > 1 && v <= kMaxVirtualStages) virtual_stages.push_back(v);
        }
      }
      for (const int micro_batch : kMicroBatches) {
        for (const int vpp : virtual_stages) {
          for (int zero = 0; zero <= (pp > 1 ? 1 : 3); ++zero) {
            StepInputs inputs = base;
            inputs.training.micro_batch = micro_batch;
            inputs.plan.tp = tp;
            inputs.plan.pp = pp;
            inputs.plan.dp = gpus / (tp * pp);
            inputs.plan.vpp = vpp;
            inputs.plan.schedule = PipelineSchedule::one_f_one_b;
            inputs.plan.zero_stage = zero;
            // The base's choice, where there is tensor parallelism to overlap.
            inputs.plan.tp_comm_overlap = base.plan.tp_comm_overlap && tp > 1;
            inputs.plan.recompute = Recompute::none;
            layouts.push_back(std::move(inputs));
          }
        }
      }
    }
  }
  return layouts;
}

struct Candidate {
  StepInputs inputs;
  double bound_s = 0;
  std::size_t order = 0;  // enumeration index: the tie-break
};

// Fastest first; equal step times in enumeration order.
bool ranks_before(const PlannedLayout& a, std::size_t a_order, const PlannedLayout& b,
                  std::size_t b_order) {
  if (a.outcome.step.step_time_s != b.outcome.step.step_time_s) {
    return a.outcome.step.step_time_s < b.outcome.step.step_time_s;
  }
  return a_order < b_order;
}

// The time of each tensor-parallel collective of a layer alone on an idle node, simulated once
// per (tp, op, size): a collective that shares links can only take longer, and the compute
// stream waits for each.
class TpCollectiveClock {
 public:
  double seconds(const StepInputs& inputs, const TpCollective& collective) {
    const auto key = std::tuple{inputs.plan.tp, collective.op, collective.size_bytes};
    const auto known = seconds_.find(key);
    if (known != seconds_.end()) return known->second;
    StepInputs one_node = inputs;
    one_node.nodes = 1;
    const double time_s =
        benchmark_collective(one_node, collective.op, inputs.plan.tp, {collective.size_bytes})
            .front()
            .time_us *
        1e-6;
    seconds_.emplace(key, time_s);
    return time_s;
  }

 private:
  std::map<std::tuple<int, CollectiveOp, double>, double> seconds_;
};

double lower_bound_s(const StepInputs& inputs, TpCollectiveClock& clock) {
  const ParallelPlan& plan = inputs.plan;
  const LayerOps layer = decoder_layer_ops(inputs.model, inputs.training, plan.tp, plan.recompute);
  const auto blocking_s = [&](const std::vector<Op>& ops) {
    double seconds = 0;
    for (const Op& op : ops) {
      seconds += op.collective ? clock.seconds(inputs, *op.collective)
                               : kernel_seconds(inputs.gpu, op.kernel);
    }
    return seconds;
  };
  const double forward_s = blocking_s(layer.forward);
  // Full recomputation runs each layer's forward again before its backward.
  const double backward_s =
      blocking_s(layer.backward) + (plan.recompute == Recompute::full ? forward_s : 0.0);
  const double micro_batches = static_cast<double>(inputs.training.global_batch) /
                               (static_cast<double>(plan.dp) * inputs.training.micro_batch);
  const double chunk_layers =
      static_cast<double>(inputs.model.layers) / (static_cast<double>(plan.pp) * plan.vpp);
  // The last stage runs all its chunks of every micro-batch, one after another: it cannot
  // start before the first micro-batch's forward has crossed the pp - 1 stages before it, and
  // after its last backward the gradient still crosses pp - 1 stages back to the first.
  // The embedding, the optimizer step and data-parallel traffic only add to this.
  const double chunk_s = chunk_layers * (forward_s + backward_s);
  // The last stage also runs the output head of every micro-batch.
  const LayerOps head = head_ops(inputs.model, inputs.training.micro_batch, inputs.training.seq_len,
                                 plan.tp, inputs.training.lora.has_value());
  const double head_s = blocking_s(head.forward) + blocking_s(head.backward);
  return (micro_batches * plan.vpp + (plan.pp - 1)) * chunk_s + micro_batches * head_s;
}

}  // namespace

double step_lower_bound_s(const StepInputs& inputs) {
  TpCollectiveClock clock;
  return lower_bound_s(inputs, clock);
}

PlanResult search_layouts(const StepInputs& base, const PlanOptions& options) {
  if (options.top == 0 || options.batch_size == 0) {
    throw ModelError("the planner needs top and batch_size of at least 1");
  }
  PlanResult result;
  std::vector<StepInputs> layouts = enumerate_layouts(base);
  result.layouts = layouts.size();

  // The memory check and the job rules for every layout, with the least recomputation that
  // fits: independent, so in parallel, each into its own slot.
  std::vector<std::optional<Candidate>> checked(layouts.size());
  std::vector<char> refused(layouts.size(), 0);
  tbb::parallel_for(std::size_t{0}, layouts.size(), [&](std::size_t i) {
    std::size_t refusals = 0;
    for (const Recompute recompute : kRecomputeModes) {
      StepInputs inputs = layouts[i];
      inputs.plan.recompute = recompute;
      try {
        if (!check_memory(inputs).memory.fits()) continue;
      } catch (const ModelError&) {
        ++refusals;  // the job rules refuse this combination
        continue;
      }
      checked[i] = Candidate{std::move(inputs), 0.0, i};
      return;
    }
    refused[i] = refusals == kRecomputeModes.size();
  });
  std::vector<Candidate> candidates;
  TpCollectiveClock clock;
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    if (refused[i]) {
      ++result.refused;
    } else if (!checked[i]) {
      ++result.not_fitting;
    } else {
      candidates.push_back(std::move(*checked[i]));
      candidates.back().bound_s = lower_bound_s(candidates.back().inputs, clock);
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.bound_s < b.bound_s; });

  std::vector<std::pair<PlannedLayout, std::size_t>> ranked;  // with enumeration order
  std::size_t next = 0;
  while (next < candidates.size()) {
    // The slowest layout of a full ranking: nothing whose bound is no better can enter it.
    const auto cannot_enter = [&](const Candidate& c) {
      return ranked.size() == options.top &&
             c.bound_s >= ranked.back().first.outcome.step.step_time_s;
    };
    if (cannot_enter(candidates[next])) break;  // bounds only grow from here
    // The first batch fills the ranking; later ones are small, so the bound prunes early.
    const std::size_t batch = ranked.empty() ? options.top : options.batch_size;
    const std::size_t end = std::min(candidates.size(), next + batch);
    std::vector<PlannedLayout> replays(end - next);
    tbb::parallel_for(next, end, [&](std::size_t i) {
      replays[i - next] = {candidates[i].inputs, simulate_step(candidates[i].inputs),
                           candidates[i].bound_s};
    });
    for (std::size_t i = next; i < end; ++i) {
      ranked.emplace_back(std::move(replays[i - next]), candidates[i].order);
    }
    result.replayed += end - next;
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return ranks_before(a.first, a.second, b.first, b.second);
    });
    if (ranked.size() > options.top) ranked.resize(options.top);
    next = end;
  }
  result.bounded_out = candidates.size() - next;
  for (auto& [layout, order] : ranked) result.ranked.push_back(std::move(layout));
  return result;
}

}  // namespace fleetsim
