// The scenario file as a whole: its top-level keys, its base variant, its compare entries and
// sweep points (variants.cpp), and the presets everything names, read once each.
#include <algorithm>
#include <string>
#include <utility>

#include "sim/scenario/loader.hpp"
#include "workloads/layout/dimensions.hpp"
#include "workloads/layout/rules.hpp"

namespace fleetsim {
namespace fs = std::filesystem;

using namespace fields;

namespace {

const Keys kTopKeys = {"name",     "description", "seed",    "label", "model",
                       "training", "layout",      "cluster", "run",   "pricing",
                       "measured", "compare",     "sweep"};

}  // namespace

// A problem reported at the first of its fields that `map` writes (each a path below it), or at
// the deepest map on the way to the first that it does.
void fail_at(const Field& map, const JobProblem& problem) {
  std::optional<Field> deepest;
  for (const std::string& path : problem.fields) {
    Field at = map;
    bool whole = true;
    for (std::size_t begin = 0; begin <= path.size();) {
      const std::size_t end = std::min(path.find('.', begin), path.size());
      const auto next = find(at, std::string_view(path).substr(begin, end - begin));
      if (!next || !at.node.IsMap()) {
        whole = false;
        break;
      }
      at = *next;
      begin = end + 1;
    }
    if (whole) fail(at, problem.problem, problem.hint);
    if (!deepest) deepest = at;
  }
  fail(deepest.value_or(map), problem.problem, problem.hint);
}

const Preset& Loader::preset(const Field& name_field, const fs::path& dir, std::string_view what) {
  const std::string name = read_string(name_field);
  const fs::path path = dir / (name + ".yaml");
  if (!is_preset_name(name) || !fs::is_regular_file(path)) {
    const std::vector<std::string> names = available_presets(dir);
    const Keys candidates(names.begin(), names.end());
    const std::string hint =
        names.empty() ? "no presets found in " + dir.string()
                      : did_you_mean(name, candidates) + "available: " + join_list(candidates);
    fail(name_field, "unknown " + std::string(what) + " " + in_quotes(name), hint);
  }
  auto& slot = presets_[path];
  if (!slot) {
    slot = std::make_unique<Preset>();
    slot->doc.file = path.string();
    slot->root = parse_yaml_file(path, slot->doc.file, std::string(what) + " file");
  }
  return *slot;
}

// The YAML (or JSON) file a scenario names at `path_field`, relative to the scenario file,
// parsed once: `what` it is for the errors, `hint` where it is missing.
const Preset& Loader::file_named_by(const Field& path_field, const std::string& what,
                                    const std::string& hint, const std::string& in_directory) {
  fs::path path = read_string(path_field);
  if (path.is_relative()) path = fs::path(path_field.doc->file).parent_path() / path;
  std::error_code error;
  if (!in_directory.empty() && fs::is_directory(path, error)) path /= in_directory;
  // (A symbolic link that loops is no file either, not a filesystem exception.)
  if (!fs::is_regular_file(path, error)) {
    fail(path_field, "no " + what + " at " + in_quotes(path.string()), hint);
  }
  auto& slot = presets_[path];
  if (!slot) {
    slot = std::make_unique<Preset>();
    slot->doc.file = path.string();
    slot->root = parse_yaml_file(path, slot->doc.file, what);
  }
  return *slot;
}

StepInputs Loader::parse_variant(const Field& root) {
  StepInputs in;
  in.model = parse_model(require(root, "model"));
  in.training = parse_training(require(root, "training"));
  if (in.training.lora) fit_lora_targets(require(root, "training"), in);
  if (const auto problems = recipe_problems(in.model, in.training); !problems.empty()) {
    fail_at(root, problems.front());
  }
  parse_cluster(require(root, "cluster"), in);
  check_attention_kernel(require(root, "training"), in);
  in.plan = parse_layout(require(root, "layout"));
  // dp: auto is what the GPUs leave (0 where they leave no whole number: a rule says so).
  in.plan.dp = data_parallel_size_for(in.plan, in.nodes * in.node.gpus);
  // The job rules (workloads/layout/rules.hpp), each problem where the scenario can change it.
  if (const auto problem = first_job_problem(job_subject_on_cluster(in), in.plan)) {
    fail_at(root, *problem);
  }
  return in;
}

Variant Loader::parse_full_variant(std::string name, const Field& root) {
  Variant variant{std::move(name), parse_variant(root), std::nullopt};
  variant.run = parse_run(root);
  if (variant.run) check_run_against_job(root, variant);
  if (variant.run && variant.run->write == CheckpointWrite::in_memory) {
    if (const auto problem = in_memory_checkpoint_problem(
            variant.run->spot.has_value(), variant.inputs.nodes, variant.inputs.node)) {
      fail(require(require(root, "run"), "checkpoint_write"), *problem,
           "use checkpoint_write: async");
    }
  }
  return variant;
}

Scenario Loader::load(const fs::path& file) {
  Doc base{file.string(), -1, {}, {}};
  const YAML::Node root_node = parse_yaml_file(file, base.file, "scenario file");
  const Field root{root_node, &base, ""};
  expect_map(root, kTopKeys);
  Scenario scenario;
  scenario.file = base.file;
  scenario.name = read_name(require(root, "name"));
  if (auto description = find(root, "description")) {
    scenario.description = read_string(*description);
  }
  if (auto seed = find(root, "seed")) {
    scenario.seed = read_uint64(*seed);
  }
  Variant first = parse_full_variant("", root);
  if (const auto measured = find(root, "measured")) first.measured = parse_measured(*measured);
  const auto label = find(root, "label");
  first.name = label ? read_name(*label) : first.inputs.node.name;
  scenario.variants.push_back(std::move(first));
  if (auto compare = find(root, "compare")) {
    parse_compare(*compare, root_node, scenario);
  }
  // A price is a run's: with no run it would be read and then ignored, the base's or an
  // entry's.
  if (std::none_of(scenario.variants.begin(), scenario.variants.end(),
                   [](const Variant& v) { return v.run.has_value(); })) {
    std::vector<Field> priced;
    if (const auto pricing = find(root, "pricing")) priced.push_back(*pricing);
    if (const auto compare = find(root, "compare"); compare && compare->node.IsSequence()) {
      for (std::size_t i = 0; i < compare->node.size(); ++i) {
        const Field entry{compare->node[i], compare->doc,
                          compare->path + "[" + std::to_string(i) + "]"};
        if (const auto pricing =
                entry.node.IsMap() ? child_node(entry.node, "pricing") : std::nullopt) {
          priced.push_back({*pricing, entry.doc, entry.path + ".pricing"});
        }
      }
    }
    if (!priced.empty()) {
      fail(priced.front(), "pricing prices a run's GPU-hours, and no variant has a run",
           "add a run: block (interruptions, checkpoints, restart), or remove pricing");
    }
  }
  // A variant that does not fit is a result (a compare shows which GPUs can run a model, a
  // sweep where it starts to fit); a scenario where no variant can, in any layout, is a mistake.
  if (!find(root, "sweep")) check_some_variant_can_fit(require(root, "model"), scenario);
  if (auto sweep = find(root, "sweep")) {
    if (const auto measured = find(root, "measured")) refuse_measured_in_sweep(*measured);
    // The points replace the variants: each variant (the base, each compare entry) swept alike.
    const std::vector<Variant> variants = std::move(scenario.variants);
    scenario.variants.clear();
    scenario.swept = true;
    for (std::size_t v = 0; v < variants.size(); ++v) {
      parse_sweep(*sweep, root_node, variants[v], static_cast<int>(v) - 1, variants.size(),
                  scenario);
    }
  }
  for (Variant& variant : scenario.variants) {
    variant.inputs.fabric.hash_seed = scenario.seed;  // the one seed of the scenario
  }
  return scenario;
}

PresetCatalog Loader::catalog() {
  Doc listing;
  listing.file = "(preset list)";
  auto named = [&](const std::string& name) { return Field{YAML::Node(name), &listing, ""}; };
  PresetCatalog catalog;
  for (const auto& name : available_presets(data_.root / "topology" / "presets")) {
    catalog.nodes.push_back({name, node_preset(named(name)).spec.description});
  }
  for (const auto& name : available_presets(data_.root / "calibration" / "profiles")) {
    catalog.gpus.push_back({name, gpu_profile(named(name)).description});
  }
  for (const auto& name : available_presets(data_.root / "workloads" / "models")) {
    catalog.models.push_back({name, model_preset(named(name)).source});
  }
  for (const auto& name : available_presets(data_.root / "calibration" / "interruptions")) {
    catalog.interruptions.push_back({name, interruption_preset_description(named(name))});
  }
  return catalog;
}

Scenario load_scenario(const std::filesystem::path& file, const DataPaths& data) {
  return Loader(data).load(file);
}

PresetCatalog list_presets(const DataPaths& data) {
  return Loader(data).catalog();
}

StepInputs Loader::cluster(const std::string& node, int nodes, const std::string& gpu_profile) {
  Doc command_line;
  command_line.file = "(command line)";
  YAML::Node spec;
  spec["node"] = node;
  spec["nodes"] = nodes;
  if (!gpu_profile.empty()) spec["gpu"] = gpu_profile;
  StepInputs in;
  parse_cluster(Field{spec, &command_line, "cluster"}, in);
  return in;
}

StepInputs load_cluster(const DataPaths& data, const std::string& node, int nodes,
                        const std::string& gpu_profile) {
  return Loader(data).cluster(node, nodes, gpu_profile);
}

GpuProfile Loader::profile(const std::string& name) {
  Doc command_line;
  command_line.file = "(command line)";
  const YAML::Node spec(name);
  return gpu_profile(Field{spec, &command_line, "gpu"});
}

GpuProfile load_gpu_profile(const DataPaths& data, const std::string& name) {
  return Loader(data).profile(name);
}

std::filesystem::path gpu_profile_file(const DataPaths& data, const std::string& name) {
  return data.root / "calibration" / "profiles" / (name + ".yaml");
}

}  // namespace fleetsim
