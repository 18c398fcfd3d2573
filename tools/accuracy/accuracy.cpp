#include "tools/accuracy/accuracy.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cctype>
#include <string_view>

#include "sim/engine/errors.hpp"
#include "sim/scenario/scenario.hpp"
#include "sim/step/step_executor.hpp"

namespace fleetsim::accuracy {
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> validation_files(const fs::path& root) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(root / "validation")) {
    if (entry.is_regular_file() && entry.path().extension() == ".yaml") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The message with the checkout's own path taken out: the page reads the same wherever it is
// generated.
std::string relative_message(std::string message, const fs::path& root) {
  const std::string prefix = (root / "").string();
  for (std::size_t at = message.find(prefix); at != std::string::npos;
       at = message.find(prefix, at)) {
    message.erase(at, prefix.size());
  }
  return message;
}

std::vector<Case> cases_of(const fs::path& file, const fs::path& root) {
  Case blank;
  blank.file = fs::relative(file, root).generic_string();
  blank.source = fs::relative(file.parent_path(), root / "validation").generic_string();
  blank.variant = file.stem().string();
  std::vector<Case> cases;
  try {
    const Scenario scenario = load_scenario(file, DataPaths{root});
    StepOptions options;
    options.replay_beyond_memory = true;
    for (const Variant& variant : scenario.variants) {
      if (!variant.measured) continue;
      Case c = blank;
      c.variant = variant.name;
      c.inputs = variant.inputs;
      c.measured = variant.measured;
      try {
        c.outcome = simulate_step(variant.inputs, options);
        c.metrics = compare_measured(*variant.measured, c.inputs, c.outcome);
      } catch (const ModelError& e) {
        c.refusal = relative_message(std::string("cannot be simulated: ") + e.what(), root);
      }
      cases.push_back(std::move(c));
    }
  } catch (const ScenarioError& e) {
    blank.refusal = relative_message(e.what(), root);
    cases.push_back(std::move(blank));
  }
  return cases;
}

}  // namespace

std::vector<Case> run_validation(const fs::path& root) {
  const std::vector<fs::path> files = validation_files(root);
  std::vector<std::vector<Case>> per_file(files.size());
  tbb::parallel_for(std::size_t{0}, files.size(),
                    [&](std::size_t i) { per_file[i] = cases_of(files[i], root); });
  std::vector<Case> cases;
  for (auto& file_cases : per_file) {
    for (Case& c : file_cases) cases.push_back(std::move(c));
  }
  return cases;
}

const MetricComparison* headline(const Case& c) {
  for (const std::string_view metric :
       {"tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "mfu"}) {
    for (const MetricComparison& m : c.metrics) {
      if (m.metric == metric && m.error) return &m;
    }
  }
  return nullptr;
}

std::optional<double> throughput_error(const Case& c) {
  const MetricComparison* m = headline(c);
  if (m == nullptr) return std::nullopt;
  // A step time e too long is a throughput 1/(1 + e) as high.
  if (m->metric == "step_time_s") return 1 / (1 + *m->error) - 1;
  return *m->error;
}

std::string gpu_family(const GpuProfile& gpu) {
  std::string family = gpu.name.substr(0, gpu.name.find('-'));
  for (char& ch : family) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return family;
}

}  // namespace fleetsim::accuracy
