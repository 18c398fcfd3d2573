#include "calibration/kernel_fit.hpp"
#include "calibration/linear_fit.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "calibration/attention_fit.hpp"
#include "calibration/kernel_cost.hpp"
#include "sim/engine/errors.hpp"

namespace fleetsim {
namespace {

// A parameter fitted to one point: its sigma, relative to the value (stated in the report).
constexpr double kOnePointSigma = 0.05;

struct GemmRow {
  const GemmSample* sample;
  const MicrobenchFile* file;
};

// A row's time on `gpu`'s GEMM entries: for an FP8 row, pass fp8_gemm_view's profile (its
// bytes are FP8's; the view holds the FP8 rates where the BF16 ones are).
double gemm_seconds(const GpuProfile& gpu, const GemmSample& s) {
  // Batched GEMMs run the batch's tiles together: the batch multiplies the rows of tiles.
  Kernel kernel = s.dtype == "fp8" ? fp8_gemm_kernel(s.batch * s.m, s.n, s.k)
                                   : gemm_kernel(s.batch * s.m, s.n, s.k, 2);
  kernel.fp8 = false;
  return kernel_seconds(gpu, kernel);
}

double relative_sse(const GpuProfile& gpu, const std::vector<GemmRow>& rows) {
  double sum = 0;
  for (const GemmRow& row : rows) {
    const double error = gemm_seconds(gpu, *row.sample) / row.sample->seconds - 1;
    sum += error * error;
  }
  return sum;
}

// Whether `gpu`'s sustained rate holds down any of `rows` (a ceiling that holds down none is no
// finding).
bool ceiling_binds(const GpuProfile& gpu, const std::vector<GemmRow>& rows) {
  GpuProfile uncapped = gpu;
  uncapped.gemm_sustained_flops_per_s.value = gpu.dense_bf16_flops_per_s.value;
  return std::any_of(rows.begin(), rows.end(), [&](const GemmRow& row) {
    return gemm_seconds(gpu, *row.sample) > gemm_seconds(uncapped, *row.sample) * (1 + 1e-9);
  });
}

// Solves the normal equations A x = b of a small least-squares problem in place (Gaussian
// elimination with partial pivoting). False if A is singular.
bool solve(std::vector<std::vector<double>>& a, std::vector<double>& b) {
  const std::size_t n = b.size();
  double largest = 0;
  for (const auto& row : a) {
    for (const double x : row) largest = std::max(largest, std::abs(x));
  }
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t pivot = c;
    for (std::size_t r = c + 1; r < n; ++r) {
      if (std::abs(a[r][c]) > std::abs(a[pivot][c])) pivot = r;
    }
    std::swap(a[c], a[pivot]);
    std::swap(b[c], b[pivot]);
    if (!(std::abs(a[c][c]) > 1e-12 * largest)) return false;
    for (std::size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (std::size_t k = c; k < n; ++k) a[r][k] -= f * a[c][k];
      b[r] -= f * b[c];
    }
  }
  for (std::size_t c = 0; c < n; ++c) b[c] /= a[c][c];
  return true;
}

// The four GEMM parameters together: efficiency e, K overhead k0, fixed time t0 and sustained
// rate C. For a given k0 a row's time is t0 + max(a u, F v) with u = 1/e, v = 1/C, a its time
// at full efficiency and F its FLOPs; the rows that C holds down are those of the highest
// efficiency a shape allows (the smallest a / F), a prefix once sorted. For each prefix the
// problem is linear in (t0, u, v) and solved exactly (relative least squares); the best prefix
// wins, judged on the full model (tiles, memory term). k0 goes on a grid, then Brent's method.
void fit_gemm_four(GpuProfile& gpu, const std::vector<GemmRow>& rows) {
  const double peak = gpu.dense_bf16_flops_per_s.value;
  const std::size_t n = rows.size();
  const auto error_at = [&](double k0) {
    gpu.gemm_k_overhead.value = k0;
    std::vector<double> a(n), f(n), y(n);
    std::vector<std::size_t> order(n);
    for (std::size_t i = 0; i < n; ++i) {
      const GemmSample& s = *rows[i].sample;
      a[i] = s.flops() / (peak * gemm_shape_efficiency(gpu, s.batch * s.m, s.n, s.k));
      f[i] = s.flops();
      y[i] = s.seconds;
      order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t z) { return a[x] / f[x] < a[z] / f[z]; });
    double best_error = std::numeric_limits<double>::infinity();
    GpuProfile best = gpu;
    for (std::size_t held = 0; held < n; ++held) {     // the `held` first rows are at C
      const std::size_t unknowns = held == 0 ? 2 : 3;  // t0, u[, v]
      std::vector<std::vector<double>> normal(unknowns, std::vector<double>(unknowns, 0.0));
      std::vector<double> rhs(unknowns, 0.0);
      for (std::size_t j = 0; j < n; ++j) {
        const std::size_t i = order[j];
        std::vector<double> x(unknowns, 0.0);
        // Unknowns scaled to order one: t0 in microseconds, 1/e, and peak / C.
        x[0] = 1e-6;
        if (j < held) {
          x[2] = f[i] / peak;
        } else {
          x[1] = a[i];
        }
        const double w = 1 / (y[i] * y[i]);
        for (std::size_t r = 0; r < unknowns; ++r) {
          rhs[r] += w * x[r] * y[i];
          for (std::size_t c = 0; c < unknowns; ++c) normal[r][c] += w * x[r] * x[c];
        }
      }
      if (!solve(normal, rhs)) continue;
      GpuProfile trial = gpu;
      trial.kernel_launch_s.value = std::clamp(rhs[0] * 1e-6, 0.0, 50e-6);
      trial.gemm_efficiency.value = std::clamp(1 / rhs[1], 0.01, 1.0);
      trial.gemm_sustained_flops_per_s.value =
          held == 0 ? peak : std::clamp(peak / rhs[2], 0.05 * peak, peak);
      const double error = relative_sse(trial, rows);
      if (error < best_error) {
        best_error = error;
        best = trial;
      }
    }
    gpu = best;
    return best_error;
  };
  constexpr double kStep = 16;
  double best_k0 = 0, best_error = std::numeric_limits<double>::infinity();
  for (double k0 = 0; k0 <= 2048; k0 += kStep) {
    const double error = error_at(k0);
    if (error < best_error) {
      best_error = error;
      best_k0 = k0;
    }
  }
  const double k0 = minimise(error_at, std::max(0.0, best_k0 - kStep), best_k0 + kStep);
  error_at(error_at(k0) <= best_error ? k0 : best_k0);
  // A ceiling that holds down no row is no finding: the peak stands for "none".
  if (!ceiling_binds(gpu, rows)) gpu.gemm_sustained_flops_per_s.value = peak;
}

// The e of t = launch + x / e (x: the time at full rate) closest to the data in relative error;
// e enters as 1/e, so the optimum is closed-form: 1/e = sum(x (y - t0) / y^2) / sum(x^2 / y^2).
// MicrobenchError (naming `what`) when the rows are no longer than the fixed time: no
// efficiency explains them.
double efficiency_fit(double launch, const std::vector<std::pair<double, double>>& x_y,
                      const std::string& what) {
  double numerator = 0, denominator = 0;
  for (const auto& [x, y] : x_y) {
    numerator += x * (y - launch) / (y * y);
    denominator += x * x / (y * y);
  }
  if (!(numerator > 0)) {
    throw MicrobenchError(what, 0,
                          "these rows take no longer than a kernel's fixed time (" +
                              std::to_string(launch * 1e6) +
                              " us): they cannot tell an efficiency");
  }
  return std::min(1.0, denominator / numerator);
}

// With fewer shapes than parameters the rows are read as best-shape measurements, as
// mamf-finder's are: the highest rate the GPU reached over a search of shapes, so an upper
// bound on every shape's rate. The sustained rate is set to the highest rate measured (kernel
// time included, as measured), and the efficiency is raised, if it must be, until the profile's
// model reaches that rate at the measured shapes; k0 and the fixed time are kept. Returns the
// keys set.
std::vector<std::string> fit_gemm_best_shape(GpuProfile& gpu, const std::vector<GemmRow>& rows) {
  double best_rate = 0;
  for (const GemmRow& row : rows) {
    best_rate = std::max(best_rate, row.sample->flops() / row.sample->seconds);
  }
  gpu.gemm_sustained_flops_per_s.value = best_rate;
  std::vector<std::string> keys{"gemm_sustained"};
  double needed = 0;
  for (const GemmRow& row : rows) {
    const GemmSample& s = *row.sample;
    const double rate_at_full =
        gpu.dense_bf16_flops_per_s.value * gemm_shape_efficiency(gpu, s.batch * s.m, s.n, s.k);
    needed = std::max(needed, best_rate / rate_at_full);
  }
  if (gpu.gemm_efficiency.value < needed) {
    gpu.gemm_efficiency.value = std::min(1.0, needed);
    keys.push_back("gemm_efficiency");
  }
  return keys;
}

// sigma of each parameter from the relative residuals: s^2 (J^T J)^-1, J by central differences.
std::vector<double> parameter_sigmas(GpuProfile& gpu, const std::vector<GemmRow>& rows,
                                     const std::vector<Calibrated*>& parameters) {
  const std::size_t n = rows.size(), p = parameters.size();
  if (n <= p) return std::vector<double>(p, 0.0);
  std::vector<std::vector<double>> jacobian(n, std::vector<double>(p));
  std::vector<double> residual(n);
  for (std::size_t i = 0; i < n; ++i) {
    residual[i] = gemm_seconds(gpu, *rows[i].sample) / rows[i].sample->seconds - 1;
  }
  for (std::size_t j = 0; j < p; ++j) {
    double& value = parameters[j]->value;
    const double saved = value;
    const double h = std::max(std::abs(saved) * 1e-4, 1e-9);
    std::vector<double> up(n), down(n);
    value = saved + h;
    for (std::size_t i = 0; i < n; ++i) up[i] = gemm_seconds(gpu, *rows[i].sample);
    value = saved - h;
    for (std::size_t i = 0; i < n; ++i) down[i] = gemm_seconds(gpu, *rows[i].sample);
    value = saved;
    for (std::size_t i = 0; i < n; ++i) {
      jacobian[i][j] = (up[i] - down[i]) / (2 * h) / rows[i].sample->seconds;
    }
  }
  // J^T J and its inverse by Gauss-Jordan (p <= 3).
  std::vector<std::vector<double>> a(p, std::vector<double>(2 * p, 0.0));
  for (std::size_t r = 0; r < p; ++r) {
    for (std::size_t c = 0; c < p; ++c) {
      for (std::size_t i = 0; i < n; ++i) a[r][c] += jacobian[i][r] * jacobian[i][c];
    }
    a[r][p + r] = 1;
  }
  for (std::size_t c = 0; c < p; ++c) {
    std::size_t pivot = c;
    for (std::size_t r = c + 1; r < p; ++r) {
      if (std::abs(a[r][c]) > std::abs(a[pivot][c])) pivot = r;
    }
    std::swap(a[c], a[pivot]);
    if (!(std::abs(a[c][c]) > 0)) return std::vector<double>(p, 0.0);
    const double d = a[c][c];
    for (double& x : a[c]) x /= d;
    for (std::size_t r = 0; r < p; ++r) {
      if (r == c) continue;
      const double f = a[r][c];
      for (std::size_t k = 0; k < 2 * p; ++k) a[r][k] -= f * a[c][k];
    }
  }
  double sse = 0;
  for (const double r : residual) sse += r * r;
  const double s2 = sse / static_cast<double>(n - p);
  std::vector<double> sigmas(p);
  for (std::size_t j = 0; j < p; ++j) sigmas[j] = std::sqrt(std::max(0.0, s2 * a[j][p + j]));
  return sigmas;
}

std::string shape_of(const GemmSample& s) {
  auto whole = [](double x) { return std::to_string(static_cast<long long>(x)); };
  std::string shape = whole(s.m) + "x" + whole(s.n) + "x" + whole(s.k);
  if (s.batch != 1) shape = whole(s.batch) + "x " + shape;
  return "gemm " + shape + " " + s.dtype;
}

KernelFitPoint gemm_point(const GpuProfile& gpu, const GemmRow& row,
                          FitRole role = FitRole::fitted) {
  return {shape_of(*row.sample),          row.file->path, row.sample->line,  row.sample->seconds,
          gemm_seconds(gpu, *row.sample), "gemm",         row.sample->dtype, role};
}

std::size_t distinct_shapes(const std::vector<GemmRow>& rows) {
  std::set<std::tuple<double, double, double, double>> shapes;
  for (const GemmRow& row : rows) {
    shapes.insert({row.sample->batch, row.sample->m, row.sample->n, row.sample->k});
  }
  return shapes.size();
}

// The sigma the starting profile gives `key`: what a fit with too few rows keeps at least.
double start_sigma(const GpuProfile& start, const std::string& key) {
  const std::optional<Calibrated> entry = profile_entry(start, key);
  return entry ? entry->sigma : 0.0;
}

std::string rows_of(std::size_t count, const std::string& what) {
  return std::to_string(count) + " " + what + (count == 1 ? " row" : " rows");
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100 * fraction);
  return text;
}

using MemoryRows = std::vector<std::pair<const MemorySample*, const MicrobenchFile*>>;

std::vector<std::pair<double, double>> memory_x_y(const GpuProfile& gpu, const MemoryRows& rows) {
  std::vector<std::pair<double, double>> x_y;
  for (const auto& [s, file] : rows) {
    x_y.push_back({s->bytes / gpu.hbm_bytes_per_s.value, s->seconds});
  }
  return x_y;
}

// Fits the GEMM entries to `rows`: all four with enough distinct shapes, else
// fit_gemm_best_shape's. Returns the keys fitted.
std::vector<std::string> fit_gemm_model(GpuProfile& gpu, const std::vector<GemmRow>& rows) {
  if (distinct_shapes(rows) >= 4) {
    fit_gemm_four(gpu, rows);
    return {"gemm_efficiency", "gemm_k_overhead", "kernel_launch", "gemm_sustained"};
  }
  return fit_gemm_best_shape(gpu, rows);
}

// The sustained rate closest, in relative error, to the rows measured under sustained load,
// the other entries kept. MicrobenchError when no rate below the peak holds them down: they
// run no slower than the other entries make them.
void fit_sustained_rate(GpuProfile& gpu, const std::vector<GemmRow>& sustained) {
  const double peak = gpu.dense_bf16_flops_per_s.value;
  const auto error_at = [&](double rate) {
    GpuProfile trial = gpu;
    trial.gemm_sustained_flops_per_s.value = rate;
    return relative_sse(trial, sustained);
  };
  gpu.gemm_sustained_flops_per_s.value = minimise(error_at, 0.05 * peak, peak);
  if (!ceiling_binds(gpu, sustained)) {
    throw MicrobenchError(sustained.front().file->path, sustained.front().sample->line,
                          "these GEMMs under sustained load run no slower than the other rows' "
                          "fit makes them: they tell no ceiling below it");
  }
}

// Where a GEMM fit's sustained rate comes from. Rows of a file marked `# load: sustained` were
// measured once the GPU's clocks had settled at its power limit (a run of seconds to minutes),
// which runs of a benchmark's usual hundred iterations do not reach (NVIDIA/cutlass's GEMM
// measurement guidelines: the clocks of back-to-back GEMMs settle after about 3 s).
enum class CeilingSource {
  // Short runs alone: their ceiling is the boost clocks'; the sustained rate is the profile's
  // sustained_clock of it.
  short_runs,
  // A few rows under sustained load beside short runs: they alone set the sustained rate, the
  // short runs the shape entries, and the two ceilings' ratio is the clocks' share.
  sustained_rows,
  // A sweep of four shapes or more under sustained load (or only such rows): it sets every
  // entry, its ceiling already the sustained rate; short runs beside it are only checked.
  sustained_sweep,
};

// What fit_gemm_rows fitted, and to which rows.
struct GemmRowsFit {
  CeilingSource source = CeilingSource::short_runs;
  std::vector<std::string> keys;    // every key set
  std::vector<std::string> model;   // those fit_gemm_model set from `shape_rows`
  std::vector<GemmRow> shape_rows;  // the rows that set the shape entries
  std::vector<GemmRow> sustained;   // sustained_rows: the rows that set the sustained rate
  GpuProfile shape_fit;             // the profile as fitted to `shape_rows` alone
};

GemmRowsFit fit_gemm_rows(GpuProfile& gpu, const std::vector<GemmRow>& rows) {
  GemmRowsFit fit;
  std::vector<GemmRow> short_runs, sustained;
  for (const GemmRow& row : rows) (row.file->sustained ? sustained : short_runs).push_back(row);
  if (distinct_shapes(sustained) >= 4 || (short_runs.empty() && !sustained.empty())) {
    fit.source = CeilingSource::sustained_sweep;
    fit.shape_rows = sustained;
  } else if (sustained.empty()) {
    fit.shape_rows = rows;
  } else {
    fit.source = CeilingSource::sustained_rows;
    fit.shape_rows = short_runs;
    fit.sustained = sustained;
  }
  fit.model = fit_gemm_model(gpu, fit.shape_rows);
  fit.keys = fit.model;
  fit.shape_fit = gpu;
  const bool has_ceiling =
      std::find(fit.keys.begin(), fit.keys.end(), "gemm_sustained") != fit.keys.end();
  if (fit.source == CeilingSource::short_runs && has_ceiling) {
    gpu.gemm_sustained_flops_per_s.value *= gpu.sustained_clock.value;
  }
  if (fit.source == CeilingSource::sustained_rows) {
    fit_sustained_rate(gpu, fit.sustained);
    if (!has_ceiling) fit.keys.push_back("gemm_sustained");
  }
  return fit;
}

// `gpu` at the boost clocks of a benchmark's short run: its GEMM ceiling over its sustained
// clock's share (the peak at most), which is how a short-run row ran.
GpuProfile at_boost_clocks(const GpuProfile& gpu) {
  GpuProfile boost = gpu;
  boost.gemm_sustained_flops_per_s.value =
      std::min(gpu.gemm_sustained_flops_per_s.value / gpu.sustained_clock.value,
               gpu.dense_bf16_flops_per_s.value);
  return boost;
}

// The files `rows` come from, each once, in order.
std::vector<const MicrobenchFile*> files_of(const std::vector<GemmRow>& rows) {
  std::vector<const MicrobenchFile*> files;
  for (const GemmRow& row : rows) {
    if (std::find(files.begin(), files.end(), row.file) == files.end()) files.push_back(row.file);
  }
  return files;
}

// The clocks' share that GEMM rows under sustained load tell beside short runs whose own
// ceiling binds: the sustained rate over the short runs' ceiling, each with its sigma. A share
// of 1 or more is no throttling the model can hold: an error at the sustained rows.
KernelFitParameter fit_sustained_clock(const GemmRowsFit& rows, const Calibrated& sustained,
                                       const Calibrated& short_ceiling, const std::string& label) {
  const double share = sustained.value / short_ceiling.value;
  if (!(share < 1)) {
    throw MicrobenchError(rows.sustained.front().file->path, rows.sustained.front().sample->line,
                          "these GEMMs under sustained load run no slower than the short runs' "
                          "ceiling: they tell no clocks lost to the power limit");
  }
  char ratio[64];
  std::snprintf(ratio, sizeof ratio, " (%.1f / %.1f TFLOPS)", sustained.value / 1e12,
                short_ceiling.value / 1e12);
  std::vector<GemmRow> both = rows.sustained;
  both.insert(both.end(), rows.shape_rows.begin(), rows.shape_rows.end());
  return {"sustained_clock",
          share,
          share * std::hypot(sustained.sigma / sustained.value,
                             short_ceiling.sigma / short_ceiling.value),
          rows_of(rows.sustained.size(), label + " GEMM") +
              " under sustained load over the ceiling of " +
              rows_of(rows.shape_rows.size(), label + " GEMM") + " of short runs" + ratio,
          true,
          files_of(both)};
}

// Fits the GEMM parameters of `gpu` (BF16's, or FP8's through fp8_gemm_view) to `gemms` and
// records them in `fit` under their keys with `prefix` ("" or "fp8."). BF16 rows under
// sustained load beside short runs also fit `gpu`'s sustained_clock.
void fit_gemm_section(KernelFit& fit, GpuProfile& gpu, const GpuProfile& start,
                      const std::vector<GemmRow>& gemms, const std::string& prefix,
                      const std::string& label) {
  GemmRowsFit rows = fit_gemm_rows(gpu, gemms);
  const std::vector<std::string>& keys = rows.keys;
  const bool sustained_apart = rows.source == CeilingSource::sustained_rows;
  // The shape entries' errors and sigmas are those of the shape rows' own fit.
  const std::vector<GemmRow>& shaped = rows.shape_rows;
  GpuProfile& shape_fit = rows.shape_fit;
  std::vector<KernelFitPoint> held_out;
  if (rows.model.size() == 4 && shaped.size() >= 6) {
    // Out of sample: every third shape row held back, the rest fitted from the starting
    // profile, the held rows predicted.
    std::vector<GemmRow> kept, held;
    for (std::size_t i = 0; i < shaped.size(); ++i) {
      (i % 3 == 1 ? held : kept).push_back(shaped[i]);
    }
    if (distinct_shapes(kept) >= 4) {
      GpuProfile trial = start;
      trial.memory_efficiency.value = gpu.memory_efficiency.value;
      fit_gemm_model(trial, kept);
      for (const GemmRow& row : held) held_out.push_back(gemm_point(trial, row));
    }
  }
  const auto members_of = [](GpuProfile& profile) {
    return std::map<std::string, Calibrated*>{
        {"gemm_efficiency", &profile.gemm_efficiency},
        {"gemm_k_overhead", &profile.gemm_k_overhead},
        {"kernel_launch", &profile.kernel_launch_s},
        {"gemm_sustained", &profile.gemm_sustained_flops_per_s}};
  };
  const std::map<std::string, Calibrated*> members = members_of(gpu);
  const double peak = gpu.dense_bf16_flops_per_s.value;
  // A sustained rate at the peak means the rows reach no ceiling: written as the peak, its
  // uncertainty not estimable from them.
  const auto at_peak = [&](const GpuProfile& profile) {
    return profile.gemm_sustained_flops_per_s.value >= 0.999 * peak;
  };
  const bool no_ceiling = !sustained_apart &&
                          std::find(keys.begin(), keys.end(), "gemm_sustained") != keys.end() &&
                          at_peak(shape_fit);
  // The shape rows' fit's own parameters give the sigmas (its ceiling among them where it
  // binds); those the sustained rows set are reported on their own.
  std::vector<std::string> shape_keys;
  for (const std::string& key : rows.model) {
    if (!(key == "gemm_sustained" && at_peak(shape_fit))) shape_keys.push_back(key);
  }
  const std::map<std::string, Calibrated*> shape_members = members_of(shape_fit);
  std::vector<Calibrated*> shape_parameters;
  for (const std::string& key : shape_keys) shape_parameters.push_back(shape_members.at(key));
  const std::vector<double> shape_sigmas = parameter_sigmas(shape_fit, shaped, shape_parameters);
  const bool best_shape = rows.model.size() < 4;
  // A parameter's sigma: its own where the rows tell it; best-shape rows say nothing of their
  // scatter (5% or the profile's, the larger); a parameter the rows barely move (an
  // ill-conditioned J^T J) is as uncertain as it is large.
  const auto sigma_of = [&](std::size_t j, double value, double prior) {
    const bool estimable = best_shape || (shape_sigmas[j] > 0 && std::isfinite(shape_sigmas[j]));
    return std::make_pair(!estimable   ? std::max(std::abs(value), prior)
                          : best_shape ? std::max(kOnePointSigma * value, prior)
                                       : shape_sigmas[j],
                          estimable);
  };
  std::string basis =
      rows_of(shaped.size(), label + " GEMM") +
      (rows.source == CeilingSource::sustained_sweep ? " under sustained load" : "");
  if (sustained_apart) {
    char ceiling[64];
    std::snprintf(ceiling, sizeof ceiling, " of short runs (as fitted to them: a ceiling of %.1f",
                  shape_fit.gemm_sustained_flops_per_s.value / 1e12);
    basis += std::string(ceiling) + " TFLOPS)";
  }
  if (best_shape) {
    basis += sustained_apart
                 ? " read as best-shape measurements: the efficiency at least what reaches the "
                   "highest rate measured (sigma: 5% or the profile's, the larger)"
                 : " read as best-shape measurements: the sustained rate is the highest "
                   "measured, the efficiency at least what reaches it (sigma: 5% or the "
                   "profile's, the larger)";
  } else {
    std::vector<KernelFitPoint> shaped_points;
    for (const GemmRow& row : shaped) shaped_points.push_back(gemm_point(shape_fit, row));
    const std::vector<double> errors = abs_errors(shaped_points);
    basis += ", median |error| " + percent(median(errors)) + ", max " +
             percent(*std::max_element(errors.begin(), errors.end()));
  }
  if (!held_out.empty()) {
    const std::vector<double> held = abs_errors(held_out);
    basis += "; held out " + std::to_string(held.size()) + ", median |error| " +
             percent(median(held)) + ", max " +
             percent(*std::max_element(held.begin(), held.end()));
  }
  const std::vector<const MicrobenchFile*> inputs = files_of(shaped);
  if (sustained_apart) {
    // One row, or a few, measured under sustained load: their scatter is not the rate's
    // uncertainty; 5% or the profile's, the larger.
    const double rate = gpu.gemm_sustained_flops_per_s.value;
    std::vector<KernelFitPoint> sustained_points;
    for (const GemmRow& row : rows.sustained) sustained_points.push_back(gemm_point(gpu, row));
    const std::vector<double> errors = abs_errors(sustained_points);
    gpu.gemm_sustained_flops_per_s.sigma =
        std::max(kOnePointSigma * rate, start_sigma(start, "gemm_sustained"));
    fit.parameters.push_back(
        {prefix + "gemm_sustained", rate, gpu.gemm_sustained_flops_per_s.sigma,
         rows_of(rows.sustained.size(), label + " GEMM") +
             " measured under sustained load, at the power limit's settled clocks, max |error| " +
             percent(*std::max_element(errors.begin(), errors.end())) +
             " (sigma: 5% or the profile's, the larger)",
         true, files_of(rows.sustained)});
    // BF16 rows tell the clocks' share, which FP8's and attention then run at.
    const auto ceiling = std::find(shape_keys.begin(), shape_keys.end(), "gemm_sustained");
    if (prefix.empty() && ceiling != shape_keys.end()) {
      const std::size_t j = static_cast<std::size_t>(ceiling - shape_keys.begin());
      Calibrated short_ceiling = shape_fit.gemm_sustained_flops_per_s;
      short_ceiling.sigma = sigma_of(j, short_ceiling.value, 0.0).first;
      const KernelFitParameter clock =
          fit_sustained_clock(rows, gpu.gemm_sustained_flops_per_s, short_ceiling, label);
      gpu.sustained_clock.value = clock.value;
      gpu.sustained_clock.sigma = clock.sigma;
      fit.parameters.push_back(clock);
    }
  }
  // A ceiling scaled from short runs to sustained load (short runs alone, the clock's share
  // known to any degree): its relative sigma and the clock's together, the clock named.
  const Calibrated& clock = gpu.sustained_clock;
  const bool clock_scaled =
      rows.source == CeilingSource::short_runs && (clock.value != 1 || clock.sigma > 0);
  // `sigma` is the short runs' ceiling's (`short_run`); the scaled one is `value`.
  const auto with_clock = [&](double value, double short_run, double sigma,
                              const std::string& text) {
    char scaled[96];
    std::snprintf(scaled, sizeof scaled, "; x sustained_clock %.3f, the clocks of sustained load",
                  clock.value);
    const double relative = std::hypot(sigma / short_run, clock.sigma / clock.value);
    return std::make_pair(value * relative, text + scaled);
  };
  for (std::size_t j = 0; j < shape_keys.size(); ++j) {
    const std::string& key = shape_keys[j];
    if (key == "gemm_sustained" && sustained_apart) continue;
    const double value = members.at(key)->value;
    const bool scaled = clock_scaled && key == "gemm_sustained";
    const double shape_value = shape_members.at(key)->value;  // before the clock's share
    // A scaled ceiling's sigma holds the clock's: the prior for the short runs' ceiling is what
    // is left of it without that (so that a refit gives the same).
    double prior = start_sigma(start, key);
    if (scaled) {
      const std::optional<Calibrated> before = profile_entry(start, key);
      const double relative = before && before->value > 0 ? prior / before->value : 0.0;
      const double clock_relative = clock.sigma / clock.value;
      prior = shape_value *
              std::sqrt(std::max(0.0, relative * relative - clock_relative * clock_relative));
    }
    auto [sigma, estimable] = sigma_of(j, shape_value, prior);
    std::string text =
        basis +
        (estimable ? "" : " (these rows barely move it: sigma its value, or the profile's)");
    if (scaled) std::tie(sigma, text) = with_clock(value, shape_value, sigma, text);
    fit.parameters.push_back({prefix + key, value, sigma, text, true, inputs});
  }
  if (no_ceiling) {
    std::string text = rows_of(gemms.size(), label + " GEMM") +
                       ": none reaches a ceiling below the peak (sigma assumed 10% of the peak)";
    double rate = gpu.gemm_sustained_flops_per_s.value, sigma = 0.1 * peak;
    if (clock_scaled) {
      std::tie(sigma, text) =
          with_clock(rate, shape_fit.gemm_sustained_flops_per_s.value, sigma, text);
    }
    fit.parameters.push_back({prefix + "gemm_sustained", rate, sigma, text, true, inputs});
  }
  for (const auto& [key, member] : members) {
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    fit.parameters.push_back({prefix + key,
                              member->value,
                              member->sigma,
                              "kept: too few GEMM shapes to tell it",
                              false,
                              {}});
  }
  // Every row at the clocks it ran at: a short run's at boost, one under sustained load's
  // settled.
  const GpuProfile boost = at_boost_clocks(gpu);
  const auto among = [](const std::vector<GemmRow>& rows, const GemmRow& row) {
    return std::any_of(rows.begin(), rows.end(),
                       [&](const GemmRow& other) { return other.sample == row.sample; });
  };
  // Best-shape rows: the fastest sets the ceiling; the others are held to it, not fitted.
  const auto rate = [](const GemmRow& row) { return row.sample->flops() / row.sample->seconds; };
  const GemmRow* fastest = nullptr;
  for (const GemmRow& row : shaped) {
    if (!fastest || rate(row) > rate(*fastest)) fastest = &row;
  }
  for (const GemmRow& row : gemms) {
    const FitRole best_shape_role =
        fastest && fastest->sample == row.sample ? FitRole::sets : FitRole::checked;
    const FitRole role = among(shaped, row) ? (best_shape ? best_shape_role : FitRole::fitted)
                         : among(rows.sustained, row) ? FitRole::sets
                                                      : FitRole::checked;
    fit.points.push_back(gemm_point(row.file->sustained ? gpu : boost, row, role));
  }
  fit.held_out.insert(fit.held_out.end(), held_out.begin(), held_out.end());
}

}  // namespace

namespace {

template <class Keep>
std::vector<KernelFitPoint> kept_if(const std::vector<KernelFitPoint>& points, Keep keep) {
  std::vector<KernelFitPoint> kept;
  std::copy_if(points.begin(), points.end(), std::back_inserter(kept), keep);
  return kept;
}

}  // namespace

std::vector<KernelFitPoint> points_of(const std::vector<KernelFitPoint>& points,
                                      std::string_view kind) {
  return kept_if(points, [&](const KernelFitPoint& point) { return point.kind == kind; });
}

std::vector<KernelFitPoint> gemm_points(const std::vector<KernelFitPoint>& points, bool fp8) {
  return kept_if(points, [&](const KernelFitPoint& point) {
    return point.kind == "gemm" && (point.dtype == "fp8") == fp8;
  });
}

std::vector<KernelFitPoint> points_in_role(const std::vector<KernelFitPoint>& points,
                                           FitRole role) {
  return kept_if(points, [&](const KernelFitPoint& point) { return point.role == role; });
}

std::vector<double> abs_errors(const std::vector<KernelFitPoint>& points) {
  std::vector<double> errors;
  for (const KernelFitPoint& point : points) errors.push_back(std::abs(point.error()));
  return errors;
}

KernelFit fit_kernels(const GpuProfile& start, const std::vector<MicrobenchFile>& files) {
  if (!(start.dense_bf16_flops_per_s.value > 0) || !(start.hbm_bytes_per_s.value > 0) ||
      start.sm_count < 1) {
    throw ModelError("profile " + start.name + " needs its peaks and SM count");
  }
  KernelFit fit;
  fit.profile = start;
  GpuProfile& gpu = fit.profile;
  std::vector<GemmRow> gemms, fp8_gemms;
  MemoryRows memory;
  std::vector<std::pair<const OverlapSample*, const MicrobenchFile*>> overlap;
  std::map<std::string, AttentionRows> attention;
  // FP16 rows count as BF16 ones where the profile's FP16 peak is its BF16 one.
  const bool fp16_is_bf16 = start.dense_fp16_flops_per_s && start.dense_fp16_flops_per_s->value ==
                                                                start.dense_bf16_flops_per_s.value;
  for (const MicrobenchFile& file : files) {
    fit.inputs.push_back(file.path + " (" + file.checksum + ")");
    // BF16 rows are fitted, FP16 ones as BF16 where the profile's FP16 peak is its BF16 one,
    // and FP8 GEMM rows where the profile has FP8 entries; others are listed as skipped.
    const auto bf16 = [&](const auto& s, const char* what) {
      if (s.dtype == "bf16" || (s.dtype == "fp16" && fp16_is_bf16)) return true;
      fit.skipped.push_back(
          {file.path, s.line,
           s.dtype + " " + what +
               (s.dtype == "fp16" ? " (the profile gives no FP16 peak equal to its BF16 one)"
                                  : " (the profile models BF16 only)")});
      return false;
    };
    for (const GemmSample& s : file.gemms) {
      if (s.dtype == "fp8") {
        if (start.fp8) {
          fp8_gemms.push_back({&s, &file});
        } else {
          fit.skipped.push_back(
              {file.path, s.line, "fp8 GEMM (the profile has no fp8 entries to fit)"});
        }
      } else if (bf16(s, "GEMM")) {
        gemms.push_back({&s, &file});
      }
    }
    for (const MemorySample& s : file.memory) memory.push_back({&s, &file});
    for (const AttentionSample& s : file.attention) {
      if (bf16(s, "attention")) attention[s.impl].push_back({&s, &file});
    }
    for (const OverlapSample& s : file.overlap) {
      if (bf16(s, "overlap")) overlap.push_back({&s, &file});
    }
  }
  if (gemms.empty() && fp8_gemms.empty() && memory.empty() && attention.empty() &&
      overlap.empty()) {
    throw MicrobenchError(files.empty() ? "(no files)" : files.front().path, 0,
                          "no rows the kernel model can fit");
  }
  std::string memory_files;
  for (const auto& [sample, file] : memory) {
    if (memory_files.find(file->path) == std::string::npos) {
      memory_files += (memory_files.empty() ? "" : ", ") + file->path;
    }
  }

  // The GEMM and memory fits depend on each other (a small GEMM can be memory-bound; a copy's
  // time includes the kernel's fixed time): they alternate to a fixed point first, so that a
  // fit started from its own result gives the same values.
  if (!gemms.empty() && !memory.empty()) {
    bool converged = false;
    for (int pass = 0; pass < 50 && !converged; ++pass) {
      const double before = gpu.memory_efficiency.value;
      fit_gemm_rows(gpu, gemms);
      gpu.memory_efficiency.value =
          efficiency_fit(gpu.kernel_launch_s.value, memory_x_y(gpu, memory), memory_files);
      converged = std::abs(gpu.memory_efficiency.value - before) < 1e-12;
    }
    if (!converged) {
      throw MicrobenchError(memory_files, 0,
                            "the GEMM and memory fits do not settle on common values");
    }
  }

  // 1. GEMMs (BF16 rows).
  const bool fp16_rows = std::any_of(
      gemms.begin(), gemms.end(), [](const GemmRow& row) { return row.sample->dtype == "fp16"; });
  if (!gemms.empty())
    fit_gemm_section(fit, gpu, start, gemms, "", fp16_rows ? "BF16 and FP16" : "BF16");

  // 2. Memory: t = launch + bytes / (hbm x e), least squares on relative errors.
  const double launch = gpu.kernel_launch_s.value;
  // One row says nothing of its scatter: 5% or the profile's sigma, the larger.
  const auto residual_sigma = [&](const std::vector<std::pair<double, double>>& x_y, double e,
                                  const std::string& key) {
    if (x_y.size() < 2) return std::max(kOnePointSigma * e, start_sigma(start, key));
    double sse = 0, sxx = 0;
    for (const auto& [x, y] : x_y) {
      const double r = (launch + x / e) / y - 1;
      sse += r * r;
      sxx += (x / (e * e) / y) * (x / (e * e) / y);
    }
    return std::sqrt(sse / static_cast<double>(x_y.size() - 1) / sxx);
  };
  if (!memory.empty()) {
    const std::vector<std::pair<double, double>> x_y = memory_x_y(gpu, memory);
    const double e = efficiency_fit(launch, x_y, memory_files);
    gpu.memory_efficiency.value = e;
    std::vector<const MicrobenchFile*> inputs;
    for (const auto& [s, file] : memory) {
      if (std::find(inputs.begin(), inputs.end(), file) == inputs.end()) inputs.push_back(file);
    }
    fit.parameters.push_back(
        {"memory_efficiency", e, residual_sigma(x_y, e, "memory_efficiency"),
         rows_of(memory.size(), "memory") +
             (memory.size() < 2
                  ? " (too few for an error estimate: sigma 5% or the profile's, the larger)"
                  : ""),
         true, inputs});
    for (const auto& [s, file] : memory) {
      Kernel copy;
      copy.bytes = s->bytes;
      char what[96];
      std::snprintf(what, sizeof what, "memory %s %.0f MB", s->op.c_str(), s->bytes / 1e6);
      fit.points.push_back({what, file->path, s->line, s->seconds, kernel_seconds(gpu, copy),
                            "memory", "", memory.size() < 2 ? FitRole::sets : FitRole::fitted});
    }
  }

  // 2b. FP8 GEMMs: the same fit on the profile's FP8 entries (fp8_gemm_view), with the
  // memory efficiency just fitted.
  if (!fp8_gemms.empty()) {
    GpuProfile view = fp8_gemm_view(gpu);
    fit_gemm_section(fit, view, fp8_gemm_view(start), fp8_gemms, "fp8.", "FP8");
    Fp8Gemm& fp8 = *gpu.fp8;
    fp8.gemm_efficiency = view.gemm_efficiency;
    fp8.gemm_sustained_flops_per_s = view.gemm_sustained_flops_per_s;
    fp8.gemm_k_overhead = view.gemm_k_overhead;
    fp8.kernel_launch_s = view.kernel_launch_s;
  }

  // 3. Attention: each implementation the profile has entries for (attention_fit.hpp).
  for (const auto& [impl, samples] : attention) {
    const std::optional<AttentionKernel> known = attention_kernel_named(impl);
    const char* why = !known                         ? "an implementation fleetsim does not know"
                      : !gpu.attention.count(*known) ? "the profile has no entries for it"
                                                     : nullptr;
    if (why) {
      for (const auto& [s, file] : samples) {
        fit.skipped.push_back({file->path, s->line, impl + " attention (" + why + ")"});
      }
      continue;
    }
    fit_attention(fit, start, *known, samples);
  }
  // 4. Overlap: the SMs a collective's kernels hold (comm_sms), the whole number that best
  // explains how much longer each GEMM took beside the collective: a row's time alone times the
  // model's ratio of its time on the SMs left to its time on all. Counts whose waves come out
  // the same fit the same; the smallest is taken. Sigma: the farthest count whose rms relative
  // error is within 0.01 (absolute) of the best's (a GEMM's slowdown steps with its waves, so
  // few shapes leave a range).
  if (!overlap.empty()) {
    std::vector<const MicrobenchFile*> inputs;
    for (const auto& [s, file] : overlap) {
      if (std::find(inputs.begin(), inputs.end(), file) == inputs.end()) inputs.push_back(file);
    }
    // Each row's GEMM and the model's time for it alone, then beside `held` SMs held.
    std::vector<Kernel> kernels;
    std::vector<double> model_alone_s;
    for (const auto& [s, file] : overlap) {
      kernels.push_back(gemm_kernel(s->m, s->n, s->k, 2.0));
      model_alone_s.push_back(kernel_seconds(gpu, kernels.back()));
    }
    const auto beside_s = [&](std::size_t row, int held) {
      return overlap[row].first->alone_seconds * kernel_seconds(gpu, kernels[row], held) /
             model_alone_s[row];
    };
    // Each count's rms relative error over the rows.
    std::vector<double> rms(static_cast<std::size_t>(std::max(gpu.sm_count, 1)), 0.0);
    for (int count = 0; count < static_cast<int>(rms.size()); ++count) {
      double squares = 0;
      for (std::size_t row = 0; row < overlap.size(); ++row) {
        squares += std::pow(beside_s(row, count) / overlap[row].first->with_comm_seconds - 1, 2);
      }
      rms[count] = std::sqrt(squares / static_cast<double>(overlap.size()));
    }
    int held = 0;
    for (int count = 1; count < static_cast<int>(rms.size()); ++count) {
      if (rms[count] < rms[held] - 1e-9) held = count;  // equal to a part in 10^9: the same fit
    }
    constexpr double kCountTolerance = 0.01;
    double spread = 0;
    for (int count = 0; count < static_cast<int>(rms.size()); ++count) {
      if (rms[count] <= rms[held] + kCountTolerance) {
        spread = std::max(spread, std::abs(static_cast<double>(count - held)));
      }
    }
    gpu.comm_sms.value = held;
    for (std::size_t row = 0; row < overlap.size(); ++row) {
      const auto& [s, file] = overlap[row];
      char what[96];
      std::snprintf(what, sizeof what, "overlap %.0fx%.0fx%.0f beside a collective", s->m, s->n,
                    s->k);
      fit.points.push_back({what, file->path, s->line, s->with_comm_seconds, beside_s(row, held),
                            "overlap", s->dtype,
                            overlap.size() < 2 ? FitRole::sets : FitRole::fitted});
    }
    fit.parameters.push_back(
        {"comm_sms", static_cast<double>(held), spread,
         rows_of(overlap.size(), "overlap") +
             ", the SM count that best explains the GEMMs' slowdowns, sigma the farthest count "
             "within 1% rms of it",
         true, inputs});
  }
  return fit;
}

std::vector<std::pair<std::string, Calibrated>> kernel_profile_entries(const KernelFit& fit) {
  std::vector<std::pair<std::string, Calibrated>> entries;
  for (const KernelFitParameter& p : fit.parameters) {
    if (!p.fitted) continue;
    bool measured = !p.inputs.empty();
    std::string inputs;
    for (const MicrobenchFile* file : p.inputs) {
      measured = measured && file->provenance == "measured";
      if (!inputs.empty()) inputs += ", ";
      // Each file with its own kind and machine: a mixed fit says which rows were measured where.
      inputs += std::filesystem::path(file->path).filename().string() + " (" + file->provenance +
                (file->gpu.empty() ? "" : ", " + file->gpu) + ") " + file->checksum;
    }
    Calibrated entry;
    entry.value = p.value;
    entry.sigma = p.sigma;
    entry.provenance = std::string(measured ? "measured" : "published") +
                       ": fleetsim calibrate --kernels, " + p.basis + " (" + inputs + ")";
    entries.push_back({p.key, entry});
  }
  return entries;
}

}  // namespace fleetsim
