// Throughput of the event engine, the flow network and the job Monte Carlo (Google Benchmark).
#include <benchmark/benchmark.h>

#include "sim/engine/engine.hpp"
#include "sim/job/job.hpp"
#include "sim/network/flow_network.hpp"

namespace {

// A self-rescheduling chain of events over a queue kept `depth` deep: the steady state of a
// simulation whose processes each keep one pending event.
void BM_EngineEvents(benchmark::State& state) {
  const int depth = static_cast<int>(state.range(0));
  constexpr int kEventsPerRun = 1'000'000;
  for (auto _ : state) {
    fleetsim::Engine engine;
    int remaining = kEventsPerRun;
    std::function<void()> tick;
    tick = [&] {
      if (--remaining > 0)
        engine.schedule_after(fleetsim::SimTime::from_ns(1 + remaining % 97), tick);
    };
    for (int i = 0; i < depth; ++i) engine.schedule_after(fleetsim::SimTime::from_ns(i), tick);
    engine.run();
    benchmark::DoNotOptimize(engine.events_processed());
    state.SetItemsProcessed(state.items_processed() +
                            static_cast<int64_t>(engine.events_processed()));
  }
}
BENCHMARK(BM_EngineEvents)->Arg(1)->Arg(1024)->Unit(benchmark::kMillisecond);

// Flows that start and finish on a shared set of links: every start and end re-solves the
// max-min allocation of the flows it touches.
void BM_FlowChurn(benchmark::State& state) {
  const int links = 64;
  const int concurrent = static_cast<int>(state.range(0));
  for (auto _ : state) {
    fleetsim::Engine engine;
    fleetsim::FlowNetwork network(engine, std::vector<double>(links, 100e9));
    int started = 0;
    std::function<void()> start_one = [&] {
      if (started >= 20'000) return;
      const auto first = static_cast<fleetsim::FlowLinkId>(started % links);
      const auto second = static_cast<fleetsim::FlowLinkId>((started * 7 + 3) % links);
      ++started;
      network.start_flow({{first, 1.0}, {second, 1.0}}, 1e6 * (1 + started % 5),
                         fleetsim::SimTime{}, start_one);
    };
    for (int i = 0; i < concurrent; ++i) start_one();
    engine.run();
    state.SetItemsProcessed(state.items_processed() + started);
  }
}
BENCHMARK(BM_FlowChurn)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond);

// 1,000 replications of a 30-day run on 16,384 GPUs at the Llama 3 run's interruption rate
// (419 in 54 days on 16,384 GPUs: one every 3.1 hours), 10 s steps, a 60 s checkpoint at the
// Young-Daly interval, 15 minutes of downtime: the target is 10 s on two cores.
void BM_JobMonteCarlo(benchmark::State& state) {
  fleetsim::JobSpec job;
  job.steps = 30 * 86400 / 10.0;
  job.step_s = 10;
  job.gpus = 16384;
  job.checkpoint_write_s = 60;
  job.restore_s = 30;
  job.detection_s = 300;
  job.restart_s = 600;
  job.causes = {{"all", 419.0 / (16384 * 54), "published: Llama 3 report"}};
  for (auto _ : state) {
    const fleetsim::JobResult result = fleetsim::simulate_job(job, 1000, 1);
    benchmark::DoNotOptimize(result.wall_s.mean);
  }
}
BENCHMARK(BM_JobMonteCarlo)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
