#include "tools/fleetsim/calibrate_command.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "calibration/nccl_log.hpp"
#include "sim/engine/rng.hpp"
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
  std::printf("profile entry (%s):\n", fit.parameter.c_str());
  // The fitted sigma measures how well the model matches this log's rows, which is usually far
  // tighter than how well it carries to another machine; the median row error is kept as a
  // floor so that the uncertainty is never below the model's own misfit.
  std::printf("    value: %.3f\n    sigma: %.3f\n", fit.efficiency,
              std::max(fit.efficiency_sigma, fit.efficiency * fit.median_abs_error));
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
  std::string quoted;  // YAML single-quoted: a quote is written twice
  for (const char c : provenance) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  std::printf("    provenance: '%s'\n", quoted.c_str());
}

}  // namespace fleetsim
