// The scenario loader's parts (this folder's own header): the Loader, which owns the presets
// read so far, and the schema of each section, one file each:
//
//   fields.cpp           the YAML field toolkit (located reads, units, did-you-mean, layers)
//   model_schema.cpp     model: (zoo presets, inline dimensions, Hugging Face configs)
//   training_schema.cpp  training:
//   layout_schema.cpp    layout: (from the table of workloads/layout/dimensions.hpp)
//   cluster_schema.cpp   cluster: (node presets and overrides, fabric, the GPU count)
//   profile_schema.cpp   GPU profiles and collective libraries (calibration/)
//   run_schema.cpp       run:, pricing: and cluster.storage (interruptions, spot, checkpoints)
//   variants.cpp         compare: entries and sweep: points, laid over the base
//   loader.cpp           the file as a whole, the presets, the public functions of scenario.hpp
//
// Presets are parsed into typed structs first and overrides are applied on the typed struct, so
// a mistake in a preset names the preset file and a mistake in an override names the scenario.
// A variant is checked exactly like the base scenario: the job rules
// (workloads/layout/rules.hpp) are reported at the field to change.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/scenario/fields.hpp"
#include "sim/scenario/scenario.hpp"

namespace fleetsim {

// Clusters above this many GPUs are refused (cluster_schema.cpp says why), and so are runs
// paying for more, spares included.
inline constexpr double kMaxGpus = 1048576;

// A preset file (or a file a scenario names) as read, with the document its fields point into.
struct Preset {
  fields::Doc doc;
  YAML::Node root;
};

// A node preset as a typed spec, plus what only the loader needs: the sources by key, and the
// field that named the GPU profile (to report an unknown profile where it was written).
struct NodeBuild {
  NodeSpec spec;
  std::vector<std::pair<std::string, std::string>> sources;
  fields::Field gpu_profile;
};

// measured_schema.cpp: a measured: block, which needs no preset; and its refusal in a
// scenario with a sweep, whose points are runs of their own.
MeasuredStep parse_measured(const fields::Field& measured);
[[noreturn]] void refuse_measured_in_sweep(const fields::Field& measured);

// Owns the presets read so far: fields point into their documents, so a mistake found late (an
// unknown GPU profile named in a node preset) can still name the preset file and line.
class Loader {
 public:
  explicit Loader(DataPaths data) : data_(std::move(data)) {}

  Scenario load(const std::filesystem::path& file);
  PresetCatalog catalog();
  StepInputs cluster(const std::string& node, int nodes, const std::string& gpu_profile);
  GpuProfile profile(const std::string& name);

 private:
  using Field = fields::Field;

  // loader.cpp
  const Preset& preset(const Field& name, const std::filesystem::path& dir, std::string_view what);
  // The YAML (or JSON) file a scenario names at `path_field`, relative to the scenario file;
  // where the path is a directory, its file named `in_directory` (when given).
  const Preset& file_named_by(const Field& path_field, const std::string& what,
                              const std::string& hint, const std::string& in_directory = "");
  StepInputs parse_variant(const Field& root);
  Variant parse_full_variant(std::string name, const Field& root);
  // model_schema.cpp
  ModelSpec parse_model(const Field& f);
  ModelSpec model_preset(const Field& name);
  ModelSpec hf_model(const Field& path);
  // cluster_schema.cpp
  void parse_cluster(const Field& f, StepInputs& in);
  NodeBuild parse_node(const Field& f);
  NodeBuild node_preset(const Field& name);
  // profile_schema.cpp
  GpuProfile gpu_profile(const Field& name);
  CollectiveCosts collective_library(const Field& name);
  // run_schema.cpp
  std::optional<RunSpec> parse_run(const Field& root);
  std::vector<InterruptionCause> interruption_preset(const Field& name);
  std::vector<double> preemption_trace(const Field& path, std::string& source);
  std::string interruption_preset_description(const Field& name);
  // What a variant's run asks of its job: at most 10^15 steps, at most kMaxGpus GPUs paid.
  static void check_run_against_job(const Field& root, const Variant& variant);
  // variants.cpp: the compare entries laid over `base`, the file's root as read.
  void parse_compare(const Field& list, const YAML::Node& base, Scenario& scenario);
  // The sweep's points of one variant: the base (entry -1) or compare entry `entry`, named
  // after it when the scenario compares (`copies` variants, each swept alike).
  void parse_sweep(const Field& sweep, const YAML::Node& base, const Variant& variant, int entry,
                   std::size_t copies, Scenario& scenario);

  DataPaths data_;
  std::map<std::filesystem::path, std::unique_ptr<Preset>> presets_;
};

// A rule's problem (workloads/layout/rules.hpp) at the first of its fields that `map` writes
// (each a path below it), or else at the deepest map on the way to its first field.
[[noreturn]] void fail_at(const fields::Field& map, const JobProblem& problem);

// The sections that need no presets.
TrainingSpec parse_training(const fields::Field& f);
// LoRA's default targets on a GELU MLP leave out its gate; a gate listed is reported there.
void fit_lora_targets(const fields::Field& training, StepInputs& in);
// A named attention kernel (training.attention: cudnn, ...) the cluster's GPU profile lacks.
void check_attention_kernel(const fields::Field& training, const StepInputs& in);
// dp: auto is left 0, for the loader to resolve once the cluster is known.
ParallelPlan parse_layout(const fields::Field& f);
FabricSpec parse_fabric(const std::optional<fields::Field>& f);
// The model's rules (workloads/model_spec.hpp), its keys looked up in `map`.
void check_model(const ModelSpec& m, const fields::Field& map);
// Throws at the base's model when no variant could fit in any layout.
void check_some_variant_can_fit(const fields::Field& model, const Scenario& scenario);

}  // namespace fleetsim
