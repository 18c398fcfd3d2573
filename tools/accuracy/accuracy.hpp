// How close fleetsim comes to published training runs: every scenario under validation/ (one
// published run each, with what it measured: its measured: block) is simulated and set beside
// its measurement, and the errors are summarised per GPU family, per source and overall. This
// is docs/accuracy.md, which fleetsim_accuracy writes and a test keeps current.
//
// Nothing is fitted here: the scenarios carry the runs' published configurations and what was
// assumed where the sources are silent (their headers), the model its kernel-level calibration.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sim/step/measured.hpp"
#include "sim/step/step_inputs.hpp"

namespace fleetsim::accuracy {

// One published run: a variant of a validation scenario that has a measured: block, or a
// scenario fleetsim refuses (then one case for the whole file, with the refusal).
struct Case {
  std::string file;     // relative to the source tree: "validation/torchtitan/<id>.yaml"
  std::string source;   // the folder under validation/: who published the run
  std::string variant;  // the variant's name
  // Why fleetsim cannot run it: the scenario's error as `fleetsim validate` prints it, or the
  // model's failure. Empty when it ran.
  std::string refusal;
  StepInputs inputs;
  std::optional<MeasuredStep> measured;
  StepOutcome outcome;                    // replayed even where memory does not fit
  std::vector<MetricComparison> metrics;  // compare_measured's, in its order
};

// Every scenario under `root`/validation (sorted by path), each variant with a measured: block
// simulated; scenarios are spread over threads. Presets are read from `root`.
std::vector<Case> run_validation(const std::filesystem::path& root);

// The figure a case is judged by: the first the source gives of tokens/s per GPU, step time,
// TFLOP/s per GPU and MFU (each predicted on the source's own terms); null when none was
// predicted.
const MetricComparison* headline(const Case& c);
// The headline as a throughput error, predicted / published - 1, positive when fleetsim is
// optimistic (a step time's error inverted): tokens/s, TFLOP/s and MFU are all proportional to
// the throughput, so every case reads the same way.
std::optional<double> throughput_error(const Case& c);

// "A100", "H100", "GB200", ...: the GPU profile's name up to its first '-', upper case (an
// A100 of 40 or 80 GB is one family).
std::string gpu_family(const GpuProfile& gpu);

// The page: how the cases were judged, the summary tables, every case, and the refusals.
std::string render_page(const std::vector<Case>& cases);
// The README's part: the summary per GPU family, and what `fleetsim run` prints for the first
// run of `example_file` (relative to the source tree) beside its measurement.
std::string readme_section(const std::vector<Case>& cases, const std::string& example_file);

}  // namespace fleetsim::accuracy
