#include "workloads/pipeline_schedule.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace fleetsim {

std::vector<Pass> pipeline_schedule(const ParallelPlan& plan, int stage, int m) {
  const int pp = plan.pp;
  // Merging a forward with the backward after it (ep_comm_overlap) takes one more forward in
  // the warm-up, so that each merged pair's passes are independent (Megatron-Core's
  // combined_1f1b.py with pp 1, schedules.py's warm-up when interleaved).
  const int merge = plan.ep_comm_overlap ? 1 : 0;
  std::vector<Pass> order;
  if (plan.schedule == PipelineSchedule::gpipe && pp > 1) {
    for (int i = 0; i < m; ++i) order.push_back({true, i, 0});
    for (int i = 0; i < m; ++i) order.push_back({false, i, 0});
    return order;
  }
  if (plan.vpp > 1) {
    // Megatron-LM's interleaved 1F1B (forward_backward_pipelining_with_interleaving): passes
    // go in groups of N micro-batches (microbatch_group, pp by default) through chunk 0, then
    // chunk 1, ..., the last group taking what remains (get_schedule_table; backward: the last
    // chunk first); the warm-up is longer by (vpp - 1) x N passes, all of them where that
    // reaches the total (Megatron-Core since 0.10, get_pp_rank_microbatches; before, every
    // stage warmed up whole when m == pp).
    const int vpp = plan.vpp;
    const int group = plan.microbatch_group_size();
    const int total = m * vpp;
    std::vector<std::pair<int, int>> table;  // (micro-batch, chunk) of the k-th forward
    table.reserve(static_cast<std::size_t>(total));
    for (int first = 0; first < m; first += group) {
      const int end = group >= m - first ? m : first + group;  // no overflow past m
      for (int chunk = 0; chunk < vpp; ++chunk) {
        for (int i = first; i < end; ++i) table.emplace_back(i, chunk);
      }
      if (end == m) break;
    }
    const auto pass = [&](int k, bool forward) {
      const auto [i, chunk] = table[static_cast<std::size_t>(k)];
      return Pass{forward, i, forward ? chunk : vpp - 1 - chunk};
    };
    const int warmup = std::min(total, (pp - stage - 1) * 2 + (vpp - 1) * group + merge);
    for (int k = 0; k < warmup; ++k) order.push_back(pass(k, true));
    for (int k = 0; k < total - warmup; ++k) {
      order.push_back(pass(warmup + k, true));
      order.back().merged = merge == 1;
      order.push_back(pass(k, false));
    }
    for (int k = total - warmup; k < total; ++k) order.push_back(pass(k, false));
    return order;
  }
  // 1F1B; without a pipeline (no warm-up) plain gradient accumulation: each micro-batch's
  // backward right after its forward, so one micro-batch's activations are live at a time
  // (two with ep_comm_overlap).
  const int warmup = std::min(pp - stage - 1 + merge, m);
  for (int i = 0; i < warmup; ++i) order.push_back({true, i, 0});
  for (int i = 0; i < m - warmup; ++i) {
    order.push_back({true, warmup + i, 0, merge == 1});
    order.push_back({false, i, 0});
  }
  for (int i = m - warmup; i < m; ++i) order.push_back({false, i, 0});
  return order;
}

}  // namespace fleetsim
