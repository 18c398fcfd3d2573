// The JSON rendering: the report records as one ordered object, units in key names.
//
// A variant that was not simulated has "step": null and "speedup_vs_first": null, so a script
// cannot mistake a layout that does not fit for one that runs at zero tokens/s. Non-finite
// numbers (no capacity, no baseline) are written as null by nlohmann.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "sim/report/report.hpp"
#include "workloads/layout/dimensions.hpp"

namespace fleetsim {
namespace {

using Json = nlohmann::ordered_json;

Json scenario_json(const RunReport& report) {
  return Json{{"name", report.scenario_name},
              {"description", report.description},
              {"file", report.scenario_file},
              {"seed", report.seed},
              {"fleetsim_version", report.fleetsim_version}};
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

Json step_json(const StepOutcome& outcome) {
  if (!outcome.simulated) {
    return nullptr;
  }
  const StepResult& step = outcome.step;
  return Json{{"step_time_s", step.step_time_s},
              {"tokens_per_s", step.tokens_per_s},
              {"mfu", step.mfu},
              {"hfu", step.hfu},
              {"model_flops", step.model_flops},
              {"hardware_flops", step.hardware_flops},
              {"compute_s", step.breakdown.compute_s},
              {"exposed_comm_s", step.breakdown.exposed_comm_s},
              {"exposed_dp_s", step.breakdown.exposed_dp_s},
              {"exposed_tp_s", step.breakdown.exposed_tp_s},
              {"exposed_pp_s", step.breakdown.exposed_pp_s},
              {"exposed_host_s", step.breakdown.exposed_host_s},
              {"idle_s", step.breakdown.idle_s},
              {"comm_bytes_per_gpu", step.comm_bytes_per_gpu},
              {"events", step.events},
              {"replayed_ranks", step.replayed_ranks}};
}

Json memory_json(const MemoryBreakdown& memory) {
  Json items = Json::array();
  for (const MemoryItem& item : memory.items) {
    items.push_back(Json{{"name", item.name}, {"bytes", item.bytes}, {"basis", item.basis}});
  }
  return Json{{"total_bytes", memory.total_bytes},
              {"capacity_bytes", memory.capacity_bytes},
              {"headroom_fraction", memory.headroom_fraction()},
              {"fits", memory.fits()},
              {"host_bytes_per_rank", memory.host_bytes_per_rank},
              {"host_bytes_per_node", memory.host_bytes_per_node},
              {"host_capacity_bytes", memory.host_capacity_bytes},
              {"items", std::move(items)}};
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

Json summary_json(const SampleSummary& s) {
  return Json{{"mean", s.mean},
              {"ci99_half_width", s.ci99_half_width},
              {"p50", s.p50},
              {"p90", s.p90},
              {"p99", s.p99}};
}

// A run's Monte Carlo (null without a run: block, or when the layout does not fit).
Json run_json(const VariantReport& variant) {
  if (!variant.job_result) return nullptr;
  const JobSpec& job = *variant.job;
  const JobResult& result = *variant.job_result;
  Json causes = Json::array();
  for (const InterruptionCause& cause : job.causes) {
    causes.push_back({{"cause", cause.name},
                      {"per_gpu_day", cause.per_gpu_day},
                      {"source", cause.source},
                      {"nodes_out", cause.nodes_out}});
  }
  Json degradations = Json::array();
  for (const Degradation& degradation : job.degradations) {
    degradations.push_back(
        {{"cause", degradation.name},
         {"slows", degradation.kind == Degradation::Kind::network ? "network" : "compute"},
         {"fraction", degradation.fraction},
         {"per_gpu_day", degradation.per_gpu_day},
         {"source", degradation.source},
         {"step_s", degradation.step_s}});
  }
  return Json{
      {"interruptions_preset", variant.run->interruptions},
      {"steps", job.steps},
      {"step_s", job.step_s},
      {"jitter_factor", job.jitter_factor},
      {"checkpoint_write", to_string(job.write)},
      {"peer_copy_s", job.peer_copy_s},
      {"peer_restore_s", job.peer_restore_s},
      {"persist_every_s", job.persist_every_s},
      {"checkpoint_write_s", job.checkpoint_write_s},
      {"checkpoint_copy_s", job.checkpoint_copy_s},
      {"restore_s", job.restore_s},
      {"detection_s", job.detection_s},
      {"restart_s", job.restart_s},
      {"node_repair_s", job.node_repair_s},
      {"hot_spares", job.hot_spares},
      {"when_short", job.when_short == ShortagePolicy::shrink ? "shrink" : "wait"},
      {"replicas", job.replicas},
      {"shrunk_step_s", job.shrunk_step_s},
      {"paid_gpus", paid_gpus(job)},
      {"checkpoint_interval_steps", result.interval_steps},
      {"mtbf_s", std::isfinite(result.mtbf_s) ? Json(result.mtbf_s) : Json(nullptr)},
      {"usd_per_gpu_hour", variant.run->priced ? Json(job.usd_per_gpu_hour) : Json(nullptr)},
      {"replications", result.replications.size()},
      {"useful_s", result.useful_s},
      {"wall_s", summary_json(result.wall_s)},
      {"goodput", summary_json(result.goodput)},
      {"interruptions", summary_json(result.interruptions)},
      {"spot", job.spot ? Json{{"preemptions_per_node_hour", job.spot->preemptions_per_node_hour},
                               {"source", job.spot->source},
                               {"notice_s", job.spot->notice_s},
                               {"capacity_return_s", job.spot->capacity_return_s},
                               {"trace_preemptions", job.spot->trace_s.size()},
                               {"preemptions", summary_json(result.preemptions)}}
                        : Json(nullptr)},
      {"lost_gpu_hours", summary_json(result.lost_gpu_hours)},
      {"node_wait_s", summary_json(result.node_wait_s)},
      {"shrunk_s", summary_json(result.shrunk_s)},
      {"regrows", summary_json(result.regrows)},
      {"degradations", std::move(degradations)},
      {"evict_degraded_after_s",
       job.evict_degraded_after_s ? Json(*job.evict_degraded_after_s) : Json(nullptr)},
      {"degraded_s", summary_json(result.degraded_s)},
      {"evictions", summary_json(result.evictions)},
      {"memory_lost", summary_json(result.memory_lost)},
      {"cost_usd", variant.run->priced ? summary_json(result.cost_usd) : Json(nullptr)},
      {"usd_per_million_tokens",
       variant.run->priced ? summary_json(result.usd_per_million_tokens) : Json(nullptr)},
      {"usd_per_checkpoint",
       variant.run->priced ? summary_json(result.usd_per_checkpoint) : Json(nullptr)},
      {"causes", std::move(causes)}};
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

Json variant_json(const RunReport& report, std::size_t index, LinkDetail detail) {
  const VariantReport& variant = report.variants[index];
  const StepInputs& inputs = variant.inputs;
  const std::optional<double> speedup = speedup_vs_first(report, index);
  const std::optional<double> scaling = scaling_efficiency_vs_first(report, index);
  Json json{{"name", variant.name},
            {"node", inputs.node.name},
            {"nodes", inputs.nodes},
            {"gpus_per_node", inputs.node.gpus},
            {"gpus", inputs.nodes * inputs.node.gpus},
            {"gpu_profile", inputs.gpu.name},
            {"model", inputs.model.name},
            {"precision", to_string(inputs.training.precision)},
            {"layout", layout_json(inputs.plan)},
            {"simulated", variant.outcome.simulated},
            {"step", step_json(variant.outcome)},
            {"memory", memory_json(variant.outcome.memory)},
            {"links", detail == LinkDetail::every_link ? links_json(variant.outcome)
                                                       : links_by_kind_json(variant.outcome)},
            {"warnings", variant.outcome.warnings},
            {"speedup_vs_first", speedup ? Json(*speedup) : Json(nullptr)},
            {"scaling_efficiency_vs_first", scaling ? Json(*scaling) : Json(nullptr)},
            {"run", run_json(variant)}};
  if (variant.attribution) json["attribution"] = attribution_json(*variant.attribution);
  if (variant.sensitivity) json["sensitivity"] = sensitivity_json(*variant.sensitivity);
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
  Json root{{"scenario", scenario_json(report)},
            {"partial", std::move(partial)},
            {"variants", std::move(variants)}};
  if (report.plan) {
    const PlanSummary& plan = *report.plan;
    root["plan"] = Json{{"layouts", plan.layouts},         {"refused", plan.refused},
                        {"not_fitting", plan.not_fitting}, {"replayed", plan.replayed},
                        {"bounded_out", plan.bounded_out}, {"search_s", plan.search_s}};
    if (plan.leanest) {
      root["plan"]["leanest"] = Json{{"name", plan.leanest->name},
                                     {"layout", layout_json(plan.leanest->inputs.plan)},
                                     {"memory", memory_json(plan.leanest->outcome.memory)}};
    }
  }
  // Names come from user files; invalid UTF-8 is replaced rather than aborting the whole report.
  return root.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace fleetsim
