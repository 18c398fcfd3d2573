#include "tools/fleetsim/calibrate_command.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "calibration/nccl_log.hpp"
#include "sim/engine/errors.hpp"
#include "sim/engine/rng.hpp"
#include "sim/report/report.hpp"
#include "sim/scenario/scenario.hpp"
#include "sim/step/collective_calibration.hpp"
#include "tools/fleetsim/collective_command.hpp"

namespace fleetsim {
namespace {

std::string file_fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(stable_hash(text.str())));
  return std::string("fnv1a64 ") + hex;
}

// `text` as the body of a YAML single-quoted scalar: a quote is written twice.
std::string yaml_quote_body(const std::string& text) {
  std::string quoted;
  for (const char c : text) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted;
}

// The lines of `after` that differ from `before`: the new entry, as it will read in the file.
std::string entry_lines(const std::string& before, const std::string& after) {
  std::istringstream old_text(before), new_text(after);
  std::vector<std::string> old_lines;
  for (std::string line; std::getline(old_text, line);) old_lines.push_back(line);
  std::vector<std::string> new_lines;
  for (std::string line; std::getline(new_text, line);) new_lines.push_back(line);
  std::size_t head = 0;
  while (head < old_lines.size() && head < new_lines.size() && old_lines[head] == new_lines[head])
    ++head;
  std::size_t tail = 0;
  while (tail < old_lines.size() - head && tail < new_lines.size() - head &&
         old_lines[old_lines.size() - 1 - tail] == new_lines[new_lines.size() - 1 - tail])
    ++tail;
  std::string out;
  for (std::size_t i = head; i < new_lines.size() - tail; ++i) out += new_lines[i] + "\n";
  return out.empty() ? "    (the profile holds this entry already)\n" : out;
}

}  // namespace

void run_calibrate_command(const CalibrateOptions& options) {
  if (options.node.empty()) {
    throw ScenarioError("(command line)", 0, 0, "--node", "the log's node preset is required",
                        "see `fleetsim list` for the presets");
  }
  const NcclLog log = read_nccl_log(options.log);
  StepInputs cluster =
      load_cluster(DataPaths{options.data_dir}, options.node, options.nodes, options.gpu);
  options.fabric.apply(cluster.fabric);
  const int ranks = options.ranks > 0 ? options.ranks
                    : log.ranks() > 0 ? log.ranks()
                                      : cluster.nodes * cluster.node.gpus;
  const double min_bytes = options.min_bytes.empty() ? 0 : parse_nccl_tests_size(options.min_bytes);
  const CollectiveFit fit =
      fit_collective_log(cluster, log, ranks, parse_algorithm(options.algorithm), min_bytes);

  std::printf("fit of %s to %s\n", fit.parameter.c_str(), options.log.c_str());
  std::printf("  %s on %d ranks of %d x %s, %s, %zu rows\n", log.op.c_str(), ranks, cluster.nodes,
              cluster.node.name.c_str(), fit.algorithm.c_str(), fit.points.size());
  std::printf("  efficiency  %.4f +- %.4f\n", fit.efficiency, fit.efficiency_sigma);
  std::printf("  latency     %.1f +- %.1f us\n\n", fit.latency_us, fit.latency_sigma_us);
  std::printf("  %14s  %14s  %14s  %8s\n", "size (B)", "measured (us)", "fitted (us)", "error");
  for (const FitPoint& point : fit.points) {
    std::printf("  %14.0f  %14.1f  %14.1f  %+7.1f%%\n", point.size_bytes, point.measured_us,
                point.fitted_us, 100 * point.error);
  }
  std::printf("\n  median |error| %.1f%%, max %.1f%%\n\n", 100 * fit.median_abs_error,
              100 * fit.max_abs_error);
  if (fit.efficiency > 1) {
    // A profile holds fractions of line rate: above 1 the preset's line rate, or the model of
    // the algorithm, is wrong for this machine, and the entry would not load.
    std::printf(
        "  warning: above 1, the log runs faster than the preset's line rate allows;\n"
        "  check the preset's link bandwidths before using this entry\n\n");
  }
  Calibrated entry;
  entry.value = fit.efficiency;
  // The fitted sigma measures how well the model matches this log's rows, which is usually far
  // tighter than how well it carries to another machine; the median row error is kept as a
  // floor so that the uncertainty is never below the model's own misfit.
  entry.sigma = std::max(fit.efficiency_sigma, fit.efficiency * fit.median_abs_error);
  const std::string log_name = std::filesystem::path(options.log).filename().string();
  char details[160];
  std::snprintf(details, sizeof details,
                "%zu rows from %.0f B, latency %.0f us, median error %.1f%%, fleetsim %s",
                fit.points.size(), min_bytes, fit.latency_us, 100 * fit.median_abs_error,
                FLEETSIM_VERSION);
  const std::string provenance =
      "measured: fit to " + log_name + " (" + file_fingerprint(options.log) + "), " + log.op +
      " on " + std::to_string(ranks) + " ranks as " + std::to_string(cluster.nodes) + " x " +
      cluster.node.name + ", " + fit.algorithm + ", " + details;
  entry.provenance = provenance;
  const DataPaths data{options.data_dir};
  // Through a symbolic link to the file it names, so the link stays a link.
  const std::filesystem::path profile =
      std::filesystem::canonical(gpu_profile_file(data, cluster.gpu.name));
  if (!options.write) {
    std::printf("profile entry (%s in %s):\n", fit.parameter.c_str(), profile.string().c_str());
    std::printf("    value: %.3f\n    sigma: %.3g\n    provenance: '%s'\n", entry.value,
                entry.sigma, yaml_quote_body(entry.provenance).c_str());
    return;
  }
  if (entry.value > 1) {
    throw ModelError(profile.string() + ": " + fit.parameter +
                     " not written: an efficiency above 1 would not load; check the preset's "
                     "link bandwidths");
  }
  std::string before;
  {
    std::ifstream in(profile);
    before.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string after = with_profile_entry(before, profile.string(), fit.parameter, entry);
  std::printf("profile entry (%s in %s):\n", fit.parameter.c_str(), profile.string().c_str());
  std::printf("%s", entry_lines(before, after).c_str());
  const auto permissions = std::filesystem::status(profile).permissions();
  write_text_atomically(profile, after);
  std::filesystem::permissions(profile, permissions);
  // The written profile must load and hold the fitted value; if not, the old text goes back.
  try {
    const GpuProfile written = load_cluster(data, options.node, options.nodes, options.gpu).gpu;
    const double value =
        fit.parameter == "nvls_efficiency" ? written.nvls_efficiency.value().value
        : fit.parameter == "p2p_efficiency"
            ? written.p2p_efficiency.value().value
            : written.link_efficiency.at(fit.parameter.substr(fit.parameter.find('.') + 1)).value;
    if (std::abs(value - entry.value) > 0.0005) {
      throw ModelError(profile.string() + ": " + fit.parameter + " reads back as " +
                       std::to_string(value) + ", not the " + std::to_string(entry.value) +
                       " written");
    }
  } catch (const std::exception& failure) {
    try {
      write_text_atomically(profile, before);
      std::filesystem::permissions(profile, permissions);
    } catch (const std::exception& restore) {
      throw ModelError(std::string(failure.what()) + "; restoring " + profile.string() +
                       " failed too: " + restore.what());
    }
    throw;
  }
  std::printf("written to %s\n", profile.string().c_str());
}

}  // namespace fleetsim
