#include "tools/fleetsim/calibrate_command.hpp"
#include "calibration/profile_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "calibration/kernel_fit.hpp"
#include "calibration/linear_fit.hpp"
#include "calibration/microbench.hpp"
#include "calibration/nccl_log.hpp"
#include "sim/engine/errors.hpp"
#include "sim/engine/rng.hpp"
#include "sim/report/report.hpp"
#include "sim/scenario/scenario.hpp"
#include "sim/step/collective_calibration.hpp"
#include "tools/fleetsim/collective_command.hpp"
#include "tools/fleetsim/profile_writer.hpp"

namespace fleetsim {

void run_calibrate_command(const CalibrateOptions& options) {
  if (options.node.empty()) {
    throw ScenarioError("(command line)", 0, 0, "--node", "the log's node preset is required",
                        "see `fleetsim list` for the presets");
  }
  const NcclLog log = read_nccl_log(options.log);
  StepInputs cluster =
      load_cluster(DataPaths{options.data_dir}, options.node, options.nodes, options.gpu);
  options.fabric.apply(cluster.fabric);
  // -g as given, else as the log's device list shows it: the GPUs of its first host, where
  // they are fewer than a node's.
  int per_node = options.gpus_per_node;
  if (per_node == 0 && !log.devices.empty()) {
    const std::string& host = log.devices.front().host;
    per_node = static_cast<int>(std::count_if(log.devices.begin(), log.devices.end(),
                                              [&](const auto& d) { return d.host == host; }));
    if (per_node >= cluster.node.gpus) per_node = 0;
  }
  const int gpus_a_node = resolve_command_line_ranks(cluster, options.ranks, per_node).per_node;
  const BenchmarkRanks ranks{options.ranks > 0 ? options.ranks : log.ranks(), per_node};
  const double min_bytes = options.min_bytes.empty() ? 0 : parse_nccl_tests_size(options.min_bytes);
  const CollectiveFit fit =
      fit_collective_log(cluster, log, ranks, parse_algorithm(options.algorithm), min_bytes);

  std::printf("fit of %s to %s\n", fit.parameter.c_str(), options.log.c_str());
  std::printf("  %s on %d ranks (%d a node) of %d x %s, %s, %zu rows\n", log.op.c_str(), fit.ranks,
              gpus_a_node, cluster.nodes, cluster.node.name.c_str(), fit.algorithm.c_str(),
              fit.points.size());
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
      " on " + std::to_string(fit.ranks) + " ranks (" + std::to_string(gpus_a_node) +
      " a node) as " + std::to_string(cluster.nodes) + " x " + cluster.node.name + ", " +
      fit.algorithm + ", " + details;
  entry.provenance = provenance;
  put_profile_entries(DataPaths{options.data_dir}, cluster.gpu.name, {{fit.parameter, entry}},
                      options.write);
}

namespace {

void print_points(const std::vector<KernelFitPoint>& points) {
  std::printf("  %-36s  %14s  %14s  %8s  %s\n", "row", "measured (us)", "fitted (us)", "error",
              "role");
  for (const KernelFitPoint& point : points) {
    std::printf("  %-36s  %14.2f  %14.2f  %+7.1f%%  %s\n", point.what.c_str(),
                1e6 * point.measured_s, 1e6 * point.fitted_s, 100 * point.error(),
                to_string(point.role));
  }
}

// The |errors| of the fitted GEMM rows of the FP8 fit or the 16-bit one.
std::vector<double> gemm_errors(const std::vector<KernelFitPoint>& points, bool fp8) {
  return abs_errors(points_in_role(gemm_points(points, fp8), FitRole::fitted));
}

}  // namespace

void run_kernel_calibrate_command(const KernelCalibrateOptions& options) {
  if (options.gpu.empty()) {
    throw ScenarioError("(command line)", 0, 0, "--gpu", "the GPU profile to fit is required",
                        "see `fleetsim list` for the profiles");
  }
  const DataPaths data{options.data_dir};
  const GpuProfile start = load_gpu_profile(data, options.gpu);
  const std::vector<MicrobenchFile> files = read_microbench_dir(options.dir);
  const KernelFit fit = fit_kernels(start, files);

  std::printf("fit of %s's kernel model to %s\n", start.name.c_str(), options.dir.c_str());
  for (const std::string& input : fit.inputs) std::printf("  input %s\n", input.c_str());
  std::printf("\n  %-22s  %12s  %12s  %s\n", "parameter", "value", "sigma", "from");
  for (const KernelFitParameter& p : fit.parameters) {
    // As the profile writes them: microseconds, TFLOPS, or plain numbers.
    std::printf("  %-22s  %14s  %14s  %s\n", p.key.c_str(),
                profile_entry_text(p.key, p.value).c_str(),
                profile_entry_text(p.key, p.sigma).c_str(), p.basis.c_str());
  }
  std::printf("\n");
  print_points(fit.points);
  // The 16-bit and FP8 rows are two fits, summarised apart.
  for (const bool fp8 : {false, true}) {
    const std::vector<double> errors = gemm_errors(fit.points, fp8);
    if (errors.empty()) continue;
    std::printf("\n  %s GEMM rows fitted: median |error| %.1f%%, max %.1f%%\n",
                fp8 ? "FP8" : "BF16/FP16", 100 * median(errors),
                100 * *std::max_element(errors.begin(), errors.end()));
  }
  if (!fit.held_out.empty()) {
    std::printf("\n  held out (every third GEMM row, predicted by a fit of the others):\n");
    print_points(fit.held_out);
    for (const bool fp8 : {false, true}) {
      const std::vector<double> held = gemm_errors(fit.held_out, fp8);
      if (held.empty()) continue;
      std::printf("  %s held-out median |error| %.1f%%, max %.1f%%\n", fp8 ? "FP8" : "BF16/FP16",
                  100 * median(held), 100 * *std::max_element(held.begin(), held.end()));
    }
  }
  for (const KernelFitSkip& skipped : fit.skipped) {
    std::printf("  skipped %s:%d: %s\n", skipped.file.c_str(), skipped.line, skipped.why.c_str());
  }
  std::printf("\n");

  put_profile_entries(data, start.name, kernel_profile_entries(fit), options.write);
}

}  // namespace fleetsim
