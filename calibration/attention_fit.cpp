#include "calibration/attention_fit.hpp"

#include <algorithm>
#include <boost/math/tools/minima.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <string>

#include "calibration/kernel_cost.hpp"

namespace fleetsim {
namespace {

constexpr int kBrentBits = std::numeric_limits<double>::digits / 2;
// A parameter the rows leave no degree of freedom for: its sigma, relative to the value.
constexpr double kUndeterminedSigma = 0.05;
// The ranges searched: efficiencies of the dense peak, overheads in keys.
constexpr double kMinEfficiency = 0.01, kMaxEfficiency = 1.0, kMaxOverhead = 16384;

// The forward pass's FLOPs of a row in FlashAttention's convention (microbench.hpp).
double forward_flops(const AttentionSample& s) {
  return 4 * s.batch * s.heads * s.seq * s.seq * s.head_dim / (s.causal ? 2 : 1);
}

Kernel pass_kernel(AttentionKernel kernel, const AttentionSample& s, bool backward) {
  Kernel k;
  k.kind = KernelKind::attention;
  k.attention = kernel;
  k.backward = backward;
  k.causal = s.causal;
  k.seq = s.seq;
  k.flops = forward_flops(s) * (backward ? 2.5 : 1.0);
  return k;
}

// The model's time for a row: its pass, or the forward kernel and the backward one.
double row_seconds(const GpuProfile& gpu, AttentionKernel kernel, const AttentionSample& s) {
  double t = 0;
  if (s.direction != "bwd") t += kernel_seconds(gpu, pass_kernel(kernel, s, false));
  if (s.direction != "fwd") t += kernel_seconds(gpu, pass_kernel(kernel, s, true));
  return t;
}

double minimise(const std::function<double(double)>& f, double low, double high) {
  std::uintmax_t iterations = 200;
  return boost::math::tools::brent_find_minima(f, low, high, kBrentBits, iterations).first;
}

// A parameter the fit moves: where it lives in the profile (several entries for a scale on both
// passes' efficiencies), its range and the profile key it is reported under.
struct Free {
  std::vector<double*> values;  // each scaled alike (one entry, or both efficiencies)
  std::vector<std::string> keys;
  double low = 0, high = 0;
  std::string what;  // what set it: "12 fwd rows at 5 sequence lengths", ...
};

std::string count_of(std::size_t n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? " row" : " rows");
}

}  // namespace

void fit_attention(KernelFit& fit, const GpuProfile& start, AttentionKernel kernel,
                   const AttentionRows& rows) {
  GpuProfile& gpu = fit.profile;
  AttentionRates& rates = gpu.attention.at(kernel);
  const std::string name = attention_kernel_name(kernel);
  const auto sse = [&] {
    double total = 0;
    for (const auto& [s, file] : rows) {
      const double r = row_seconds(gpu, kernel, *s) / s->seconds - 1;
      total += r * r;
    }
    return total;
  };

  // What the rows can tell, pass by pass.
  std::vector<Free> free;
  bool any_pass_rows = false;
  for (const char* pass_name : {"fwd", "bwd"}) {
    const bool backward = std::string(pass_name) == "bwd";
    AttentionPass& pass = backward ? rates.bwd : rates.fwd;
    std::size_t own = 0;
    std::set<double> full_seqs, causal_seqs;
    for (const auto& [s, file] : rows) {
      if (s->direction != pass_name) continue;
      ++own;
      (s->causal ? causal_seqs : full_seqs).insert(s->seq);
    }
    if (own == 0) continue;
    any_pass_rows = true;
    const std::string prefix = "attention." + name + "." + pass_name + ".";
    free.push_back({{&pass.efficiency.value},
                    {prefix + "efficiency"},
                    kMinEfficiency,
                    kMaxEfficiency,
                    count_of(own, name + " " + pass_name)});
    if (full_seqs.size() >= 2) {
      free.push_back({{&pass.seq_overhead.value},
                      {prefix + "seq_overhead"},
                      0,
                      kMaxOverhead,
                      count_of(own, name + " " + pass_name) + ", full mask at " +
                          std::to_string(full_seqs.size()) + " sequence lengths"});
    }
    if (causal_seqs.size() >= 2) {
      free.push_back({{&pass.causal_overhead.value},
                      {prefix + "causal_overhead"},
                      0,
                      kMaxOverhead,
                      count_of(own, name + " " + pass_name) + ", causal at " +
                          std::to_string(causal_seqs.size()) + " sequence lengths"});
    }
  }
  if (!any_pass_rows) {
    // fwd_bwd rows only: one factor on both efficiencies, their ratio kept.
    free.push_back(
        {{&rates.fwd.efficiency.value, &rates.bwd.efficiency.value},
         {"attention." + name + ".fwd.efficiency", "attention." + name + ".bwd.efficiency"},
         0,
         0,
         count_of(rows.size(), name + " forward-and-backward") +
             " (one factor on both passes, their ratio kept)"});
  }

  // Each parameter as a factor on its starting value(s), or its value for a single entry.
  const auto set = [](const Free& p, const std::vector<double>& base, double x) {
    for (std::size_t i = 0; i < p.values.size(); ++i) {
      *p.values[i] = p.values.size() == 1 ? x : base[i] * x;
    }
  };
  std::vector<std::vector<double>> bases;
  for (const Free& p : free) {
    std::vector<double> base;
    for (const double* v : p.values) base.push_back(*v);
    bases.push_back(base);
  }
  const auto range_of = [&](std::size_t i) {
    const Free& p = free[i];
    if (p.values.size() == 1) return std::pair{p.low, p.high};
    const double largest = *std::max_element(bases[i].begin(), bases[i].end());
    return std::pair{kMinEfficiency / largest, kMaxEfficiency / largest};
  };
  const auto current = [&](std::size_t i) {
    return free[i].values.size() == 1 ? *free[i].values[0] : *free[i].values[0] / bases[i][0];
  };
  for (int sweep = 0; sweep < 100; ++sweep) {
    double moved = 0;
    for (std::size_t i = 0; i < free.size(); ++i) {
      const double before = current(i);
      const auto [low, high] = range_of(i);
      const double best = minimise(
          [&](double x) {
            set(free[i], bases[i], x);
            return sse();
          },
          low, high);
      set(free[i], bases[i], best);
      moved = std::max(moved, std::abs(best - before) / std::max(std::abs(before), 1e-9));
    }
    if (moved < 1e-9) break;
  }

  // Sigmas: residual variance over the curvature of the squared error in each parameter.
  const double n = static_cast<double>(rows.size());
  const double dof = n - static_cast<double>(free.size());
  const double best_sse = sse();
  std::vector<const MicrobenchFile*> inputs;
  for (const auto& [s, file] : rows) {
    if (std::find(inputs.begin(), inputs.end(), file) == inputs.end()) inputs.push_back(file);
  }
  for (std::size_t i = 0; i < free.size(); ++i) {
    const double x = current(i);
    const bool overhead = free[i].values.size() == 1 && free[i].high > kMaxEfficiency;
    const double h = std::max(std::abs(x) * 1e-3, overhead ? 1.0 : 1e-4);
    // Central differences, or forward ones at the range's floor (an overhead of zero).
    const double from = x - h >= 0 ? x - h : x;
    const auto sse_at = [&](double at) {
      set(free[i], bases[i], at);
      return sse();
    };
    const double f0 = sse_at(from), f1 = sse_at(from + h), f2 = sse_at(from + 2 * h);
    set(free[i], bases[i], x);
    const double curvature = (f0 - 2 * f1 + f2) / (h * h);
    double sigma_x = 0;
    const bool determined = dof > 0 && curvature > 0;
    if (determined) sigma_x = std::sqrt(2 * best_sse / dof / curvature);
    for (std::size_t j = 0; j < free[i].values.size(); ++j) {
      const std::string& key = free[i].keys[j];
      const double value = *free[i].values[j];
      const double scale = free[i].values.size() == 1 ? 1.0 : bases[i][j];
      double sigma = sigma_x * scale;
      std::string basis = free[i].what;
      if (!determined) {
        const std::optional<Calibrated> entry = profile_entry(start, key);
        sigma = std::max(kUndeterminedSigma * value, entry ? entry->sigma : 0.0);
        basis += " (too few for an error estimate: sigma 5% or the profile's, the larger)";
      }
      fit.parameters.push_back({key, value, sigma, basis, true, inputs});
    }
  }
  for (const auto& [s, file] : rows) {
    char what[96];
    std::snprintf(what, sizeof what, "attention %s %s %s s%.0f d%.0f", name.c_str(),
                  s->direction.c_str(), s->causal ? "causal" : "full", s->seq, s->head_dim);
    fit.points.push_back({what, file->path, s->line, s->seconds, row_seconds(gpu, kernel, *s)});
  }
}

}  // namespace fleetsim
