#include "calibration/kernel_cost.hpp"

#include <algorithm>
#include <cmath>

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

double wave_efficiency(int sms, GemmTile tile, double m, double n) {
  const double tiles = std::ceil(m / tile.m) * std::ceil(n / tile.n);
  if (tiles <= 0 || sms <= 0) return 1.0;
  return tiles / (std::ceil(tiles / sms) * sms);
}

double wave_efficiency(const GpuProfile& gpu, double m, double n) {
  double best = 0;
  for (const GemmTile& tile : gpu.gemm_tiles) {
    best = std::max(best, wave_efficiency(gpu.sm_count, tile, m, n));
  }
  return gpu.gemm_tiles.empty() ? 1.0 : best;
}

double gemm_shape_efficiency(const GpuProfile& gpu, double m, double n, double k) {
  return wave_efficiency(gpu, m, n) * k / (k + gpu.gemm_k_overhead.value);
}

double gemm_compute_efficiency(const GpuProfile& gpu, double m, double n, double k) {
  return gpu.gemm_efficiency.value * gemm_shape_efficiency(gpu, m, n, k);
}

double kernel_seconds(const GpuProfile& gpu, const Kernel& kernel) {
  double compute_efficiency = 0;
  switch (kernel.kind) {
    case KernelKind::gemm:
      compute_efficiency = gemm_compute_efficiency(gpu, kernel.m, kernel.n, kernel.k);
      break;
    case KernelKind::attention: compute_efficiency = gpu.attention_efficiency.value; break;
    case KernelKind::memory_bound: break;
  }
  double rate = gpu.dense_bf16_flops_per_s.value * compute_efficiency;
  if (kernel.kind == KernelKind::gemm && gpu.gemm_sustained_flops_per_s.value > 0) {
    rate = std::min(rate, gpu.gemm_sustained_flops_per_s.value);
  }
  const double compute_s = compute_efficiency > 0 ? kernel.flops / rate : 0.0;
  const double memory_s = kernel.bytes / (gpu.hbm_bytes_per_s.value * gpu.memory_efficiency.value);
  return std::max(compute_s, memory_s) + gpu.kernel_launch_s.value;
}

}  // namespace fleetsim
