// The study layer: what `fleetsim run`, `sweep`, `plan` and `memory` mean, as a library. A study
// takes a loaded scenario and produces the report the outputs render: every variant's step (or,
// for a re-planned sweep point, the best layout's), its run's Monte Carlo, the plan's ranking,
// the attributions and sensitivities asked for; spread over threads (TBB) and over processes
// (Spread, MPI under the CLI), and cut short by a stop (sim/engine/stop.hpp) into a report
// marked partial that keeps exactly what finished.
//
// Nothing here prints or exits: progress goes to a callback, and the CLI turns the report into
// a table, JSON or files and an exit code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/stop.hpp"
#include "sim/plan/planner.hpp"
#include "sim/report/report.hpp"
#include "sim/scenario/scenario.hpp"
#include "sim/step/step_cache.hpp"

namespace fleetsim {

// The processes a study is spread over: each simulates the variants whose index is its rank
// modulo their number, and gather brings every rank's bytes to rank 0 (in rank order; nothing
// elsewhere). One process alone by default.
struct Spread {
  int rank = 0;
  int size = 1;
  std::function<std::vector<std::string>(const std::string&)> gather = {};
  bool owns(std::size_t variant) const {
    return variant % static_cast<std::size_t>(size) == static_cast<std::size_t>(rank);
  }
};

// Units of work done: a step, or one replication of a run. Called from any thread.
using Progress = std::function<void(std::int64_t units)>;

// A re-planned sweep point with a run: block keeps, of this many fastest layouts, the one whose
// run is expected to cost least (as `fleetsim plan` ranks them by default).
inline constexpr std::size_t kRunCandidates = 10;

// A report of `scenario` with no variant results yet.
RunReport empty_report(const Scenario& scenario);

// The units of work simulate_scenario does on this process: what a progress bar counts to.
std::int64_t work_units(const Scenario& scenario, const Spread& spread);

// Every variant of `scenario`, spread over threads and processes (rank 0's report has them
// all; the others' are theirs alone). A variant whose run cannot finish (RunCannotFinish)
// keeps its step, with the reason as a warning in the place of its run. A stop leaves the variants
// not finished out: the report is then marked partial, a run cut short keeping the replications it
// finished; on rank 0 a stop any rank reports is requested process-wide (sim/engine/stop.hpp),
// since what follows would not be whole. Throws ModelError on rank 0 when a rank fails, with that
// rank's message (the others return what they sent), and for a spread without a gather or of no
// processes.
RunReport simulate_scenario(const Scenario& scenario, const StepOptions& options,
                            const Spread& spread = {}, const Progress& progress = {});

// A variant's run, once its step is simulated: its job (the steps one replica short and with
// degraded hardware from the step executor), then the Monte Carlo on `seed`. A stop keeps the
// replications finished, or throws Stopped, as `on_stop` says.
// Its steps come from `steps`, shared with the scenario's other variants.
void simulate_run(VariantReport& variant, std::uint64_t seed, const StepOptions& options,
                  const Progress& progress, OnStop on_stop, StepCache& steps);

// `layouts` (fastest step first), each with `run` simulated, ranked by the run's expected cost
// (its mean; without a price its mean wall time), ties in the order given. One whose run
// cannot be simulated is ranked last, with a warning. Throws Stopped when a stop cuts a Monte
// Carlo short: the ranking would not be one.
void rank_by_run(std::vector<VariantReport>& layouts, const RunSpec& run, std::uint64_t seed,
                 const StepOptions& options, const Progress& progress, StepCache& steps);

// What `fleetsim memory` reports: every variant's memory check, nothing replayed.
RunReport memory_report(const Scenario& scenario);

// `fleetsim plan`: the search from the scenario's first variant (its model, recipe and
// cluster), its ranked layouts as variants named by their layout and micro-batch, fastest step
// first, with the search's counts and wall time.
RunReport plan_report(const Scenario& scenario, const PlanOptions& options);
// With a run: block, each ranked layout's run too, and the ranking by its expected cost to
// train (a layout's step is not all a run costs): replications() units of work.
std::int64_t plan_run_units(const RunReport& plan, const Scenario& scenario);
void rank_plan_by_run(RunReport& plan, const Scenario& scenario, const StepOptions& options,
                      const Progress& progress = {});

// Each compare entry's difference from the first variant, split among its causes; and each
// variant's prediction interval. A stop leaves an analysis out whole.
void attribute_variants(RunReport& report, std::uint64_t seed, const StepOptions& options);
void add_sensitivities(RunReport& report, std::uint64_t seed, int draws,
                       const StepOptions& options);

// `report` marked partial, stopped for `reason` (kept if it is already): its partial results.
PartialResults& mark_partial(RunReport& report, StopReason reason);
// Marks `report` partial after a stop: keeps the variants finished (`finished[i]`), the others
// going to its not_finished, and lists the Monte Carlos cut short.
void keep_finished(RunReport& report, const std::vector<char>& finished, StopReason reason);
// After a stop: the report is partial, and lists the analyses asked for that are missing.
void note_stopped_analyses(RunReport& report, StopReason reason, bool attribute, bool sensitivity);

}  // namespace fleetsim
