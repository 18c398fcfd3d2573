// A GPU calibration profile: the rates and efficiencies that turn FLOPs and bytes into time.
//
// Every number carries its provenance (measured: which benchmark, machine and date; published:
// which document; extrapolated: from what) and an uncertainty sigma in the same unit as the value.
// A wide sigma marks a number that only a spec sheet backs. Profiles are YAML files under
// calibration/profiles/, read by the scenario layer.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "calibration/collective_costs.hpp"

namespace fleetsim {

struct Calibrated {
  double value = 0;
  double sigma = 0;  // one standard deviation, same unit as value
  std::string provenance;
};

struct GpuProfile {
  std::string name;
  std::string description;
  int sm_count = 0;                       // streaming multiprocessors (wave quantisation)
  std::optional<int> compute_capability;  // NVIDIA's, times ten (90 for 9.0); absent on others
  Calibrated dense_bf16_flops_per_s;      // dense tensor-core peak, no sparsity
  Calibrated hbm_capacity_bytes;          // what the device reports as usable
  Calibrated hbm_bytes_per_s;             // spec peak
  Calibrated gemm_efficiency;             // best large-GEMM throughput / dense peak
  int gemm_tile_m = 128;                  // output tile of the GEMM kernels (wave quantisation)
  int gemm_tile_n = 256;
  Calibrated attention_efficiency;  // FlashAttention fwd+bwd throughput / dense peak
  Calibrated memory_efficiency;     // achieved / peak HBM bandwidth of streaming kernels
  Calibrated kernel_launch_s;       // fixed cost per kernel
  // Usable fraction of line rate per link kind ("nvlink", "xgmi", "pcie", "infiniband", ...):
  // for GPU and fabric links, NCCL's bus bandwidth over line rate.
  std::map<std::string, Calibrated> link_efficiency;
  // Usable fraction of NVLink line rate for NVLS (in-switch reduction) collectives; absent for
  // GPUs that cannot use it.
  std::optional<Calibrated> nvls_efficiency;
  // Usable fraction of GPU-to-GPU link (NVLink, xGMI) line rate for send/recv; absent: the
  // ring's link efficiency.
  std::optional<Calibrated> p2p_efficiency;
  // The collective library the GPU runs (NCCL, RCCL) and its cost model, from
  // calibration/collectives/<library>.yaml.
  CollectiveCosts collectives;
};

}  // namespace fleetsim
