#include <catch2/catch.hpp>
#include <cmath>

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
  AttentionRates& fa2 = gpu.attention[AttentionKernel::fa2];
  fa2.fwd.efficiency.value = fa2.bwd.efficiency.value = 0.5;
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

TEST_CASE("a GEMM that fills every SM in one wave takes a second beside a collective") {
  // 10 x 10 tiles fill the 100 SMs once. A collective holding 20 SMs leaves 80: the tile chosen
  // for the whole GPU now needs two waves over 80 SMs (wave 100 / 160) at 80% of the peak, so the
  // compute takes (100 / 80) x (160 / 100) = 2x as long: the tail effect of a GEMM sized for
  // the whole GPU.
  GpuProfile gpu = round_gpu();
  gpu.hbm_bytes_per_s.value = 1e15;
  const Kernel gemm = gemm_kernel(128 * 10, 256 * 10, 16384, 2);
  CHECK(kernel_seconds(gpu, gemm, 20) / kernel_seconds(gpu, gemm) == Approx(2.0).epsilon(1e-9));
  // A GEMM of many waves loses about the SMs' share: 100 waves of 100 tiles on 80 SMs take
  // 125 waves, exactly 1.25x.
  const Kernel many = gemm_kernel(12800, 25600, 8192, 2);
  CHECK(kernel_seconds(gpu, many, 20) / kernel_seconds(gpu, many) == Approx(1.25).epsilon(1e-9));
  // Attention keeps its efficiency on the SMs left.
  Kernel attention;
  attention.kind = KernelKind::attention;
  attention.flops = 1e12;
  CHECK(kernel_seconds(gpu, attention, 20) == Approx(1e12 / (1e15 * 0.8 * 0.5)));
}

TEST_CASE("beside a collective a kernel's bytes move on the HBM bandwidth it leaves") {
  // The round GPU sustains 0.9 TB/s. A collective moving 0.3 TB/s of HBM leaves 0.6: a copy
  // of 0.9 GB takes 1.5 ms instead of 1. One moving 0.6 TB/s would leave 0.3, but two
  // requesters that could each use it all get half at least: 0.45 TB/s, 2 ms.
  const GpuProfile gpu = round_gpu();
  Kernel copy;
  copy.bytes = 0.9e9;
  CHECK(kernel_seconds(gpu, copy, 0, 0) == kernel_seconds(gpu, copy));
  CHECK(kernel_seconds(gpu, copy, 0, 0.3e12) == Approx(1.5e-3));
  CHECK(kernel_seconds(gpu, copy, 0, 0.6e12) == Approx(2e-3));
  CHECK(kernel_seconds(gpu, copy, 0, 5e12) == Approx(2e-3));
  // More taken is never faster.
  double previous = 0;
  for (double taken = 0; taken <= 1e12; taken += 0.05e12) {
    const double t = kernel_seconds(gpu, copy, 0, taken);
    CHECK(t >= previous);
    previous = t;
  }
  // A compute-bound GEMM (2 x 12800 x 25600 x 8192 FLOPs at 0.8 PFLOP/s: 6.7 ms; its 1.1 GB
  // need 1.2 ms at 0.9 TB/s, 1.8 ms at 0.6) keeps its time; its memory term grows.
  const Kernel gemm = gemm_kernel(12800, 25600, 8192, 2);
  CHECK(kernel_seconds(gpu, gemm, 0, 0.3e12) == kernel_seconds(gpu, gemm));
  // The traffic a collective's link rate stands for: 3 bytes of HBM a byte on the link.
  CHECK(comm_hbm_bytes_per_s(100e9) == Approx(300e9));
  CHECK(comm_hbm_bytes_per_s(-1) == 0);
}

TEST_CASE("a GEMM launched with an SM margin plans its tiles for the SMs left") {
  // 10 x 10 tiles on 100 SMs with a margin of 20 (Transformer Engine's set_sm_margin): one
  // wave of 80 and a second of 20 on the 80 SMs it plans for, wave 100 / 160 at 80% of the
  // peak: 2x the full GPU's time, collective or not, as long as the collective holds no more
  // than the margin. Holding more takes SMs it planned for: 60 held leave 40, three waves.
  GpuProfile gpu = round_gpu();
  gpu.hbm_bytes_per_s.value = 1e15;
  const Kernel whole = gemm_kernel(128 * 10, 256 * 10, 16384, 2);
  Kernel margin = whole;
  margin.sm_margin = 20;
  CHECK(kernel_seconds(gpu, margin) / kernel_seconds(gpu, whole) == Approx(2.0).epsilon(1e-9));
  CHECK(kernel_seconds(gpu, margin, 20) == kernel_seconds(gpu, margin));
  CHECK(kernel_seconds(gpu, margin, 60) / kernel_seconds(gpu, margin) == Approx(1.5).epsilon(1e-9));
  // With a tile that fits the SMs left (5 x 16 = 80 tiles of 256 x 160 on 80 SMs) the margin
  // costs only the SMs' share, where the same GEMM planned for the whole GPU loses a wave.
  gpu.gemm_tiles = {{128, 256}, {256, 160}};
  const Kernel fits = gemm_kernel(256 * 5, 160 * 16, 16384, 2);
  Kernel planned = fits;
  planned.sm_margin = 20;
  CHECK(kernel_seconds(gpu, planned, 20) / kernel_seconds(gpu, fits) == Approx(1.25).epsilon(1e-9));
  CHECK(kernel_seconds(gpu, fits, 20) > kernel_seconds(gpu, planned, 20));
  // A chunk of rows keeps the margin and reads all of B.
  const Kernel chunk = gemm_rows(planned, planned.m / 4);
  CHECK(chunk.sm_margin == 20);
  CHECK(chunk.flops == Approx(planned.flops / 4));
  CHECK(chunk.bytes == Approx(2 * (planned.m / 4 * planned.k + planned.k * planned.n +
                                   planned.m / 4 * planned.n)));
}

TEST_CASE("beside collectives compute is never faster, HBM-bound kernels keep their time") {
  GpuProfile gpu = round_gpu();
  gpu.kernel_launch_s.value = 5e-6;
  gpu.gemm_tiles = {{128, 256}, {256, 128}, {128, 128}, {64, 64}};
  for (const double m : {512.0, 2048.0, 4096.0, 12288.0}) {
    for (const double n : {1024.0, 5120.0, 14336.0}) {
      const Kernel gemm = gemm_kernel(m, n, 4096, 2);
      double previous = kernel_seconds(gpu, gemm);
      for (const int held : {1, 8, 16, 24, 50, 99}) {
        const double t = kernel_seconds(gpu, gemm, held);
        CHECK(t >= previous);
        previous = t;
      }
    }
  }
  Kernel copy;
  copy.kind = KernelKind::memory_bound;
  copy.bytes = 9e9;
  CHECK(kernel_seconds(gpu, copy, 40) == kernel_seconds(gpu, copy));
}

TEST_CASE("beside a collective the power ceiling falls as SMs^(2/3): capped GEMMs lose less") {
  // A GEMM capped at 600 TFLOPS of an 800 TFLOPS uncapped rate. With 20 of 100 SMs held the 80
  // left could reach 640 uncapped; under the same power they clock up by 0.8^(-1/3), so the
  // ceiling is 600 x 0.8^(2/3) = 517: 1.16x as long, less than the 1.25x of the SMs' share.
  // With 50 held: 400 uncapped against a ceiling of 600 x 0.5^(2/3) = 378, which binds.
  GpuProfile gpu = round_gpu();
  gpu.gemm_sustained_flops_per_s.value = 600e12;
  const Kernel many = gemm_kernel(12800, 25600, 8192, 2);
  const double alone = kernel_seconds(gpu, many);
  CHECK(kernel_seconds(gpu, many, 20) / alone == Approx(std::pow(0.8, -2.0 / 3)));
  CHECK(kernel_seconds(gpu, many, 20) / alone < 1.25);
  CHECK(kernel_seconds(gpu, many, 50) / alone == Approx(std::pow(0.5, -2.0 / 3)));
  // Uncapped (no ceiling), the SMs' share alone decides.
  gpu.gemm_sustained_flops_per_s.value = 0;
  CHECK(kernel_seconds(gpu, many, 20) / kernel_seconds(gpu, many) == Approx(1.25));
}

TEST_CASE("collectives hold comm_sms SMs each, leaving compute at least one") {
  GpuProfile gpu = round_gpu();
  gpu.comm_sms.value = 24;
  CHECK(comm_sms_held(gpu, 0) == 0);
  CHECK(comm_sms_held(gpu, 1) == 24);
  CHECK(comm_sms_held(gpu, 3) == 72);
  CHECK(comm_sms_held(gpu, 5) == 99);
  gpu.comm_sms.value = 0;
  CHECK(comm_sms_held(gpu, 3) == 0);
}

TEST_CASE("a sliding-window attention kernel amortises its fixed work over the keys it meets") {
  // fa2 forward at 0.5 of a 1e15 peak, 256 keys' worth of fixed work per query tile under a
  // causal mask. Causal over 8,192 tokens: a query meets 4,096 keys on average, efficiency
  // 0.5 x 4,096 / 4,352. A window of 1,024: 1,024 - 1,024^2 / (2 x 8,192) = 960 keys, 0.5 x
  // 960 / 1,216, so the same FLOPs take longer; the window's own FLOPs (960 / 4,096 of the
  // causal pass's) take less time than the causal pass, more with a wider window.
  GpuProfile gpu = round_gpu();
  gpu.attention[AttentionKernel::fa2].fwd.causal_overhead.value = 256;
  gpu.attention_default = AttentionKernel::fa2;
  Kernel causal;
  causal.kind = KernelKind::attention;
  causal.causal = true;
  causal.seq = 8192;
  causal.flops = 1e12;
  CHECK(attention_efficiency(gpu, causal) == Approx(0.5 * 4096 / 4352));
  Kernel local = causal;
  local.window = 1024;
  CHECK(attention_efficiency(gpu, local) == Approx(0.5 * 960 / 1216));
  double previous_s = 0;
  for (const double window : {128.0, 512.0, 1024.0, 4096.0}) {
    CAPTURE(window);
    local.window = window;
    local.flops = causal.flops * mean_causal_keys(8192, window) / 4096;
    const double seconds = kernel_seconds(gpu, local);
    CHECK(seconds > previous_s);
    CHECK(seconds < kernel_seconds(gpu, causal));
    previous_s = seconds;
  }
  // A window as long as the sequence is the causal pass.
  local.window = 8192;
  local.flops = causal.flops;
  CHECK(kernel_seconds(gpu, local) == kernel_seconds(gpu, causal));
}

TEST_CASE("a grouped GEMM schedules all its problems' tiles as one set of waves") {
  // Eight problems of 384 x 256 x 4,096 on 100 SMs with 128 x 256 tiles: 3 tiles each, so one
  // alone runs a wave 3% full, at 1e15 x 0.8 x 0.03; grouped, their 24 tiles share one wave
  // (24%): all eight take the time of one, where one after another take eight times it. (HBM
  // at 1e15 B/s keeps every GEMM here compute-bound.)
  GpuProfile gpu = round_gpu();
  gpu.kernel_launch_s.value = 2e-6;
  gpu.hbm_bytes_per_s.value = 1e15;
  const Kernel one = gemm_kernel(384, 256, 4096, 2);
  const double one_s = 2.0 * 384 * 256 * 4096 / (1e15 * 0.8 * 0.03) + 2e-6;
  CHECK(kernel_seconds(gpu, one) == Approx(one_s));
  const Kernel eight = grouped(one, 8);
  CHECK(eight.flops == 8 * one.flops);
  CHECK(eight.bytes == 8 * one.bytes);
  CHECK(kernel_seconds(gpu, eight) == Approx(one_s));
  // 40 problems: 120 tiles, two waves 60% full on average: 40 / (0.8 x 0.6) problems' time.
  CHECK(kernel_seconds(gpu, grouped(one, 40)) ==
        Approx(40 * 2.0 * 384 * 256 * 4096 / (1e15 * 0.8 * 0.6) + 2e-6));
  // A memory-bound kernel grouped is one pass over all the bytes.
  Kernel copy;
  copy.bytes = 1e9;
  CHECK(kernel_seconds(gpu, grouped(copy, 4)) == Approx(4e9 / 0.9e15 + 2e-6));
}
