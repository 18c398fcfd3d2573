#include "sim/study/study.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <string>
#include <utility>

#include "sim/analysis/attribution.hpp"
#include "sim/analysis/sensitivity.hpp"
#include "sim/engine/errors.hpp"
#include "sim/engine/stop.hpp"
#include "sim/job/job_of_step.hpp"
#include "sim/step/step_executor.hpp"

namespace fleetsim {
namespace {

void report_progress(const Progress& progress, std::int64_t units) {
  if (progress) progress(units);
}

// A stop reason as the one character a rank's results start with, and back.
static_assert(static_cast<int>(StopReason::memory_limit) < 10);
std::string stop_reason_byte(StopReason reason) {
  return std::to_string(static_cast<int>(reason));
}
StopReason stop_reason_of_byte(char byte) {
  const int reason = byte - '0';
  if (reason < 0 || reason > static_cast<int>(StopReason::memory_limit)) {
    throw ModelError("a rank's results begin with an unknown stop reason");
  }
  return static_cast<StopReason>(reason);
}

// Whether a stop cut the variant's Monte Carlo short (fewer replications than its run has).
bool cut_short(const VariantReport& variant) {
  return variant.job_result && variant.job_result->replications.size() <
                                   static_cast<std::size_t>(variant.run->replications);
}

// `out` = compute(), left empty when a stop ends it: an analysis is whole or absent (its
// simulations and Monte Carlos throw Stopped rather than return part of their work).
template <typename T, typename Compute>
void whole_unless_stopped(std::optional<T>& out, Compute compute) {
  try {
    out = compute();
  } catch (const Stopped&) {  // left out
  }
}

// `out` without its run, and why: its step's results stand.
void leave_run_out(VariantReport& out, const ModelError& why) {
  out.job.reset();
  out.job_result.reset();
  out.outcome.warnings.push_back(std::string("its run cannot be simulated: ") + why.what());
}

// One variant's simulation into `out`: its step, or a re-planned point's best layout (the
// fastest step, or with a run: block the cheapest expected run of the fastest few), then its
// run.
void simulate_variant(const Scenario& scenario, const Variant& variant, const StepOptions& options,
                      const Progress& progress, StepCache& steps, VariantReport& out) {
  if (!scenario.replanned) {
    out.outcome = steps.simulate(variant.inputs, options);
    report_progress(progress, 1);
    try {  // a run that cannot finish is this variant's answer, not the scenario's failure
      simulate_run(out, scenario.seed, options, progress, OnStop::keep_finished, steps);
    } catch (const RunCannotFinish& why) {
      leave_run_out(out, why);
    }
    return;
  }
  PlanOptions plan;
  plan.top = variant.run ? kRunCandidates : 1;
  plan.step = options.untraced();
  PlanResult best = search_layouts(variant.inputs, plan);
  const std::int64_t run_units =
      variant.run ? static_cast<std::int64_t>(kRunCandidates) * variant.run->replications : 0;
  if (best.ranked.empty()) {
    out.outcome = best.leanest ? std::move(best.leanest->outcome) : check_memory(variant.inputs);
    report_progress(progress, 1 + run_units);
    return;
  }
  if (variant.run) {
    std::vector<VariantReport> candidates;
    for (PlannedLayout& layout : best.ranked) {
      candidates.push_back({out.name, std::move(layout.inputs), std::move(layout.outcome),
                            variant.run, std::nullopt, std::nullopt, out.swept});
    }
    rank_by_run(candidates, *variant.run, scenario.seed, plan.step, progress, steps);
    report_progress(progress, 1 + static_cast<std::int64_t>(kRunCandidates - candidates.size()) *
                                      variant.run->replications);
    out = std::move(candidates.front());
    return;
  }
  out.inputs = std::move(best.ranked.front().inputs);
  out.outcome = std::move(best.ranked.front().outcome);
  report_progress(progress, 1);
}

}  // namespace

RunReport empty_report(const Scenario& scenario) {
  RunReport report;
  report.scenario_name = scenario.name;
  report.description = scenario.description;
  report.scenario_file = scenario.file;
  report.fleetsim_version = FLEETSIM_VERSION;
  report.seed = scenario.seed;
  report.swept = scenario.swept;
  return report;
}

std::int64_t work_units(const Scenario& scenario, const Spread& spread) {
  std::int64_t units = 0;
  for (std::size_t i = 0; i < scenario.variants.size(); ++i) {
    if (!spread.owns(i)) continue;
    const auto& run = scenario.variants[i].run;
    const std::int64_t runs = scenario.replanned ? kRunCandidates : 1;
    units += 1 + (run ? runs * run->replications : 0);
  }
  return units;
}

void simulate_run(VariantReport& out, std::uint64_t seed, const StepOptions& options,
                  const Progress& progress, OnStop on_stop, StepCache& steps) {
  if (!out.run) return;
  // A run that does not happen (its step does not fit) or cannot finish counts the
  // replications it did not play as done: work_units counts every run's.
  if (!out.outcome.simulated) {
    report_progress(progress, out.run->replications);
    return;
  }
  std::atomic<std::int64_t> played = 0;
  try {
    out.job = job_of_step(*out.run, out.inputs, out.outcome.step.step_time_s, options,
                          out.outcome.warnings, steps);
    out.job_result = simulate_job(
        *out.job, out.run->replications, seed,
        [&progress, &played] {
          ++played;
          report_progress(progress, 1);
        },
        on_stop);
  } catch (const ModelError&) {
    report_progress(progress, out.run->replications - played);
    throw;
  }
  // Young-Daly's interval may rightly outlast a short run; an interval given may not.
  if (out.job->policy.kind != CheckpointPolicy::Kind::young_daly &&
      out.job_result->interval_steps >= out.job->steps) {
    out.outcome.warnings.push_back(
        "it never checkpoints: the run's " +
        std::to_string(static_cast<long long>(out.job->steps)) +
        " steps end before its first checkpoint, so every interruption starts it again from "
        "the beginning");
  }
  if (out.job->spot && !out.job->spot->trace_s.empty() &&
      out.job_result->wall_s.p50 > out.job->spot->trace_s.back()) {
    out.outcome.warnings.push_back(
        "the spot preemption trace ends at " +
        std::to_string(static_cast<long long>(out.job->spot->trace_s.back() / 3600)) +
        " h, before most runs do: no preemptions after it");
  }
}

void rank_by_run(std::vector<VariantReport>& layouts, const RunSpec& run, std::uint64_t seed,
                 const StepOptions& options, const Progress& progress, StepCache& steps) {
  tbb::parallel_for(std::size_t{0}, layouts.size(), [&](std::size_t i) {
    VariantReport& layout = layouts[i];
    layout.run = run;
    try {
      simulate_run(layout, seed, options, progress, OnStop::throw_stopped, steps);
    } catch (const ModelError& why) {
      // This layout's run only: a layout no one wrote (its checkpoint larger than the
      // scenario's layout's, say) is ranked last, not a mistake in the scenario.
      leave_run_out(layout, why);
    }
  });
  const auto expected = [&](const VariantReport& layout) {
    if (!layout.job_result) return std::numeric_limits<double>::infinity();
    return run.priced ? layout.job_result->cost_usd.mean : layout.job_result->wall_s.mean;
  };
  std::stable_sort(layouts.begin(), layouts.end(),
                   [&](const auto& a, const auto& b) { return expected(a) < expected(b); });
}

RunReport simulate_scenario(const Scenario& scenario, const StepOptions& options,
                            const Spread& spread, const Progress& progress) {
  if (spread.size < 1 || spread.rank < 0 || spread.rank >= spread.size ||
      (spread.size > 1 && !spread.gather)) {
    throw ModelError("a study spread over processes needs its rank among them and a gather");
  }
  RunReport report = empty_report(scenario);
  report.variants.resize(scenario.variants.size());
  // Variants are independent simulations; each writes only its own slot, so the report is the
  // same however TBB schedules them.
  for (std::size_t i = 0; i < scenario.variants.size(); ++i) {
    const Variant& variant = scenario.variants[i];
    report.variants[i] = {variant.name, variant.inputs, {},           variant.run,
                          std::nullopt, std::nullopt,   variant.swept};
    report.variants[i].measured = variant.measured;
  }
  // Which variants finished; each element written by its variant's own task only (chars, not
  // vector<bool>, whose packed bits tasks would share).
  std::vector<char> finished(scenario.variants.size(), 0);
  StepCache steps;  // variants asking for the same step share it
  const auto simulate_unless_stopped = [&](std::size_t i) {
    if (!spread.owns(i) || stop_requested()) return;
    try {
      simulate_variant(scenario, scenario.variants[i], options, progress, steps,
                       report.variants[i]);
      finished[i] = 1;
    } catch (const Stopped&) {  // left out
    }
  };
  if (spread.size == 1) {
    tbb::parallel_for(std::size_t{0}, scenario.variants.size(), simulate_unless_stopped);
    if (stop_requested()) keep_finished(report, finished, stop_reason());
    return report;
  }
  // Spread over ranks: each sends rank 0 its finished variants' results ('R', then what stopped
  // it, '0' for nothing), or what failed ('E'), so that no rank waits for one that has given up.
  std::string sent;
  try {
    tbb::parallel_for(std::size_t{0}, scenario.variants.size(), simulate_unless_stopped);
    std::vector<std::size_t> indices;
    for (std::size_t i = 0; i < scenario.variants.size(); ++i) {
      if (finished[i]) indices.push_back(i);
    }
    sent = "R" + stop_reason_byte(stop_reason()) + results_to_bytes(report, indices);
  } catch (const std::exception& error) {
    sent = std::string("E") + error.what();
  }
  const std::vector<std::string> received = spread.gather(sent);
  auto reason = StopReason::none;
  for (std::size_t r = 0; r < received.size(); ++r) {
    if (received[r].front() == 'E') {
      throw ModelError("rank " + std::to_string(r) + ": " + received[r].substr(1));
    }
    if (reason == StopReason::none) reason = stop_reason_of_byte(received[r][1]);
    if (r == 0) continue;
    for (std::size_t i : results_from_bytes(received[r].substr(2), report)) finished[i] = 1;
  }
  if (reason != StopReason::none) {
    request_stop(reason);  // rank 0 stops too: what follows would not be whole
    keep_finished(report, finished, reason);
  }
  return report;
}

RunReport memory_report(const Scenario& scenario) {
  RunReport report = empty_report(scenario);
  for (const Variant& variant : scenario.variants) {
    report.variants.push_back({variant.name, variant.inputs, check_memory(variant.inputs)});
    report.variants.back().measured = variant.measured;
  }
  return report;
}

RunReport plan_report(const Scenario& scenario, const PlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  PlanResult result = search_layouts(scenario.variants.front().inputs, options);
  const double search_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RunReport report = empty_report(scenario);
  // A layout as a variant, named by its layout and micro-batch.
  const auto variant = [](PlannedLayout& layout) {
    std::string name = layout_label(layout.inputs.plan) + " mb" +
                       std::to_string(layout.inputs.training.micro_batch);
    return VariantReport{std::move(name), std::move(layout.inputs), std::move(layout.outcome)};
  };
  for (PlannedLayout& layout : result.ranked) report.variants.push_back(variant(layout));
  report.plan = PlanSummary{result.layouts,  result.refused,       result.not_fitting,
                            result.replayed, result.bounded_out,   result.offload_alternatives,
                            search_s,        options.min_headroom, std::nullopt};
  if (result.leanest) report.plan->leanest = variant(*result.leanest);
  return report;
}

std::int64_t plan_run_units(const RunReport& plan, const Scenario& scenario) {
  const auto& run = scenario.variants.front().run;
  return run ? static_cast<std::int64_t>(plan.variants.size()) * run->replications : 0;
}

void rank_plan_by_run(RunReport& plan, const Scenario& scenario, const StepOptions& options,
                      const Progress& progress) {
  if (const auto& run = scenario.variants.front().run) {
    StepCache steps;
    rank_by_run(plan.variants, *run, scenario.seed, options, progress, steps);
  }
}

void attribute_variants(RunReport& report, std::uint64_t seed, const StepOptions& options) {
  const VariantReport& first = report.variants.front();
  for (std::size_t i = 1; i < report.variants.size(); ++i) {
    VariantReport& variant = report.variants[i];
    whole_unless_stopped(variant.attribution, [&] {
      return attribute({first.name, first.inputs, first.run},
                       {variant.name, variant.inputs, variant.run}, seed, options);
    });
  }
}

void add_sensitivities(RunReport& report, std::uint64_t seed, int draws,
                       const StepOptions& options) {
  SensitivityOptions sensitivity_options;
  sensitivity_options.draws = draws;
  for (VariantReport& variant : report.variants) {
    whole_unless_stopped(variant.sensitivity, [&] {
      return sensitivity(variant.inputs, variant.run, seed, sensitivity_options, options);
    });
  }
}

PartialResults& mark_partial(RunReport& report, StopReason reason) {
  if (!report.partial) {
    report.partial.emplace();
    report.partial->stopped_by = describe(reason);
  }
  return *report.partial;
}

void keep_finished(RunReport& report, const std::vector<char>& finished, StopReason reason) {
  PartialResults& partial = mark_partial(report, reason);
  partial.first_variant_left_out = !report.variants.empty() && !finished[0];
  std::vector<VariantReport> kept;
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    VariantReport& variant = report.variants[i];
    if (!finished[i]) {
      // As the scenario has it: a step that finished before its run was stopped is dropped too.
      variant.outcome = {};
      variant.job.reset();
      variant.job_result.reset();
      partial.not_finished.push_back(std::move(variant));
      continue;
    }
    if (cut_short(variant)) {
      partial.left_out.push_back(
          variant.name + ": " +
          std::to_string(variant.run->replications - variant.job_result->replications.size()) +
          " of " + std::to_string(variant.run->replications) + " replications");
    }
    kept.push_back(std::move(variant));
  }
  report.variants = std::move(kept);
}

void note_stopped_analyses(RunReport& report, StopReason reason, bool attribute, bool sensitivity) {
  PartialResults& partial = mark_partial(report, reason);
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    const VariantReport& variant = report.variants[i];
    // The first variant is the others' baseline; when a stop left it out, every one lacks one.
    const bool attributed = i > 0 || partial.first_variant_left_out;
    if (attribute && attributed && !variant.attribution) {
      partial.left_out.push_back(variant.name + ": attribution");
    }
    if (sensitivity && !variant.sensitivity) {
      partial.left_out.push_back(variant.name + ": sensitivity");
    }
  }
}

}  // namespace fleetsim
