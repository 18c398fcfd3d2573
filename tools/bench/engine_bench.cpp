// Throughput of the event engine, the flow network, the job Monte Carlo and the scenario loader
// (Google Benchmark).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sim/engine/engine.hpp"
#include "sim/job/job.hpp"
#include "sim/network/flow_network.hpp"
#include "sim/scenario/scenario.hpp"

namespace {

// A self-rescheduling chain of events over a queue kept `depth` deep: the steady state of a
// simulation whose processes each keep one pending event.
void BM_EngineEvents(benchmark::State& state) {
  const int depth = static_cast<int>(state.range(0));
  constexpr int kEventsPerRun = 1'000'000;
  for (auto _ : state) {
    const std::uint64_t events = fleetsim::run_reference_events(depth, kEventsPerRun);
    benchmark::DoNotOptimize(events);
    state.SetItemsProcessed(state.items_processed() + static_cast<int64_t>(events));
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

// Loading a scenario of N compare entries (each a micro-batch laid over the default scenario's
// base): the file is read once and each entry laid over it, so the time per entry stays flat
// as N grows (compare the times per entry of the two sizes).
void BM_LoadCompareEntries(benchmark::State& state) {
  const auto entries = static_cast<int>(state.range(0));
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() /
      ("fleetsim-bench-compare-" + std::to_string(entries) + ".yaml");
  {
    std::ofstream out(file);
    out << "name: compare\nmodel: llama3-8b\n"
           "training: {seq_len: 4096, global_batch: 256, micro_batch: 2}\n"
           "layout: {dp: 8, zero: 3}\ncluster: {node: dgx-h100}\ncompare:\n";
    for (int i = 0; i < entries; ++i) {
      out << "  - name: v" << i << "\n    training: {micro_batch: " << 1 + i % 2 << "}\n";
    }
  }
  const fleetsim::DataPaths data{FLEETSIM_DATA_DIR};
  for (auto _ : state) {
    const fleetsim::Scenario scenario = fleetsim::load_scenario(file, data);
    benchmark::DoNotOptimize(scenario.variants.size());
  }
  state.counters["s_per_entry"] =
      benchmark::Counter(static_cast<double>(entries) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  std::filesystem::remove(file);
}
BENCHMARK(BM_LoadCompareEntries)->Arg(500)->Arg(4000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
