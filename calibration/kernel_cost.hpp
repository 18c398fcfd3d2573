// Kernel cost model: how long one kernel takes on one GPU, from its FLOPs, bytes and shape.
//
//   time = max(flops / (peak * eff_c(shape)), bytes / (hbm_bw * eff_m)) + launch
//
// eff_c for a GEMM (C[m,n] = A[m,k] B[k,n]) is the product of
//   * the profile's GEMM efficiency: the rate with every SM busy and K long;
//   * wave quantisation: the output is cut into tiles, one per SM at a time; when the tile
//     count is not a multiple of the SM count the last wave leaves SMs idle, and that fraction
//     is lost: wave = tiles / (ceil(tiles / SMs) * SMs). The library picks, per shape, the tile
//     (of the profile's list) with the best wave, as cuBLAS's heuristics pick a kernel;
//   * the K term K / (K + k0): each tile spends about k0 elements' worth of its main loop on
//     its prologue and epilogue, which a short K does not amortise;
// a grouped GEMM (G problems of one shape in one launch, as Transformer Engine's grouped GEMM
// runs a mixture of experts' experts) schedules all G problems' tiles as one set of waves and
// pays the fixed time once;
// and the GEMM's rate peak x eff_c is capped by the rate the GPU sustains under its power limit
// (gemm_sustained), which large GEMMs reach.
// `launch` is the fixed GPU time of a kernel. Fused attention runs, per implementation and
// pass, at peak x efficiency x keys / (keys + overhead) x sustained_clock, keys the sequence
// (half of it under a causal mask), overhead the keys' worth of fixed work per query tile
// (AttentionPass) and sustained_clock the share of a short run's rate that the clocks of
// sustained load keep (the attention entries are fitted to short runs);
// memory-bound kernels have no FLOP term. An FP8 GEMM runs on the profile's FP8
// entries (peak, efficiency, k0, sustained rate, fixed time) with the same tiles.
//
// Beside communication kernels, which hold SMs of their own (comm_sms each), a kernel runs on
// the SMs left, and on the HBM bandwidth the communication leaves: see
// kernel_seconds(gpu, kernel, sms_held, hbm_taken). Left out: kernels sized for fewer SMs
// (Transformer Engine's userbuffers overlap sets an SM target; persistent and stream-K GEMMs
// schedule their own tiles), the L2 the two share and the power the communication itself draws.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "calibration/gpu_profile.hpp"

namespace fleetsim {

enum class KernelKind { gemm, attention, memory_bound };

struct Kernel {
  // Its fields ordered by size, so that it packs without padding (a step's program holds one
  // in each of its compute tasks).
  double m = 0, n = 0, k = 0;  // GEMM shape (C[m,n] = A[m,k] B[k,n]); unused otherwise
  double flops = 0;            // executed FLOPs
  double bytes = 0;            // HBM bytes read and written
  double groups = 1;           // a grouped GEMM: this many problems of the shape above
  // Attention: the sequence of keys the queries run against and, under a sliding window, the
  // most keys a query meets (0: none); the implementation (none: the profile's default), the
  // pass and the mask below.
  double seq = 0;
  double window = 0;
  KernelKind kind = KernelKind::memory_bound;
  // SMs the library leaves free when it launches the kernel (Transformer Engine's
  // set_sm_margin, for communication beside it): a GEMM plans its tiles for the rest.
  int sm_margin = 0;
  std::optional<AttentionKernel> attention;
  bool fp8 = false;  // a GEMM on FP8 inputs
  bool backward = false;
  bool causal = false;
  auto operator<=>(const Kernel&) const = default;
};

// For finding distinct kernels (a program repeats its layers' many times over): every field
// that tells two apart.
struct KernelHash {
  std::size_t operator()(const Kernel& kernel) const {
    std::uint64_t hash = 1469598103934665603ull;
    const auto mix = [&hash](std::uint64_t value) { hash = (hash ^ value) * 1099511628211ull; };
    // +0.0 so that -0 hashes as 0, as they compare equal.
    for (const double value : {kernel.m, kernel.n, kernel.k, kernel.flops, kernel.bytes,
                               kernel.groups, kernel.seq, kernel.window}) {
      mix(std::bit_cast<std::uint64_t>(value + 0.0));
    }
    mix(static_cast<std::uint64_t>(kernel.kind));
    mix(static_cast<std::uint64_t>(kernel.sm_margin));
    mix(kernel.attention ? static_cast<std::uint64_t>(*kernel.attention) + 1 : 0);
    mix(static_cast<std::uint64_t>(kernel.fp8) | static_cast<std::uint64_t>(kernel.backward) << 1 |
        static_cast<std::uint64_t>(kernel.causal) << 2);
    return static_cast<std::size_t>(hash ^ hash >> 32);  // the high bits' differences down too
  }
};

Kernel gemm_kernel(double m, double n, double k, double bytes_per_element);
// FP8 inputs (one byte each), a BF16 output.
Kernel fp8_gemm_kernel(double m, double n, double k);
// The same GEMM on `rows` of its m rows (a chunk of a GEMM split by rows): every chunk reads
// all of B.
Kernel gemm_rows(const Kernel& gemm, double rows);
// `groups` copies of a kernel launched as one: a GEMM as a grouped GEMM of that many problems,
// a memory-bound kernel over that many times the bytes.
Kernel grouped(Kernel kernel, double groups);
// The wave efficiency of one tile shape over `sms` SMs.
double wave_efficiency(int sms, GemmTile tile, double m, double n, double groups = 1);
// The best over the profile's tiles.
double wave_efficiency(const GpuProfile& gpu, double m, double n);
// What the shape leaves of the GEMM efficiency: wave x K term.
double gemm_shape_efficiency(const GpuProfile& gpu, double m, double n, double k);
// eff_c of a GEMM of this shape: efficiency x wave x K term.
double gemm_compute_efficiency(const GpuProfile& gpu, double m, double n, double k);
// The attention implementation a kernel runs (its own, or the profile's default); ModelError if
// the profile has none of it.
const AttentionRates& attention_rates(const GpuProfile& gpu, std::optional<AttentionKernel> kernel);
// The keys a query meets on average under a causal mask over `seq` tokens: seq / 2, or under a
// sliding window of w < seq the integral of min(x, w) over the sequence, divided by it:
// w - w^2 / (2 seq).
double mean_causal_keys(double seq, double window);
// An attention kernel's rate / dense BF16 peak, from its pass, mask and sequence (AttentionPass).
// A sliding window is costed as a causal pass over the keys a query meets on average: its key
// tiles are those of the window, with masked tiles at its two edges where a causal pass has
// one at the diagonal, left in the fixed work per query tile.
double attention_efficiency(const GpuProfile& gpu, const Kernel& kernel);
// ModelError for an FP8 GEMM on a profile without FP8 entries, or attention it has none of.
double kernel_seconds(const GpuProfile& gpu, const Kernel& kernel);
// The kernel's time while communication kernels hold `sms_held` of the GPU's SMs. The GEMM
// library picked its tile for the whole GPU but its margin (it cannot know what else runs),
// so a GEMM's waves run over the SMs left (all but the larger of the margin and those held): a
// shape that filled every SM in one wave takes a second (the tail effect). Compute peaks shrink
// with the share of SMs left; the power ceiling (gemm_sustained) shrinks less, to share^(2/3):
// dynamic power goes as SMs x f x V^2 with V rising with f, so under the same power fewer SMs clock
// higher, f ~ SMs^(-1/3). The fixed time does not change.
// `hbm_taken` (bytes/s) is the HBM bandwidth the communication moves meanwhile
// (comm_hbm_bytes_per_s): the kernel's bytes move on what is left of the sustained bandwidth
// (hbm x memory_efficiency), and at least on half of it, the fair share of two requesters that
// both could use all of it.
double kernel_seconds(const GpuProfile& gpu, const Kernel& kernel, int sms_held,
                      double hbm_taken = 0);
// The SMs `collectives` communication kernels running at once hold: comm_sms each, rounded,
// leaving compute at least one.
int comm_sms_held(const GpuProfile& gpu, int collectives);

// HBM bytes a collective reads and writes per byte it moves over a link: NCCL stores what
// arrives to memory and reads it back (2x), and reads or writes the user's buffers besides, up
// to 3x (sjeaugey, NVIDIA/nccl issue 1428: "300GB/s needs to be multiplied by at least 2x for
// memory bandwidth ... it can be 3x"); the upper figure, as a ring reduce-scatter or all-gather
// touches the user's buffers on every step.
inline constexpr double kCommHbmBytesPerLinkByte = 3.0;
// The HBM bandwidth a collective moving `link_bytes_per_s` over each GPU's links takes from
// compute.
double comm_hbm_bytes_per_s(double link_bytes_per_s);

// The GPU running `slowdown` slower at compute (0.1: its compute kernels take 10% longer), as a
// throttled or faulty one does: every compute rate (BF16 and FP8 peaks, sustained GEMM rates)
// divided by 1 + slowdown; HBM, launch times and links unchanged.
GpuProfile slowed(const GpuProfile& gpu, double slowdown);
// The profile with its FP8 entries in the places of the BF16 GEMM ones (peak, efficiency, k0,
// sustained rate, fixed time): what an FP8 GEMM sees, and what an FP8 fit adjusts.
GpuProfile fp8_gemm_view(const GpuProfile& gpu);

}  // namespace fleetsim
