// Kernel cost model: how long one kernel takes on one GPU, from its FLOPs, bytes and shape.
//
//   time = max(flops / (peak * eff_c(shape)), bytes / (hbm_bw * eff_m)) + launch
//
// eff_c for a GEMM is the profile's large-GEMM efficiency times the wave-quantisation factor:
// the output is cut into tiles of tile_m x tile_n, one per SM at a time; when the tile count is
// not a multiple of the SM count the last wave leaves SMs idle, and that fraction is lost
//     wave_efficiency = tiles / (ceil(tiles / SMs) * SMs).
// Attention (FlashAttention) has its own efficiency; memory-bound kernels have no FLOP term.
#pragma once

#include "calibration/gpu_profile.hpp"

namespace fleetsim {

enum class KernelKind { gemm, attention, memory_bound };

struct Kernel {
  KernelKind kind = KernelKind::memory_bound;
  double m = 0, n = 0, k = 0;  // GEMM shape (C[m,n] = A[m,k] B[k,n]); unused otherwise
  double flops = 0;            // executed FLOPs
  double bytes = 0;            // HBM bytes read and written
};

Kernel gemm_kernel(double m, double n, double k, double bytes_per_element);
double wave_efficiency(const GpuProfile& gpu, double m, double n);
double kernel_seconds(const GpuProfile& gpu, const Kernel& kernel);

}  // namespace fleetsim
