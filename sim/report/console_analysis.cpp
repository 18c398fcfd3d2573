#include "sim/report/console_analysis.hpp"

#include <cstddef>
#include <string>
#include <vector>

#include "sim/report/console_text.hpp"
#include "sim/report/result_fields.hpp"

namespace fleetsim {

using namespace console;

namespace {

// A metric's name and its value as the console shows it.
std::string metric_title(const std::string& metric) {
  if (metric == "step_time_s") return "step time (s)";
  if (metric == "tokens_per_s") return "tokens/s";
  if (metric == "mfu") return kMfuTitle;
  if (metric == "wall_s_mean") return "time to train, mean (days)";
  return "cost, mean (USD)";
}
std::string metric_text(const std::string& metric, double value) {
  if (metric == "step_time_s") return seconds_text(value);
  if (metric == "tokens_per_s") return grouped_integer(value);
  if (metric == "mfu") return percent_text(value);
  if (metric == "wall_s_mean") return fixed(value / kDay, 2);
  return grouped_integer(value);
}

}  // namespace

// Why a variant differs from the first: one row per factor, one column per attributed metric,
// the parts adding up to the total row (Shapley values, sim/analysis/attribution.hpp).
std::string attribution_section(const Attribution& a) {
  std::string text = "\nwhy " + a.variant + " differs from " + a.baseline;
  if (!a.not_attributed.empty()) return text + ": not attributed, " + a.not_attributed + "\n";
  if (a.factors.empty()) return text + ": it does not, in anything the simulation reads\n";
  text += " (Shapley values over " + std::to_string(a.factors.size()) + " factor" +
          (a.factors.size() == 1 ? "" : "s") + ", " + std::to_string(a.counterfactuals) +
          " simulations)\n";
  // A part with its sign; exactly zero (a factor that changes nothing the metric depends on)
  // reads "0".
  const auto part_text = [&](std::size_t m, double value) {
    if (value == 0) return std::string("0");
    const std::string number = metric_text(a.metrics[m], value);
    return number.front() == '-' ? number : "+" + number;
  };
  std::vector<std::vector<std::string>> rows{{""}};
  for (const std::string& metric : a.metrics) rows[0].push_back(metric_title(metric));
  for (std::size_t i = 0; i < a.factors.size(); ++i) {
    rows.push_back({label(a.factors[i])});
    for (std::size_t m = 0; m < a.metrics.size(); ++m)
      rows.back().push_back(part_text(m, a.parts[i][m]));
  }
  std::vector<std::string> total{"total"}, from{a.baseline}, to{a.variant};
  for (std::size_t m = 0; m < a.metrics.size(); ++m) {
    total.push_back(part_text(m, a.variant_values[m] - a.baseline_values[m]));
    from.push_back(metric_text(a.metrics[m], a.baseline_values[m]));
    to.push_back(metric_text(a.metrics[m], a.variant_values[m]));
  }
  rows.push_back(std::move(total));
  rows.push_back(std::move(from));
  rows.push_back(std::move(to));
  return text + aligned_rows(rows);
}

// A variant's prediction interval, then its inputs by how far one sigma moves the result.
std::string sensitivity_section(const std::string& name, const Sensitivity& s) {
  std::string text = "\nsensitivity of " + name;
  if (!s.not_simulated.empty()) return text + ": not simulated: " + s.not_simulated + "\n";
  const std::string low = "P" + fixed(100 * (1 - s.coverage) / 2, 0);
  const std::string high = "P" + fixed(100 * (1 + s.coverage) / 2, 0);
  text += " (" + std::to_string(s.draws) + " draws of " + std::to_string(s.swings.size()) +
          " uncertain inputs within their sigma)\n";
  if (s.failed_draws > 0) {
    text += "  " + std::to_string(s.failed_draws) + " draws did not run and are left out (" +
            s.failure + ")\n";
  } else if (!s.failure.empty()) {
    text += "  a swing did not run, shown as nan (" + s.failure + ")\n";
  }
  std::vector<std::vector<std::string>> rows{{"", "nominal", low, "P50", high}};
  for (const MetricInterval& interval : s.intervals) {
    rows.push_back({metric_title(interval.metric), metric_text(interval.metric, interval.nominal),
                    metric_text(interval.metric, interval.low),
                    metric_text(interval.metric, interval.median),
                    metric_text(interval.metric, interval.high)});
  }
  text += aligned_rows(rows);
  if (s.swings.empty()) return text;
  // The swing of the first metric (the step time) and, for runs, of the time to train.
  std::vector<std::size_t> shown{0};
  for (std::size_t m = 0; m < s.metrics.size(); ++m) {
    if (s.metrics[m] == "wall_s_mean") shown.push_back(m);
  }
  text += "each input one sigma below and above its value, the others at theirs:\n";
  std::vector<std::vector<std::string>> swing_rows{{"input", "value", "sigma"}};
  for (std::size_t m : shown) {
    swing_rows[0].push_back(metric_title(s.metrics[m]) + " -1 sigma");
    swing_rows[0].push_back("+1 sigma");
  }
  for (const InputSwing& swing : s.swings) {
    std::vector<std::string> row{swing.input.name, significant(swing.input.value, 4),
                                 significant(swing.input.sigma, 3)};
    for (std::size_t m : shown) {
      row.push_back(metric_text(s.metrics[m], swing.minus[m]));
      row.push_back(metric_text(s.metrics[m], swing.plus[m]));
    }
    swing_rows.push_back(std::move(row));
  }
  return text + aligned_rows(swing_rows);
}

MeasuredMetricFormat measured_metric_format(const MetricComparison& c) {
  if (c.metric == "tokens_per_s_per_gpu") return {"tokens/s per GPU", grouped_integer};
  if (c.metric == "step_time_s") return {"step time (s)", seconds_text};
  if (c.metric == "tflops_per_gpu") {
    return {"TFLOP/s per GPU (" + c.basis + ")", [](double tflops) { return fixed(tflops, 1); }};
  }
  if (c.metric == "mfu") return {"MFU (%, " + c.basis + ")", percent_text};
  if (c.metric == "peak_memory_bytes") return {"peak memory per GPU (GB)", gb_text};
  return {c.metric, [](double value) { return significant(value, 6); }};
}

// The measured value of a metric and the prediction as a source would print them, and the
// signed error.
std::string measured_section(const std::string& name, const MeasuredStep& measured,
                             const std::vector<MetricComparison>& comparisons) {
  std::vector<std::vector<std::string>> rows{{"", "measured", "predicted", "error"}};
  for (const MetricComparison& c : comparisons) {
    const MeasuredMetricFormat format = measured_metric_format(c);
    const std::string error =
        c.error ? (*c.error >= 0 ? "+" : "") + percent_text(*c.error) + "%" : kMissing;
    rows.push_back({format.title, format.text(c.measured),
                    c.predicted ? format.text(*c.predicted) : kMissing, error});
  }
  return "\npredicted vs measured: " + name + " (" + measured.source + ")\n" + aligned_rows(rows);
}

}  // namespace fleetsim
