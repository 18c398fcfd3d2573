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

double wave_efficiency(const GpuProfile& gpu, double m, double n) {
  const double tiles = std::ceil(m / gpu.gemm_tile_m) * std::ceil(n / gpu.gemm_tile_n);
  const double sms = gpu.sm_count;
  if (tiles <= 0 || sms <= 0) return 1.0;
  return tiles / (std::ceil(tiles / sms) * sms);
}

double kernel_seconds(const GpuProfile& gpu, const Kernel& kernel) {
  double compute_efficiency = 0;
  switch (kernel.kind) {
    case KernelKind::gemm:
      compute_efficiency = gpu.gemm_efficiency.value * wave_efficiency(gpu, kernel.m, kernel.n);
      break;
    case KernelKind::attention: compute_efficiency = gpu.attention_efficiency.value; break;
    case KernelKind::memory_bound: break;
  }
  const double compute_s =
      compute_efficiency > 0
          ? kernel.flops / (gpu.dense_bf16_flops_per_s.value * compute_efficiency)
          : 0.0;
  const double memory_s = kernel.bytes / (gpu.hbm_bytes_per_s.value * gpu.memory_efficiency.value);
  return std::max(compute_s, memory_s) + gpu.kernel_launch_s.value;
}

}  // namespace fleetsim
