// Fitting a GPU profile's kernel parameters to microbenchmarks (calibration/microbench.hpp).
//
// The model is kernel_cost.hpp's; the fit finds the parameters that minimise the squared relative
// error of the times, each data kind in turn:
//   1. GEMMs (BF16 rows). With at least four distinct shapes: gemm_efficiency, gemm_k_overhead,
//      kernel_launch (the fixed time of a kernel) and gemm_sustained together. With fewer, the
//      rows are read as best-shape measurements (mamf-finder's: the highest rate over a search
//      of shapes): the ceiling is the highest rate measured and gemm_efficiency rises, if it
//      must, until the model reaches it there; k0 and the fixed time are kept. Where the
//      ceiling comes from (CeilingSource): rows of short runs alone tell the boost clocks'
//      ceiling, and gemm_sustained is the profile's sustained_clock of it; a few rows of a file
//      marked `# load: sustained` beside short runs set gemm_sustained alone, the short runs
//      the rest, and (BF16) their ratio to the short runs' ceiling is the sustained_clock
//      fitted; a sweep of four shapes or more under sustained load sets every entry itself,
//      short runs beside it only checked. Each row's point is at the clocks it ran at.
//   2. Memory (copy rows, and any other op): memory_efficiency of t = launch + bytes / (hbm x e).
//   2b. FP8 GEMM rows, where the profile has FP8 entries: the same GEMM fit on them
//      (fp8_gemm_view: the FP8 peak, efficiency, k0, sustained rate and fixed time), keys
//      "fp8.*". FP8 rows on a profile without FP8 entries are skipped.
//   3. Attention, each implementation the profile has entries for: per pass, its efficiency
//      and sequence overheads (AttentionPass; attention_fit.hpp).
//   4. Overlap (a GEMM alone and beside a collective): comm_sms, the SMs a collective's
//      kernels hold, as the whole number whose model times beside (the row's time alone times
//      the model's ratio on the SMs left) best match the rows.
// Uncertainties come from the residuals (sigma^2 (J^T J)^-1 on the relative residuals) where the
// data over-determine the parameters (one the rows barely move, an ill-conditioned J^T J, gets
// its own value as sigma); a parameter set by too few rows gets 5% of its value or the starting
// profile's sigma, the larger, as its entry says. With six or more GEMM rows of
// four shapes, every third is held back and predicted by a fit of the others, started from the
// same profile: the out-of-sample error.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "calibration/gpu_profile.hpp"
#include "calibration/microbench.hpp"

namespace fleetsim {

// What a row did in its fit: one of several the parameters are fitted to; one that sets an
// entry on its own (a best shape, a single memory copy, GEMMs under sustained load beside short
// runs), where its error is nil by construction; or one only compared with the fit (short runs
// beside a sweep under sustained load).
enum class FitRole { fitted, sets, checked };
inline const char* to_string(FitRole role) {
  switch (role) {
    case FitRole::fitted: return "fitted";
    case FitRole::sets: return "sets its entry";
    case FitRole::checked: return "checked";
  }
  return "?";
}

struct KernelFitPoint {
  std::string what;  // "gemm 4096x2048x4096 bf16", "memory copy 512 MB", ...
  std::string file;
  int line = 0;
  double measured_s = 0;
  double fitted_s = 0;
  std::string kind;   // "gemm", "memory", "attention", "overlap"
  std::string dtype;  // the row's input precision ("bf16", "fp16", "fp8"); empty for memory
  FitRole role = FitRole::fitted;
  double error() const { return fitted_s / measured_s - 1; }
};

struct KernelFitParameter {
  std::string key;  // the profile key: "gemm_efficiency", "kernel_launch", ...
  double value = 0;
  double sigma = 0;
  std::string basis;  // how many rows of which kind and how well they fit, or why it was kept
  bool fitted = false;
  std::vector<const MicrobenchFile*> inputs;  // the files whose rows it was fitted to
};

// A row the model does not cover: where it is, and why.
struct KernelFitSkip {
  std::string file;
  int line = 0;
  std::string why;  // "fp8 GEMM (the profile has no fp8 entries to fit)", ...
};

struct KernelFit {
  GpuProfile profile;  // the starting profile with the fitted values in place
  std::vector<KernelFitParameter> parameters;
  std::vector<KernelFitPoint> points;    // every row, at the final fit
  std::vector<KernelFitPoint> held_out;  // GEMM rows predicted by a fit without them
  std::vector<std::string> inputs;       // "file (checksum)", one per file read
  std::vector<KernelFitSkip> skipped;    // rows the model does not cover
};

// The points of one kind of row ("gemm", "memory", "attention", "overlap").
std::vector<KernelFitPoint> points_of(const std::vector<KernelFitPoint>& points,
                                      std::string_view kind);
// The GEMM points of the FP8 fit, or of the 16-bit one (BF16 rows, and FP16 rows the profile
// reads as BF16).
std::vector<KernelFitPoint> gemm_points(const std::vector<KernelFitPoint>& points, bool fp8);
// Those of `points` in `role`.
std::vector<KernelFitPoint> points_in_role(const std::vector<KernelFitPoint>& points, FitRole role);
// Each point's |relative error|, in order.
std::vector<double> abs_errors(const std::vector<KernelFitPoint>& points);

// Throws MicrobenchError (no usable rows) or ModelError on a profile without peaks.
// The fit points into `files`, which must outlive it.
KernelFit fit_kernels(const GpuProfile& start, const std::vector<MicrobenchFile>& files);

// The profile entries of the fitted parameters, each citing its input files by name and
// checksum (not by path), so that the same inputs give the same text wherever they are fitted.
std::vector<std::pair<std::string, Calibrated>> kernel_profile_entries(const KernelFit& fit);

}  // namespace fleetsim
