#include "calibration/kernel_cost.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

#include "sim/engine/errors.hpp"

namespace fleetsim {

Kernel gemm_kernel(double m, double n, double k, double bytes_per_element) {
  Kernel kernel;
  kernel.kind = KernelKind::gemm;
  kernel.m = m;
  kernel.n = n;
  kernel.k = k;
  kernel.flops = 2 * m * n * k;
  kernel.bytes = bytes_per_element * (m * k + k * n + m * n);
  return kernel;
}

Kernel fp8_gemm_kernel(double m, double n, double k) {
  Kernel kernel = gemm_kernel(m, n, k, 1.0);
  kernel.bytes += m * n;  // the output in BF16
  kernel.fp8 = true;
  return kernel;
}

Kernel gemm_rows(const Kernel& gemm, double rows) {
  const double elements = gemm.groups * (gemm.m * gemm.k + gemm.k * gemm.n + gemm.m * gemm.n);
  Kernel part = gemm.fp8
                    ? fp8_gemm_kernel(rows, gemm.n, gemm.k)
                    : gemm_kernel(rows, gemm.n, gemm.k, elements > 0 ? gemm.bytes / elements : 0.0);
  part.sm_margin = gemm.sm_margin;
  return grouped(part, gemm.groups);
}

GpuProfile fp8_gemm_view(const GpuProfile& gpu) {
  if (!gpu.fp8) throw ModelError("GPU profile " + gpu.name + " has no FP8 GEMM entries");
  GpuProfile view = gpu;
  view.dense_bf16_flops_per_s = gpu.fp8->dense_flops_per_s;
  view.gemm_efficiency = gpu.fp8->gemm_efficiency;
  view.gemm_sustained_flops_per_s = gpu.fp8->gemm_sustained_flops_per_s;
  view.gemm_k_overhead = gpu.fp8->gemm_k_overhead;
  view.kernel_launch_s = gpu.fp8->kernel_launch_s;
  return view;
}

Kernel grouped(Kernel kernel, double groups) {
  if (kernel.kind == KernelKind::gemm) kernel.groups *= groups;
  kernel.flops *= groups;
  kernel.bytes *= groups;
  return kernel;
}

double wave_efficiency(int sms, GemmTile tile, double m, double n, double groups) {
  const double tiles = groups * std::ceil(m / tile.m) * std::ceil(n / tile.n);
  if (tiles <= 0 || sms <= 0) return 1.0;
  return tiles / (std::ceil(tiles / sms) * sms);
}

namespace {

// The tile the library picks for the `planned` SMs it is told it has (the whole GPU unless
// given a margin): the first with the best wave.
std::optional<GemmTile> chosen_tile(const GpuProfile& gpu, int planned, double m, double n,
                                    double groups) {
  std::optional<GemmTile> chosen;
  double best = -1;
  for (const GemmTile& tile : gpu.gemm_tiles) {
    const double wave = wave_efficiency(planned, tile, m, n, groups);
    if (wave > best) {
      best = wave;
      chosen = tile;
    }
  }
  return chosen;
}

// The wave efficiency of the tile chosen for the whole GPU, run on `sms` of its SMs.
double wave_efficiency_on(const GpuProfile& gpu, int planned, int sms, double m, double n,
                          double groups = 1) {
  const std::optional<GemmTile> tile = chosen_tile(gpu, planned, m, n, groups);
  return tile ? wave_efficiency(sms, *tile, m, n, groups) : 1.0;
}

}  // namespace

double wave_efficiency(const GpuProfile& gpu, double m, double n) {
  return wave_efficiency_on(gpu, gpu.sm_count, gpu.sm_count, m, n);
}

int comm_sms_held(const GpuProfile& gpu, int collectives) {
  if (collectives <= 0 || gpu.sm_count < 1) return 0;
  const double held = std::round(collectives * std::max(0.0, gpu.comm_sms.value));
  return static_cast<int>(std::min(held, static_cast<double>(gpu.sm_count - 1)));
}

double comm_hbm_bytes_per_s(double link_bytes_per_s) {
  return kCommHbmBytesPerLinkByte * std::max(0.0, link_bytes_per_s);
}

namespace {

// The GEMM model's parameters for one input precision.
struct GemmRates {
  double peak, efficiency, k_overhead, sustained, fixed_s;
};

GemmRates bf16_rates(const GpuProfile& gpu) {
  return {gpu.dense_bf16_flops_per_s.value, gpu.gemm_efficiency.value, gpu.gemm_k_overhead.value,
          gpu.gemm_sustained_flops_per_s.value, gpu.kernel_launch_s.value};
}

GemmRates fp8_rates(const GpuProfile& gpu) {
  if (!gpu.fp8) throw ModelError("GPU profile " + gpu.name + " has no FP8 GEMM entries");
  const Fp8Gemm& f = *gpu.fp8;
  return {f.dense_flops_per_s.value, f.gemm_efficiency.value, f.gemm_k_overhead.value,
          f.gemm_sustained_flops_per_s.value, f.kernel_launch_s.value};
}

// On `sms` of the GPU's SMs.
double shape_efficiency(const GpuProfile& gpu, int planned, int sms, const GemmRates& rates,
                        double m, double n, double k, double groups = 1) {
  return wave_efficiency_on(gpu, planned, sms, m, n, groups) * k / (k + rates.k_overhead);
}

}  // namespace

double gemm_shape_efficiency(const GpuProfile& gpu, double m, double n, double k) {
  return shape_efficiency(gpu, gpu.sm_count, gpu.sm_count, bf16_rates(gpu), m, n, k);
}

double gemm_compute_efficiency(const GpuProfile& gpu, double m, double n, double k) {
  return gpu.gemm_efficiency.value * gemm_shape_efficiency(gpu, m, n, k);
}

GpuProfile slowed(const GpuProfile& gpu, double slowdown) {
  GpuProfile slow = gpu;
  const double factor = 1 / (1 + slowdown);
  slow.dense_bf16_flops_per_s.value *= factor;
  slow.gemm_sustained_flops_per_s.value *= factor;
  if (slow.fp8) {
    slow.fp8->dense_flops_per_s.value *= factor;
    slow.fp8->gemm_sustained_flops_per_s.value *= factor;
  }
  return slow;
}

const AttentionRates& attention_rates(const GpuProfile& gpu,
                                      std::optional<AttentionKernel> kernel) {
  const AttentionKernel chosen = kernel.value_or(gpu.attention_default);
  const auto found = gpu.attention.find(chosen);
  if (found == gpu.attention.end()) {
    throw ModelError("the " + gpu.name + " profile has no " +
                     std::string(attention_kernel_name(chosen)) + " attention");
  }
  return found->second;
}

double mean_causal_keys(double seq, double window) {
  return window > 0 && window < seq ? window - window * window / (2 * seq) : seq / 2;
}

double attention_efficiency(const GpuProfile& gpu, const Kernel& kernel) {
  const AttentionRates& rates = attention_rates(gpu, kernel.attention);
  const AttentionPass& pass = kernel.backward ? rates.bwd : rates.fwd;
  // Each query tile meets every key, or half of them on average under a causal mask (fewer
  // under a window).
  const double keys = kernel.causal ? mean_causal_keys(kernel.seq, kernel.window) : kernel.seq;
  const double overhead =
      std::max(0.0, (kernel.causal ? pass.causal_overhead : pass.seq_overhead).value);
  return keys > 0 ? pass.efficiency.value * keys / (keys + overhead) : pass.efficiency.value;
}

double kernel_seconds(const GpuProfile& gpu, const Kernel& kernel) {
  return kernel_seconds(gpu, kernel, 0);
}

double kernel_seconds(const GpuProfile& gpu, const Kernel& kernel, int sms_held, double hbm_taken) {
  const double sustained = gpu.hbm_bytes_per_s.value * gpu.memory_efficiency.value;
  const double memory_s =
      kernel.bytes / std::max(sustained - std::max(0.0, hbm_taken), 0.5 * sustained);
  // Communication takes the SMs of the kernel's margin first, then ones it planned for.
  const int margin = std::max(0, kernel.sm_margin);
  const int sms = std::max(1, gpu.sm_count - std::max(margin, sms_held));
  const int planned = std::max(1, gpu.sm_count - margin);
  const double sm_share =
      gpu.sm_count > 0 ? std::min(1.0, static_cast<double>(sms) / gpu.sm_count) : 1.0;
  switch (kernel.kind) {
    case KernelKind::gemm: {
      const GemmRates rates = kernel.fp8 ? fp8_rates(gpu) : bf16_rates(gpu);
      const double efficiency =
          rates.efficiency *
          shape_efficiency(gpu, planned, sms, rates, kernel.m, kernel.n, kernel.k, kernel.groups);
      double rate = rates.peak * sm_share * efficiency;
      if (rates.sustained > 0)
        rate = std::min(rate, rates.sustained * std::cbrt(sm_share * sm_share));
      const double compute_s = efficiency > 0 ? kernel.flops / rate : 0.0;
      return std::max(compute_s, memory_s) + rates.fixed_s;
    }
    case KernelKind::attention: {
      // Attention entries are short-run rates: a step's back-to-back kernels run at the clocks
      // sustained load settles at.
      const double efficiency = attention_efficiency(gpu, kernel) * gpu.sustained_clock.value;
      const double compute_s =
          efficiency > 0 ? kernel.flops / (gpu.dense_bf16_flops_per_s.value * sm_share * efficiency)
                         : 0.0;
      return std::max(compute_s, memory_s) + gpu.kernel_launch_s.value;
    }
    case KernelKind::memory_bound: break;
  }
  return memory_s + gpu.kernel_launch_s.value;
}

}  // namespace fleetsim
