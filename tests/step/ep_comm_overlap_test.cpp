// Expert-parallel all-to-alls beside another micro-batch's compute (ep_comm_overlap): each
// steady-state forward merged with the backward after it, layer by layer, as Megatron-Core's
// combined 1F1B runs them.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/folded_steps.hpp"
#include "common/memory_items.hpp"
#include "common/small_job.hpp"
#include "sim/step/memory_check.hpp"
#include "sim/step/step_executor.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/pipeline_schedule.hpp"
#include "workloads/task_graph.hpp"

using namespace fleetsim;

namespace {

// The small job's 8 layers with 8 experts, 2 a token, over the node's 8 GPUs (ep 8, dp 8),
// 128 sequences a step: m = 128 / (2 x 8) = 8 micro-batches a replica.
StepInputs experts_over_the_node(bool overlap) {
  StepInputs in = testing::with_experts(testing::small_job());
  in.training.global_batch = 128;
  in.plan.ep = 8;
  in.plan.ep_comm_overlap = overlap;
  return in;
}

std::vector<std::string> broken_rules(const StepInputs& in) {
  std::vector<std::string> names;
  for (const JobProblem& problem : job_problems(job_subject(in.model, in.training), in.plan)) {
    names.push_back(problem.rule);
  }
  return names;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

TEST_CASE("ep_comm_overlap runs one forward ahead: with pp 1, F0 F1 B0 F2 B1 ... B(m-1)") {
  ParallelPlan plan;
  plan.ep_comm_overlap = true;
  const std::vector<Pass> order = pipeline_schedule(plan, 0, 4);
  const std::vector<std::pair<bool, int>> expected = {
      {true, 0}, {true, 1}, {false, 0}, {true, 2}, {false, 1}, {true, 3}, {false, 2}, {false, 3}};
  REQUIRE(order.size() == expected.size());
  for (std::size_t k = 0; k < order.size(); ++k) {
    CAPTURE(k);
    CHECK(order[k].forward == expected[k].first);
    CHECK(order[k].micro_batch == expected[k].second);
    // Merged: F1 with B0, F2 with B1, F3 with B2; F0 warms up alone, B3 cools down alone.
    CHECK(order[k].merged == (order[k].forward && order[k].micro_batch > 0));
  }
  // One micro-batch: F0 then B0, its own backward, never merged with it.
  for (const Pass& pass : pipeline_schedule(plan, 0, 1)) CHECK_FALSE(pass.merged);
  // Interleaved (pp 2, vpp 2, groups of 2, 4 micro-batches): stage 0 warms up with
  // (pp - 1) x 2 + (vpp - 1) x 2 = 4 forwards, one more merged: 5, and the steady state's
  // first forward comes before its first backward: 6 forwards before a backward (5 without).
  plan.pp = 2;
  plan.vpp = 2;
  const auto forwards_first = [&](const ParallelPlan& p) {
    const std::vector<Pass> passes = pipeline_schedule(p, 0, 4);
    int forwards = 0;
    while (passes[static_cast<std::size_t>(forwards)].forward) ++forwards;
    return forwards;
  };
  CHECK(forwards_first(plan) == 6);
  // With as many micro-batches as stages the warm-up is every forward: no steady state, and
  // the last warm-up forward is not merged with the first cool-down backward (which, on stage
  // 0, waits for gradients that stage 1 sends only once that forward has reached it).
  plan.pp = 2;
  for (const Pass& pass : pipeline_schedule(plan, 0, 2)) CHECK_FALSE(pass.merged);
  plan.ep_comm_overlap = false;
  CHECK(forwards_first(plan) == 5);
}

TEST_CASE("ep_comm_overlap holds a layer's activations more with pp 1") {
  // Each forward runs beside the backward of the micro-batch ahead of it, saving its layer j
  // as the backward frees layer L - 1 - j: at the peak one micro-batch's 8 layers and one of
  // the next's, 9 / 8 of the saved tensors without it, the rest of the memory unchanged.
  const MemoryBreakdown without = check_memory(experts_over_the_node(false)).memory;
  const MemoryBreakdown with = check_memory(experts_over_the_node(true)).memory;
  using testing::memory_item;
  REQUIRE(memory_item(without, "activations") > 0);
  CHECK(memory_item(with, "activations") == Approx(9.0 / 8 * memory_item(without, "activations")));
  CHECK(memory_item(with, "weights") == memory_item(without, "weights"));
  CHECK(memory_item(with, "optimizer states") == memory_item(without, "optimizer states"));
}

TEST_CASE("ep_comm_overlap moves the merged passes' all-to-alls to the expert stream") {
  // pp 1, m = 8: the pairs (F1, B0) ... (F7, B6) are merged, F0 and B7 run alone. Each layer
  // pass has two all-to-alls (dispatch, combine), so the merged pairs put 7 x 2 x 8 x 2 = 224
  // on the expert stream and the lone passes 2 x 8 x 2 = 32 on the tensor stream, as without
  // the overlap every one of the 256 is.
  const StepInputs in = experts_over_the_node(true);
  const TaskGraph graph = build_data_parallel_step(in.model, in.training, in.plan);
  const Program& program = graph.stages.front();
  int on_expert_stream = 0;
  int exchanges = 0;
  for (TaskIndex t = 0; t < program.size(); ++t) {
    const Task& task = program[t];
    const auto* work = std::get_if<CollectiveWork>(&task.work);
    if (work == nullptr || work->group != GroupKind::expert) continue;
    ++exchanges;
    if (task.stream != Stream::expert) continue;
    ++on_expert_stream;
    // What it moves is read by its own micro-batch's next op, which waits for it: a task of
    // the same micro-batch and layer lists it among its dependencies.
    const std::string_view name = task.name;
    const std::string_view layer = name.substr(0, name.find('.', name.find('.') + 1) + 1);
    bool read = false;
    for (TaskIndex later = t + 1; later < program.size() && !read; ++later) {
      if (!starts_with(program[later].name, layer)) continue;
      for (const TaskIndex dep : program[later].deps) read = read || dep == t;
    }
    CAPTURE(name);
    CHECK(read);
  }
  CHECK(exchanges == 256);
  CHECK(on_expert_stream == 224);
  // The same kernels either way: the model FLOPs of the step are unchanged.
  const StepInputs plain = experts_over_the_node(false);
  CHECK(build_data_parallel_step(plain.model, plain.training, plain.plan).model_flops_per_rank ==
        Approx(graph.model_flops_per_rank));
}

TEST_CASE("ep_comm_overlap hides the merged passes' all-to-alls behind the other pass") {
  // Without the overlap every all-to-all blocks its own micro-batch: 2m passes expose them.
  // Merged, the other pass computes beside them, and these exchanges (over NVLink, shorter
  // than the compute beside them) hide but for the two passes that run alone, F0 and
  // B(m - 1): 2 / 2m of the exposed time stays (0.95 of it here; within a quarter).
  const StepOutcome without = simulate_step(experts_over_the_node(false));
  const StepOutcome with = simulate_step(experts_over_the_node(true));
  const double m = 8;
  const double exposed = without.step.breakdown.exposed_ep_s;
  REQUIRE(exposed > 0);
  CHECK(with.step.breakdown.exposed_ep_s < 1.25 * exposed / m);
  CHECK(with.step.breakdown.exposed_ep_s > 0.75 * exposed / m);
  CHECK(with.step.step_time_s < without.step.step_time_s);
  // The exchanges beside the compute hold SMs, which the compute misses: no faster than the
  // compute alone.
  CHECK(with.step.breakdown.compute_s >= without.step.breakdown.compute_s);
  CHECK(with.step.model_flops == Approx(without.step.model_flops));
}

TEST_CASE("ep_comm_overlap folds as every rank replays it") {
  // ep 4 of dp 8: two expert groups in the node, alike.
  StepInputs in = experts_over_the_node(true);
  in.plan.ep = 4;
  const auto [folded, unfolded] = testing::folded_and_unfolded(in);
  CHECK(folded.step_time_s == Approx(unfolded.step_time_s).epsilon(1e-3));
  CHECK(folded.breakdown.exposed_ep_s == Approx(unfolded.breakdown.exposed_ep_s).epsilon(1e-3));
}

TEST_CASE("ep_comm_overlap is refused where Megatron-Core refuses it or it is not modelled") {
  using Catch::Matchers::VectorContains;
  const std::string rule = "ep-comm-overlap-as-megatron-runs-it";
  CHECK(broken_rules(experts_over_the_node(true)).empty());
  StepInputs no_experts_split = experts_over_the_node(true);
  no_experts_split.plan.ep = 1;
  CHECK_THAT(broken_rules(no_experts_split), VectorContains(rule));
  // A pipeline without interleaving has no merged passes in Megatron-Core; with it, it does.
  StepInputs pipelined = experts_over_the_node(true);
  pipelined.plan.pp = 2;
  pipelined.plan.dp = 4;
  pipelined.plan.ep = 4;
  CHECK_THAT(broken_rules(pipelined), VectorContains(rule));
  pipelined.plan.vpp = 2;
  CHECK(broken_rules(pipelined).empty());
  StepInputs recomputed = experts_over_the_node(true);
  recomputed.plan.recompute = Recompute::full;
  CHECK_THAT(broken_rules(recomputed), VectorContains(rule));
  StepInputs sharded = experts_over_the_node(true);
  sharded.plan.zero_stage = 3;
  CHECK_THAT(broken_rules(sharded), VectorContains(rule));
  StepInputs shared = experts_over_the_node(true);
  shared.model.shared_expert_ffn = 1024;
  shared.training.shared_expert_overlap = true;
  CHECK_THAT(broken_rules(shared), VectorContains(rule));
}

TEST_CASE("ep_comm_overlap with an interleaved pipeline runs and beats the blocking exchanges") {
  // pp 2 x vpp 2 over 4 layers a stage, ep 4: the steady state's merged pairs hide exchanges
  // a plain interleaved schedule exposes.
  const auto pipelined = [](bool overlap) {
    StepInputs in = experts_over_the_node(overlap);
    in.model.vocab = 256;
    in.plan.pp = 2;
    in.plan.vpp = 2;
    in.plan.dp = 4;
    in.plan.ep = 4;
    return in;
  };
  // As many micro-batches as stages: stage 0 warms up with every forward (nothing merged),
  // stage 1 merges one forward with a backward of its last chunk; it runs to its end.
  StepInputs no_steady_state = pipelined(true);
  no_steady_state.training.micro_batch = 8;
  no_steady_state.training.global_batch = 64;
  CHECK(simulate_step(no_steady_state).simulated);
  const StepOutcome without = simulate_step(pipelined(false));
  const StepOutcome with = simulate_step(pipelined(true));
  CHECK(with.step.breakdown.exposed_ep_s < without.step.breakdown.exposed_ep_s);
  CHECK(with.step.step_time_s < without.step.step_time_s);
  CHECK(with.step.model_flops == Approx(without.step.model_flops));
}
