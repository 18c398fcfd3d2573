// A measured: block against the simulated step: each metric on the source's terms.
#include <catch2/catch.hpp>

#include "sim/step/measured.hpp"
#include "workloads/models.hpp"

using namespace fleetsim;

namespace {

// Llama-3-8B on one 8-GPU node, 8,000 tokens/s: 1,000 a GPU, a step of 4 s.
StepInputs inputs() {
  StepInputs in;
  in.model = testing::llama3_8b();
  in.training.seq_len = 4096;
  in.nodes = 1;
  in.node.gpus = 8;
  return in;
}

StepOutcome simulated() {
  StepOutcome outcome;
  outcome.simulated = true;
  outcome.step.tokens_per_s = 8000;
  outcome.step.step_time_s = 4;
  outcome.memory.total_bytes = 60e9;
  return outcome;
}

}  // namespace

TEST_CASE("the prediction is counted as the source counts, the error signed") {
  MeasuredStep measured;
  measured.source = "a test";
  measured.tokens_per_s_per_gpu = 800;
  measured.step_time_s = 5;
  measured.flops_per_gpu = MeasuredStep::FlopRate{50e12, FlopConvention::megatron};
  measured.mfu = MeasuredStep::Utilisation{0.05, 989e12, FlopConvention::six_n};
  measured.peak_memory_bytes = 50e9;
  const std::vector<MetricComparison> rows = compare_measured(measured, inputs(), simulated());
  REQUIRE(rows.size() == 5);
  // 1,000 predicted over 800 measured: 25% optimistic; 4 s over 5 s: 20% short.
  CHECK(rows[0].metric == "tokens_per_s_per_gpu");
  CHECK(*rows[0].predicted == Approx(1000));
  CHECK(*rows[0].error == Approx(0.25));
  CHECK(*rows[1].error == Approx(-0.2));
  // TFLOP/s by Megatron's count: 1,000 tokens a second at its FLOPs a token.
  const double megatron = flops_per_token(inputs().model, 4096, FlopConvention::megatron);
  CHECK(rows[2].basis == "megatron");
  CHECK(*rows[2].predicted == Approx(1000 * megatron / 1e12));
  CHECK(*rows[2].error == Approx(1000 * megatron / 50e12 - 1));
  // MFU by 6N over the source's peak, whatever fleetsim's own MFU says.
  CHECK(rows[3].basis == "6n of 989 TFLOP/s");
  CHECK(*rows[3].predicted == Approx(1000 * 6 * inputs().model.parameters() / 989e12));
  CHECK(*rows[4].error == Approx(0.2));  // 60 GB over 50
}

TEST_CASE("a layout that does not fit compares its memory only") {
  MeasuredStep measured;
  measured.source = "a test";
  measured.tokens_per_s_per_gpu = 800;
  measured.peak_memory_bytes = 75e9;
  StepOutcome outcome = simulated();
  outcome.simulated = false;
  outcome.memory.total_bytes = 90e9;
  const std::vector<MetricComparison> rows = compare_measured(measured, inputs(), outcome);
  REQUIRE(rows.size() == 2);
  CHECK_FALSE(rows[0].predicted);
  CHECK_FALSE(rows[0].error);
  CHECK(*rows[1].error == Approx(0.2));
}
