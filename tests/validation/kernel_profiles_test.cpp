// The shipped GPU profiles' kernel entries are what `fleetsim calibrate --kernels` fits to the
// shipped inputs (calibration/microbench/<profile>/): regenerated, they match bit for bit.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "calibration/kernel_cost.hpp"
#include "calibration/kernel_fit.hpp"
#include "calibration/microbench.hpp"
#include "calibration/profile_file.hpp"
#include "sim/scenario/scenario.hpp"

using namespace fleetsim;

TEST_CASE("every shipped profile with microbenchmark inputs is its fit, bit for bit") {
  const std::filesystem::path source = FLEETSIM_SOURCE_DIR;
  const DataPaths data{source};
  int profiles = 0;
  for (const auto& entry : std::filesystem::directory_iterator(source / "calibration/microbench")) {
    if (!entry.is_directory()) continue;
    const std::string name = entry.path().filename().string();
    INFO(name);
    const std::filesystem::path file = gpu_profile_file(data, name);
    std::ifstream in(file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::vector<MicrobenchFile> inputs = read_microbench_dir(entry.path());
    const KernelFit fit = fit_kernels(load_gpu_profile(data, name), inputs);
    std::string refitted = text;
    for (const auto& [key, calibrated] : kernel_profile_entries(fit)) {
      refitted = with_profile_entry(refitted, file.string(), key, calibrated);
    }
    CHECK(refitted == text);
    ++profiles;
  }
  CHECK(profiles == 9);  // h100-sxm, h100-sxm-96gb, h200, b200, gb200, mi300x, mi325x, mi355x,
                         // a100-sxm
}

TEST_CASE("the H200's GEMM entries are the H100 SXM's fit, which they are extrapolated from") {
  // The same GH100 compute at 700 W: h200.yaml copies h100-sxm's fitted GEMM entries, and must
  // follow when that fit changes.
  const DataPaths data{FLEETSIM_SOURCE_DIR};
  const GpuProfile h100 = load_gpu_profile(data, "h100-sxm");
  const GpuProfile h200 = load_gpu_profile(data, "h200");
  CHECK(h200.gemm_efficiency.value == h100.gemm_efficiency.value);
  CHECK(h200.gemm_k_overhead.value == h100.gemm_k_overhead.value);
  CHECK(h200.kernel_launch_s.value == h100.kernel_launch_s.value);
  CHECK(h200.gemm_sustained_flops_per_s.value == h100.gemm_sustained_flops_per_s.value);
  CHECK(h200.sustained_clock.value == h100.sustained_clock.value);
  // The H100 PCIe's attention entries are the SXM part's short-run ones: so is its clock share.
  CHECK(load_gpu_profile(data, "h100-pcie").sustained_clock.value == h100.sustained_clock.value);
  CHECK(h200.gemm_tiles == h100.gemm_tiles);
  CHECK_THAT(h200.gemm_efficiency.provenance, Catch::StartsWith("extrapolated: "));
}

TEST_CASE("B300 and GB300 kernel entries are B200's and GB200's fits at the measured ratios") {
  // The reference set measures B300 only by mamf-finder's best BF16 and FP8 rates, the tool
  // that measured B200 (published.yaml kernels.mamf_bf16, mamf_fp8_e4m3), and GB300 not at all:
  // b300.yaml scales b200's fitted sustained rates by those ratios (written to three decimals)
  // and copies the rest of its kernel fit, gb300.yaml does the same to gb200's; both must
  // follow when those fits change.
  const DataPaths data{FLEETSIM_SOURCE_DIR};
  for (const auto& [parent, child] : {std::pair{"b200", "b300"}, std::pair{"gb200", "gb300"}}) {
    CAPTURE(child);
    const GpuProfile measured = load_gpu_profile(data, parent);
    const GpuProfile scaled = load_gpu_profile(data, child);
    CHECK(scaled.gemm_sustained_flops_per_s.value ==
          Approx(measured.gemm_sustained_flops_per_s.value * 1769.0 / 1745.0).epsilon(1e-6));
    REQUIRE(measured.fp8);
    REQUIRE(scaled.fp8);
    CHECK(scaled.fp8->gemm_sustained_flops_per_s.value ==
          Approx(measured.fp8->gemm_sustained_flops_per_s.value * 3353.3 / 3432.5).epsilon(1e-6));
    CHECK(scaled.fp8->gemm_efficiency.value == measured.fp8->gemm_efficiency.value);
    CHECK(scaled.gemm_efficiency.value == measured.gemm_efficiency.value);
    CHECK(scaled.gemm_k_overhead.value == measured.gemm_k_overhead.value);
    CHECK(scaled.kernel_launch_s.value == measured.kernel_launch_s.value);
    CHECK(scaled.sustained_clock.value == measured.sustained_clock.value);
    CHECK(scaled.gemm_tiles == measured.gemm_tiles);
    CHECK_THAT(scaled.gemm_sustained_flops_per_s.provenance, Catch::StartsWith("extrapolated: "));
  }
}

TEST_CASE("a variant of a GPU is its parent's profile but for its memory and power limit") {
  // The same die with other memory: a100-sxm-40gb (GA100 at 400 W, HBM2) copies a100-sxm, every
  // entry but the memory's capacity and bandwidth, and must follow when its parent's fit
  // changes. h100-sxm-96gb (GH100 at 500 W, HBM2e) copies h100-sxm likewise but for its lower
  // power limit: its own sustained GEMM rate, fitted to GEMMs at 500 W (lower than the parent's;
  // the FP16 peak its rows are read against, the BF16 one), and its attention efficiencies and
  // FP8 GEMM rate the parent's at the share its BF16 GEMMs keep, each sigma the parent's and the
  // share's 7.2% together (to the decimals written).
  struct Variant {
    const char* name;
    const char* parent;
    double capacity_bytes;   // what the variant's source gives
    double bandwidth_ratio;  // its peak over the parent's
    bool own_sustained;      // fitted at its own power limit
  };
  const Variant variants[] = {
      {"a100-sxm-40gb", "a100-sxm", 42405855232.0, 1555.0 / 2039.0, false},  // deviceQuery
      {"h100-sxm-96gb", "h100-sxm", 96e9, 2400.0 / 3350.0, true},  // torchtitan's hardware note
  };
  const DataPaths data{FLEETSIM_SOURCE_DIR};
  for (const Variant& v : variants) {
    INFO(v.name);
    const GpuProfile parent = load_gpu_profile(data, v.parent);
    GpuProfile variant = load_gpu_profile(data, v.name);
    CHECK(variant.hbm_capacity_bytes.value == v.capacity_bytes);
    CHECK(variant.hbm_bytes_per_s.value / parent.hbm_bytes_per_s.value ==
          Approx(v.bandwidth_ratio));
    variant.name = parent.name;
    variant.description = parent.description;
    variant.hbm_capacity_bytes = parent.hbm_capacity_bytes;
    variant.hbm_bytes_per_s = parent.hbm_bytes_per_s;
    if (v.own_sustained) {
      CHECK(variant.gemm_sustained_flops_per_s.value < parent.gemm_sustained_flops_per_s.value);
      REQUIRE(variant.dense_fp16_flops_per_s);
      CHECK(variant.dense_fp16_flops_per_s->value == parent.dense_bf16_flops_per_s.value);
      const double share =
          variant.gemm_sustained_flops_per_s.value / parent.gemm_sustained_flops_per_s.value;
      // The share's relative sigma: its one row's 5% and the 700 W ceiling's, the parent's
      // gemm_efficiency sigma over its value.
      const double kShareSigma =
          std::hypot(0.05, parent.gemm_efficiency.sigma / parent.gemm_efficiency.value);
      CHECK(share == Approx(623.2 / 819.9).epsilon(1e-3));  // the profile's provenance
      for (auto& [kernel, rates] : variant.attention) {
        INFO(attention_kernel_name(kernel));
        const AttentionRates& own = parent.attention.at(kernel);
        for (auto [pass, parent_pass] : {std::pair{&rates.fwd, &own.fwd}, {&rates.bwd, &own.bwd}}) {
          CHECK(pass->efficiency.value ==
                Approx(parent_pass->efficiency.value * share).margin(6e-4));
          CHECK(pass->efficiency.sigma ==
                Approx(pass->efficiency.value *
                       std::hypot(parent_pass->efficiency.sigma / parent_pass->efficiency.value,
                                  kShareSigma))
                    .epsilon(1e-2));
          CHECK_THAT(pass->efficiency.provenance, Catch::StartsWith("extrapolated: "));
          pass->efficiency = parent_pass->efficiency;
        }
      }
      REQUIRE(variant.fp8);
      CHECK(variant.fp8->gemm_sustained_flops_per_s.value ==
            Approx(parent.fp8->gemm_sustained_flops_per_s.value * share).epsilon(1e-3));
      const Calibrated& own_fp8 = parent.fp8->gemm_sustained_flops_per_s;
      CHECK(variant.fp8->gemm_sustained_flops_per_s.sigma ==
            Approx(variant.fp8->gemm_sustained_flops_per_s.value *
                   std::hypot(own_fp8.sigma / own_fp8.value, kShareSigma))
                .epsilon(1e-3));
      variant.fp8->gemm_sustained_flops_per_s = parent.fp8->gemm_sustained_flops_per_s;
      variant.gemm_sustained_flops_per_s = parent.gemm_sustained_flops_per_s;
      variant.dense_fp16_flops_per_s = parent.dense_fp16_flops_per_s;
      // The parent's clock share, extrapolated (fitted on the parent's files, not its own).
      CHECK(variant.sustained_clock.value == parent.sustained_clock.value);
      CHECK(variant.sustained_clock.sigma == parent.sustained_clock.sigma);
      CHECK_THAT(variant.sustained_clock.provenance, Catch::StartsWith("extrapolated: "));
      variant.sustained_clock = parent.sustained_clock;
    }
    CHECK(variant == parent);
  }
}

TEST_CASE("an H100 GEMM of one full wave beside an NCCL all-gather takes about twice as long") {
  // Published (NVIDIA developer forum thread 337991, H100): a GEMM of exactly 132 thread
  // blocks at about 80% MFU alone drops to about 47% beside an all-gather whose 24 blocks take
  // SMs, pushing part of the GEMM into a second wave: 1.70x as long. Neither the shape nor the
  // message size is given; a 132-tile shape (1536 x 2816 in 128 x 256 tiles, K 8192) on the
  // shipped profile, held to 10%: the model gives 1.85x. Alone the GEMM runs at the profile's
  // sustained ceiling (74% of the peak, less its fixed time: 70%), where the forum's profile
  // saw 80%, above what long runs hold (calibration/microbench/h100-sxm/gemm-gpufryer-bf16.csv).
  const DataPaths data{FLEETSIM_SOURCE_DIR};
  const GpuProfile h100 = load_gpu_profile(data, "h100-sxm");
  const Kernel gemm = gemm_kernel(1536, 2816, 8192, 2);
  const double alone = kernel_seconds(h100, gemm);
  const double beside = kernel_seconds(h100, gemm, comm_sms_held(h100, 1));
  CHECK(comm_sms_held(h100, 1) == 24);
  CHECK(alone ==
        Approx(gemm.flops / h100.gemm_sustained_flops_per_s.value + h100.kernel_launch_s.value)
            .epsilon(1e-9));
  CHECK(beside / alone == Approx(0.80 / 0.47).epsilon(0.10));
}

TEST_CASE("an A100 elementwise kernel beside an all-gather: HBM explains part of its slowdown") {
  // Published (NVIDIA/nccl issue 1428, A100 SXM4 80GB, Nsight of GPT training): an elementwise
  // kernel takes 0.05 ms beside an all-gather, 0.02 ms alone; sjeaugey: the 300 GB/s NVLink
  // traffic needs 2x to 3x of it in HBM. On the shipped a100-sxm profile a copy that takes 0.02
  // ms alone, beside an all-gather at NVLink's usable rate, takes 1.6x as long: more than
  // nothing, less than the 2.5x measured (the L2 and the SMs the two share are not modelled
  // for memory-bound kernels).
  const DataPaths data{FLEETSIM_SOURCE_DIR};
  const GpuProfile a100 = load_gpu_profile(data, "a100-sxm");
  const double sustained = a100.hbm_bytes_per_s.value * a100.memory_efficiency.value;
  Kernel copy;
  copy.bytes = (20e-6 - a100.kernel_launch_s.value) * sustained;
  REQUIRE(kernel_seconds(a100, copy) == Approx(20e-6));
  const double taken = comm_hbm_bytes_per_s(300e9 * a100.link_efficiency.at("nvlink").value);
  const double slowdown = kernel_seconds(a100, copy, 0, taken) / 20e-6;
  CHECK(slowdown > 1.4);
  CHECK(slowdown < 0.05 / 0.02);
}

TEST_CASE("a fit's rows by kind, precision and role, as the page and the CLI summarise them") {
  // On the shipped H100 SXM inputs: the gpu-fryer burn under sustained load beside the short
  // runs sets the sustained rate (nil error by construction), the 16-bit short runs are the
  // rows fitted, the single STREAM copy sets the memory efficiency, and the FP8 sweep under
  // sustained load is fitted with mamf-finder's best short-run shape only checked beside it.
  const std::string source = FLEETSIM_SOURCE_DIR;
  const std::vector<MicrobenchFile> files =
      read_microbench_dir(source + "/calibration/microbench/h100-sxm");
  const KernelFit fit = fit_kernels(load_gpu_profile(DataPaths{source}, "h100-sxm"), files);
  const std::vector<KernelFitPoint> sixteen = gemm_points(fit.points, false);
  const std::vector<KernelFitPoint> fp8 = gemm_points(fit.points, true);
  CHECK(points_of(fit.points, "gemm").size() == sixteen.size() + fp8.size());
  CHECK(points_in_role(sixteen, FitRole::sets).size() == 1);
  CHECK(std::abs(points_in_role(sixteen, FitRole::sets).front().error()) < 1e-9);
  CHECK(points_in_role(sixteen, FitRole::fitted).size() == 18);  // the profile's basis says 18
  CHECK(points_in_role(fp8, FitRole::fitted).size() == 9);
  REQUIRE(points_in_role(fp8, FitRole::checked).size() == 1);
  CHECK(points_in_role(fp8, FitRole::checked).front().file.ends_with("gemm-mamf-fp8.csv"));
  const std::vector<KernelFitPoint> memory = points_of(fit.points, "memory");
  REQUIRE(memory.size() == 1);
  CHECK(memory.front().role == FitRole::sets);
  CHECK(memory.front().dtype.empty());
  const std::vector<KernelFitPoint> attention = points_of(fit.points, "attention");
  CHECK(attention.size() == 41);
  CHECK(std::all_of(attention.begin(), attention.end(),
                    [](const KernelFitPoint& point) { return point.dtype == "bf16"; }));
  CHECK(points_of(fit.points, "overlap").empty());
}
