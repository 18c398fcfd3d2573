// Kernel microbenchmark results, as `tools/microbench` writes them and as published figures are
// shipped (calibration/microbench/<profile>/*.csv).
//
// A file is CSV: '#' lines first (`# provenance: measured` or `published`, `# source: ...`,
// `# gpu: ...`, `# load: short` or `sustained`, free comments), then a header
// row naming the columns, then one row per measurement. The header says what the file holds:
//
//   gemm       dtype,m,n,k[,batch][,layout],time_us|tflops     C[m,n] = A[m,k] B[k,n], batch times
//   memory     op,bytes,time_us|gb_per_s                       bytes read plus written
//   attention  impl,dtype,batch,heads,seq,head_dim,causal,direction,time_us|tflops
//   overlap    dtype,m,n,k,alone_us,with_comm_us[,comm_op,comm_bytes,gpus]  a GEMM alone and
//              while a collective runs on the same GPU
//
// A row gives its time, its rate, or both (then they must agree within 1%): published tables give
// rates, the microbenchmark both. Rates are decimal (1 TFLOPS = 1e12 FLOP/s, 1 GB/s = 1e9 B/s).
// Other columns (gpu, clocks, ...) are allowed and ignored. Attention FLOPs follow FlashAttention's
// benchmark: 4 batch heads seq^2 head_dim for the forward pass, halved when causal; the backward
// pass counts 2.5 times that, forward and backward together 3.5 times.
//
// Reading never prints; every problem is a MicrobenchError naming the file and line.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace fleetsim {

class MicrobenchError : public std::runtime_error {
 public:
  MicrobenchError(const std::string& file, int line, const std::string& problem)
      : std::runtime_error(file + ":" + std::to_string(line) + ": " + problem) {}
};

struct GemmSample {
  std::string dtype;  // "bf16", "fp8", ...
  double m = 0, n = 0, k = 0, batch = 1;
  double seconds = 0;
  double flops() const { return 2 * batch * m * n * k; }
  int line = 0;
};

struct MemorySample {
  std::string op;  // "copy", "triad", "read", ...
  double bytes = 0;
  double seconds = 0;
  int line = 0;
};

struct AttentionSample {
  std::string impl;  // "fa2", "fa3", "cudnn", ...
  std::string dtype;
  double batch = 0, heads = 0, seq = 0, head_dim = 0;
  bool causal = false;
  std::string direction;  // "fwd", "bwd", "fwd_bwd"
  double seconds = 0;
  double forward_flops() const;  // the forward pass's, whatever the row's direction
  double flops() const;
  int line = 0;
};

struct OverlapSample {
  std::string dtype;
  double m = 0, n = 0, k = 0;
  double alone_seconds = 0;
  double with_comm_seconds = 0;
  int line = 0;
};

struct MicrobenchFile {
  std::string path;
  std::string checksum;    // fnv1a64 of the bytes, as profiles cite their inputs
  std::string source;      // the `# source:` line; empty if none
  std::string provenance;  // `# provenance:` measured | published (required)
  std::string gpu;         // the `# gpu:` line up to its first comma; empty if none
  // `# load: sustained`: measured once the clocks had settled at the power limit (a run of
  // seconds or more), not in a benchmark's usual short bursts (`# load: short`, the default).
  // GEMM rows set the sustained rate from it (kernel_fit.hpp), attention rows are modelled at
  // the profile's sustained_clock; memory rows are fitted as usual (HBM keeps its clock).
  bool sustained = false;
  std::vector<GemmSample> gemms;
  std::vector<MemorySample> memory;
  std::vector<AttentionSample> attention;
  std::vector<OverlapSample> overlap;
};

MicrobenchFile read_microbench_file(const std::filesystem::path& path);

// Every *.csv of a directory, in name order. MicrobenchError if there is none.
std::vector<MicrobenchFile> read_microbench_dir(const std::filesystem::path& dir);

}  // namespace fleetsim
