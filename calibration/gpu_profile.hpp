// A GPU calibration profile: the rates and efficiencies that turn FLOPs and bytes into time.
//
// Every number carries its provenance (measured: which benchmark, machine and date; published:
// which document; extrapolated: from what) and an uncertainty sigma in the same unit as the value.
// A wide sigma marks a number that only a spec sheet backs. Profiles are YAML files under
// calibration/profiles/, read by the scenario layer.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "calibration/collective_costs.hpp"

namespace fleetsim {

struct Calibrated {
  double value = 0;
  double sigma = 0;  // one standard deviation, same unit as value
  std::string provenance;
  bool operator==(const Calibrated&) const = default;
};

struct GemmTile {
  int m = 128;  // rows of the output each thread block computes
  int n = 256;  // columns
  bool operator==(const GemmTile&) const = default;
};

// FP8 GEMMs (E4M3 and E5M2 inputs, as Transformer Engine runs a layer's projections on Hopper,
// Blackwell and MI300X): their own peak and GEMM parameters, fitted from FP8 rows as the BF16
// ones are from BF16 rows (kernel_cost.hpp); the tile shapes are the BF16 ones.
struct Fp8Gemm {
  Calibrated dense_flops_per_s;  // dense FP8 tensor-core peak, no sparsity
  Calibrated gemm_efficiency;
  Calibrated gemm_sustained_flops_per_s;
  Calibrated gemm_k_overhead;
  Calibrated kernel_launch_s;  // an FP8 GEMM's fixed time
  bool operator==(const Fp8Gemm&) const = default;
};

// Fused attention kernels (FlashAttention's algorithm: tiles of queries against tiles of keys,
// the scores never written to HBM), each implementation as a library ships it.
enum class AttentionKernel {
  fa2,    // FlashAttention-2: the flash-attn package and PyTorch's SDPA flash backend
  fa3,    // FlashAttention-3 (Hopper)
  cudnn,  // cuDNN fused attention, as Transformer Engine runs it on Hopper and Blackwell
  ck,     // AMD's Composable Kernel / aiter FMHA (MI300X)
};
inline constexpr std::array<std::pair<AttentionKernel, const char*>, 4> kAttentionKernels = {{
    {AttentionKernel::fa2, "fa2"},
    {AttentionKernel::fa3, "fa3"},
    {AttentionKernel::cudnn, "cudnn"},
    {AttentionKernel::ck, "ck"},
}};
inline const char* attention_kernel_name(AttentionKernel kernel) {
  for (const auto& [k, name] : kAttentionKernels) {
    if (k == kernel) return name;
  }
  return "?";
}
inline std::optional<AttentionKernel> attention_kernel_named(std::string_view name) {
  for (const auto& [k, kernel_name] : kAttentionKernels) {
    if (name == kernel_name) return k;
  }
  return std::nullopt;
}

// One pass (forward or backward) of one attention implementation. A query tile runs through
// the key tiles it meets (all s of them, or s / 2 on average under a causal mask) plus a fixed
// part worth `seq_overhead` keys (loading Q, writing O or dQ, the softmax's bookkeeping; under
// a causal mask `causal_overhead`, which holds the masked diagonal tiles as well), so at s keys
// met the pass runs at peak x efficiency x s / (s + overhead) (kernel_cost.hpp).
struct AttentionPass {
  Calibrated efficiency;       // the rate at long sequences / dense BF16 peak
  Calibrated seq_overhead;     // keys' worth of fixed work per query tile, full mask
  Calibrated causal_overhead;  // the same under a causal mask
  bool operator==(const AttentionPass&) const = default;
};
struct AttentionRates {
  AttentionPass fwd, bwd;
  bool operator==(const AttentionRates&) const = default;
};

struct GpuProfile {
  std::string name;
  std::string description;
  int sm_count = 0;                       // streaming multiprocessors (wave quantisation)
  std::optional<int> compute_capability;  // NVIDIA's, times ten (90 for 9.0); absent on others
  Calibrated dense_bf16_flops_per_s;      // dense tensor-core peak, no sparsity
  // The dense FP16 tensor-core peak, where stated: equal to the BF16 one (A100, H100, MI300X),
  // FP16 GEMM and attention measurements count as BF16 ones (the same pipeline at the same
  // rate); the model itself runs BF16.
  std::optional<Calibrated> dense_fp16_flops_per_s;
  Calibrated hbm_capacity_bytes;  // what the device reports as usable
  Calibrated hbm_bytes_per_s;     // spec peak
  // GEMM throughput / dense peak with every SM busy and K long (kernel_cost.hpp).
  Calibrated gemm_efficiency;
  // The dense rate long GEMMs sustain under the GPU's power limit: a ceiling on a GEMM's rate
  // whatever its shape (clocks drop below boost when every SM computes for milliseconds).
  Calibrated gemm_sustained_flops_per_s;
  // The share of its short-run rate that tensor-core work keeps once back-to-back kernels have
  // settled the clocks at the power limit, as a training step's do: a benchmark of a hundred
  // iterations or so runs at boost clocks (flashinfer PR 2899 on B200: FA4 attention 1450 ->
  // 1237 TFLOPS as the SM clock fell 1965 -> 1580 MHz). Attention entries, fitted to short runs,
  // run at this share of their rate; a GEMM ceiling fitted to short runs alone is this share of
  // theirs (kernel_fit.hpp). A profile file states it; one built in code starts at 1, no
  // clock lost.
  Calibrated sustained_clock{1, 0, ""};
  // K elements' worth of time each output tile spends outside its main loop (prologue,
  // epilogue): a GEMM of depth K runs at K / (K + gemm_k_overhead) of its long-K rate.
  Calibrated gemm_k_overhead;
  // The output tiles the GEMM library chooses among; per shape, the one whose waves leave the
  // fewest SMs idle (kernel_cost.hpp).
  std::vector<GemmTile> gemm_tiles{{128, 256}};
  // The attention implementations calibrated for this GPU, and the one a scenario's
  // `attention: flash` runs (what PyTorch's SDPA and the flash-attn package run here).
  std::map<AttentionKernel, AttentionRates> attention;
  AttentionKernel attention_default = AttentionKernel::fa2;
  Calibrated memory_efficiency;  // achieved / peak HBM bandwidth of streaming kernels
  Calibrated kernel_launch_s;    // fixed GPU time of every kernel (launch, ramp, tail)
  // The SMs a communication kernel holds while it runs beside compute on the same GPU: NCCL runs
  // one thread block per channel, each on an SM of its own that compute kernels cannot use, so
  // a kernel beside k collectives runs on sm_count - k x comm_sms SMs (kernel_cost.hpp). From
  // the library's channel count, or fitted to the overlap microbenchmark.
  Calibrated comm_sms;
  // Usable fraction of line rate per link kind ("nvlink", "xgmi", "pcie", "infiniband", ...):
  // for GPU and fabric links, NCCL's bus bandwidth over line rate.
  std::map<std::string, Calibrated> link_efficiency;
  // NVLS (in-switch reduction) all-reduce bus bandwidth over twice the NVLink line rate, which
  // the switch's reduction holds whatever the GPU count (sim/collectives/collectives.hpp);
  // absent for GPUs that cannot use it.
  std::optional<Calibrated> nvls_efficiency;
  // Usable fraction of GPU-to-GPU link (NVLink, xGMI) line rate for send/recv; absent: the
  // ring's link efficiency.
  std::optional<Calibrated> p2p_efficiency;
  // The collective library the GPU runs (NCCL, RCCL) and its cost model, from
  // calibration/collectives/<library>.yaml.
  CollectiveCosts collectives;
  // Absent: no FP8 tensor cores (A100), or none calibrated.
  std::optional<Fp8Gemm> fp8;
  bool operator==(const GpuProfile&) const = default;
};

// Whether the GPU's FP8 GEMMs read an operand in either layout: NVIDIA compute capability 10.x
// and 11.x, and from 13 (Transformer Engine's is_non_tn_fp8_gemm_supported, utils.py). Hopper
// and compute capability 12 take FP8 operands in the TN layout only.
inline bool fp8_gemm_any_layout(const GpuProfile& gpu) {
  const int capability = gpu.compute_capability.value_or(0);
  return (capability >= 100 && capability < 120) || capability >= 130;
}

// What an entry's value and sigma measure: the unit a profile file writes them in follows (a
// FLOP rate like 989TFLOPS, a size like 80GB, a bandwidth like 3.35TB/s, a duration like 4us;
// fractions and counts are plain numbers).
enum class ProfileQuantity { flop_rate, size, bandwidth, fraction, count, duration };

// An attention entry's profile key ("attention.fa2.fwd.efficiency", ...) and what it measures.
struct AttentionEntryKey {
  const char* pass;   // "fwd", "bwd"
  const char* field;  // "efficiency", "seq_overhead", "causal_overhead"
  AttentionPass AttentionRates::*pass_member;
  Calibrated AttentionPass::*member;
  ProfileQuantity quantity;  // efficiencies are fractions, overheads counts of keys
};
inline constexpr std::array<AttentionEntryKey, 6> kAttentionEntries = {{
    {"fwd", "efficiency", &AttentionRates::fwd, &AttentionPass::efficiency,
     ProfileQuantity::fraction},
    {"fwd", "seq_overhead", &AttentionRates::fwd, &AttentionPass::seq_overhead,
     ProfileQuantity::count},
    {"fwd", "causal_overhead", &AttentionRates::fwd, &AttentionPass::causal_overhead,
     ProfileQuantity::count},
    {"bwd", "efficiency", &AttentionRates::bwd, &AttentionPass::efficiency,
     ProfileQuantity::fraction},
    {"bwd", "seq_overhead", &AttentionRates::bwd, &AttentionPass::seq_overhead,
     ProfileQuantity::count},
    {"bwd", "causal_overhead", &AttentionRates::bwd, &AttentionPass::causal_overhead,
     ProfileQuantity::count},
}};

// The implementations a profile calibrates, by name: "fa2, cudnn".
inline std::string attention_kernels_of(const GpuProfile& profile) {
  std::string names;
  for (const auto& [kernel, rates] : profile.attention) {
    names += (names.empty() ? "" : ", ") + std::string(attention_kernel_name(kernel));
  }
  return names;
}

// A profile's single entries by their file keys, with what each measures; every profile has
// them but dense_fp16 (where a source states it), nvls_efficiency (GPUs behind an NVLS-capable
// switch) and p2p_efficiency (where a send/recv benchmark calibrates it). FP8's are kFp8Entries,
// links' link_efficiency (fractions).
struct ProfileEntryKey {
  const char* key;
  ProfileQuantity quantity;
  bool required = true;
};
inline constexpr std::array<ProfileEntryKey, 13> kProfileEntryKeys = {{
    {"dense_bf16", ProfileQuantity::flop_rate},
    {"dense_fp16", ProfileQuantity::flop_rate, false},
    {"hbm_capacity", ProfileQuantity::size},
    {"hbm_bandwidth", ProfileQuantity::bandwidth},
    {"gemm_efficiency", ProfileQuantity::fraction},
    {"gemm_sustained", ProfileQuantity::flop_rate},
    {"sustained_clock", ProfileQuantity::fraction},
    {"gemm_k_overhead", ProfileQuantity::count},
    {"memory_efficiency", ProfileQuantity::fraction},
    {"kernel_launch", ProfileQuantity::duration},
    {"comm_sms", ProfileQuantity::count},
    {"nvls_efficiency", ProfileQuantity::fraction, false},
    {"p2p_efficiency", ProfileQuantity::fraction, false},
}};

// The FP8 entries by their profile keys ("fp8.gemm_efficiency", ...), in the order a profile
// writes them.
struct Fp8EntryKey {
  const char* key;
  Calibrated Fp8Gemm::*member;
  ProfileQuantity quantity;
};
inline constexpr std::array<Fp8EntryKey, 5> kFp8Entries = {{
    {"fp8.dense", &Fp8Gemm::dense_flops_per_s, ProfileQuantity::flop_rate},
    {"fp8.gemm_efficiency", &Fp8Gemm::gemm_efficiency, ProfileQuantity::fraction},
    {"fp8.gemm_sustained", &Fp8Gemm::gemm_sustained_flops_per_s, ProfileQuantity::flop_rate},
    {"fp8.gemm_k_overhead", &Fp8Gemm::gemm_k_overhead, ProfileQuantity::count},
    {"fp8.kernel_launch", &Fp8Gemm::kernel_launch_s, ProfileQuantity::duration},
}};

// The entry a profile file names `key` ("dense_bf16", "hbm_bandwidth", "gemm_efficiency",
// "kernel_launch", "nvls_efficiency", "link_efficiency.<kind>", "fp8.gemm_efficiency", ...) in
// `profile` (const or not); null for a key it does not have.
template <typename Profile>
auto* find_profile_entry(Profile& profile, const std::string& key) {
  using Entry = std::remove_pointer_t<decltype(&profile.gemm_efficiency)>;
  const auto optional = [](auto& entry) -> Entry* { return entry ? &*entry : nullptr; };
  if (key == "dense_bf16") return &profile.dense_bf16_flops_per_s;
  if (key == "dense_fp16") return optional(profile.dense_fp16_flops_per_s);
  if (key == "hbm_capacity") return &profile.hbm_capacity_bytes;
  if (key == "hbm_bandwidth") return &profile.hbm_bytes_per_s;
  if (key == "gemm_efficiency") return &profile.gemm_efficiency;
  if (key == "gemm_sustained") return &profile.gemm_sustained_flops_per_s;
  if (key == "sustained_clock") return &profile.sustained_clock;
  if (key == "gemm_k_overhead") return &profile.gemm_k_overhead;
  if (key == "kernel_launch") return &profile.kernel_launch_s;
  if (key == "memory_efficiency") return &profile.memory_efficiency;
  if (key == "comm_sms") return &profile.comm_sms;
  if (key == "nvls_efficiency") return optional(profile.nvls_efficiency);
  if (key == "p2p_efficiency") return optional(profile.p2p_efficiency);
  for (const auto& [name, member, quantity] : kFp8Entries) {
    if (key == name) return profile.fp8 ? &((*profile.fp8).*member) : static_cast<Entry*>(nullptr);
  }
  const std::string attention = "attention.";
  if (key.rfind(attention, 0) == 0) {
    for (const auto& [kernel, name] : kAttentionKernels) {
      const std::string prefix = attention + name + ".";
      if (key.rfind(prefix, 0) != 0) continue;
      const auto rates = profile.attention.find(kernel);
      if (rates == profile.attention.end()) break;
      for (const AttentionEntryKey& entry : kAttentionEntries) {
        if (key == prefix + entry.pass + "." + entry.field) {
          return &(rates->second.*entry.pass_member.*entry.member);
        }
      }
    }
    return static_cast<Entry*>(nullptr);
  }
  const std::string links = "link_efficiency.";
  if (key.rfind(links, 0) == 0) {
    const auto found = profile.link_efficiency.find(key.substr(links.size()));
    if (found != profile.link_efficiency.end()) return &found->second;
  }
  return static_cast<Entry*>(nullptr);
}

// The entry a profile file names `key`, as loaded; nothing for a key it does not have.
inline std::optional<Calibrated> profile_entry(const GpuProfile& profile, const std::string& key) {
  const Calibrated* entry = find_profile_entry(profile, key);
  return entry ? std::optional(*entry) : std::nullopt;
}

}  // namespace fleetsim
