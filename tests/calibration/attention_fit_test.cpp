#include <catch2/catch.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "calibration/kernel_cost.hpp"
#include "calibration/kernel_fit.hpp"
#include "calibration/microbench.hpp"
#include "common/temp_dir.hpp"

using namespace fleetsim;
using fleetsim::testing::TempDir;

namespace {

// A GPU of round numbers with one attention implementation and no fixed time.
GpuProfile round_gpu(AttentionRates rates) {
  GpuProfile gpu;
  gpu.name = "test";
  gpu.sm_count = 100;
  gpu.dense_bf16_flops_per_s.value = 1e15;
  gpu.hbm_bytes_per_s.value = 1e12;
  gpu.memory_efficiency.value = 0.9;
  gpu.kernel_launch_s.value = 0;
  gpu.attention[AttentionKernel::cudnn] = rates;
  gpu.attention_default = AttentionKernel::cudnn;
  return gpu;
}

AttentionPass pass(double efficiency, double seq_overhead, double causal_overhead) {
  AttentionPass p;
  p.efficiency.value = efficiency;
  p.seq_overhead.value = seq_overhead;
  p.causal_overhead.value = causal_overhead;
  return p;
}

Kernel attention(double seq, bool causal, bool backward, double flops) {
  Kernel k;
  k.kind = KernelKind::attention;
  k.seq = seq;
  k.causal = causal;
  k.backward = backward;
  k.flops = flops;
  return k;
}

}  // namespace

TEST_CASE("attention runs at efficiency x keys / (keys + overhead), half the keys when causal") {
  const GpuProfile gpu = round_gpu({pass(0.7, 256, 512), pass(0.5, 512, 1024)});
  // Full mask, 4096 keys, overhead 256: 0.7 x 4096 / 4352. 1 TFLOP takes 1e12 / (1e15 x that).
  CHECK(kernel_seconds(gpu, attention(4096, false, false, 1e12)) ==
        Approx(1e12 / (1e15 * 0.7 * 4096 / 4352)));
  // Causal: each query tile meets 2048 keys on average, overhead 512: 0.7 x 2048 / 2560 = 0.56.
  CHECK(attention_efficiency(gpu, attention(4096, true, false, 1)) == Approx(0.56));
  // The backward pass has its own entries: 0.5 x 2048 / 3072.
  CHECK(attention_efficiency(gpu, attention(4096, true, true, 1)) == Approx(0.5 * 2048 / 3072));
  // Longer sequences amortise the overhead: the rate rises with the sequence toward the
  // efficiency, never past it.
  double previous = 0;
  for (double seq : {512.0, 1024.0, 2048.0, 8192.0, 65536.0}) {
    const double e = attention_efficiency(gpu, attention(seq, true, false, 1));
    CHECK(e > previous);
    CHECK(e < 0.7);
    previous = e;
  }
  // A kernel naming an implementation the profile lacks is an error, not a default.
  Kernel fa3 = attention(4096, true, false, 1);
  fa3.attention = AttentionKernel::fa3;
  CHECK_THROWS_WITH(kernel_seconds(gpu, fa3), Catch::Contains("has no fa3 attention"));
}

TEST_CASE("attention fit: rows the model generates give back its parameters") {
  // Rows at 1k-16k keys, both masks, both passes, from known entries and a 5 us fixed time;
  // the fit starts far from them.
  GpuProfile truth = round_gpu({pass(0.7, 250, 480), pass(0.55, 300, 600)});
  truth.kernel_launch_s.value = 5e-6;
  std::string csv =
      "# provenance: measured\nimpl,dtype,batch,heads,seq,head_dim,causal,direction,time_us\n";
  for (const char* direction : {"fwd", "bwd"}) {
    for (const bool causal : {false, true}) {
      for (const double seq : {1024.0, 2048.0, 4096.0, 8192.0, 16384.0}) {
        const bool backward = std::string(direction) == "bwd";
        const double flops =
            4.0 * 1 * 64 * seq * seq * 128 / (causal ? 2 : 1) * (backward ? 2.5 : 1.0);
        const double us = 1e6 * kernel_seconds(truth, attention(seq, causal, backward, flops));
        char row[160];
        std::snprintf(row, sizeof row, "cudnn,bf16,1,64,%.0f,128,%s,%s,%.9f\n", seq,
                      causal ? "true" : "false", direction, us);
        csv += row;
      }
    }
  }
  TempDir dir;
  const std::vector<MicrobenchFile> files{read_microbench_file(dir.write("attention.csv", csv))};
  GpuProfile start = round_gpu({pass(0.4, 50, 50), pass(0.4, 50, 50)});
  start.kernel_launch_s.value = 5e-6;
  const KernelFit fit = fit_kernels(start, files);
  const AttentionRates& got = fit.profile.attention.at(AttentionKernel::cudnn);
  const AttentionRates& want = truth.attention.at(AttentionKernel::cudnn);
  for (const AttentionEntryKey& key : kAttentionEntries) {
    INFO(key.pass << "." << key.field);
    CHECK((got.*key.pass_member.*key.member).value ==
          Approx((want.*key.pass_member.*key.member).value).epsilon(1e-4));
  }
  // All six fitted, each with a sigma (tiny: the rows are exact), every row matched.
  REQUIRE(fit.parameters.size() == 6);
  for (const KernelFitParameter& p : fit.parameters) {
    CHECK(p.key.rfind("attention.cudnn.", 0) == 0);
    CHECK(p.sigma >= 0);
    CHECK(p.sigma < 1e-3 * std::max(1.0, p.value));
  }
  for (const KernelFitPoint& point : fit.points) CHECK(std::abs(point.error()) < 1e-5);
}

TEST_CASE("attention fit: fwd_bwd rows alone scale both passes and keep the overheads") {
  // One forward-and-backward row at 8192 keys, full mask: the passes keep their 0.8 ratio and
  // overheads, and their sum matches the row.
  GpuProfile start = round_gpu({pass(0.5, 200, 400), pass(0.4, 300, 600)});
  TempDir dir;
  const std::vector<MicrobenchFile> files{
      read_microbench_file(dir.write("attention.csv",
                                     "# provenance: published\nimpl,dtype,batch,heads,seq,"
                                     "head_dim,causal,direction,tflops\n"
                                     "cudnn,bf16,2,16,8192,128,false,fwd_bwd,500\n"))};
  const KernelFit fit = fit_kernels(start, files);
  const AttentionRates& got = fit.profile.attention.at(AttentionKernel::cudnn);
  CHECK(got.bwd.efficiency.value / got.fwd.efficiency.value == Approx(0.8));
  CHECK(got.fwd.seq_overhead.value == 200);
  CHECK(got.bwd.causal_overhead.value == 600);
  REQUIRE(fit.points.size() == 1);
  CHECK(std::abs(fit.points[0].error()) < 1e-6);
  // Two entries, both with the one-row sigma: 5% of the value.
  REQUIRE(fit.parameters.size() == 2);
  CHECK(fit.parameters[0].sigma == Approx(0.05 * got.fwd.efficiency.value));
}

TEST_CASE("attention under sustained load runs at sustained_clock of its short-run rate") {
  // The entries are short-run rates: at a sustained clock of 0.85 a compute-bound pass takes
  // 1 / 0.85 as long. Full mask, 4096 keys, overhead 256: 1 TFLOP at 1e15 x 0.7 x 4096 / 4352
  // x 0.85.
  GpuProfile gpu = round_gpu({pass(0.7, 256, 512), pass(0.5, 512, 1024)});
  const Kernel kernel = attention(4096, false, false, 1e12);
  const double boost = kernel_seconds(gpu, kernel);
  gpu.sustained_clock.value = 0.85;
  CHECK(kernel_seconds(gpu, kernel) == Approx(1e12 / (1e15 * 0.7 * 4096 / 4352 * 0.85)));
  CHECK(kernel_seconds(gpu, kernel) / boost == Approx(1 / 0.85));
}

TEST_CASE("attention fit: short-run rows give short-run entries, sustained ones are read up") {
  // One forward row at 8192 keys, full mask, 500 TFLOPS. Measured in a short run it gives the
  // same entries whatever the profile's sustained clock (the clock applies to the step, not to
  // the benchmark); measured under sustained load (`# load: sustained`) at a clock of 0.8, the
  // short-run rate it tells is 500 / 0.8.
  const std::string rows =
      "impl,dtype,batch,heads,seq,head_dim,causal,direction,tflops\n"
      "cudnn,bf16,2,16,8192,128,false,fwd,500\n";
  TempDir dir;
  const std::vector<MicrobenchFile> short_run{
      read_microbench_file(dir.write("short.csv", "# provenance: published\n" + rows))};
  const std::vector<MicrobenchFile> sustained{read_microbench_file(
      dir.write("long.csv", "# provenance: published\n# load: sustained\n" + rows))};
  GpuProfile start = round_gpu({pass(0.5, 200, 400), pass(0.4, 300, 600)});
  const double at_boost = fit_kernels(start, short_run)
                              .profile.attention.at(AttentionKernel::cudnn)
                              .fwd.efficiency.value;
  start.sustained_clock.value = 0.8;
  const KernelFit fit = fit_kernels(start, short_run);
  CHECK(fit.profile.attention.at(AttentionKernel::cudnn).fwd.efficiency.value ==
        Approx(at_boost).epsilon(1e-9));
  REQUIRE(fit.points.size() == 1);
  CHECK(std::abs(fit.points[0].error()) < 1e-6);
  const KernelFit read_up = fit_kernels(start, sustained);
  CHECK(read_up.profile.attention.at(AttentionKernel::cudnn).fwd.efficiency.value ==
        Approx(at_boost / 0.8).epsilon(1e-6));
}
