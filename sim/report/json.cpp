// The JSON rendering: the report records as one ordered object, units in key names.
//
// A variant that was not simulated has "step": null and "speedup_vs_first": null, so a script
// cannot mistake a layout that does not fit for one that runs at zero tokens/s. Non-finite
// numbers (no capacity, no baseline) are written as null by nlohmann.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <type_traits>
#include <variant>

#include "sim/report/report.hpp"
#include "sim/report/result_fields.hpp"
#include "workloads/layout/dimensions.hpp"

namespace fleetsim {
namespace {

using Json = nlohmann::ordered_json;

Json summary_json(const SampleSummary& s) {
  Json json;
  for (const auto& [member, pointer] : kSummaryMembers) json[std::string(member)] = s.*pointer;
  return json;
}

Json value_json(const FieldValue& value) {
  return std::visit(
      [](const auto& v) -> Json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return nullptr;
        } else if constexpr (std::is_same_v<T, SampleSummary>) {
          return summary_json(v);
        } else {
          return v;  // nlohmann writes a non-finite number as null
        }
      },
      value);
}

// The registered fields of a group (result_fields.hpp) that JSON has, in their order.
Json group_json(FieldGroup group, const RunReport& report, std::size_t index) {
  Json object = Json::object();
  for (const ResultField& field : result_fields()) {
    if (field.group != group || field.name.empty()) continue;
    object[std::string(field.name)] = value_json(field.get(report, index));
  }
  return object;
}

// Every dimension of the layout (workloads/layout/dimensions.hpp) under its output name.
Json layout_json(const ParallelPlan& plan) {
  Json layout = Json::object();
  for (const LayoutDimension& dimension : layout_dimensions()) {
    std::visit([&](const auto& value) { layout[std::string(dimension.output)] = value; },
               dimension.get(plan));
  }
  return layout;
}

Json memory_json(const RunReport& report, std::size_t index, const MemoryBreakdown& memory) {
  Json json = group_json(FieldGroup::memory, report, index);
  Json items = Json::array();
  for (const MemoryItem& item : memory.items) {
    items.push_back(Json{{"name", item.name},
                         {"bytes", item.bytes},
                         {"basis", item.basis},
                         {"moment", to_string(item.moment)}});
  }
  json["items"] = std::move(items);
  return json;
}

Json links_json(const StepOutcome& outcome) {
  Json links = Json::array();
  for (const LinkUsage& link : outcome.step.links) {
    links.push_back(Json{{"name", link.name},
                         {"kind", link.kind},
                         {"capacity_bytes_per_s", link.capacity_bytes_per_s},
                         {"bytes", link.bytes},
                         {"utilisation", link.utilisation}});
  }
  return links;
}

// The links summed by kind, in the order the kinds first appear: how many carried traffic,
// their bytes, and the busiest one's utilisation.
Json links_by_kind_json(const StepOutcome& outcome) {
  Json kinds = Json::array();
  for (const LinkUsage& link : outcome.step.links) {
    auto kind = std::find_if(kinds.begin(), kinds.end(),
                             [&](const Json& k) { return k["kind"] == link.kind; });
    if (kind == kinds.end()) {
      kinds.push_back(
          Json{{"kind", link.kind}, {"links", 0}, {"bytes", 0.0}, {"max_utilisation", 0.0}});
      kind = kinds.end() - 1;
    }
    (*kind)["links"] = (*kind)["links"].get<int>() + 1;
    (*kind)["bytes"] = (*kind)["bytes"].get<double>() + link.bytes;
    (*kind)["max_utilisation"] =
        std::max((*kind)["max_utilisation"].get<double>(), link.utilisation);
  }
  return kinds;
}

// A run's Monte Carlo (null without a run: block, or when the layout does not fit).
Json run_json(const RunReport& report, std::size_t index) {
  const VariantReport& variant = report.variants[index];
  if (!in_json(FieldGroup::run, variant)) return nullptr;
  const JobSpec& job = *variant.job;
  Json json = group_json(FieldGroup::run, report, index);
  json["spot"] = in_json(FieldGroup::spot, variant) ? group_json(FieldGroup::spot, report, index)
                                                    : Json(nullptr);
  Json degradations = Json::array();
  for (const auto& [degradation, step_s] : job.degradations) {
    degradations.push_back(
        {{"cause", degradation.name},
         {"slows", degradation.kind == Degradation::Kind::network ? "network" : "compute"},
         {"fraction", degradation.fraction},
         {"per_gpu_day", degradation.per_gpu_day},
         {"source", degradation.source},
         {"step_s", step_s}});
  }
  json["degradations"] = std::move(degradations);
  Json causes = Json::array();
  for (const InterruptionCause& cause : job.causes) {
    causes.push_back({{"cause", cause.name},
                      {"per_gpu_day", cause.per_gpu_day},
                      {"source", cause.source},
                      {"nodes_out", cause.nodes_out}});
  }
  json["causes"] = std::move(causes);
  return json;
}

// Why a variant differs from the first: per factor, its part of each attributed metric.
Json attribution_json(const Attribution& a) {
  Json parts = Json::array();
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    Json part{{"factor", to_string(a.factors[i])}};
    for (std::size_t m = 0; m < a.metrics.size(); ++m) part[a.metrics[m]] = a.parts[i][m];
    parts.push_back(std::move(part));
  }
  Json baseline = Json::object();
  Json variant = Json::object();
  for (std::size_t m = 0; m < a.baseline_values.size(); ++m) {
    baseline[a.metrics[m]] = a.baseline_values[m];
    variant[a.metrics[m]] = a.variant_values[m];
  }
  return Json{
      {"against", a.baseline},
      {"metrics", a.metrics},
      {"baseline", std::move(baseline)},
      {"variant", std::move(variant)},
      {"parts", std::move(parts)},
      {"counterfactuals", a.counterfactuals},
      {"not_attributed", a.not_attributed.empty() ? Json(nullptr) : Json(a.not_attributed)}};
}

// A variant's prediction interval per metric and each input's swing.
Json sensitivity_json(const Sensitivity& s) {
  Json intervals = Json::object();
  for (const MetricInterval& interval : s.intervals) {
    intervals[interval.metric] = Json{{"nominal", interval.nominal},
                                      {"low", interval.low},
                                      {"median", interval.median},
                                      {"high", interval.high}};
  }
  Json inputs = Json::array();
  for (const InputSwing& swing : s.swings) {
    Json minus = Json::object();
    Json plus = Json::object();
    for (std::size_t m = 0; m < s.metrics.size(); ++m) {
      minus[s.metrics[m]] = swing.minus[m];
      plus[s.metrics[m]] = swing.plus[m];
    }
    inputs.push_back(Json{{"input", swing.input.name},
                          {"value", swing.input.value},
                          {"sigma", swing.input.sigma},
                          {"minus_sigma", std::move(minus)},
                          {"plus_sigma", std::move(plus)}});
  }
  return Json{{"draws", s.draws},
              {"coverage", s.coverage},
              {"failed_draws", s.failed_draws},
              {"failure", s.failure.empty() ? Json(nullptr) : Json(s.failure)},
              {"intervals", std::move(intervals)},
              {"inputs", std::move(inputs)},
              {"not_simulated", s.not_simulated.empty() ? Json(nullptr) : Json(s.not_simulated)}};
}

Json measured_json(const VariantReport& variant) {
  Json metrics = Json::array();
  for (const MetricComparison& c :
       compare_measured(*variant.measured, variant.inputs, variant.outcome)) {
    metrics.push_back(Json{{"metric", c.metric},
                           {"basis", c.basis},
                           {"measured", c.measured},
                           {"predicted", c.predicted ? Json(*c.predicted) : Json(nullptr)},
                           {"error", c.error ? Json(*c.error) : Json(nullptr)}});
  }
  return Json{{"source", variant.measured->source}, {"metrics", std::move(metrics)}};
}

Json variant_json(const RunReport& report, std::size_t index, LinkDetail detail) {
  const VariantReport& variant = report.variants[index];
  Json json = group_json(FieldGroup::variant, report, index);
  json["layout"] = layout_json(variant.inputs.plan);
  json["step"] = in_json(FieldGroup::step, variant) ? group_json(FieldGroup::step, report, index)
                                                    : Json(nullptr);
  json["memory"] = memory_json(report, index, variant.outcome.memory);
  json["links"] = detail == LinkDetail::every_link ? links_json(variant.outcome)
                                                   : links_by_kind_json(variant.outcome);
  json["warnings"] = variant.outcome.warnings;
  json["run"] = run_json(report, index);
  if (variant.attribution) json["attribution"] = attribution_json(*variant.attribution);
  if (variant.sensitivity) json["sensitivity"] = sensitivity_json(*variant.sensitivity);
  if (variant.measured) json["measured"] = measured_json(variant);
  if (report.swept) {
    const std::optional<double> in_sweep = scaling_efficiency_in_sweep(report, index);
    json["scaling_efficiency_in_sweep"] = in_sweep ? Json(*in_sweep) : Json(nullptr);
    Json swept = Json::object();  // the point's value of each swept path
    for (const auto& [path, value] : variant.swept) swept[path] = value;
    json["swept"] = std::move(swept);
  }
  return json;
}

}  // namespace

std::string render_json(const RunReport& report, LinkDetail detail) {
  Json variants = Json::array();
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    variants.push_back(variant_json(report, i, detail));
  }
  Json partial = nullptr;
  if (report.partial) {
    Json not_finished = Json::array();
    for (const VariantReport& variant : report.partial->not_finished) {
      not_finished.push_back(variant.name);
    }
    partial = Json{{"stopped_by", report.partial->stopped_by},
                   {"variants_planned", planned_variants(report)},
                   {"variants_finished", report.variants.size()},
                   {"not_finished", std::move(not_finished)},
                   {"left_out", report.partial->left_out}};
  }
  Json root{{"scenario", group_json(FieldGroup::scenario, report, 0)},
            {"partial", std::move(partial)},
            {"variants", std::move(variants)}};
  if (report.plan) {
    const PlanSummary& plan = *report.plan;
    root["plan"] = group_json(FieldGroup::plan, report, 0);
    if (plan.leanest) {
      // The leanest layout as a report of its own, so that its memory renders as a variant's.
      RunReport leanest;
      leanest.variants = {*plan.leanest};
      root["plan"]["leanest"] =
          Json{{"name", plan.leanest->name},
               {"layout", layout_json(plan.leanest->inputs.plan)},
               {"memory", memory_json(leanest, 0, plan.leanest->outcome.memory)}};
    }
  }
  // Names come from user files; invalid UTF-8 is replaced rather than aborting the whole report.
  return root.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace fleetsim
