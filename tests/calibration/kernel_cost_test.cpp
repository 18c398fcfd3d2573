#include <catch2/catch.hpp>

#include "calibration/kernel_cost.hpp"

using namespace fleetsim;

namespace {

// A round-number GPU so expected values can be derived by hand.
GpuProfile round_gpu() {
  GpuProfile gpu;
  gpu.sm_count = 100;
  gpu.dense_bf16_flops_per_s.value = 1e15;
  gpu.hbm_bytes_per_s.value = 1e12;
  gpu.gemm_efficiency.value = 0.8;
  gpu.attention_efficiency.value = 0.5;
  gpu.memory_efficiency.value = 0.9;
  gpu.kernel_launch_s.value = 0;
  gpu.gemm_tiles = {{128, 256}};
  return gpu;
}

}  // namespace

TEST_CASE("a large square GEMM runs at peak times efficiency") {
  // 100 x 100 tiles = 10,000 tiles = 100 full waves: no quantisation loss.
  // flops = 2 * 12800 * 25600 * 8192; time = flops / (1e15 * 0.8).
  const GpuProfile gpu = round_gpu();
  const Kernel k = gemm_kernel(12800, 25600, 8192, 2);
  CHECK(wave_efficiency(gpu, 12800, 25600) == 1.0);
  CHECK(kernel_seconds(gpu, k) == Approx(k.flops / 0.8e15));
}

TEST_CASE("wave quantisation is a step when the tile count crosses a multiple of the SMs") {
  // 100 SMs, tiles of 128 x 256. n = 256 (one tile column), m = 128 * tiles.
  GpuProfile gpu = round_gpu();
  CHECK(wave_efficiency(gpu, 128 * 100, 256) == 1.0);                    // 100 tiles: 1 wave
  CHECK(wave_efficiency(gpu, 128 * 101, 256) == Approx(101.0 / 200.0));  // 2nd wave, 1 tile
  CHECK(wave_efficiency(gpu, 128 * 200, 256) == 1.0);
  // With 10 x 10 tiles the GEMM fills one wave; 11 x 10 = 110 tiles need two waves of 100, so
  // 10% more FLOPs take 1.1 / (110 / 200) = 2x as long. HBM is made fast enough here that the
  // FLOP term decides.
  gpu.hbm_bytes_per_s.value = 1e15;
  const double t100 = kernel_seconds(gpu, gemm_kernel(128 * 10, 256 * 10, 16384, 2));
  const double t110 = kernel_seconds(gpu, gemm_kernel(128 * 11, 256 * 10, 16384, 2));
  CHECK(t110 / t100 == Approx(2.0).epsilon(1e-9));
}

TEST_CASE("memory-bound kernels run at the achieved HBM bandwidth") {
  const GpuProfile gpu = round_gpu();
  Kernel copy;
  copy.kind = KernelKind::memory_bound;
  copy.bytes = 9e9;  // 9e9 / (1e12 * 0.9) = 10 ms
  CHECK(kernel_seconds(gpu, copy) == Approx(0.01));
}

TEST_CASE("a skinny GEMM is limited by memory, not FLOPs") {
  // m = 1: 2*n*k FLOPs but it must read the whole n x k matrix: arithmetic intensity ~1.
  const GpuProfile gpu = round_gpu();
  const Kernel k = gemm_kernel(1, 8192, 8192, 2);
  CHECK(kernel_seconds(gpu, k) == Approx(k.bytes / 0.9e12));
}

TEST_CASE("launch overhead is added once per kernel") {
  GpuProfile gpu = round_gpu();
  gpu.kernel_launch_s.value = 5e-6;
  Kernel empty;
  CHECK(kernel_seconds(gpu, empty) == Approx(5e-6));
}
