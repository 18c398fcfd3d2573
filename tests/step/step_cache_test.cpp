#include "sim/step/step_cache.hpp"

#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "common/small_job.hpp"
#include "sim/engine/errors.hpp"
#include "sim/step/step_executor.hpp"

using namespace fleetsim;
using fleetsim::testing::small_job;

TEST_CASE("step cache: a step asked for again is the step simulated again, simulated once") {
  StepCache steps;
  const StepInputs in = small_job();
  const StepOutcome first = steps.simulate(in, {});
  const StepOutcome again = steps.simulate(in, {});
  const StepOutcome fresh = simulate_step(in);
  CHECK(steps.simulated() == 1);
  CHECK(steps.reused() == 1);
  CHECK(again.step.step_time_s == first.step.step_time_s);
  CHECK(again.step.events == fresh.step.events);
  CHECK(again.step.step_time_s == fresh.step.step_time_s);
  // Any difference in the inputs or the options is another step.
  StepInputs slower = in;
  slower.node.nic_bytes_per_s /= 2;
  StepInputs other_gpu = in;
  other_gpu.gpu.memory_efficiency.value = 0.5;  // not among the hashed fields
  StepOptions traced;
  traced.trace_ranks = 1;
  steps.simulate(slower, {});
  CHECK(steps.simulate(other_gpu, {}).step.step_time_s > first.step.step_time_s);
  CHECK(!steps.simulate(in, traced).step.trace.empty());
  CHECK(steps.simulated() == 4);
}

TEST_CASE("step cache: threads asking for one step together wait for one simulation") {
  StepCache steps;
  const StepInputs in = small_job();
  std::vector<double> step_s(8, 0);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < step_s.size(); ++i) {
    threads.emplace_back([&, i] { step_s[i] = steps.simulate(in, {}).step.step_time_s; });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(steps.simulated() == 1);
  CHECK(steps.reused() == 7);
  for (const double s : step_s) CHECK(s == step_s.front());
}

TEST_CASE("step cache: a failed step reaches its caller and is not kept") {
  StepCache steps;
  StepInputs too_large = small_job();
  too_large.plan.dp = 16;  // 16 ranks on one 8-GPU node
  too_large.training.global_batch = 64;
  too_large.plan.zero_stage = 0;
  StepOptions replay;
  replay.replay_beyond_memory = true;
  CHECK_THROWS_AS(steps.simulate(too_large, replay), ModelError);
  CHECK_THROWS_AS(steps.simulate(too_large, replay), ModelError);
  CHECK(steps.simulated() == 2);  // tried again: an error is no result to keep
}

TEST_CASE("step cache: beyond its capacity the least recently asked for step goes") {
  StepCache steps(1);
  StepInputs a = small_job();
  StepInputs b = a;
  b.node.nic_bytes_per_s /= 2;
  steps.simulate(a, {});
  steps.simulate(b, {});
  steps.simulate(b, {});
  steps.simulate(a, {});
  CHECK(steps.simulated() == 3);
  CHECK(steps.reused() == 1);
}
