// A mixture of experts' router as it trains: under expert parallelism the busiest rank of each
// expert group, which every all-to-all waits for, computes and receives more than its share.
#include <catch2/catch.hpp>

#include "common/small_job.hpp"
#include "sim/step/memory_check.hpp"
#include "sim/step/step_executor.hpp"
#include "workloads/memory_model.hpp"

using namespace fleetsim;

namespace {

// The small job with 8 experts, 2 a token, spread over 4 expert-parallel ranks.
StepInputs expert_parallel(double imbalance, double capacity = 0) {
  StepInputs in = testing::with_experts(testing::small_job());
  in.plan.ep = 4;
  in.training.expert_load_imbalance = imbalance;
  in.training.expert_capacity_factor = capacity;
  return in;
}

}  // namespace

TEST_CASE("an imbalanced router slows the step monotonically, and a balanced one is today's") {
  // The busiest rank's experts run 1, 1.25, 1.5 and 2 times a balanced share of the tokens,
  // and its all-to-alls carry as much more: each step is longer than the one before. The
  // model FLOPs are the balanced ones throughout (MFU falls with the time), the executed ones
  // grow, and so does the activation memory of the experts.
  const StepOutcome balanced = simulate_step(expert_parallel(1));
  StepInputs default_routing = testing::with_experts(testing::small_job());
  default_routing.plan.ep = 4;
  CHECK(simulate_step(default_routing).step.step_time_s == balanced.step.step_time_s);
  double previous_s = balanced.step.step_time_s;
  double previous_hardware = balanced.step.hardware_flops;
  double previous_bytes = check_memory(expert_parallel(1)).memory.total_bytes;
  for (const double imbalance : {1.25, 1.5, 2.0}) {
    CAPTURE(imbalance);
    const StepOutcome skewed = simulate_step(expert_parallel(imbalance));
    CHECK(skewed.step.step_time_s > previous_s);
    CHECK(skewed.step.model_flops == Approx(balanced.step.model_flops));
    CHECK(skewed.step.hardware_flops > previous_hardware);
    const double bytes = check_memory(expert_parallel(imbalance)).memory.total_bytes;
    CHECK(bytes > previous_bytes);
    previous_s = skewed.step.step_time_s;
    previous_hardware = skewed.step.hardware_flops;
    previous_bytes = bytes;
  }
}

TEST_CASE(
    "a capacity factor caps the busiest rank's load, and without ep routing changes nothing") {
  // Capacity 1.25: a load of 2 is cut to 1.25 (tokens past it dropped), so the step is the one
  // with an imbalance of 1.25.
  CHECK(expert_rank_load(expert_parallel(2.0, 1.25).training, 4) == 1.25);
  CHECK(simulate_step(expert_parallel(2.0, 1.25)).step.step_time_s ==
        Approx(simulate_step(expert_parallel(1.25)).step.step_time_s));
  // Every rank holding every expert runs all of its tokens' experts whatever their split.
  StepInputs all_experts = expert_parallel(1.5);
  all_experts.plan.ep = 1;
  StepInputs balanced = expert_parallel(1);
  balanced.plan.ep = 1;
  CHECK(simulate_step(all_experts).step.step_time_s == simulate_step(balanced).step.step_time_s);
}

TEST_CASE("a router's load is refused below balance, or on a model without experts") {
  StepInputs in = expert_parallel(0.9);
  const std::vector<JobProblem> below = recipe_problems(in.model, in.training);
  REQUIRE(below.size() == 1);
  CHECK(below.front().rule == "expert-load-at-least-balanced");
  StepInputs dense = testing::small_job();
  dense.training.expert_capacity_factor = 1.25;
  const std::vector<JobProblem> no_experts = recipe_problems(dense.model, dense.training);
  REQUIRE(no_experts.size() == 1);
  CHECK(no_experts.front().rule == "expert-settings-need-experts");
  CHECK(no_experts.front().fields.front() == "training.expert_capacity_factor");
}

TEST_CASE("grouped expert GEMMs run the same work in fewer, fuller waves") {
  // 64 experts of the small job's width, 2 a token, ep 4: 16 experts a rank, each expert's
  // GEMMs a few tiles. Grouped, the step is shorter and executes the same FLOPs.
  StepInputs sequential = expert_parallel(1);
  sequential.model.experts = 64;
  StepInputs grouped_experts = sequential;
  grouped_experts.training.expert_gemm = ExpertGemm::grouped;
  const StepOutcome one_by_one = simulate_step(sequential);
  const StepOutcome at_once = simulate_step(grouped_experts);
  CHECK(at_once.step.step_time_s < one_by_one.step.step_time_s);
  CHECK(at_once.step.hardware_flops == Approx(one_by_one.step.hardware_flops));
  CHECK(at_once.step.model_flops == Approx(one_by_one.step.model_flops));
}

TEST_CASE("shared_expert_overlap hides part of the expert-parallel exchanges, never more") {
  // The small job's experts over 4 expert-parallel ranks with a shared expert of 4,096: with
  // the overlap its two GEMMs run beside the dispatch and combine all-to-alls (and their
  // weight gradients beside theirs in backward). The step gets shorter, by no more than the
  // communication it left exposed before (the expert-parallel exchanges, and the data-parallel
  // reductions, whose last buckets the reordered weight gradients fill at other times); the
  // compute is the same work, and the model's FLOPs are the same.
  StepInputs in = expert_parallel(1);
  in.model.shared_expert_ffn = 4096;
  const StepOutcome serial = simulate_step(in);
  in.training.shared_expert_overlap = true;
  const StepOutcome overlapped = simulate_step(in);
  REQUIRE(serial.simulated);
  REQUIRE(overlapped.simulated);
  const StepBreakdown& before = serial.step.breakdown;
  REQUIRE(before.exposed_ep_s > 0);
  const double saved = serial.step.step_time_s - overlapped.step.step_time_s;
  CHECK(saved > 0);
  CHECK(saved <= before.exposed_comm_s * (1 + 1e-9));
  CHECK(overlapped.step.breakdown.compute_s >= before.compute_s * (1 - 1e-9));
  CHECK(overlapped.step.breakdown.exposed_ep_s < before.exposed_ep_s);
  CHECK(overlapped.step.model_flops == Approx(serial.step.model_flops));
}

TEST_CASE("the breakdown tells tensor- from expert-parallel exchanges when a layout has both") {
  // tp 2 x ep 4: the blocks' gathers and reduce-scatters (and the dispatcher's gather of what
  // each tp rank received) are tensor-parallel, the all-to-alls expert-parallel; each is
  // exposed in its own kind, and the kinds add up to the exposed communication.
  StepInputs in = expert_parallel(1);
  in.plan.tp = 2;
  in.plan.dp = 4;
  const StepOutcome both = simulate_step(in);
  REQUIRE(both.simulated);
  const StepBreakdown& b = both.step.breakdown;
  CHECK(b.exposed_tp_s > 0);
  CHECK(b.exposed_ep_s > 0);
  CHECK(b.exposed_cp_s == 0);
  double sum = 0;
  for (const ExposedPart& part : kExposedParts) sum += b.*part.seconds;
  CHECK(sum == Approx(b.exposed_comm_s).epsilon(1e-12));
}
