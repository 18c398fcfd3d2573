// Scenario files: YAML in, typed and validated configuration out.
//
// A scenario describes one training step setup (cluster, model, training recipe, layout) and an
// optional `compare:` list of variants, each a partial scenario deep-merged over the base. Presets
// (nodes, GPU profiles, models) are referenced by name and can be overridden field by field.
// Every mistake is a ScenarioError naming file:line:column, the key, what was expected and a
// hint; unknown keys are errors, never ignored. The schema is docs/scenario-reference.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/engine/errors.hpp"
#include "sim/job/job.hpp"
#include "sim/step/measured.hpp"
#include "sim/step/step_inputs.hpp"

namespace fleetsim {

// Where presets live: <root>/topology/presets/<name>.yaml, <root>/calibration/profiles/<name>.yaml,
// <root>/workloads/models/<name>.yaml.
struct DataPaths {
  std::filesystem::path root;
};

struct Variant {
  std::string name;
  StepInputs inputs;
  std::optional<RunSpec> run;  // set: the scenario's run: block, a Monte Carlo of the run
  // A sweep's point: each swept field's path and value, in the sweep's order.
  std::vector<std::pair<std::string, std::string>> swept = {};
  // What a real run of it measured (measured:), to compare with the simulation.
  std::optional<MeasuredStep> measured = std::nullopt;
};

struct Scenario {
  std::string name;
  std::string description;
  std::string file;
  std::uint64_t seed = 1;
  std::vector<Variant> variants;  // the base scenario first, then the compare entries in order
  bool swept = false;             // a sweep: the variants are its points, in order
  bool replanned = false;         // a sweep with layout: plan: each point's layout is searched
};

Scenario load_scenario(const std::filesystem::path& file, const DataPaths& data);

// About the memory simulating `variant`'s step takes: its topology and flows, 16 KB a GPU
// (measured: 507 MB peak for six variants of a 16,384-GPU run, two replayed at a time), its
// programs, 16 KB a layer pass (workloads/layout/rules.hpp), and without folding every rank's
// replay of its stage.
double simulation_bytes_estimate(const Variant& variant, bool folded = true);

// Every preset under the data root, each read and validated as a scenario would read it (a
// broken preset throws its ScenarioError), with its one-line description (a model: its source).
struct PresetInfo {
  std::string name;
  std::string description;
};
struct PresetCatalog {
  std::vector<PresetInfo> nodes;
  std::vector<PresetInfo> gpus;
  std::vector<PresetInfo> models;
  std::vector<PresetInfo> interruptions;
};
PresetCatalog list_presets(const DataPaths& data);

// A cluster named on the command line (a node preset, a node count, optionally another GPU
// profile), read and checked as a scenario's cluster: section is. Model, training and layout
// are left empty.
StepInputs load_cluster(const DataPaths& data, const std::string& node, int nodes,
                        const std::string& gpu_profile = "");

// GPU profile `name`, read and checked as a scenario's `gpu:` is.
GpuProfile load_gpu_profile(const DataPaths& data, const std::string& name);

// The file that holds GPU profile `name` under the data root.
std::filesystem::path gpu_profile_file(const DataPaths& data, const std::string& name);

}  // namespace fleetsim
