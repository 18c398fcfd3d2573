// measured: what a real run of the scenario (or of a compare entry) measured, as its source
// publishes it: fleetsim run prints the prediction beside it (sim/step/measured.hpp).
#include <charconv>
#include <iterator>
#include <string>

#include "sim/scenario/loader.hpp"

namespace fleetsim {

using namespace fields;

namespace {

const Keys kMeasuredKeys = {"source", "tokens_per_s_per_gpu", "step_time", "tflops_per_gpu",
                            "mfu",    "peak_memory"};
const Keys kMetrics = {"tokens_per_s_per_gpu", "step_time", "tflops_per_gpu", "mfu", "peak_memory"};
const Keys kFlopRateKeys = {"value", "convention"};
const Keys kMfuKeys = {"value", "peak", "convention"};
const Keys kConventions(std::begin(kFlopConventionNames), std::end(kFlopConventionNames));

// 0.568, 56.8: six significant digits, whatever the locale (0.403, not 0.40299999999999997).
std::string shortest(double value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value, std::chars_format::general, 6);
  return std::string(text, end.ptr);
}

FlopConvention read_convention(const Field& map) {
  const Field field = require(map, "convention");
  const std::string name = read_choice(field, kConventions);
  for (std::size_t i = 0; i < kConventions.size(); ++i) {
    if (kConventions[i] == name) return static_cast<FlopConvention>(i);
  }
  return FlopConvention::megatron;  // read_choice refused any other
}

void expect_fields(const Field& map, const Keys& keys, const std::string& example) {
  if (!map.node.IsMap()) {
    fail(map, "expected a map, got " + describe(map.node), example);
  }
  expect_map(map, keys);
  require_keys(map, keys);
}

}  // namespace

MeasuredStep parse_measured(const Field& measured) {
  expect_map(measured, kMeasuredKeys);
  MeasuredStep step;
  step.source = read_string(require(measured, "source"));
  if (step.source.empty()) {
    fail(require(measured, "source"), "a measurement needs its source",
         "the document, commit or log the figures come from");
  }
  bool any = false;
  if (const auto field = find(measured, "tokens_per_s_per_gpu")) {
    step.tokens_per_s_per_gpu = read_positive(*field);
    any = true;
  }
  if (const auto field = find(measured, "step_time")) {
    step.step_time_s = read_quantity(*field, Quantity::duration);
    if (!(*step.step_time_s > 0)) fail(*field, "a step takes some time", "e.g. step_time: 4.2s");
    any = true;
  }
  if (const auto field = find(measured, "tflops_per_gpu")) {
    expect_fields(*field, kFlopRateKeys,
                  "tflops_per_gpu: {value: 501TFLOPS, convention: megatron}");
    step.flops_per_gpu = MeasuredStep::FlopRate{
        read_quantity(require(*field, "value"), Quantity::flop_rate), read_convention(*field)};
    any = true;
  }
  if (const auto field = find(measured, "mfu")) {
    expect_fields(*field, kMfuKeys,
                  "mfu: {value: 0.45, peak: 989TFLOPS, convention: 6n_attention}");
    const Field value = require(*field, "value");
    // Tables print MFU in percent; the block takes the fraction, as fleetsim's results do.
    if (const double number = read_number(value); number > 1 && number <= 100) {
      fail(value, "expected a fraction in (0, 1], got " + describe(value.node),
           "an MFU of " + shortest(number) + "% is value: " + shortest(number / 100));
    }
    MeasuredStep::Utilisation mfu{read_fraction(value),
                                  read_quantity(require(*field, "peak"), Quantity::flop_rate),
                                  read_convention(*field)};
    step.mfu = mfu;
    any = true;
  }
  if (const auto field = find(measured, "peak_memory")) {
    step.peak_memory_bytes = read_quantity(*field, Quantity::size);
    any = true;
  }
  if (!any) {
    fail(measured, "a measurement needs at least one of " + join_list(kMetrics),
         "e.g. tokens_per_s_per_gpu: 3150");
  }
  return step;
}

void refuse_measured_in_sweep(const Field& measured) {
  fail(measured,
       "a sweep's points are runs of their own: what one run measured does not belong to them "
       "all",
       "compare a measured run in a scenario without a sweep");
}

}  // namespace fleetsim
