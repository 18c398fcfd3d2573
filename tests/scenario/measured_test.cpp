// A scenario's measured: block: what it reads, and what it refuses where it is written.
#include <catch2/catch.hpp>
#include <string>

#include "scenario/fixture.hpp"

using namespace fleetsim;
using namespace fleetsim::testing;

namespace {

const std::string kMeasured =
    "measured:\n"                                                         // 12
    "  source: torchtitan docs/performance.md at 157a12c5\n"              // 13
    "  tokens_per_s_per_gpu: 2904\n"                                      // 14
    "  step_time: 2.82s\n"                                                // 15
    "  tflops_per_gpu: {value: 170TFLOPS, convention: megatron}\n"        // 16
    "  mfu: {value: 0.568, peak: 312TFLOPS, convention: 6n_attention}\n"  // 17
    "  peak_memory: 70.1GiB\n";                                           // 18

}  // namespace

TEST_CASE("measured: reads every metric with its unit and convention") {
  const Scenario scenario = load_text(kBase + kMeasured);
  REQUIRE(scenario.variants.front().measured);
  const MeasuredStep& m = *scenario.variants.front().measured;
  CHECK(m.source == "torchtitan docs/performance.md at 157a12c5");
  CHECK(*m.tokens_per_s_per_gpu == 2904);
  CHECK(*m.step_time_s == Approx(2.82));
  CHECK(m.flops_per_gpu->flops_per_s == Approx(170e12));
  CHECK(m.flops_per_gpu->convention == FlopConvention::megatron);
  CHECK(m.mfu->value == Approx(0.568));
  CHECK(m.mfu->peak_flops == Approx(312e12));
  CHECK(m.mfu->convention == FlopConvention::six_n_attention);
  CHECK(*m.peak_memory_bytes == Approx(70.1 * (1 << 30)));
}

TEST_CASE("measured: each compare entry its own") {
  const Scenario scenario = load_text(kBase + kMeasured +
                                      "compare:\n"
                                      "  - name: other run\n"
                                      "    measured: {source: a log, tokens_per_s_per_gpu: 3000}\n"
                                      "  - name: not measured\n"
                                      "    layout: {zero: 2}\n");
  REQUIRE(scenario.variants.size() == 3);
  // The entry's block is its own, whole: nothing of the base's measurement is merged in, and an
  // entry without one has none.
  CHECK(*scenario.variants[1].measured->tokens_per_s_per_gpu == 3000);
  CHECK_FALSE(scenario.variants[1].measured->step_time_s);
  CHECK_FALSE(scenario.variants[2].measured);
}

TEST_CASE("measured: mistakes are refused where they are written") {
  const auto error_at = [](const std::string& yaml, int line, const std::string& words) {
    const auto error = load_error(yaml);
    REQUIRE(error);
    INFO(error->what());
    CHECK(error->line() == line);
    CHECK_THAT(error->what(), Catch::Contains(words));
  };
  // An unknown convention, with the ones there are.
  error_at(with(kBase + kMeasured, "convention: megatron}", "convention: megatronn}"), 16,
           "6n_attention");
  // An MFU without the peak it divides by.
  error_at(with(kBase + kMeasured, "peak: 312TFLOPS, ", ""), 17, "peak");
  // A TFLOP/s figure without its unit.
  error_at(with(kBase + kMeasured, "value: 170TFLOPS", "value: 170"), 16, "TFLOPS");
  // An MFU as a percentage, with the fraction to write.
  error_at(with(kBase + kMeasured, "value: 0.568", "value: 40.3"), 17, "is value: 0.403");
  // No source, or nothing measured (a block map is reported at its first key).
  error_at(with(kBase + kMeasured, "  source: torchtitan docs/performance.md at 157a12c5\n", ""),
           13, "source");
  error_at(kBase + "measured: {source: a log}\n", 12, "at least one of");
  // A sweep's points are not the measured run.
  error_at(kBase + kMeasured + "sweep:\n  grid: {cluster.nodes: [1, 2]}\n", 13, "sweep");
  // A compare entry's, at the entry's block (line 14 of this scenario).
  error_at(kBase +
               "compare:\n"                                                   // 12
               "  - name: measured\n"                                         // 13
               "    measured: {source: a log, tokens_per_s_per_gpu: 3000}\n"  // 14
               "sweep:\n  grid: {cluster.nodes: [1, 2]}\n",
           14, "sweep");
}
