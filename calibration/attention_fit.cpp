#include "calibration/attention_fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>

#include "calibration/kernel_cost.hpp"
#include "calibration/linear_fit.hpp"

namespace fleetsim {
namespace {

// A parameter the rows leave no degree of freedom for: its sigma, relative to the value.
constexpr double kUndeterminedSigma = 0.05;
// The ranges searched: efficiencies of the dense peak, overheads in keys.
constexpr double kMinEfficiency = 0.01, kMaxEfficiency = 1.0, kMaxOverhead = 16384;

Kernel pass_kernel(AttentionKernel kernel, const AttentionSample& s, bool backward) {
  Kernel k;
  k.kind = KernelKind::attention;
  k.attention = kernel;
  k.backward = backward;
  k.causal = s.causal;
  k.seq = s.seq;
  k.flops = s.forward_flops() * (backward ? 2.5 : 1.0);
  return k;
}

// The model's time for a row: its pass, or the forward kernel and the backward one.
double row_seconds(const GpuProfile& gpu, AttentionKernel kernel, const AttentionSample& s) {
  double t = 0;
  if (s.direction != "bwd") t += kernel_seconds(gpu, pass_kernel(kernel, s, false));
  if (s.direction != "fwd") t += kernel_seconds(gpu, pass_kernel(kernel, s, true));
  return t;
}

// Holds `gpu`'s sustained clock at a value while it lives, then gives back the profile's: the
// fit moves entries of that profile in place, so a row is timed on it, at its own clocks.
class ClockHeld {
 public:
  ClockHeld(GpuProfile& gpu, double value)
      : clock_(gpu.sustained_clock.value), saved_(gpu.sustained_clock.value) {
    clock_ = value;
  }
  ~ClockHeld() { clock_ = saved_; }
  ClockHeld(const ClockHeld&) = delete;
  ClockHeld& operator=(const ClockHeld&) = delete;

 private:
  double& clock_;
  double saved_;
};

// A parameter the fit moves, x: one profile entry (x is its value), or both passes'
// efficiencies (x is a factor on their starting values, `base`). `step` is the smallest
// finite-difference step its sigma is taken with.
struct Free {
  std::vector<double*> values;
  std::vector<double> base;
  std::vector<std::string> keys;
  double low = 0, high = 0, step = 0;
  std::string what;  // what set it: "10 cudnn fwd rows, causal at 5 sequence lengths", ...
  void set(double x) const {
    for (std::size_t i = 0; i < values.size(); ++i)
      *values[i] = values.size() == 1 ? x : base[i] * x;
  }
  double current() const { return values.size() == 1 ? *values[0] : *values[0] / base[0]; }
};

Free entry(double& value, std::string key, double high, double step, std::string what) {
  return {{&value}, {value}, {std::move(key)}, 0, high, step, std::move(what)};
}

std::string count_of(std::size_t n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? " row" : " rows");
}

}  // namespace

void fit_attention(KernelFit& fit, const GpuProfile& start, AttentionKernel kernel,
                   const AttentionRows& rows) {
  GpuProfile& gpu = fit.profile;
  AttentionRates& rates = gpu.attention.at(kernel);
  const std::string name = attention_kernel_name(kernel);
  // A row of a short run ran at boost clocks; one of a file marked `# load: sustained`, at the
  // clocks of sustained load (the profile's sustained_clock). The entries are short-run rates.
  const auto model_seconds = [&](const AttentionSample& s, const MicrobenchFile& file) {
    const ClockHeld held(gpu, file.sustained ? gpu.sustained_clock.value : 1.0);
    return row_seconds(gpu, kernel, s);
  };
  const auto sse = [&] {
    double total = 0;
    for (const auto& [s, file] : rows) {
      const double r = model_seconds(*s, *file) / s->seconds - 1;
      total += r * r;
    }
    return total;
  };

  // What the rows can tell, pass by pass.
  std::vector<Free> free;
  for (const char* pass_name : {"fwd", "bwd"}) {
    AttentionPass& pass = std::string(pass_name) == "bwd" ? rates.bwd : rates.fwd;
    std::size_t own = 0;
    std::set<double> full_seqs, causal_seqs;
    for (const auto& [s, file] : rows) {
      if (s->direction != pass_name) continue;
      ++own;
      (s->causal ? causal_seqs : full_seqs).insert(s->seq);
    }
    if (own == 0) continue;
    const std::string prefix = "attention." + name + "." + pass_name + ".";
    const std::string what = count_of(own, name + " " + pass_name);
    free.push_back(entry(pass.efficiency.value, prefix + "efficiency", kMaxEfficiency, 1e-4, what));
    free.back().low = kMinEfficiency;
    const struct {
      const std::set<double>& seqs;
      Calibrated& overhead;
      const char* key;
      const char* mask;
    } overheads[] = {{full_seqs, pass.seq_overhead, "seq_overhead", "full mask"},
                     {causal_seqs, pass.causal_overhead, "causal_overhead", "causal"}};
    for (const auto& o : overheads) {
      if (o.seqs.size() < 2) continue;
      free.push_back(entry(
          o.overhead.value, prefix + o.key, kMaxOverhead, 1.0,
          what + ", " + o.mask + " at " + std::to_string(o.seqs.size()) + " sequence lengths"));
    }
  }
  if (free.empty()) {
    // fwd_bwd rows only: one factor on both efficiencies, their ratio kept.
    const double largest = std::max(rates.fwd.efficiency.value, rates.bwd.efficiency.value);
    free.push_back(
        {{&rates.fwd.efficiency.value, &rates.bwd.efficiency.value},
         {rates.fwd.efficiency.value, rates.bwd.efficiency.value},
         {"attention." + name + ".fwd.efficiency", "attention." + name + ".bwd.efficiency"},
         kMinEfficiency / largest,
         kMaxEfficiency / largest,
         1e-4,
         count_of(rows.size(), name + " forward-and-backward") +
             " (one factor on both passes, their ratio kept)"});
  }

  for (int sweep = 0; sweep < 100; ++sweep) {
    double moved = 0;
    for (const Free& p : free) {
      const double before = p.current();
      const double best = minimise(
          [&](double x) {
            p.set(x);
            return sse();
          },
          p.low, p.high);
      p.set(best);
      moved = std::max(moved, std::abs(best - before) / std::max(std::abs(before), 1e-9));
    }
    if (moved < 1e-9) break;
  }

  // Sigmas: residual variance over the curvature of the squared error in each parameter.
  const double dof = static_cast<double>(rows.size()) - static_cast<double>(free.size());
  const double best_sse = sse();
  std::vector<const MicrobenchFile*> inputs;
  for (const auto& [s, file] : rows) {
    if (std::find(inputs.begin(), inputs.end(), file) == inputs.end()) inputs.push_back(file);
  }
  for (const Free& p : free) {
    const double x = p.current();
    const double h = std::max(std::abs(x) * 1e-3, p.step);
    // Central differences, or forward ones at the range's floor (an overhead of zero).
    const double from = x - h >= 0 ? x - h : x;
    const auto sse_at = [&](double at) {
      p.set(at);
      return sse();
    };
    const double f0 = sse_at(from), f1 = sse_at(from + h), f2 = sse_at(from + 2 * h);
    p.set(x);
    const double curvature = (f0 - 2 * f1 + f2) / (h * h);
    const bool determined = dof > 0 && curvature > 0;
    const double sigma_x = determined ? std::sqrt(2 * best_sse / dof / curvature) : 0.0;
    for (std::size_t j = 0; j < p.values.size(); ++j) {
      const double value = *p.values[j];
      double sigma = sigma_x * (p.values.size() == 1 ? 1.0 : p.base[j]);
      std::string basis = p.what;
      if (!determined) {
        const std::optional<Calibrated> entry = profile_entry(start, p.keys[j]);
        sigma = std::max(kUndeterminedSigma * value, entry ? entry->sigma : 0.0);
        basis += " (too few for an error estimate: sigma 5% or the profile's, the larger)";
      }
      fit.parameters.push_back({p.keys[j], value, sigma, basis, true, inputs});
    }
  }
  for (const auto& [s, file] : rows) {
    char what[96];
    std::snprintf(what, sizeof what, "attention %s %s %s s%.0f d%.0f", name.c_str(),
                  s->direction.c_str(), s->causal ? "causal" : "full", s->seq, s->head_dim);
    fit.points.push_back({what, file->path, s->line, s->seconds, model_seconds(*s, *file),
                          "attention", s->dtype,
                          rows.size() < 2 ? FitRole::sets : FitRole::fitted});
  }
}

}  // namespace fleetsim
