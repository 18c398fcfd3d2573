// Calibrating a collective model from a measured nccl-tests / rccl-tests log.
//
// The log's rows are replayed on the cluster's topology with the algorithm the log used (the
// tuner's, unless forced). The parameter fitted is the efficiency of the algorithm's bottleneck:
// the link kind whose links are the most loaded (link_efficiency.<kind>), nvls_efficiency for
// NVLS and NVLS-tree when NVLink bounds them, or p2p_efficiency for send/recv and all-to-all
// bound by NVLink or xGMI. With every latency at 0 the simulator gives each
// row a bandwidth-only time x(e) at efficiency e; the measured time is y = L + x(e), fitted on
// relative errors (linear_fit.hpp) as y = L + s * x(e) and solved for s = 1: e is the
// efficiency, L the latency of this collective on these ranks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "calibration/nccl_log.hpp"
#include "sim/collectives/collectives.hpp"
#include "sim/step/collective_benchmark.hpp"
#include "sim/step/step_inputs.hpp"

namespace fleetsim {

struct FitPoint {
  double size_bytes = 0;
  double measured_us = 0;
  double fitted_us = 0;
  double error = 0;  // (fitted - measured) / measured
};

struct CollectiveFit {
  std::string parameter;  // "link_efficiency.xgmi", "nvls_efficiency", ...
  double efficiency = 0;
  double efficiency_sigma = 0;
  double latency_us = 0;  // L: the collective's latency on these ranks
  double latency_sigma_us = 0;
  std::string algorithm;
  int ranks = 0;
  std::vector<FitPoint> points;
  double median_abs_error = 0;
  double max_abs_error = 0;
};

// Fits on the out-of-place times of rows of at least `min_bytes`. Throws ModelError when the log
// has too few rows, an op the simulator does not model, or more ranks than the cluster.
CollectiveFit fit_collective_log(const StepInputs& cluster, const NcclLog& log,
                                 BenchmarkRanks ranks,
                                 std::optional<CollectiveAlgorithm> forced = std::nullopt,
                                 double min_bytes = 0);

// The log's op as the simulator names it.
CollectiveOp collective_op_of_log(const NcclLog& log);

}  // namespace fleetsim
