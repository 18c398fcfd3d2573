// Results of a run, rendered for people (console table), scripts (JSON) and analysis (HDF5).
//
// All three are rendered from the same records, so they never disagree. Files are written
// atomically: to a temporary file in the target directory, then renamed over the target, so a
// crash never leaves a half-written result.
//
// Speed-up is a throughput ratio (tokens/s of a variant over tokens/s of the first), so variants
// with different global batches still compare fairly; scaling efficiency divides it by the ratio
// of GPU counts. Both are undefined when either variant was not simulated (its layout does not
// fit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "sim/analysis/attribution.hpp"
#include "sim/analysis/sensitivity.hpp"
#include "sim/job/job.hpp"
#include "sim/step/collective_benchmark.hpp"
#include "sim/step/measured.hpp"
#include "sim/step/step_inputs.hpp"
#include "workloads/layout/dimensions.hpp"

namespace fleetsim {

struct VariantReport {
  std::string name;
  StepInputs inputs;
  StepOutcome outcome;
  // A scenario with a run: block: the run's job (from the simulated step) and its Monte Carlo.
  std::optional<RunSpec> run = std::nullopt;
  std::optional<JobSpec> job = std::nullopt;
  std::optional<JobResult> job_result = std::nullopt;
  std::vector<std::pair<std::string, std::string>> swept = {};  // a sweep point's values
  // `fleetsim run --attribute`: why this variant differs from the first (not on the first).
  std::optional<Attribution> attribution = std::nullopt;
  // `fleetsim run --sensitivity N`: its prediction interval and the inputs that move it most.
  std::optional<Sensitivity> sensitivity = std::nullopt;
  // The scenario's measured: block: what a real run of it measured (sim/step/measured.hpp).
  std::optional<MeasuredStep> measured = std::nullopt;
};

// What `fleetsim plan` searched: how many layouts, and what became of them.
struct PlanSummary {
  std::size_t layouts = 0;      // enumerated
  std::size_t refused = 0;      // by the job rules (tp not dividing the heads, ...)
  std::size_t not_fitting = 0;  // in no recomputation mode (with min_headroom free)
  std::size_t replayed = 0;
  std::size_t bounded_out = 0;           // fit, but their lower bound could not enter the ranking
  std::size_t offload_alternatives = 0;  // also tried with activations offloaded
  double search_s = 0;                   // wall time of the search
  double min_headroom = 0;               // the share of memory a layout had to leave free
  // Of the layouts that do not fit, the one needing the least memory (its memory check only).
  std::optional<VariantReport> leanest;
};

// Set when a stop (Ctrl-C, SIGTERM, --max-wall, --max-memory) ended the work early: the report
// holds the variants that finished, and says what is missing.
struct PartialResults {
  std::string stopped_by;  // "interrupted (SIGINT)", ...
  // The variants not finished, as the scenario has them (nothing simulated): a speed-up needs
  // to know whether its baseline is among them, a sweep's scaling efficiency whether a smaller
  // point of its group is.
  std::vector<VariantReport> not_finished;
  bool first_variant_left_out = false;
  // Beyond the variants not finished: "h100: 63 of 100 replications", "b200: attribution", ...
  std::vector<std::string> left_out;
};

struct RunReport {
  std::string scenario_name;
  std::string description;
  std::string scenario_file;
  std::string fleetsim_version;
  std::uint64_t seed = 1;
  std::vector<VariantReport> variants;  // the first one is the baseline for speed-ups
  std::optional<PlanSummary> plan;      // set for `fleetsim plan`: variants are its ranking
  bool swept = false;                   // a sweep's: variants are its points
  std::optional<PartialResults> partial;
};

// One column per variant; speed-up of each variant over the first; then each attribution, a
// row per factor. Ends with a newline.
std::string render_console(const RunReport& report);
// `fleetsim memory`: per variant, each item of the memory per GPU with what it assumes, and for
// a layout that does not fit, by how much. Ends with a newline.
std::string render_memory(const RunReport& report);
// `fleetsim plan`: what was searched, then one row per ranked layout, fastest first, with its
// step time, throughput, MFU and memory headroom. Ends with a newline.
std::string render_plan(const RunReport& report);
// Per variant, every link that carried traffic, or the links summed by kind (kind, links,
// bytes, max_utilisation): a summary that stays small on large clusters.
enum class LinkDetail { every_link, by_kind };
// Pretty-printed, keys in a fixed order; units in key names; for a plan, its summary under
// "plan". Ends with a newline.
std::string render_json(const RunReport& report, LinkDetail links = LinkDetail::every_link);
// Throws ModelError when the file cannot be written; the target is then left untouched.
// The HDF5 library of the build is not thread-safe: calls are serialised internally.
void write_hdf5(const RunReport& report, const std::filesystem::path& path);
// Throws ModelError when the file cannot be written; nothing is left behind and the target
// is untouched.
void write_text_atomically(const std::filesystem::path& path, const std::string& content);
// Why a result file cannot be written at `path`, checked before anything is simulated: its
// directory missing or not writable (an empty file is made there and removed, as root passes
// every permission check), or `path` something other than a regular file (a directory, a
// device such as /dev/null, a FIFO), or one of `inputs`. Empty when it can.
std::string output_target_problem(const std::filesystem::path& path,
                                  const std::vector<std::filesystem::path>& inputs);
// While it lives, an exclusive lock (flock) on the directory of each of `paths` (empty ones
// skipped), taken in one order so that no two processes wait for each other: two fleetsim
// processes writing into the same directories write one after the other, and one's HDF5 file
// is never found beside the other's trace. The lock is on the directory itself: no lock file
// is left behind. `waiting` is told each directory another process holds, before this one
// waits for it.
class OutputLock {
 public:
  // How a wait for another process ends: only when it lets go, or also when a stop is
  // requested (sim/engine/stop.hpp: --max-wall, --max-memory), by throwing Stopped with
  // nothing locked. A run or sweep stopped already is writing what it finished: it waits on.
  enum class Wait { until_free, until_free_or_stopped };
  explicit OutputLock(const std::vector<std::filesystem::path>& paths,
                      const std::function<void(const std::filesystem::path&)>& waiting = {},
                      Wait wait = Wait::until_free);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  std::vector<int> descriptors_;
};
// The temporary file a result is being written to at this moment, or nullptr: a signal
// handler that ends the process removes it first (async-signal-safe to read).
const char* temp_file_being_written() noexcept;

// A Chrome / Perfetto trace (JSON, open it in ui.perfetto.dev) of the traced ranks of every
// simulated variant: one process per variant, one track per rank and stream (compute, gather,
// reduce, tensor), each kernel and collective a slice. Variants replayed without tracing add
// nothing.
std::string render_trace(const RunReport& report);

// A simulated nccl-tests run (`fleetsim collective`).
struct CollectiveReport {
  std::string fleetsim_version;
  std::string node;
  int nodes = 1;
  std::string gpu_profile;
  std::string op;
  int ranks = 0;
  std::vector<CollectiveSample> samples;
};
// Root attributes: fleetsim_version, node, gpu_profile, op (string), nodes, ranks (int);
// dataset /collective: compound {size_bytes, time_us, algbw_gb_per_s, busbw_gb_per_s, algorithm,
// protocol},
// one row per message size (the tuner may pick per size). Written atomically like write_hdf5.
void write_collective_hdf5(const CollectiveReport& report, const std::filesystem::path& path);

// The variants the scenario has: those reported, and those a stop left out.
std::size_t planned_variants(const RunReport& report);
// tokens/s of variant `index` over tokens/s of variant 0; empty when either was not simulated,
// or when a stop left the scenario's first variant out.
std::optional<double> speedup_vs_first(const RunReport& report, std::size_t index);
// Tokens/s per GPU of variant `index` over those of variant 0: 1 is perfect scaling from the
// first variant's GPU count to this one's; empty when either was not simulated, or when every
// variant has the first one's GPU count.
std::optional<double> scaling_efficiency_vs_first(const RunReport& report, std::size_t index);
// For a sweep: tokens/s per GPU of variant `index` over those of the point with the fewest GPUs
// that fits among the points that differ from it only in size (the same node preset, GPU
// profile and model, and the same value of every swept field but cluster.nodes and layout.dp:
// a sweep over node counts and node types scales each type from its own smallest point);
// empty when it was not simulated, or when a stop left out a smaller point of its group.
std::optional<double> scaling_efficiency_in_sweep(const RunReport& report, std::size_t index);
// What holds a step most: "compute", the exposed communication of one kind ("exposed DP comm",
// "exposed TP comm", "exposed CP comm", "exposed EP comm", "exposed PP comm", "exposed offload
// copies"), or waiting ("idle (bubble, waits)"); ties go to the first.
std::string largest_share(const StepBreakdown& parts);
// `fleetsim sweep`: one row per point (GPUs, step time, tokens/s, per GPU, scaling efficiency,
// MFU, the largest share of the step). Ends with a newline.
std::string render_sweep(const RunReport& report);

// The results of some of a report's variants (what each one's simulation adds to the
// scenario's inputs: a re-planned point's layout and micro-batch, the step's outcome, a run's
// job and Monte Carlo) as bytes, and back into the same variants of a report of the same
// scenario: what one rank of a distributed sweep sends rank 0. Every double keeps its bits.
// Read by the build that wrote it; throws ModelError on other bytes. Returns the indices read.
std::string results_to_bytes(const RunReport& report, const std::vector<std::size_t>& indices);
std::vector<std::size_t> results_from_bytes(const std::string& bytes, RunReport& report);

// Reading an HDF5 result file back without HDF5 headers (tests, and programs that check a file).
using Hdf5Attribute = std::variant<std::string, std::int64_t, std::uint64_t, double>;

struct Hdf5VariantSummary {
  std::string group;  // "/variants/<name>"
  std::map<std::string, Hdf5Attribute> attributes;
  // dataset name -> number of rows; "run/wall_s", "attribution/parts", "sensitivity/samples",
  // ... for the datasets of its run, attribution and sensitivity groups
  std::map<std::string, std::size_t> dataset_rows;
  std::vector<std::string> warnings;
  // The attributes of its run, attribution and sensitivity groups, by group name.
  std::map<std::string, std::map<std::string, Hdf5Attribute>> group_attributes;
};

struct Hdf5Summary {
  std::map<std::string, Hdf5Attribute> attributes;  // of the root group
  std::vector<Hdf5VariantSummary> variants;         // in the order they were written
  std::vector<std::string> summary_columns;         // the /summary table's, in order
  std::size_t summary_rows = 0;
  std::vector<std::string> swept;  // a sweep's swept columns (none: not a sweep)
};

// Throws ModelError when the file cannot be opened or does not follow the layout of write_hdf5.
Hdf5Summary read_hdf5_summary(const std::filesystem::path& path);

}  // namespace fleetsim
