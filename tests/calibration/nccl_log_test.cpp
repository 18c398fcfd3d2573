#include <catch2/catch.hpp>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "calibration/nccl_log.hpp"

using namespace fleetsim;

namespace {

std::string log_path(const std::string& name) {
  return std::string(FLEETSIM_SOURCE_DIR) + "/calibration/logs/" + name;
}

NcclLog parse_text(const std::string& text, const std::string& file_name = "test.log",
                   const std::string& op_hint = "") {
  std::istringstream in(text);
  return parse_nccl_log(in, file_name, op_hint);
}

// The line an NcclLogError names, or -1 when parsing succeeded.
int error_line(const std::string& text, const std::string& file_name = "test.log") {
  try {
    parse_text(text, file_name);
  } catch (const NcclLogError& e) {
    return e.line();
  }
  return -1;
}

std::string error_message(const std::string& text) {
  try {
    parse_text(text);
  } catch (const NcclLogError& e) {
    return e.what();
  }
  return "";
}

// The column header and units lines exactly as current nccl-tests print them.
const std::string kHeader =
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time "
    "  algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us) "
    " (GB/s)  (GB/s)\n";

// Row from a100x8-allreduce-meta-gcm-fixture.log: 33554432 B / 344.8 us = 97.31 GB/s.
const std::string kGoodRow =
    "    33554432       8388608     float     sum      -1    344.8   97.32  170.31      0    349.5 "
    " "
    " 95.99  167.99      0\n";

// busbw and algbw are each printed with two decimals from unrounded values related by the
// factor, so |busbw - factor * algbw| <= 0.005 + factor * 0.005.
void check_busbw(const NcclTiming& t, double factor) {
  CHECK(std::abs(t.busbw_gb_per_s - factor * t.algbw_gb_per_s) <= 0.005 * (1 + factor) + 1e-9);
}

struct Expected {
  std::string file;
  int ranks;  // 0: the log does not list its devices
  std::size_t rows;
  double first_size, last_size;
  double last_busbw_out_of_place;  // copied from the last row of the log
  std::optional<double> avg_busbw;
};

}  // namespace

TEST_CASE("every shipped log parses with the values read off its text") {
  // Rows, first and last size and last out-of-place busbw read off each log; ranks = number of
  // '# Rank' lines. All logs are all_reduce_perf output, which no log line names: the op comes
  // from "allreduce" in the file name.
  const std::vector<Expected> logs = {
      {"a100x16-2node-allreduce-meta-gcm-fixture.log", 16, 6, 33554432, 1073741824, 182.80,
       150.209},
      // Slurm prefix stripped, no '# nThread' header, device list or summary.
      {"a100x16-2node-p4de-efa-allreduce-aws-partial.log", 0, 29, 8, 2147483648, 78.33,
       std::nullopt},
      {"a100x8-allreduce-meta-gcm-fixture.log", 8, 6, 33554432, 1073741824, 231.72, 210.99},
      // GB200 NVL72 racks (CoreWeave): no '# nThread' header or device list.
      {"gb200x144-2rack-nvl72-allreduce-coreweave-partial.log", 0, 6, 536870912, 17179869184,
       810.41, 688.487},
      {"gb200x1440-20rack-nvl72-allreduce-coreweave-partial.log", 0, 6, 536870912, 17179869184,
       405.74, 297.808},
      {"gb200x72-nvl72-allreduce-coreweave-partial.log", 0, 5, 536870912, 8589934592, 834.57,
       745.53},
      {"h100x16-2node-allreduce-gcp-a3mega.log", 16, 31, 8, 8589934592, 338.82, 70.742},
      {"h100x16-2node-ib-allreduce-nccltests290.log", 16, 11, 8388608, 8589934592, 155.57, 142.735},
      {"h100x16-2node-ib-cx7-allreduce-degraded-nccltests319.log", 16, 32, 8, 17179869184, 89.24,
       33.4128},
      {"h100x16-2node-p5-efa-allreduce-aws-partial.log", 0, 32, 8, 17179869184, 487.09,
       std::nullopt},
      // Device list elided to '...'.
      {"h100x64-8node-allreduce-sharp-coreweave-partial.log", 0, 5, 536870912, 8589934592, 386.56,
       373.187},
      {"h100x8-allreduce-nvls-nccltests290.log", 8, 6, 134217728, 4294967296, 473.60, 439.369},
      {"mi300x16-2node-allreduce-rccl-hisohara-aac10.log", 16, 32, 8, 17179869184, 357.46, 92.3318},
      {"mi300x8-allreduce-rccl-hisohara-aac8.log", 8, 31, 8, 8589934592, 315.69, 110.464},
      {"mi300x8-allreduce-rccl-rocmblog-xgmi.log", 8, 32, 8, 17179869184, 318.98, 116.669},
      // No '# nThread' header or summary; the 16 GiB row is missing.
      {"mi355x16-2node-allreduce-rccl-hisohara-aac14-partial.log", 16, 31, 8, 8589934592, 369.04,
       std::nullopt},
      {"rtx5090x4-pcie-allreduce-nccltests287.log", 4, 25, 8, 134217728, 27.26, 9.09703},
  };
  for (const Expected& e : logs) {
    INFO(e.file);
    const NcclLog log = read_nccl_log(log_path(e.file));
    CHECK(log.file == log_path(e.file));
    CHECK(log.op == "all_reduce");
    CHECK(log.ranks() == e.ranks);
    REQUIRE(log.rows.size() == e.rows);
    CHECK(log.rows.front().size_bytes == e.first_size);
    CHECK(log.rows.back().size_bytes == e.last_size);
    REQUIRE(log.rows.back().out_of_place);
    CHECK(log.rows.back().out_of_place->busbw_gb_per_s == Approx(e.last_busbw_out_of_place));
    CHECK(log.avg_busbw_gb_per_s == e.avg_busbw);
    for (const NcclLogRow& row : log.rows) {
      // Every row is float sum, 4 B per element, root printed "-1", both sides present.
      CHECK(row.type == "float");
      CHECK(row.redop == "sum");
      CHECK(row.root == -1);
      CHECK(row.count * 4 == row.size_bytes);
      CHECK(row.out_of_place.has_value());
      CHECK(row.in_place.has_value());
    }
  }
}

TEST_CASE("busbw = algbw * nccl_bus_factor for every row of the logs that list their ranks") {
  const std::vector<std::string> files = {
      "a100x16-2node-allreduce-meta-gcm-fixture.log",
      "a100x8-allreduce-meta-gcm-fixture.log",
      "h100x16-2node-allreduce-gcp-a3mega.log",
      "h100x16-2node-ib-allreduce-nccltests290.log",
      "h100x16-2node-ib-cx7-allreduce-degraded-nccltests319.log",
      "h100x8-allreduce-nvls-nccltests290.log",
      "mi300x16-2node-allreduce-rccl-hisohara-aac10.log",
      "mi300x8-allreduce-rccl-hisohara-aac8.log",
      "mi300x8-allreduce-rccl-rocmblog-xgmi.log",
      "mi355x16-2node-allreduce-rccl-hisohara-aac14-partial.log",
      "rtx5090x4-pcie-allreduce-nccltests287.log",
  };
  for (const std::string& file : files) {
    INFO(file);
    const NcclLog log = read_nccl_log(log_path(file));
    REQUIRE(log.ranks() > 0);
    const double factor = nccl_bus_factor(log.op, log.ranks());
    for (const NcclLogRow& row : log.rows) {
      INFO("line " << row.line);
      check_busbw(*row.out_of_place, factor);
      check_busbw(*row.in_place, factor);
    }
  }
}

TEST_CASE("nccl_bus_factor follows nccl-tests doc/PERFORMANCE.md") {
  // all_reduce on 16 ranks: 2 * 15 / 16 = 1.875; on 8: 2 * 7 / 8 = 1.75 (the factor the ROCm
  // blog quotes for its 8-GPU run).
  CHECK(nccl_bus_factor("all_reduce", 16) == 1.875);
  CHECK(nccl_bus_factor("all_reduce", 8) == 1.75);
  CHECK(nccl_bus_factor("all_gather", 8) == 0.875);  // 7 / 8
  CHECK(nccl_bus_factor("reduce_scatter", 4) == 0.75);
  CHECK(nccl_bus_factor("alltoall", 2) == 0.5);
  CHECK(nccl_bus_factor("broadcast", 64) == 1);
  CHECK(nccl_bus_factor("reduce", 64) == 1);
  CHECK(nccl_bus_factor("sendrecv", 2) == 1);
  CHECK_THROWS_AS(nccl_bus_factor("gather", 8), std::invalid_argument);
  CHECK_THROWS_AS(nccl_bus_factor("all_reduce", 0), std::invalid_argument);
}

TEST_CASE("out-of-place and in-place columns are kept apart") {
  // Last row of a100x16-2node-allreduce-meta-gcm-fixture.log (line 30):
  //   1073741824  268435456  float  sum  -1    11013  97.50  182.80  0    11099  96.74  181.39  0
  const NcclLog log = read_nccl_log(log_path("a100x16-2node-allreduce-meta-gcm-fixture.log"));
  const NcclLogRow& row = log.rows.back();
  CHECK(row.line == 30);
  CHECK(row.count == 268435456);
  REQUIRE(row.out_of_place);
  REQUIRE(row.in_place);
  CHECK(row.out_of_place->time_us == 11013);
  CHECK(row.out_of_place->algbw_gb_per_s == 97.50);
  CHECK(row.out_of_place->busbw_gb_per_s == 182.80);
  CHECK(row.out_of_place->wrong == 0L);
  CHECK(row.in_place->time_us == 11099);
  CHECK(row.in_place->algbw_gb_per_s == 96.74);
  CHECK(row.in_place->busbw_gb_per_s == 181.39);
  CHECK(row.in_place->wrong == 0L);
}

TEST_CASE("header fields, devices and quirks of individual logs") {
  SECTION("run parameters and device list") {
    const NcclLog log = read_nccl_log(log_path("a100x8-allreduce-meta-gcm-fixture.log"));
    CHECK(log.n_threads == 1);
    CHECK(log.n_gpus == 1);
    CHECK(log.min_bytes == 33554432.0);
    CHECK(log.max_bytes == 1073741824.0);
    REQUIRE(log.devices.size() == 8);
    // "#  Rank  0 Group  0 Pid  66421 on {hostname} device  0 [0x00] NVIDIA A100-SXM4-80GB"
    CHECK(log.devices[0].rank == 0);
    CHECK(log.devices[0].host == "{hostname}");
    CHECK(log.devices[0].device == 0);
    CHECK(log.devices[0].name == "NVIDIA A100-SXM4-80GB");
    CHECK(log.devices[7].rank == 7);
    CHECK(log.rows.front().line == 17);  // after the header (15) and units (16) lines
  }
  SECTION("two nodes, host names padded") {
    // "#  Rank 15 Group  0 Pid 541705 on    node007 device  7 [0xc1] NVIDIA H100 80GB HBM3"
    const NcclLog log = read_nccl_log(log_path("h100x16-2node-ib-allreduce-nccltests290.log"));
    CHECK(log.max_bytes == 8589934592.0);
    REQUIRE(log.devices.size() == 16);
    CHECK(log.devices[15].rank == 15);
    CHECK(log.devices[15].host == "node007");
    CHECK(log.devices[15].device == 7);
    CHECK(log.devices[15].name == "NVIDIA H100 80GB HBM3");
  }
  SECTION("validation off prints N/A in #wrong") {
    // First row: 8388608 B, 215.3 us out-of-place -> 8388608 / 215.3 / 1e3 = 38.96 GB/s.
    const NcclLog log = read_nccl_log(log_path("h100x16-2node-ib-allreduce-nccltests290.log"));
    const NcclLogRow& row = log.rows.front();
    CHECK(row.out_of_place->time_us == 215.3);
    CHECK(row.out_of_place->algbw_gb_per_s == 38.96);
    CHECK_FALSE(row.out_of_place->wrong.has_value());
    CHECK(row.in_place->busbw_gb_per_s == 87.38);
    CHECK_FALSE(row.in_place->wrong.has_value());
    // Last row prints a six-digit time without decimals: 8589934592 / 103530 / 1e3 = 82.97.
    CHECK(log.rows.back().out_of_place->time_us == 103530);
  }
  SECTION("older rccl-tests device lines have no Group field and a bus id with a function") {
    // "#   Rank  8 Pid 366643 on     gpu-56 device  0 [0000:05:00.0] AMD Instinct MI300X"
    const NcclLog log = read_nccl_log(log_path("mi300x16-2node-allreduce-rccl-hisohara-aac10.log"));
    REQUIRE(log.devices.size() == 16);
    CHECK(log.devices[8].rank == 8);
    CHECK(log.devices[8].host == "gpu-56");
    CHECK(log.devices[8].device == 0);
    CHECK(log.devices[8].name == "AMD Instinct MI300X");
  }
  SECTION("device lines without a GPU name, '# Testing' comment, no nThread header") {
    // "#  Rank  0 Group  0 Pid 2908511 on mi355-gpu-23 device  0 [0000:75:00]"
    const NcclLog log =
        read_nccl_log(log_path("mi355x16-2node-allreduce-rccl-hisohara-aac14-partial.log"));
    REQUIRE(log.devices.size() == 16);
    CHECK(log.devices[0].host == "mi355-gpu-23");
    CHECK(log.devices[0].name.empty());
    CHECK_FALSE(log.n_threads.has_value());
    CHECK_FALSE(log.max_bytes.has_value());
    CHECK(log.rows.front().line == 29);  // after '# Testing 1 cycle.' on line 28
  }
  SECTION("a 17-digit size row starting in column 1") {
    // Line 53: "17179869184    4294967296  float  sum  -1  94254  182.27  318.98 ..."
    const NcclLog log = read_nccl_log(log_path("mi300x8-allreduce-rccl-rocmblog-xgmi.log"));
    CHECK(log.rows.back().line == 53);
    CHECK(log.rows.back().size_bytes == 17179869184.0);
    CHECK(log.rows.back().in_place->busbw_gb_per_s == 318.73);
  }
  SECTION("a header that does not belong to the rows is reported as printed") {
    // The coreweave README's '# nThread' says maxBytes 2147483648 but its rows reach 8 GiB; the
    // reader does not reconcile them. The elided device list ('...') leaves the rank count unknown.
    const NcclLog log =
        read_nccl_log(log_path("h100x64-8node-allreduce-sharp-coreweave-partial.log"));
    CHECK(log.max_bytes == 2147483648.0);
    CHECK(log.rows.back().size_bytes == 8589934592.0);
    CHECK(log.ranks() == 0);
  }
}

TEST_CASE("the op comes from the log, then the hint, then the file name") {
  const std::string rows = kHeader + kGoodRow;
  CHECK(parse_text("# Collective test starting: all_gather_perf\n" + rows, "x-allreduce.log").op ==
        "all_gather");
  CHECK(parse_text(rows, "x-allreduce.log", "reduce_scatter").op == "reduce_scatter");
  CHECK(parse_text(rows, "x.log", "alltoall_perf").op == "alltoall");
  CHECK(parse_text(rows, "logs/h100_all_gather.txt").op == "all_gather");
  CHECK(parse_text(rows, "reducescatter-8.log").op == "reduce_scatter");
  CHECK(parse_text(rows, "sendrecv.log").op == "sendrecv");
  CHECK(parse_text(rows, "run.log").op.empty());
  CHECK_THROWS_AS(parse_text(rows, "x.log", "all_reduce_with_typo"), NcclLogError);
}

TEST_CASE("logging, banners and Slurm task labels around the rows are skipped") {
  const std::string text =
      "0: node005:291005:291005 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n"
      "0: 1942ef50-8240:7085:7085 [0] NCCL INFO cudaDriverVersion 12040\n"
      "0: NCCL version 2.16.2+cuda11.6\n"
      "0: rccl-tests: Version develop:448c4c7\n"
      "0: RCCL version : 2.22.3-develop:f5b15f2\n" +
      kHeader + "0: " + kGoodRow + "0:\n\n";
  const NcclLog log = parse_text(text);
  REQUIRE(log.rows.size() == 1);
  CHECK(log.rows[0].line == 8);
  CHECK(log.rows[0].size_bytes == 33554432);
}

TEST_CASE("Windows line endings are accepted") {
  const NcclLog log = parse_text(
      "#  size count type redop root time algbw busbw #wrong\r\n"
      "   1000000  250000 float sum -1  10.00  100.00  175.00  0\r\n");
  REQUIRE(log.rows.size() == 1);
  CHECK(log.rows[0].out_of_place->wrong == 0L);
  CHECK_FALSE(log.rows[0].in_place.has_value());  // the header has a single group
}

TEST_CASE("column layouts of other versions") {
  SECTION("a header without root") {
    // 1048576 B / 10.00 us = 104.8576 GB/s.
    const NcclLog log = parse_text(
        "#  size  count  type  redop  time  algbw  busbw  #wrong  time  algbw  busbw "
        "#wrong\n"
        "  1048576  262144  float  sum  10.00  104.86  183.50  0  11.00  95.33  166.83 "
        " 0\n");
    REQUIRE(log.rows.size() == 1);
    CHECK(log.rows[0].root == -1);
    CHECK(log.rows[0].redop == "sum");
    CHECK(log.rows[0].out_of_place->busbw_gb_per_s == 183.50);
    CHECK(log.rows[0].in_place->time_us == 11.00);
  }
  SECTION("old alltoall: an empty redop under a redop header, a float 'error' column") {
    // alltoall_perf of the 2020 nccl-tests prints opName "" for a "redop" header, so the row has
    // 11 fields for 12 columns. 1048576 B / 20.00 us = 52.43 GB/s; busbw = 52.43 * 7/8 = 45.88.
    const NcclLog log = parse_text(
        "#  size  count  type  redop  time  algbw  busbw  error  time  algbw  busbw  "
        "error\n"
        "  1048576  262144  float    20.00  52.43  45.88  0e+00  20.50  51.15  44.76  "
        "N/A\n",
        "alltoall.log");
    REQUIRE(log.rows.size() == 1);
    CHECK(log.op == "alltoall");
    CHECK(log.rows[0].type == "float");
    CHECK(log.rows[0].redop.empty());
    CHECK(log.rows[0].out_of_place->time_us == 20.00);
    CHECK_FALSE(log.rows[0].out_of_place->wrong.has_value());  // no #wrong column
    check_busbw(*log.rows[0].out_of_place, nccl_bus_factor("alltoall", 8));
  }
  SECTION("extra columns are skipped by name") {
    const NcclLog log = parse_text(
        "#  size  count  type  redop  root  time  algbw  busbw  #wrong  extra  time  "
        "algbw  busbw  #wrong\n"
        "  1048576  262144  float  sum  0  10.00  104.86  183.50  0  x  10.00  104.86 "
        " 183.50  3\n");
    CHECK(log.rows[0].root == 0);
    CHECK(log.rows[0].in_place->wrong == 3L);
  }
  SECTION("no header at all: 13 fields are the current layout") {
    const NcclLog log = parse_text(kGoodRow);
    CHECK(log.rows[0].root == -1);
    CHECK(log.rows[0].in_place->busbw_gb_per_s == 167.99);
  }
  SECTION("no header at all: 12 fields are the layout without root") {
    const NcclLog log = parse_text(
        "  1048576  262144  float  sum  10.00  104.86  183.50  0  11.00  95.33  166.83  0\n");
    CHECK(log.rows[0].root == -1);
    CHECK(log.rows[0].in_place->algbw_gb_per_s == 95.33);
  }
  SECTION("no header and a field count of neither layout") {
    CHECK(error_line("# a comment\n  1048576  262144  float  sum  10.00  104.86\n") == 2);
  }
}

TEST_CASE("malformed logs are errors naming the line") {
  SECTION("a non-number where a number belongs") {
    // Line 3 = two header lines + this row.
    const std::string text = kHeader +
                             "    33554432       8388608     float     sum      -1    34x.8   "
                             "97.32  170.31      0    349.5   95.99  167.99      0\n";
    CHECK(error_line(text) == 3);
    const std::string message = error_message(text);
    CHECK(message.find("test.log:3: ") == 0);
    CHECK(message.find("'34x.8'") != std::string::npos);
    CHECK(message.find("(hint: ") != std::string::npos);
  }
  SECTION("a row with a field missing") {
    const std::string text =
        kHeader + kGoodRow +
        "    67108864      16777216     float     sum      -1    557.4  120.39  210.68      0    "
        "556.2  120.67  211.17\n";
    CHECK(error_line(text) == 4);
    CHECK(error_message(text).find("expected 13 fields") != std::string::npos);
  }
  SECTION("two rows pasted together") {
    CHECK(error_line(kHeader + "    33554432       8388608     float     sum      -1    344.8   "
                               "97.32  170.31      0    349.5   95.99  167.99      0    "
                               "67108864\n") == 3);
  }
  SECTION("algbw inconsistent with size / time") {
    // 33554432 B / 344.8 us = 97.32 GB/s, but 79.32 is printed: a transposed digit.
    const std::string text = kHeader + kGoodRow +
                             "    33554432       8388608     float     sum      -1    344.8   "
                             "79.32  170.31      0    349.5   95.99  167.99      0\n";
    CHECK(error_line(text) == 4);
    CHECK(error_message(text).find("out-of-place algbw") != std::string::npos);
  }
  SECTION("in-place algbw inconsistent") {
    // The in-place time of another row: 33554432 B / 556.2 us = 60.33 GB/s, not 95.99.
    CHECK(error_line(kHeader + "    33554432       8388608     float     sum      -1    344.8   "
                               "97.32  170.31      0    556.2   95.99  167.99      0\n") == 3);
  }
  SECTION("a garbled '# Rank' line") {
    CHECK(error_line("#  Rank  x Group  0 Pid  1 on host device  0 [0x00] GPU\n" + kGoodRow) == 1);
  }
  SECTION("an empty file") {
    CHECK(error_line("") == 0);
    CHECK(error_message("").find("test.log: no data rows") == 0);
  }
  SECTION("only header lines") {
    CHECK(error_line(kHeader + "# Avg bus bandwidth : 1.0\n") == 0);
  }
}

TEST_CASE("a path that cannot be read is an error") {
  const std::string missing = log_path("no-such-file.log");
  CHECK_THROWS_AS(read_nccl_log(missing), NcclLogError);
  try {
    read_nccl_log(missing);
  } catch (const NcclLogError& e) {
    CHECK(e.file() == missing);
    CHECK(e.line() == 0);
    CHECK(std::string(e.what()).find(missing + ": ") == 0);
  }
  CHECK_THROWS_AS(read_nccl_log(log_path("")), NcclLogError);  // the logs folder itself
}
