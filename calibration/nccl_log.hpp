// Reader for nccl-tests / rccl-tests output, exactly as the tools print it.
//
// A log is a few '#' header lines (run parameters, the device list, the column header) followed
// by one data row per message size:
//
//   #       size         count      type   redop    root     time   algbw   busbw #wrong  ...
//       33554432       8388608     float     sum      -1    650.2   51.61   96.76      0  ...
//
// The first time/algbw/busbw/#wrong group of columns is the out-of-place run, the second the
// in-place run. Columns are mapped by their name in the header, because versions differ (older
// ones lack `root`, old alltoall/sendrecv print no redop, rccl-tests may add columns).
//
// Invariants of a parsed log, which is how a mis-pasted log is caught:
//   * it has at least one data row, and every row has the fields the header announces;
//   * algbw = size / time (GB/s = 1e9 B/s, time in us) within the printed rounding, on each side.
// busbw is not checked on read, since its factor depends on the op and on the rank count, which a
// partial log may not show; nccl_bus_factor() gives that factor for callers that know both.
//
// Lines are read as follows. '#' lines are the run parameters, device list, column header and
// summary, or else comments. Blank lines, NCCL/RCCL debug logging ("host:pid:tid [0] NCCL INFO
// ...") and tool banners ("NCCL version ...", "rccl-tests: Version ...") are skipped; any other
// line that starts with a digit is a data row. A leading `srun -l` task label ("0: ") is dropped.
//
// Parsing never prints; every problem is an NcclLogError naming the file and line.
#pragma once

#include <filesystem>
#include <istream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fleetsim {

struct NcclTiming {
  double time_us = 0;
  double algbw_gb_per_s = 0;  // size / time, 1 GB = 1e9 B
  double busbw_gb_per_s = 0;  // algbw * nccl_bus_factor(op, ranks)
  // Elements that failed validation; nullopt when printed "N/A" (run with -c 0) or when the log has
  // no #wrong column (old versions print a floating-point "error" column instead).
  std::optional<long> wrong;
};

struct NcclLogRow {
  double size_bytes = 0;
  double count = 0;   // elements
  std::string type;   // "float", "bfloat16", ...
  std::string redop;  // "sum", "none", ...; empty when the log prints none
  int root = -1;      // -1 when the column is absent or printed "-1"
  // A side the log does not print is nullopt.
  std::optional<NcclTiming> out_of_place, in_place;
  int line = 0;  // 1-based line in the log
};

struct NcclLogDevice {
  int rank = 0;
  std::string host;
  int device = 0;
  std::string name;  // "NVIDIA H100 80GB HBM3"; empty when the tool prints none
};

struct NcclLog {
  std::string file;  // as given, for messages
  // "all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce",
  // or "" if unknown.
  std::string op;
  // From the "# nThread" header, when present, as printed (a pasted log may carry a header that
  // does not belong to its rows; nothing here cross-checks them).
  std::optional<int> n_threads, n_gpus;
  std::optional<double> min_bytes, max_bytes;
  std::vector<NcclLogDevice> devices;        // from the "# Using devices" list
  std::vector<NcclLogRow> rows;              // in log order
  std::optional<double> avg_busbw_gb_per_s;  // "# Avg bus bandwidth : 142.735"

  // Number of ranks when the device list is shown, else 0.
  int ranks() const { return static_cast<int>(devices.size()); }
};

// "FILE:LINE: problem (hint: ...)"; LINE is omitted for problems with the file as a whole.
class NcclLogError : public std::runtime_error {
 public:
  NcclLogError(std::string file, int line, const std::string& problem, const std::string& hint);
  const std::string& file() const { return file_; }
  int line() const { return line_; }  // 0 when the problem is not on one line

 private:
  std::string file_;
  int line_;
};

// op_hint names the collective when the log does not ("all_reduce", "allreduce" and
// "all_reduce_perf" are all accepted); the file name is the last resort. An op hint that names no
// known collective is an NcclLogError.
NcclLog parse_nccl_log(std::istream& in, const std::string& file_name, std::string op_hint = "");
NcclLog read_nccl_log(const std::filesystem::path& path, std::string op_hint = "");

// busbw / algbw as nccl-tests defines it (doc/PERFORMANCE.md): the fraction of the data that each
// rank's busiest link carries, so that busbw is comparable with link speed across rank counts.
//   all_reduce                       2 (n - 1) / n
//   all_gather, reduce_scatter,
//   alltoall                         (n - 1) / n
//   broadcast, reduce, sendrecv      1
// Throws std::invalid_argument for an unknown op or ranks < 1.
double nccl_bus_factor(const std::string& op, int ranks);

}  // namespace fleetsim
