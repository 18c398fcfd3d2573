// fleetsim collective and calibrate end to end: nccl-tests' table and options, the log read back
// and fitted, the profile entry written.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "calibration/nccl_log.hpp"
#include "cli_run.hpp"
#include "sim/report/report.hpp"
#include "sim/scenario/scenario.hpp"

namespace fs = std::filesystem;
using namespace fleetsim::testing;  // NOLINT: run_cli and its kin

namespace {

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// What a script written for nccl-tests output reads: the data rows, each split on blanks into
// size, count, type, redop, root, then time, algbw, busbw, #wrong out of place and in place
// (nccl-tests' README; the common parsers take the busbw of the last row and the average line).
struct ScriptView {
  std::vector<std::vector<std::string>> rows;
  double average_busbw = -1;
  bool ok_line = false;
};
ScriptView read_as_script(const std::string& text) {
  ScriptView view;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("# Avg bus bandwidth")) {
      view.average_busbw = std::stod(line.substr(line.find(':') + 1));
    } else if (line == "# Out of bounds values : 0 OK") {
      view.ok_line = true;
    } else if (!line.empty() && line[0] != '#') {
      view.rows.push_back(words(line));
    }
  }
  return view;
}

// The columns (one past the last character) where the words of a line end.
std::vector<std::size_t> word_ends(const std::string& line) {
  std::vector<std::size_t> ends;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] != ' ' && (i + 1 == line.size() || line[i + 1] == ' ')) ends.push_back(i + 1);
  }
  return ends;
}

std::string line_starting(const std::string& text, const std::string& start) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(start)) return line;
  }
  return {};
}

}  // namespace

TEST_CASE("fleetsim collective prints a table that reads back as an nccl-tests log") {
  // -b 1M -e 1G -f 4: 1M, 4M, 16M, 64M, 256M, 1G = 6 rows. The log reader checks that every
  // row's algbw equals size / time; busbw must be algbw x 2(p-1)/p for an all-reduce.
  const Result result = run_cli("collective --node dgx-a100 -b 1M -e 1G -f 4");
  REQUIRE(result.exit_code == 0);
  std::istringstream text(result.out);
  const fleetsim::NcclLog log = fleetsim::parse_nccl_log(text, "(fleetsim output)", "all_reduce");
  REQUIRE(log.rows.size() == 6);
  CHECK(log.rows.front().size_bytes == 1024.0 * 1024);
  CHECK(log.rows.back().size_bytes == 1024.0 * 1024 * 1024);
  for (const auto& row : log.rows) {
    const auto& timing = *row.out_of_place;
    // Both are printed to 0.01: 0.005 x 1.75 + 0.005 = 0.014 of rounding at most.
    CHECK(timing.busbw_gb_per_s == Approx(timing.algbw_gb_per_s * 2 * 7 / 8).margin(0.015));
  }
  // A100 has no NVLS, so this is a ring: large messages approach the usable NVLink 3 rate,
  // 300 GB/s x 0.773 = 232 GB/s, from below.
  CHECK(log.rows.back().out_of_place->busbw_gb_per_s < 232.0);
  CHECK(log.rows.back().out_of_place->busbw_gb_per_s > 220.0);
}

TEST_CASE("fleetsim collective writes its table to HDF5") {
  const fs::path h5 = scratch_dir() / "collective.h5";
  fs::remove(h5);
  const Result result =
      run_cli("collective --node mi300x-platform -b 1M -e 1G -f 4 --output " + h5.string());
  REQUIRE(result.exit_code == 0);
  CHECK(fs::file_size(h5) > 0);
  // nccl-tests' -o is the reduction op: the short spelling is refused, not taken as a file.
  const Result reduction = run_cli("collective --node mi300x-platform -o sum");
  CHECK(reduction.exit_code == 2);
  CHECK(reduction.err.find("--output FILE.h5") != std::string::npos);
  CHECK_FALSE(fs::exists("sum"));
}

TEST_CASE("fleetsim collective rejects bad sizes and unknown ops with exit 2") {
  CHECK(run_cli("collective --node dgx-h100 -e 8X").exit_code == 2);
  CHECK(run_cli("collective --node dgx-h100 --op all_to_none").exit_code == 2);
  CHECK(run_cli("collective").exit_code == 2);
  CHECK(run_cli("collective --node dgx-h100 --nodes 2 --routing random").exit_code == 2);
  CHECK(run_cli("collective --node dgx-h100 --nodes 2 --routing hash --seeds 0").exit_code == 2);
  CHECK(run_cli("collective --node dgx-h100 --nodes 2 --placement scattered").exit_code == 2);
  CHECK(run_cli("collective --node dgx-h100 --nodes 2 --seeds 4").exit_code == 2);  // adaptive
  CHECK(run_cli("collective --node dgx-h100 --write").exit_code == 2);  // calibrate's option
  // Sweeps past what a table is read in, at once and with where to look, not run for ever.
  const auto refused = [](const std::string& arguments, const std::string& message) {
    INFO(arguments);
    const Result result = run_cli("collective --node dgx-h100 " + arguments);
    CHECK(result.exit_code == 2);
    CHECK_THAT(result.err, Catch::Contains(message));
  };
  refused("-b 8 -e 8G -f 1.0000001", "-f / --factor: expected a factor above 1");
  refused("-f 1", "-f / --factor");
  refused("-b 8G -e 8", "-b / --min: the smallest size '8G' is above the largest '8'");
  refused("-b 8 -e 2048G", "-e / --max: expected a message of at most 1024G");
  refused("-b 8 -e 8G -f 1.0000001", "got 1.0000001");
  refused("--nodes 4 --routing hash --seeds 1000000000 -b 8 -e 8", "--seeds: expected 1 to 1000");
  // Left out they mean every GPU; a 0 written is refused, not taken to mean it.
  refused("--ranks 0", "--ranks takes at least 1");
  refused("-g 0", "--gpus-per-node takes at least 1");
}

TEST_CASE("fleetsim collective with hash routing prints the median run and the spread") {
  // 8 nodes spread over 6-port leaves: collisions vary with the seed. The table is still an
  // nccl-tests table; a comment line gives min <= median <= max busbw of the largest size.
  const Result result = run_cli(
      "collective --node dgx-h100 --nodes 8 --leaf-ports 6 --placement spread --routing hash "
      "--seeds 5 --algo ring -b 1G -e 1G");
  REQUIRE(result.exit_code == 0);
  std::istringstream text(result.out);
  const fleetsim::NcclLog log = fleetsim::parse_nccl_log(text, "(fleetsim output)", "all_reduce");
  REQUIRE(log.rows.size() == 1);
  const std::string marker = "busbw at 1073741824 B: min ";
  const auto at = result.out.find(marker);
  REQUIRE(at != std::string::npos);
  double min = 0, median = 0, max = 0;
  REQUIRE(std::sscanf(result.out.c_str() + at + marker.size(), "%lf, median %lf, max %lf", &min,
                      &median, &max) == 3);
  CHECK(min <= median);
  CHECK(median <= max);
  CHECK(median == Approx(log.rows.front().out_of_place->busbw_gb_per_s).epsilon(0.01));
}

TEST_CASE("fleetsim calibrate fits a shipped log and prints the profile entry") {
  const std::string log = std::string(FLEETSIM_SOURCE_DIR) +
                          "/calibration/logs/mi300x8-allreduce-rccl-rocmblog-xgmi.log";
  const Result result = run_cli("calibrate " + log + " --node mi300x-platform");
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("fit of link_efficiency.xgmi") != std::string::npos);
  // Rows of 64 MiB and up of this log give 0.710 (docs/collective-accuracy.md's table); a model
  // change that moves the fit shows here.
  CHECK(result.out.find("efficiency  0.71") != std::string::npos);
  CHECK(result.out.find("provenance: 'measured: fit to") != std::string::npos);
  CHECK(run_cli("calibrate " + log).exit_code == 2);  // no --node
}

TEST_CASE("fleetsim calibrate --kernels fits a profile's kernel model to microbenchmark CSVs") {
  const std::string source = FLEETSIM_SOURCE_DIR;
  const std::string dir = source + "/calibration/microbench/h100-sxm";
  const Result result = run_cli("calibrate --kernels " + dir + " --gpu h100-sxm");
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("fit of h100-sxm's kernel model") != std::string::npos);
  CHECK(result.out.find("held out (every third GEMM row") != std::string::npos);
  // The shipped profile is this fit: nothing to change.
  CHECK(result.out.find("(the profile holds these entries already)") != std::string::npos);
  CHECK(run_cli("calibrate --kernels " + dir).exit_code == 2);  // no --gpu
  CHECK(run_cli("calibrate --kernels " + dir + " --gpu h100-sxm --node dgx-h100").exit_code == 2);
  const fs::path bad = scratch_dir() / "bad-microbench";
  fs::remove_all(bad);
  fs::create_directories(bad);
  std::ofstream(bad / "gemm.csv") << "# provenance: measured\ndtype,m,n,k,time_us\nbf16,1,2\n";
  const Result error = run_cli("calibrate --kernels " + bad.string() + " --gpu h100-sxm");
  CHECK(error.exit_code == 2);
  CHECK(error.err.find("gemm.csv:3: expected 5 fields, got 3") != std::string::npos);
}

TEST_CASE("fleetsim calibrate --write replaces the profile entry and nothing else") {
  // On a copy of the data: the fitted xGMI efficiency replaces the published 0.75, the file
  // still loads, and every other line of the profile is as it was.
  const std::string source = FLEETSIM_SOURCE_DIR;
  const fs::path data = scratch_dir() / "data";
  fs::remove_all(data);
  fs::create_directories(data);
  for (const char* sub : {"topology", "calibration", "workloads"}) {
    fs::copy(fs::path(source) / sub, data / sub, fs::copy_options::recursive);
  }
  const fs::path profile = data / "calibration/profiles/mi300x.yaml";
  const std::string before = slurp(profile);
  const std::string arguments = "calibrate " + source +
                                "/calibration/logs/mi300x8-allreduce-rccl-rocmblog-xgmi.log "
                                "--node mi300x-platform --data-dir " +
                                data.string();
  REQUIRE(run_cli(arguments).exit_code == 0);
  CHECK(slurp(profile) == before);  // without --write the file is untouched
  const Result written = run_cli(arguments + " --write");
  REQUIRE(written.exit_code == 0);
  const std::string after = slurp(profile);
  const fleetsim::StepInputs cluster =
      fleetsim::load_cluster(fleetsim::DataPaths{data}, "mi300x-platform", 1);
  CHECK(cluster.gpu.link_efficiency.at("xgmi").value == Approx(0.710).margin(0.0005));
  CHECK_THAT(cluster.gpu.link_efficiency.at("xgmi").provenance,
             Catch::StartsWith("measured: fit to mi300x8-allreduce-rccl-rocmblog-xgmi.log"));
  std::istringstream old_lines(before), new_lines(after);
  int changed = 0;
  for (std::string a, b; std::getline(old_lines, a) && std::getline(new_lines, b);) {
    changed += a != b;
  }
  CHECK(changed == 3);  // value, sigma, provenance
  // Writing the same fit again changes nothing.
  REQUIRE(run_cli(arguments + " --write").exit_code == 0);
  CHECK(slurp(profile) == after);
  // While another calibration holds the profile's directory, this one waits and says so. The
  // other puts the published entry back and adds a line before letting go; this one, reading
  // the profile only once it holds it, keeps that line and writes its fit again (had it read
  // first, it would write back what it read: the fit, without the line).
  const std::string others_line = "# written by another calibration\n";
  std::optional<fleetsim::OutputLock> other(std::in_place, std::vector<fs::path>{profile});
  auto waiting = std::async(std::launch::async, [&] { return run_cli(arguments + " --write"); });
  const bool still_waiting =
      waiting.wait_for(std::chrono::seconds(3)) == std::future_status::timeout;
  std::ofstream(profile) << before << others_line;
  other.reset();  // before any check: a failed one must not leave the command waiting
  CHECK(still_waiting);
  const Result after_wait = waiting.get();
  REQUIRE(after_wait.exit_code == 0);
  CHECK_THAT(after_wait.err, Catch::Contains("waiting for another process writing into " +
                                             fs::weakly_canonical(profile.parent_path()).string()));
  CHECK(slurp(profile) == after + others_line);
  fs::remove_all(data);
}

TEST_CASE(
    "fleetsim collective prints nccl-tests' layout: a script reads it as it reads a real log") {
  const std::string real = slurp(std::string(FLEETSIM_SOURCE_DIR) +
                                 "/calibration/logs/h100x8-allreduce-nvls-nccltests290.log");
  const Result result = run_cli("collective --node dgx-h100 -b 128M -e 4G");
  REQUIRE(result.exit_code == 0);
  for (const std::string& text : {real, result.out}) {
    const ScriptView view = read_as_script(text);
    REQUIRE(view.rows.size() == 6);  // 128M .. 4G by 2
    for (const auto& row : view.rows) {
      REQUIRE(row.size() == 13);
      CHECK(row[2] == "float");
      CHECK(row[3] == "sum");
      CHECK(std::stod(row[7]) == Approx(std::stod(row[11])).epsilon(0.01));  // busbw both ways
    }
    CHECK(std::stod(view.rows.back()[0]) == 4294967296.0);
    CHECK(view.ok_line);
    CHECK(view.average_busbw > 400);
    // NVLS on 8 H100: the log's 473.6 GB/s, the model's 479.2 at 4 GiB (1.2% apart).
    CHECK(std::stod(view.rows.back()[7]) == Approx(476).epsilon(0.01));
  }
  // nccl-tests 2.19.6's lines, character for character (src/util.cu's formats), and its
  // columns: every row's words end where the header's do.
  const std::string out = result.out;
  CHECK(out.find("# Collective test starting: all_reduce_perf\n") != std::string::npos);
  CHECK(out.find("\n# Collective test concluded: all_reduce_perf\n") != std::string::npos);
  const std::string header = line_starting(out, "#       size");
  CHECK(header ==
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        "     time   algbw   busbw  #wrong ");
  CHECK(line_starting(out, "#        (B)") ==
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)         "
        "    (us)  (GB/s)  (GB/s)         ");
  CHECK(line_starting(out, "#  Rank  7") ==
        "#  Rank  7 Group  0 Pid      0 on      node0 device  7 [0000:00:00] h100-sxm");
  // Without validation nccl-tests prints each #wrong as "    N/A", one character short of the
  // header's "  #wrong" (src/util.cu), which shifts what follows: so do these rows.
  std::vector<std::size_t> columns = word_ends(header);
  columns.erase(columns.begin());  // the header's '#'
  for (std::size_t i = 8; i < columns.size(); ++i) columns[i] -= i < 12 ? 1 : 2;
  std::istringstream rows(out);
  int checked = 0;
  for (std::string line; std::getline(rows, line);) {
    if (line.empty() || line[0] == '#') continue;
    CHECK(word_ends(line) == columns);
    ++checked;
  }
  CHECK(checked == 6);
}

TEST_CASE("fleetsim collective -g takes the first GPUs of each node, as nccl-tests' -g does") {
  // One GPU on each of two DGX H100: a two-rank ring over one 400 Gb/s rail, busbw = algbw of
  // at most 50 GB/s x 0.96 = 48 GB/s; all 16 GPUs reach far more through NVLS and eight rails.
  const Result one = run_cli("collective --node dgx-h100 --nodes 2 -g 1 -b 1G -e 1G");
  REQUIRE(one.exit_code == 0);
  const ScriptView view = read_as_script(one.out);
  REQUIRE(view.rows.size() == 1);
  CHECK(std::stod(view.rows[0][7]) < 48.0);
  CHECK(std::stod(view.rows[0][7]) > 40.0);
  CHECK(one.out.find("nGpus 1 ") != std::string::npos);
  CHECK(line_starting(one.out, "#  Rank  1") ==
        "#  Rank  1 Group  0 Pid      1 on      node1 device  0 [0000:00:00] h100-sxm");
  CHECK(line_starting(one.out, "#  Rank  2").empty());
  const Result all = run_cli("collective --node dgx-h100 --nodes 2 -b 1G -e 1G");
  REQUIRE(all.exit_code == 0);
  CHECK(std::stod(read_as_script(all.out).rows[0][7]) > 300.0);
  CHECK(run_cli("collective --node dgx-h100 -g 9").exit_code == 2);
  CHECK(run_cli("collective --node dgx-h100 --nodes 2 -g 2 --ranks 5").exit_code == 2);
  CHECK(run_cli("collective --node dgx-h100 --op all_reduce_perf -b 1M -e 1M").exit_code == 0);
}

TEST_CASE("fleetsim calibrate reads fleetsim collective's table back to the profile's values") {
  // A simulated log fitted on the preset that made it gives back the efficiency it ran at:
  // NVLink 3 on 8 A100 (0.773), and one InfiniBand rail between two DGX H100 (0.96).
  const fs::path dir = scratch_dir();
  const auto fitted = [&](const std::string& collective, const std::string& calibrate) {
    const Result table = run_cli("collective " + collective + " -b 64M -e 4G");
    REQUIRE(table.exit_code == 0);
    const fs::path log = dir / "simulated.log";
    std::ofstream(log) << table.out;
    const Result fit = run_cli("calibrate " + log.string() + " " + calibrate);
    REQUIRE(fit.exit_code == 0);
    const std::string line = line_starting(fit.out, "  efficiency");
    REQUIRE_FALSE(line.empty());
    return std::stod(words(line)[1]);
  };
  CHECK(fitted("--node dgx-a100", "--node dgx-a100") == Approx(0.773).epsilon(0.01));
  CHECK(fitted("--node dgx-h100 --nodes 2 -g 1", "--node dgx-h100 --nodes 2 -g 1") ==
        Approx(0.96).epsilon(0.01));
  // Without -g the log's device list tells it: one GPU on each host.
  CHECK(fitted("--node dgx-h100 --nodes 2 -g 1", "--node dgx-h100 --nodes 2") ==
        Approx(0.96).epsilon(0.01));
}

TEST_CASE("fleetsim calibrate refuses a log it should not fit, and writes nothing") {
  const std::string logs = std::string(FLEETSIM_SOURCE_DIR) + "/calibration/logs/";
  const auto refused = [](const std::string& arguments, const std::string& why) {
    const Result result = run_cli("calibrate " + arguments + " --write");
    CHECK(result.exit_code == 2);
    CHECK(result.out.empty());
    CHECK(result.err.find(why) != std::string::npos);
  };
  // Another GPU (an RCCL log of MI300X) than the preset's.
  refused(logs + "mi300x8-allreduce-rccl-hisohara-aac8.log --node dgx-h100",
          "the log ran on AMD Instinct MI300X, and the cluster's GPU profile is h100-sxm");
  // More ranks than the cluster gives.
  refused(logs + "a100x16-2node-allreduce-meta-gcm-fixture.log --node dgx-a100",
          "the log has 16 ranks, and 1 x dgx-a100 give 8 GPUs");
  // A degraded system (its maintainers' word, nccl-tests issue 319): NVLS at 12% of line rate.
  refused(logs +
              "h100x16-2node-ib-cx7-allreduce-degraded-nccltests319.log --node dgx-h100 "
              "--nodes 2",
          "the fit gives nvls_efficiency = 0.092, outside the 0.40-1");
  // A log that stops while its bandwidth still climbs (1 to 16 MiB).
  const Result rising = run_cli("collective --node dgx-h100 -b 1M -e 16M");
  REQUIRE(rising.exit_code == 0);
  const fs::path log = scratch_dir() / "rising.log";
  std::ofstream(log) << rising.out;
  refused(log.string() + " --node dgx-h100 --fit-min 1M", "still rises");
}

TEST_CASE("each command refuses the options it does not take, naming those that do") {
  const std::string log = std::string(FLEETSIM_SOURCE_DIR) +
                          "/calibration/logs/mi300x8-allreduce-rccl-rocmblog-xgmi.log";
  const Result op = run_cli("calibrate " + log + " --node mi300x-platform --op all_gather");
  CHECK(op.exit_code == 2);
  CHECK(op.err.find("--op belongs to 'collective', not 'calibrate'") != std::string::npos);
  CHECK(run_cli("collective --node dgx-h100 --json").exit_code == 2);
  CHECK(run_cli("collective --node dgx-h100 --threads 2").exit_code == 2);
  CHECK(run_cli("list --json").exit_code == 2);
  CHECK(run_cli("list extra").exit_code == 2);
  CHECK(run_cli("collective extra --node dgx-h100").exit_code == 2);
  const std::string scenario = std::string(FLEETSIM_SOURCE_DIR) + "/scenarios/h100-vs-b200.yaml";
  const Result json = run_cli("validate " + scenario + " --json");
  CHECK(json.exit_code == 2);
  CHECK(json.err.find("--json belongs to 'plan', 'run' and 'sweep', not 'validate'") !=
        std::string::npos);
  CHECK(run_cli("memory " + scenario + " --bench 3").exit_code == 2);
  CHECK(run_cli("run " + scenario + " --sensitivity 0").exit_code == 2);  // no draws is no option
  CHECK(run_cli("calibrate --kernels x --gpu h100-sxm --algo ring").exit_code == 2);
}

TEST_CASE("counts and file names on the command line are checked before anything runs") {
  const std::string scenario = std::string(FLEETSIM_SOURCE_DIR) + "/scenarios/h100-vs-b200.yaml";
  const auto refused = [](const std::string& arguments, const std::string& message) {
    INFO(arguments);
    const Result result = run_cli(arguments);
    CHECK(result.exit_code == 2);
    CHECK(result.out.empty());
    CHECK_THAT(result.err, Catch::Contains(message));
  };
  refused("run " + scenario + " --threads 0", "--threads takes 1 to 1024");
  refused("run " + scenario + " --threads -1", "--threads takes 1 to 1024");
  refused("run " + scenario + " --threads 1000000000", "--threads takes 1 to 1024");
  refused("run " + scenario + " --bench -1", "--bench takes 1 to 1000 runs");
  refused("run " + scenario + " --bench 1000000", "--bench takes 1 to 1000 runs");
  refused("run " + scenario + " --sensitivity 100000000", "--sensitivity takes 2 to 10000");
  refused("run " + scenario + " -o ''", "-o needs a file name");
  refused("run " + scenario + " --trace ''", "--trace needs a file name");
  // -o writes HDF5 whatever the name says: a name that says otherwise is refused.
  refused("run " + scenario + " -o out.json", "name the file .h5 or .hdf5");
  refused("run " + scenario + " -o " + scenario, "name the file .h5 or .hdf5");
  refused("collective --node dgx-h100 --output table.csv", "name the file .h5 or .hdf5");
  refused("collective --node dgx-h100 --nodes 2 --leaf-ports 100000", "expected 2 to 512 ports");
  refused("collective --node dgx-h100 --nodes 2 --leaf-ports 0", "--leaf-ports takes at least 2");
  refused("collective --node dgx-h100 --nodes 2 --oversubscription -1", "at least 1");
  refused("run " + scenario + " -o same.h5 --trace same.h5", "name the same file");
  // Targets checked before anything is simulated: a missing directory, a device, the input.
  refused("run " + scenario + " -o /nonexistent-dir/x.h5", "does not exist");
  refused("run " + scenario + " --trace /dev/null", "not a regular file");
  refused("run " + scenario + " --trace " + scenario, "is the input");
  // Results that cannot reach standard output are a failure, not exit 0.
  const std::string full =
      std::string(FLEETSIM_CLI) + " run " + scenario + " -q --json >/dev/full 2>/dev/null";
  const int status = std::system(full.c_str());
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  // A step bigger than the memory allowed is refused before it starts, with its estimate.
  const fs::path big = scratch_dir() / "every-gpu.yaml";
  std::ofstream(big) << "name: big\nmodel: llama3-8b\n"
                        "training: {seq_len: 4096, global_batch: 1048576, micro_batch: 1}\n"
                        "layout: {dp: 1048576, zero: 3}\n"
                        "cluster: {node: dgx-h100, nodes: 131072, fabric: {kind: rail-fat-tree, "
                        "link: 400Gbps}}\n";
  refused("run " + big.string() + " --max-memory 1GB", "needs about 17 GB to simulate");
  // Every rank replayed (--no-fold), GPT-3 175B's 1,024 ranks hold their stages' programs each:
  // about 1 KB a rank a layer pass, about 2 GB here, where the folded step runs within 1 GB.
  const std::string gpt3 = std::string(FLEETSIM_SOURCE_DIR) + "/tools/bench/gpt3-175b-step.yaml";
  refused("run " + gpt3 + " --no-fold --max-memory 1GB", "every rank replayed");
  refused("run " + gpt3 + " --no-fold --max-memory 1GB", "without --no-fold");
  // A command's --help is its own: its line of the usage and its options, not the others'.
  const Result help = run_cli("collective --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::StartsWith("usage: fleetsim collective"));
  CHECK_THAT(help.out, Catch::Contains("--gpus-per-node"));
  CHECK_THAT(help.out, !Catch::Contains("--sensitivity"));
  const Result sweep_help = run_cli("sweep --help");
  CHECK_THAT(sweep_help.out, Catch::Contains("--csv"));
  CHECK_THAT(sweep_help.out, Catch::Contains("--no-fold"));       // run's, which a sweep takes
  CHECK_THAT(sweep_help.out, !Catch::Contains("--sensitivity"));  // run's, which it refuses
  CHECK_THAT(run_cli("validate --help").out, Catch::Contains("--data-dir"));
  // No command at all is a mistake: the usage, on standard error.
  const Result bare = run_cli("");
  CHECK(bare.exit_code == 2);
  CHECK(bare.out.empty());
  CHECK_THAT(bare.err, Catch::Contains("usage: fleetsim <command>"));
}

TEST_CASE("bench runs quote the engine's reference rate beside the wall time") {
  // Times from different machines or days compare through the engine's reference workload,
  // timed in the same process: the median run is also given in its events.
  const std::string scenario = std::string(FLEETSIM_SOURCE_DIR) + "/scenarios/h100-vs-b200.yaml";
  const Result result = run_cli("run " + scenario + " --bench 1 -q");
  REQUIRE(result.exit_code == 0);
  CHECK_THAT(result.out, Catch::Contains("bench: 1 runs, wall time median"));
  const std::string marker = "bench: engine reference ";
  const auto at = result.out.find(marker);
  REQUIRE(at != std::string::npos);
  const double rate_millions = std::stod(result.out.substr(at + marker.size()));
  CHECK(rate_millions > 0.1);  // millions of events per second on any machine that builds this
  CHECK_THAT(result.out, Catch::Contains("M of its events"));
}
