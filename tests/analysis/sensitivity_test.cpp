#include "sim/analysis/sensitivity.hpp"

#include "sim/analysis/configuration.hpp"

#include <tbb/global_control.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>

#include "scenario/fixture.hpp"
#include "sim/scenario/scenario.hpp"

using namespace fleetsim;

namespace {

Scenario shipped(const std::string& name) {
  return load_scenario(std::filesystem::path(FLEETSIM_SOURCE_DIR) / "scenarios" / name,
                       testing::source_data());
}

// The inputs with every uncertainty but `key`'s set to zero, and `key`'s to `sigma`.
StepInputs only_uncertain(StepInputs inputs, const std::string& key, double sigma) {
  for (const UncertainInput& input : uncertain_inputs(inputs, std::nullopt)) {
    find_profile_entry(inputs.gpu, input.name)->sigma = 0;
  }
  find_profile_entry(inputs.gpu, key)->sigma = sigma;
  return inputs;
}

double width(const Sensitivity& s, std::size_t metric = 0) {
  return s.intervals[metric].high - s.intervals[metric].low;
}

}  // namespace

TEST_CASE("sensitivity: an input's wider sigma widens the prediction interval") {
  const StepInputs h100 = shipped("h100-vs-b200.yaml").variants.front().inputs;
  SensitivityOptions options;
  options.draws = 24;
  // The rate long GEMMs sustain under the power limit bounds most of this step's kernels.
  const double sustained = find_profile_entry(h100.gpu, "gemm_sustained")->value;
  const Sensitivity narrow = sensitivity(only_uncertain(h100, "gemm_sustained", 0.01 * sustained),
                                         std::nullopt, 1, options);
  const Sensitivity wide = sensitivity(only_uncertain(h100, "gemm_sustained", 0.03 * sustained),
                                       std::nullopt, 1, options);
  REQUIRE(narrow.not_simulated.empty());
  REQUIRE(narrow.swings.size() == 1);
  CHECK(width(narrow) > 0);
  CHECK(width(wide) > 2 * width(narrow));  // about 3x: the step is mostly GEMMs
  CHECK(width(wide, 1) > 2 * width(narrow, 1));
  // The nominal configuration sits inside both intervals.
  for (const Sensitivity* s : {&narrow, &wide}) {
    CHECK(s->intervals[0].low <= s->intervals[0].nominal);
    CHECK(s->intervals[0].nominal <= s->intervals[0].high);
  }
  // Faster GEMMs shorten the step.
  CHECK(narrow.swings[0].plus[0] < narrow.swings[0].minus[0]);

  // Nothing uncertain: nothing to widen.
  StepInputs certain = only_uncertain(h100, "gemm_efficiency", 0);
  const Sensitivity none = sensitivity(certain, std::nullopt, 1, options);
  CHECK(none.swings.empty());
  CHECK(width(none) == 0);
  CHECK(none.intervals[0].median == none.intervals[0].nominal);
}

TEST_CASE("sensitivity: the same draws on one thread and on two, and draws stay in range") {
  const StepInputs h100 = shipped("h100-vs-b200.yaml").variants.front().inputs;
  SensitivityOptions options;
  options.draws = 16;
  // A sigma of ten times the value: drawn by a factor, half the draws are above 1 unless kept
  // in (0, 1], none at or below 0.
  const StepInputs wild = only_uncertain(h100, "attention.fa2.fwd.efficiency", 10.0);
  const auto run_with = [&](int threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    return sensitivity(wild, std::nullopt, 7, options);
  };
  const Sensitivity one = run_with(1);
  const Sensitivity two = run_with(2);
  REQUIRE(one.samples.size() == 16);
  CHECK(one.samples == two.samples);
  // An attention efficiency of 1 is the fastest any draw can be.
  StepInputs fastest = wild;
  find_profile_entry(fastest.gpu, "attention.fa2.fwd.efficiency")->value = 1.0;
  const double low = sensitivity(fastest, std::nullopt, 7, options).intervals[0].nominal;
  int at_the_bound = 0;
  for (const auto& sample : one.samples) {
    CHECK(sample[0] >= low * (1 - 1e-12));
    CHECK(std::isfinite(sample[0]));
    at_the_bound += sample[0] == low;
  }
  CHECK(at_the_bound > 0);
}

TEST_CASE("sensitivity: a run's interruption rates are as sure as the interruptions counted") {
  const Variant base = shipped("llama3-70b-pretraining-run.yaml").variants.front();
  REQUIRE(base.run);
  const auto inputs = uncertain_inputs(base.inputs, base.run);
  const auto rates = std::find_if(inputs.begin(), inputs.end(),
                                  [](const auto& in) { return in.name == "interruption_rates"; });
  REQUIRE(rates != inputs.end());
  // 419 interruptions counted: each cause's Poisson sigma adds up to 1 / sqrt(419) of the rate.
  CHECK(rates->sigma / rates->value == Approx(1 / std::sqrt(419.0)).epsilon(1e-9));
  SensitivityOptions options;
  options.draws = 8;
  const Sensitivity s = sensitivity(base.inputs, base.run, 1, options);
  REQUIRE(s.metrics.back() == "cost_usd_mean");
  const auto swing = std::find_if(s.swings.begin(), s.swings.end(), [](const InputSwing& in) {
    return in.input.name == "interruption_rates";
  });
  REQUIRE(swing != s.swings.end());
  const std::size_t wall = static_cast<std::size_t>(
      std::find(s.metrics.begin(), s.metrics.end(), "wall_s_mean") - s.metrics.begin());
  REQUIRE(wall < s.metrics.size());
  CHECK(swing->plus[wall] > swing->minus[wall]);  // more interruptions, a longer run
  CHECK(swing->plus[0] == swing->minus[0]);       // and the same step
  CHECK(s.failed_draws == 0);
}

TEST_CASE("sensitivity: a draw that does not run is left out of the interval, and said") {
  const Variant base = shipped("llama3-70b-pretraining-run.yaml").variants.front();
  RunSpec run = *base.run;
  run.replications = 10;
  // A day down after each interruption, at 5 interruptions a day on the 512 GPUs: a restart
  // gets through e^5 times less often than it is tried. Known within 100%, the draws above
  // e^(10 - 5) = twice the rate are refused as runs that would never end.
  run.detection_s = 0;
  run.restart_s = 86400;
  const double per_gpu_day = 5.0 / 512;
  run.causes = {{"test fault", per_gpu_day, "test", 0, per_gpu_day}};
  SensitivityOptions options;
  options.draws = 40;
  const Sensitivity s = sensitivity(base.inputs, run, 1, options);
  REQUIRE(s.not_simulated.empty());
  CHECK(s.failed_draws > 0);
  CHECK(s.failed_draws < 20);
  CHECK_THAT(s.failure, Catch::StartsWith("draw "));
  const std::size_t wall = static_cast<std::size_t>(
      std::find(s.metrics.begin(), s.metrics.end(), "wall_s_mean") - s.metrics.begin());
  CHECK(std::isfinite(s.intervals[wall].high));
  int not_run = 0;
  for (const auto& sample : s.samples) not_run += std::isnan(sample[wall]);
  CHECK(not_run == s.failed_draws);
}

TEST_CASE("sensitivity: the inputs are the profile entries the step reads, in a fixed order") {
  // H100 over two nodes, FP8, a pipeline: the kernel model's eight, FlashAttention-2's six and
  // the clock share, FP8's five, NVLink, PCIe and InfiniBand, NVLS and p2p.
  StepInputs inputs = shipped("h100-vs-b200.yaml").variants.front().inputs;
  inputs.nodes = 2;
  inputs.training.precision = Precision::fp8;
  inputs.plan.pp = 2;
  std::vector<std::string> keys;
  for (const StepProfileEntry& entry : step_profile_entries(inputs)) keys.push_back(entry.key);
  const std::string fa2 = "attention.fa2.";
  CHECK(keys == std::vector<std::string>{"dense_bf16",
                                         "hbm_bandwidth",
                                         "gemm_efficiency",
                                         "gemm_sustained",
                                         "gemm_k_overhead",
                                         "memory_efficiency",
                                         "kernel_launch",
                                         "comm_sms",
                                         fa2 + "fwd.efficiency",
                                         fa2 + "fwd.seq_overhead",
                                         fa2 + "fwd.causal_overhead",
                                         fa2 + "bwd.efficiency",
                                         fa2 + "bwd.seq_overhead",
                                         fa2 + "bwd.causal_overhead",
                                         "sustained_clock",
                                         "fp8.dense",
                                         "fp8.gemm_efficiency",
                                         "fp8.gemm_sustained",
                                         "fp8.gemm_k_overhead",
                                         "fp8.kernel_launch",
                                         "link_efficiency.nvlink",
                                         "link_efficiency.pcie",
                                         "link_efficiency.infiniband",
                                         "nvls_efficiency",
                                         "p2p_efficiency"});
  // Each drawn in its range: rates by a factor above 0, shares up to 1, overheads and counts
  // from 0.
  std::map<std::string, EntryRange> range;
  for (const StepProfileEntry& entry : step_profile_entries(inputs)) range[entry.key] = entry.range;
  for (const std::string rate :
       {"dense_bf16", "hbm_bandwidth", "gemm_sustained", "fp8.dense", "fp8.gemm_sustained"}) {
    CHECK(range[rate] == EntryRange::rate);
  }
  for (const std::string& share :
       std::vector<std::string>{"gemm_efficiency", "memory_efficiency", "fp8.gemm_efficiency",
                                fa2 + "fwd.efficiency", "sustained_clock", "nvls_efficiency"}) {
    CHECK(range[share] == EntryRange::fraction);
  }
  for (const std::string& amount :
       std::vector<std::string>{"gemm_k_overhead", "kernel_launch", "comm_sms", "fp8.kernel_launch",
                                fa2 + "bwd.seq_overhead"}) {
    CHECK(range[amount] == EntryRange::non_negative);
  }
  // The record of what a variant read adds the memory check's capacity in front.
  const std::vector<std::string> read = read_profile_keys(inputs);
  CHECK(read.front() == "hbm_capacity");
  CHECK(std::vector<std::string>(read.begin() + 1, read.end()) == keys);
  // The uncertain inputs: those of them the profile has, with a sigma, in the same order.
  std::vector<std::string> uncertain;
  for (const UncertainInput& input : uncertain_inputs(inputs, std::nullopt)) {
    uncertain.push_back(input.name);
  }
  std::vector<std::string> with_sigma;
  for (const std::string& key : keys) {
    const Calibrated* entry = find_profile_entry(inputs.gpu, key);
    if (entry && entry->sigma > 0) with_sigma.push_back(key);
  }
  CHECK(uncertain == with_sigma);
  CHECK(uncertain.size() > 15);
}
