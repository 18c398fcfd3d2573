// The fleetsim command line. The only place that prints, and that turns errors into exit codes:
// 0 ok, 1 the simulation says a layout does not fit or a model fails, 2 bad input, 3 stopped at
// --max-wall or --max-memory, 130 and 143 stopped by SIGINT and SIGTERM (run and sweep write
// what finished first, marked partial).
#include <tbb/global_control.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "calibration/microbench.hpp"
#include "calibration/nccl_log.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/errors.hpp"
#include "sim/engine/text.hpp"
#include "sim/plan/planner.hpp"
#include "sim/report/report.hpp"
#include "sim/report/summary_table.hpp"
#include "sim/scenario/scenario.hpp"
#include "sim/scenario/units.hpp"
#include "sim/step/step_executor.hpp"
#include "sim/study/study.hpp"
#include "tools/fleetsim/calibrate_command.hpp"
#include "tools/fleetsim/collective_command.hpp"
#include "tools/fleetsim/progress.hpp"
#include "tools/fleetsim/ranks.hpp"
#include "tools/fleetsim/stopping.hpp"
#include "workloads/layout/dimensions.hpp"
#include "workloads/layout/rules.hpp"

namespace po = boost::program_options;
using fleetsim::DataPaths;
using fleetsim::RunReport;
using fleetsim::Scenario;
using fleetsim::Variant;

namespace {

constexpr int kOk = 0;
constexpr int kSimulationFailed = 1;
constexpr int kBadInput = 2;

const char* const kUsage =
    "usage: fleetsim <command> [options]\n"
    "\n"
    "commands:\n"
    "  run FILE        simulate a scenario and print its comparison table\n"
    "  sweep FILE      simulate a scenario's sweep: points, one row each, with scaling\n"
    "  validate FILE   check a scenario file without simulating it\n"
    "  memory FILE     print each variant's memory per GPU, item by item, without simulating\n"
    "  list            list node presets, GPU profiles and models (and check them)\n"
    "  collective      simulate an nccl-tests run and print its table\n"
    "  report RESULT.h5\n"
    "                  one HTML page of a result file: comparison, step breakdowns, memory,\n"
    "                  attribution, sensitivity, scaling, runs, assumptions (-o page.html)\n"
    "  plan FILE       search the layouts of a scenario's model and cluster, rank them\n"
    "  calibrate LOG   fit the collective model to a measured nccl-tests log\n"
    "  calibrate --kernels DIR --gpu PROFILE\n"
    "                  fit a GPU profile's kernel model to microbenchmark CSVs\n"
    "\n"
    "Each command refuses the options below that are not its own.\n"
    "\n"
    "run options:\n"
    "  -o, --output FILE.h5   also write the results to an HDF5 file\n"
    "  --trace FILE.json      also write a Perfetto trace (8 replayed ranks of each variant)\n"
    "  --trace-ranks LIST     with --trace: these ranks instead (0,8,16-23; folded, a rank\n"
    "                         that stands for others is replayed, not they: --no-fold)\n"
    "  --json                 print JSON instead of the table\n"
    "  --csv                  print CSV instead: a line per variant, a column per result\n"
    "                         (the HDF5 file's /summary table)\n"
    "  --summary              with --json: each variant's links summed by kind, not one by one\n"
    "  --bench N              repeat the simulation N times and report the median wall time\n"
    "  --attribute            split each compare entry's difference from the first variant\n"
    "                         among its causes (compute, HBM, NVLink, network, memory and\n"
    "                         layout, failures, checkpoints, ...) by counterfactual\n"
    "                         simulations, as Shapley values\n"
    "  --sensitivity N        draw the calibrated inputs N times within their sigma: each\n"
    "                         variant's 90% prediction interval, and the inputs that move it\n"
    "                         most (each one sigma either way)\n"
    "  --no-fold              replay every data-parallel replica (default: one per stage,\n"
    "                         the others' traffic kept where it shares links)\n"
    "  --data-dir DIR         where presets live (default: the source tree)\n"
    "  --threads N            worker threads for independent variants (default: all cores)\n"
    "  -q, --quiet            no progress bar (it shows on a terminal for runs over a second)\n"
    "  --max-wall DURATION    stop after this long (90s, 30min, 2h): the variants and\n"
    "                         replications finished are written, marked partial (exit 3)\n"
    "  --max-memory SIZE      stop when the process holds more memory than this (8GB,\n"
    "                         512MiB; checked every 10 ms), likewise. Ctrl-C (SIGINT) or\n"
    "                         SIGTERM does the same with exit 130 or 143; a second one ends\n"
    "                         it at once\n"
    "\n"
    "sweep options: those of run (--csv: a line per point, the swept values first)\n"
    "\n"
    "plan options (and -o, --json, --csv, --no-fold, --data-dir, --threads, -q, --max-wall and\n"
    "--max-memory as for run, but a plan stopped early writes nothing):\n"
    "  --top N                layouts to rank (default 10)\n"
    "  --min-headroom PCT     count a layout as fitting only with this share of GPU memory\n"
    "                         free (15%: what practitioners keep; default 0%)\n"
    "\n"
    "collective options (as nccl-tests names them where it can; its table is printed in\n"
    "nccl-tests' layout):\n"
    "  --node PRESET          node preset (required), --nodes N (default 1), --gpu PROFILE\n"
    "  --op OP                all_reduce (default), reduce_scatter, all_gather, all_to_all,\n"
    "                         broadcast, send_recv (or the program's name, all_reduce_perf)\n"
    "  -g, --gpus-per-node N  the first N GPUs of each node take part, as nccl-tests' -g with\n"
    "                         one process a node (default: all)\n"
    "  --ranks N              of those, the first N in rank order (default: all)\n"
    "  --csv                  print CSV instead, a line per message size\n"
    "  --output FILE.h5       also write the table to an HDF5 file (spelt out: nccl-tests'\n"
    "                         -o is its reduction op, refused here)\n"
    "  --algo ALGO            force ring, tree, nvls, nvls_tree or hierarchical (all-reduce),\n"
    "                         as NCCL_ALGO does\n"
    "  -b, --min SIZE         smallest message, e.g. 8, 128M (default 8)\n"
    "  -e, --max SIZE         largest message (default 8G)\n"
    "  -f, --factor F         size multiplier between rows (default 2)\n"
    "  --oversubscription R, --leaf-ports N, --tiers 2|3   fabric (default 1, 64, as needed)\n"
    "  --placement packed|spread   nodes fill a leaf in turn (default), or round robin\n"
    "  --routing adaptive|hash     spread flows over all spines (default), or pin each\n"
    "                         channel to one by a seeded hash (ECMP)\n"
    "  --seeds N              hash routing: run seeds 1..N, print the median (default 1)\n"
    "\n"
    "calibrate options: --node PRESET (required), --nodes, --gpu, -g, --ranks (default: the\n"
    "  log's), --algo and the fabric options as above;\n"
    "  --fit-min SIZE         leave out rows smaller than SIZE (default 64M)\n"
    "  --write                replace the entry in the GPU profile file, keeping the rest\n"
    "  --kernels DIR          fit GEMM, memory, attention and overlap entries to DIR/*.csv\n"
    "                         (calibration/microbench/<profile>/, tools/microbench output)\n"
    "\n"
    "  -h, --help      this help\n"
    "  --version       print the version\n";

struct Options {
  std::string command;
  std::string file;
  std::string output;
  std::string trace;        // a Perfetto / Chrome trace of the run
  std::string trace_ranks;  // the ranks it records ("0,8,16-23"); empty: kTracedRanks of them
  std::string data_dir = FLEETSIM_DATA_DIR;
  bool json = false;
  bool summary = false;       // --json with the links summed by kind
  bool attribute = false;     // run: attribute each variant's difference from the first
  int sensitivity_draws = 0;  // run: draws of the calibrated inputs within their sigma (0: off)
  bool csv = false;           // run, sweep, plan, collective: CSV instead of the table
  bool no_fold = false;       // replay every data-parallel replica, not one per stage
  bool quiet = false;         // no progress bar
  int bench_runs = 0;
  std::string max_wall;      // run, sweep, plan: stop after this long
  std::string max_memory;    // run, sweep, plan: stop above this resident memory
  std::optional<int> top;    // layouts `plan` ranks (default 10)
  std::string min_headroom;  // plan: the share of memory a layout must leave free ("15%")
  int threads = 0;           // 0: TBB's default, one per core
  fleetsim::CollectiveOptions collective;
  // Below about 64 MiB NCCL switches to its LL/LL128 protocols and its pipeline is still
  // filling; the model has neither, so a fit of bandwidth and latency uses large messages.
  std::string calibrate_min_bytes = "64M";
  bool calibrate_write = false;
  std::string calibrate_kernels;  // a directory of kernel microbenchmark CSVs
  std::set<std::string> given;    // the options the command line gives, by their long names
};

// The options each command takes: any other it is given is refused, not ignored.
const std::map<std::string, std::set<std::string>>& command_options() {
  static const std::set<std::string> limits{"max-wall", "max-memory"};
  static const std::set<std::string> fabric{"oversubscription", "leaf-ports", "tiers", "placement",
                                            "routing"};
  static const std::map<std::string, std::set<std::string>> options = [] {
    std::map<std::string, std::set<std::string>> table{
        {"run",
         {"output", "trace", "trace-ranks", "json", "csv", "summary", "bench", "attribute",
          "sensitivity", "no-fold", "threads", "quiet"}},
        {"sweep", {"output", "json", "summary", "csv", "bench", "no-fold", "threads", "quiet"}},
        {"plan",
         {"output", "json", "csv", "summary", "no-fold", "threads", "quiet", "top",
          "min-headroom"}},
        {"validate", {}},
        {"memory", {}},
        {"list", {}},
        {"report", {"output"}},
        {"collective",
         {"output", "csv", "node", "nodes", "gpu", "op", "ranks", "gpus-per-node", "algo", "min",
          "max", "factor", "seeds"}},
        {"calibrate",
         {"node", "nodes", "gpu", "ranks", "gpus-per-node", "algo", "fit-min", "write",
          "kernels"}}};
    for (auto& [command, names] : table) {
      names.insert("data-dir");
      if (command == "run" || command == "sweep" || command == "plan") {
        names.insert(limits.begin(), limits.end());
      }
      if (command == "collective" || command == "calibrate") {
        names.insert(fabric.begin(), fabric.end());
      }
    }
    return table;
  }();
  return options;
}

// Refuses an option the command does not take, naming the commands that do.
void check_command_options(const Options& options) {
  const auto& table = command_options();
  const auto taken = table.find(options.command);
  if (taken == table.end()) return;
  for (const std::string& name : options.given) {
    if (taken->second.contains(name)) continue;
    std::vector<std::string> owners;
    for (const auto& [command, names] : table) {
      if (names.contains(name)) owners.push_back("'" + command + "'");
    }
    std::string list;
    for (std::size_t i = 0; i < owners.size(); ++i) {
      list += (i == 0 ? "" : i + 1 == owners.size() ? " and " : ", ") + owners[i];
    }
    throw po::error("--" + name +
                    (owners.empty() ? " belongs to no command" : " belongs to " + list) +
                    ", not '" + options.command + "'");
  }
}

// `fleetsim COMMAND --help`: the command's lines of the usage and its options' section, cut
// from the one usage text, and every option it takes.
std::string command_help(const std::string& command) {
  std::vector<std::string> lines;
  std::istringstream usage(kUsage);
  for (std::string line; std::getline(usage, line);) lines.push_back(line);
  std::string text = "usage: fleetsim " + command + " [options]\n\n";
  bool known = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].starts_with("  " + command + " ") && lines[i] != "  " + command) continue;
    known = true;
    text += lines[i] + "\n";
    while (i + 1 < lines.size() && lines[i + 1].starts_with("                  ")) {
      text += lines[++i] + "\n";
    }
  }
  if (!known) return kUsage;
  const auto section = [&](const std::string& name) {
    std::string found;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (!lines[i].starts_with(name + " options")) continue;
      for (; i < lines.size() && !lines[i].empty(); ++i) found += lines[i] + "\n";
      break;
    }
    return found.empty() ? found : "\n" + found;
  };
  text += section(command);
  // What it takes, from the table that refuses the rest (check_command_options).
  std::string taken;
  for (const std::string& name : command_options().at(command)) {
    taken += (taken.empty() ? "--" : ", --") + name;
  }
  return text + "\n" + command + " takes " + taken + " (see fleetsim --help), and -h, --help\n";
}

Options parse_options(int argc, char** argv, bool& exit_now) {
  Options options;
  po::options_description named("options");
  named.add_options()("help,h", "")("version", "")("output,o", po::value(&options.output))(
      "trace", po::value(&options.trace))("trace-ranks", po::value(&options.trace_ranks))(
      "json", po::bool_switch(&options.json))("csv", po::bool_switch(&options.csv))(
      "summary", po::bool_switch(&options.summary))(
      "attribute", po::bool_switch(&options.attribute))("sensitivity",
                                                        po::value(&options.sensitivity_draws))(
      "no-fold", po::bool_switch(&options.no_fold))("quiet,q", po::bool_switch(&options.quiet))(
      "bench", po::value(&options.bench_runs))("max-wall", po::value(&options.max_wall))(
      "max-memory", po::value(&options.max_memory))("data-dir", po::value(&options.data_dir))(
      "threads", po::value(&options.threads))("top", po::value<int>())(
      "min-headroom", po::value(&options.min_headroom))("command", po::value(&options.command))(
      "file", po::value(&options.file));
  auto& c = options.collective;
  named.add_options()("node", po::value(&c.node))("nodes", po::value(&c.nodes))(
      "gpu", po::value(&c.gpu))("op", po::value(&c.op))("ranks", po::value(&c.ranks))(
      "gpus-per-node,g", po::value(&c.gpus_per_node))("min,b", po::value(&c.min_bytes))(
      "max,e", po::value(&c.max_bytes))("factor,f", po::value(&c.factor))(
      "oversubscription", po::value(&c.fabric.oversubscription))(
      "leaf-ports", po::value(&c.fabric.leaf_ports))("tiers", po::value(&c.fabric.tiers))(
      "placement", po::value(&c.fabric.placement))("routing", po::value(&c.fabric.routing))(
      "seeds", po::value(&c.seeds))("algo", po::value(&c.algorithm))(
      "fit-min", po::value(&options.calibrate_min_bytes))(
      "write", po::bool_switch(&options.calibrate_write))("kernels",
                                                          po::value(&options.calibrate_kernels));
  po::positional_options_description positional;
  positional.add("command", 1).add("file", 1);
  po::variables_map vm;
  po::store(po::command_line_parser(argc, argv).options(named).positional(positional).run(), vm);
  po::notify(vm);
  for (const auto& [name, value] : vm) {
    if (!value.defaulted() && name != "command" && name != "file") options.given.insert(name);
  }
  // nccl-tests' -o is the reduction op: on `collective` the file is spelt out.
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (options.command == "collective" && argument.starts_with("-o")) {
      throw po::error(
          "-o is nccl-tests' reduction op, which fleetsim collective does not take (it reduces "
          "with sum); write the HDF5 file with --output FILE.h5");
    }
  }
  if (vm.count("top")) options.top = vm["top"].as<int>();
  exit_now = false;
  if (vm.count("help")) {
    std::cout << (options.command.empty() ? std::string(kUsage) : command_help(options.command));
    exit_now = true;
  } else if (vm.count("version")) {
    std::cout << "fleetsim " << FLEETSIM_VERSION << "\n";
    exit_now = true;
  }
  return options;
}

fleetsim::LinkDetail link_detail(const Options& options) {
  return options.summary ? fleetsim::LinkDetail::by_kind : fleetsim::LinkDetail::every_link;
}

// Ranks whose slices a trace records: enough to see a layout's schedule, few enough that the
// trace opens in a browser.
constexpr int kTracedRanks = 8;

// --trace-ranks: ranks and ranges separated by commas ("0,8,16-23"), in increasing order.
std::vector<int> parse_rank_list(const std::string& text) {
  std::vector<int> ranks;
  const auto refuse = [&](const std::string& why) {
    return po::error("--trace-ranks takes ranks and ranges like 0,8,16-23: " + why + " in '" +
                     text + "'");
  };
  std::istringstream items(text);
  for (std::string item; std::getline(items, item, ',');) {
    const std::size_t dash = item.find('-', 1);
    const std::string first_text = item.substr(0, dash);
    const std::string last_text = dash == std::string::npos ? first_text : item.substr(dash + 1);
    int first = 0, last = 0;
    const auto read = [&](const std::string& number, int& value) {
      const char* end = number.data() + number.size();
      const auto [at, error] = std::from_chars(number.data(), end, value);
      if (number.empty() || error != std::errc{} || at != end || value < 0) {
        throw refuse("'" + number + "' is not a rank");
      }
    };
    read(first_text, first);
    read(last_text, last);
    if (last < first) throw refuse("the range " + item + " runs backwards");
    if (last - first >= 4096 || ranks.size() + (last - first) >= 4096) {
      throw refuse("more than 4,096 ranks (a trace of them would not open)");
    }
    if (!ranks.empty() && first <= ranks.back()) throw refuse("ranks out of order or repeated");
    for (std::int64_t rank = first; rank <= last; ++rank) ranks.push_back(static_cast<int>(rank));
  }
  if (ranks.empty() || text.back() == ',') throw refuse("an empty item");
  return ranks;
}

// The study spread over `ranks`, with a progress bar for runs over a second on a terminal.
RunReport simulate(const Scenario& scenario, const fleetsim::StepOptions& options,
                   const fleetsim::Ranks& ranks, bool quiet = true) {
  const fleetsim::Spread spread{ranks.rank(), ranks.size(),
                                [&ranks](const std::string& mine) { return ranks.gather(mine); }};
  fleetsim::ProgressBar progress(fleetsim::work_units(scenario, spread),
                                 scenario.swept ? "points and replications" : "simulations",
                                 fleetsim::ProgressBar::wanted(quiet));
  RunReport report = fleetsim::simulate_scenario(
      scenario, options, spread, [&progress](std::int64_t units) { progress.advance(units); });
  progress.finish();
  return report;
}

// The wall times of `runs` calls of `work`, shortest first: fewer where a limit or a signal
// stops them (a run cut short, returning or thrown out of, is no wall time).
template <typename Work>
std::vector<double> sorted_wall_times(int runs, Work&& work) {
  std::vector<double> seconds;
  for (int i = 0; i < runs && !fleetsim::stop_requested(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    try {
      work();
    } catch (const fleetsim::Stopped&) {
      break;
    }
    if (fleetsim::stop_requested()) break;
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds;
}

// The engine's reference workload, timed beside a benchmark: a machine or a day that runs it
// slower runs everything slower, so a median in its events compares across both. With one
// chain pending it processes exactly kReferenceEvents events each run.
constexpr int kReferenceRuns = 5;
constexpr int kReferenceEvents = 1'000'000;

// `--bench N`'s figures: the repetitions' wall times, sorted (fewer than asked where a limit or
// a signal stopped them), and the engine's reference rate (0 where stopped before it).
struct BenchFigures {
  int asked = 0;
  std::vector<double> seconds;
  double reference_events_per_s = 0;
};

BenchFigures measure_bench(const Scenario& scenario, const fleetsim::StepOptions& options, int runs,
                           const fleetsim::Ranks& ranks) {
  BenchFigures bench{runs, sorted_wall_times(runs, [&] { simulate(scenario, options, ranks); })};
  const std::vector<double> reference = sorted_wall_times(
      kReferenceRuns, [] { fleetsim::run_reference_events(1, kReferenceEvents); });
  if (static_cast<int>(reference.size()) == kReferenceRuns) {
    bench.reference_events_per_s = kReferenceEvents / reference[reference.size() / 2];
  }
  return bench;
}

void print_bench(const BenchFigures& bench) {
  if (bench.seconds.empty()) return;  // stopped before a repetition ended: the caller says why
  const std::vector<double>& seconds = bench.seconds;
  const double median_s = seconds[seconds.size() / 2];
  std::cout << "bench: " << seconds.size() << " runs"
            << (static_cast<int>(seconds.size()) < bench.asked
                    ? " (of " + std::to_string(bench.asked) + ": stopped)"
                    : std::string())
            << ", wall time median " << median_s << " s, min " << seconds.front() << " s, max "
            << seconds.back() << " s\n";
  const double rate = bench.reference_events_per_s;
  if (rate == 0) return;
  std::ostringstream line;
  line << std::setprecision(3) << "bench: engine reference " << rate / 1e6
       << " M events/s (one pending event, median of " << kReferenceRuns
       << "): the median run takes as long as " << median_s * rate / 1e6 << " M of its events\n";
  std::cout << line.str();
}

// --min-headroom's "15%" as a share of memory, 0 up to (not including) 100%.
double parse_headroom(const std::string& text) {
  const auto fail = [&text]() -> double {
    throw po::error("--min-headroom takes a percentage of at least 0% and under 100%, got '" +
                    text + "' (e.g. 15%)");
  };
  if (text.size() < 2 || text.back() != '%') return fail();
  const std::string number = text.substr(0, text.size() - 1);
  std::size_t used = 0;
  double percent = 0;
  try {
    percent = std::stod(number, &used);
  } catch (const std::exception&) {
    return fail();
  }
  if (used != number.size() || !(percent >= 0 && percent < 100)) return fail();
  return percent / 100;
}

// `fleetsim plan`: the search from the scenario's first variant (its model, recipe and
// cluster), the ranking printed as a table or JSON and written to HDF5 as variants.
int plan_command(const Scenario& scenario, const Options& options) {
  fleetsim::PlanOptions plan_options;
  if (options.top) {
    if (*options.top < 1) throw po::error("--top needs at least 1");
    plan_options.top = static_cast<std::size_t>(*options.top);
  }
  if (!options.min_headroom.empty()) {
    plan_options.min_headroom = parse_headroom(options.min_headroom);
  }
  plan_options.step.fold = !options.no_fold;
  RunReport report = fleetsim::plan_report(scenario, plan_options);
  if (const std::int64_t units = fleetsim::plan_run_units(report, scenario); units > 0) {
    fleetsim::ProgressBar progress(units, "replications",
                                   fleetsim::ProgressBar::wanted(options.quiet));
    fleetsim::rank_plan_by_run(report, scenario, plan_options.step,
                               [&progress](std::int64_t done) { progress.advance(done); });
    progress.finish();
  }
  if (scenario.variants.size() > 1 && !options.json) {
    std::cout << "note: the plan searches from the scenario's base; its " +
                     std::to_string(scenario.variants.size() - 1) +
                     " compare entries are not used\n";
  }
  std::cout << (options.json  ? fleetsim::render_json(report, link_detail(options))
                : options.csv ? fleetsim::render_summary_csv(fleetsim::summary_table(report))
                              : fleetsim::render_plan(report));
  if (!options.output.empty()) {
    // --max-wall and --max-memory still hold: a plan stopped while it waits writes nothing.
    const fleetsim::OutputLock lock({options.output}, fleetsim::say_waiting_for,
                                    fleetsim::OutputLock::Wait::until_free_or_stopped);
    fleetsim::write_hdf5(report, options.output);
  }
  return report.variants.empty() ? kSimulationFailed : kOk;
}

void print_catalog(const fleetsim::PresetCatalog& catalog) {
  std::size_t width = 0;
  for (const auto* presets :
       {&catalog.nodes, &catalog.gpus, &catalog.models, &catalog.interruptions}) {
    for (const auto& preset : *presets) width = std::max(width, preset.name.size());
  }
  const auto section = [&](const char* title, const std::vector<fleetsim::PresetInfo>& presets) {
    std::cout << title << "\n";
    for (const auto& preset : presets) {
      std::cout << "  " << preset.name << std::string(width + 2 - preset.name.size(), ' ')
                << preset.description << "\n";
    }
  };
  section("nodes (topology/presets)", catalog.nodes);
  section("GPU profiles (calibration/profiles)", catalog.gpus);
  section("models (workloads/models)", catalog.models);
  section("interruption rates (calibration/interruptions)", catalog.interruptions);
  // The layout's knobs and the rules they keep, from the layout's own tables.
  std::cout << "layout: keys (default; what fleetsim plan tries)\n";
  for (const fleetsim::LayoutDimension& dimension : fleetsim::layout_dimensions()) {
    std::cout << "  " << dimension.key << " (" << fleetsim::default_text(dimension)
              << "): " << dimension.description << "; plan: " << dimension.planner << "\n";
  }
  std::cout << "job rules (checked by validate, run and plan)\n";
  for (const fleetsim::JobRule& rule : fleetsim::job_rules()) {
    std::cout << "  " << rule.name << ": " << rule.summary << "\n";
  }
}

// Each draw replays every variant's step: past this, a mistake rather than a study.
constexpr int kMostSensitivityDraws = 10000;
// More worker threads than any machine's cores only cost memory (each a stack and its
// variant's step); more repetitions than a benchmark needs only cost time.
constexpr int kMostThreads = 1024;
constexpr int kMostBenchRuns = 1000;

// -o names an HDF5 file (.h5 or .hdf5: JSON and CSV go to standard output), --trace a
// Perfetto JSON file; neither may be empty, nor the other's. `writes`: this process writes them
// (under MPI rank 0 does, and only its node's directories matter): each must then be a place a
// result can be written.
void check_outputs(const Options& options, bool writes) {
  const auto suffix = [](const std::string& path) {
    return fleetsim::ascii_lower(std::filesystem::path(path).extension().string());
  };
  if (options.given.contains("output")) {
    if (options.output.empty()) throw po::error("-o needs a file name, e.g. -o results.h5");
    const std::string extension = suffix(options.output);
    if (options.command == "report") {
      if (extension != ".html" && extension != ".htm") {
        throw po::error("report -o writes a web page: name it .html, got '" + options.output + "'");
      }
    } else if (extension != ".h5" && extension != ".hdf5") {
      throw po::error("-o writes HDF5: name the file .h5 or .hdf5, got '" + options.output +
                      "' (JSON goes to standard output with --json" + ", CSV with --csv)");
    }
  }
  if (options.given.contains("trace") && options.trace.empty()) {
    throw po::error("--trace needs a file name, e.g. --trace step.json");
  }
  if (options.given.contains("trace-ranks")) {
    if (options.trace.empty()) throw po::error("--trace-ranks chooses the ranks --trace records");
    parse_rank_list(options.trace_ranks);  // refused here, before anything runs
  }
  if (!options.output.empty() && options.output == options.trace) {
    throw po::error("-o and --trace name the same file, " + options.output);
  }
  if (!writes) return;
  // Checked before anything is simulated, so that no simulation is lost to a bad target.
  std::vector<std::filesystem::path> inputs;
  if (!options.file.empty()) inputs.emplace_back(options.file);
  for (const auto& [name, path] : {std::pair{"-o", options.output}, {"--trace", options.trace}}) {
    if (path.empty()) continue;
    const std::string problem = fleetsim::output_target_problem(path, inputs);
    if (!problem.empty()) throw po::error(std::string(name) + " " + path + ": " + problem);
  }
}

// `bytes` as a person reads it: "238 MB", "17 GB" (rounded up).
std::string memory_amount(double bytes) {
  return bytes < 1e9 ? std::to_string(static_cast<long long>(std::ceil(bytes / 1e6))) + " MB"
                     : std::to_string(static_cast<long long>(std::ceil(bytes / 1e9))) + " GB";
}

// A step that would need more memory than the command may use is refused before it starts.
// Past what the process may use at all (the machine's or its container's memory) the kernel
// would end it, results and all: any variant's estimate refuses the command. --max-memory
// stops a run and keeps the variants that finished (exit 3): refused only where no variant
// could finish under it.
void check_memory_estimate(const Scenario& scenario, const Options& options) {
  if (scenario.variants.empty()) return;
  const bool folded = !options.no_fold;
  const auto estimate = [folded](const Variant& variant) {
    return fleetsim::simulation_bytes_estimate(variant, folded);
  };
  const auto [smallest, largest] = std::minmax_element(
      scenario.variants.begin(), scenario.variants.end(),
      [&](const Variant& a, const Variant& b) { return estimate(a) < estimate(b); });
  const auto refuse = [&](const Variant& variant, const std::string& what) {
    const double gpus = static_cast<double>(variant.inputs.nodes) * variant.inputs.node.gpus;
    throw po::error("variant '" + variant.name + "' needs about " +
                    memory_amount(estimate(variant)) + " to simulate (its " +
                    std::to_string(static_cast<long long>(gpus)) + " GPUs and its step's programs" +
                    (folded ? "" : ", every rank replayed") + "), more than " + what +
                    ": simulate a slice of the cluster and scale with a sweep" +
                    (folded ? "" : ", or fold the replicas (without --no-fold)"));
  };
  const double usable = fleetsim::usable_memory_bytes();  // the machine's, or its container's
  if (usable > 0 && estimate(*largest) > usable) {
    refuse(*largest, "the " + memory_amount(usable) + " this process may use");
  }
  if (!options.max_memory.empty() &&
      estimate(*smallest) > fleetsim::parse_size(options.max_memory)) {  // checked by parse_limits
    refuse(*smallest, "--max-memory " + options.max_memory +
                          (scenario.variants.size() > 1 ? ", as every other variant does" : ""));
  }
}

// `report`: the page is written by tools/python/fleetsim_report.py (in the source tree, beside
// the plots it draws with matplotlib), run in place of this process on Debian's python3
// (tools/setup.sh installs its h5py and matplotlib); its exit status is the command's. Throws
// only where Python cannot be started.
[[noreturn]] void run_report(const Options& options) {
  const std::string python = "/usr/bin/python3";
  const std::string script = std::string(FLEETSIM_DATA_DIR) + "/tools/python/fleetsim_report.py";
  std::vector<std::string> arguments{python, script};
  if (!options.output.empty()) arguments.insert(arguments.end(), {"-o", options.output});
  arguments.insert(arguments.end(), {"--", options.file});  // a file named -x.h5 stays a file
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  std::cout.flush();
  ::execv(python.c_str(), argv.data());
  throw fleetsim::ModelError("cannot run " + python + " " + script + " (" + std::strerror(errno) +
                             "): 'report' needs Debian's python3 with python3-h5py and "
                             "python3-matplotlib (tools/setup.sh installs them)");
}

int run_command(const Options& options, const fleetsim::Ranks& ranks) {
  std::optional<tbb::global_control> thread_limit;
  if (options.threads > 0) {
    thread_limit.emplace(tbb::global_control::max_allowed_parallelism,
                         static_cast<std::size_t>(options.threads));
  }
  check_command_options(options);
  if (options.csv && options.json) throw po::error("--csv and --json: one of them");
  if (options.summary && !options.json) throw po::error("--summary shortens --json's output");
  if (options.given.contains("sensitivity") &&
      (options.sensitivity_draws < 2 || options.sensitivity_draws > kMostSensitivityDraws)) {
    throw po::error("--sensitivity takes 2 to " + std::to_string(kMostSensitivityDraws) +
                    " draws (100 make a steady 90% interval)");
  }
  if (options.given.contains("threads") &&
      (options.threads < 1 || options.threads > kMostThreads)) {
    throw po::error("--threads takes 1 to " + std::to_string(kMostThreads) +
                    " (without it, one a core)");
  }
  // Left out, these mean every GPU; written, 0 would mean it silently too.
  for (const auto& [key, count] : {std::pair{"ranks", options.collective.ranks},
                                   std::pair{"gpus-per-node", options.collective.gpus_per_node}}) {
    if (options.given.contains(key) && count < 1) {
      throw po::error("--" + std::string(key) + " takes at least 1 (leave it out for every GPU)");
    }
  }
  if (options.given.contains("bench") &&
      (options.bench_runs < 1 || options.bench_runs > kMostBenchRuns)) {
    throw po::error("--bench takes 1 to " + std::to_string(kMostBenchRuns) +
                    " runs (3 give a median, 5 a steadier one)");
  }
  check_outputs(options, ranks.rank() == 0);
  // The fabric given on the command line (0 in Options: not given), in its range.
  const auto& fabric = options.collective.fabric;
  if (options.given.contains("oversubscription") && !(fabric.oversubscription >= 1)) {
    throw po::error("--oversubscription takes a ratio of at least 1 (1: non-blocking)");
  }
  if (options.given.contains("leaf-ports") && fabric.leaf_ports < 2) {
    throw po::error("--leaf-ports takes at least 2 ports (64 for NDR Quantum-2)");
  }
  // Started before the scenario loads: a limit counts the whole command.
  std::optional<fleetsim::ResourceWatch> watch;
  watch.emplace(fleetsim::parse_limits(options.max_wall, options.max_memory));
  // A stopped run or sweep writes what it finished; other commands end at once, as usual, but
  // for the temporary file of a result being written, which goes with them.
  if (options.command == "run" || options.command == "sweep") {
    fleetsim::stop_on_signals();
  } else {
    fleetsim::stop_ending_process_on_signals();
  }
  if ((options.command == "collective" || options.command == "list") && !options.file.empty()) {
    throw po::error("'" + options.command + "' takes no FILE, got '" + options.file + "'");
  }
  if (options.command == "report") {
    if (options.file.empty()) throw po::error("'report' needs a result file (fleetsim run -o)");
    run_report(options);
  }
  if (options.command == "collective") {
    fleetsim::CollectiveOptions collective = options.collective;
    collective.data_dir = options.data_dir;
    collective.output = options.output;
    collective.csv = options.csv;
    fleetsim::run_collective_command(collective);
    return kOk;
  }
  if (options.command == "calibrate" && !options.calibrate_kernels.empty()) {
    if (!options.file.empty() || !options.collective.node.empty()) {
      throw po::error(
          "'calibrate --kernels DIR' fits a GPU profile: give --gpu, not a LOG or --node");
    }
    for (const std::string& name : options.given) {
      if (name != "kernels" && name != "gpu" && name != "write" && name != "data-dir") {
        throw po::error("--" + name +
                        " belongs to the fit of an nccl-tests LOG, not to "
                        "'calibrate --kernels'");
      }
    }
    fleetsim::KernelCalibrateOptions kernels;
    kernels.data_dir = options.data_dir;
    kernels.dir = options.calibrate_kernels;
    kernels.gpu = options.collective.gpu;
    kernels.write = options.calibrate_write;
    fleetsim::run_kernel_calibrate_command(kernels);
    return kOk;
  }
  if (options.command == "calibrate") {
    if (options.file.empty()) throw po::error("'calibrate' needs an nccl-tests LOG");
    fleetsim::CalibrateOptions calibrate;
    calibrate.data_dir = options.data_dir;
    calibrate.log = options.file;
    calibrate.node = options.collective.node;
    calibrate.nodes = options.collective.nodes;
    calibrate.gpu = options.collective.gpu;
    calibrate.ranks = options.collective.ranks;
    calibrate.algorithm = options.collective.algorithm;
    calibrate.min_bytes = options.calibrate_min_bytes;
    calibrate.fabric = options.collective.fabric;
    calibrate.write = options.calibrate_write;
    calibrate.gpus_per_node = options.collective.gpus_per_node;
    fleetsim::run_calibrate_command(calibrate);
    return kOk;
  }
  if (options.command == "list") {
    print_catalog(fleetsim::list_presets(DataPaths{options.data_dir}));
    return kOk;
  }
  if (options.file.empty()) throw po::error("'" + options.command + "' needs a scenario FILE");
  const Scenario scenario = fleetsim::load_scenario(options.file, DataPaths{options.data_dir});
  if (options.command == "run" || options.command == "sweep" || options.command == "plan") {
    check_memory_estimate(scenario, options);
  }
  if (options.command == "memory") {
    RunReport report = fleetsim::memory_report(scenario);
    std::cout << fleetsim::render_memory(report);
    const bool all_fit = std::all_of(report.variants.begin(), report.variants.end(),
                                     [](const auto& v) { return v.outcome.memory.fits(); });
    return all_fit ? kOk : kSimulationFailed;
  }
  if (options.command == "plan") {
    if (scenario.swept) {
      std::cerr << "error: " << options.file
                << ": plan searches the layouts of one point, and this scenario sweeps (hint: "
                   "plan a copy without its sweep: block)\n";
      return kBadInput;
    }
    return plan_command(scenario, options);
  }
  if (options.command == "validate") {
    std::cout << options.file << ": ok (" << scenario.variants.size() << " variant"
              << (scenario.variants.size() == 1 ? "" : "s") << ")\n";
    return kOk;
  }
  const bool sweep = options.command == "sweep";
  if (sweep && !scenario.swept) {
    std::cerr << "error: " << options.file
              << ": no sweep: block to run (hint: add sweep: {grid: {cluster.nodes: [1, 2, 4]}}, "
                 "or use fleetsim run)\n";
    return kBadInput;
  }
  fleetsim::StepOptions step_options;
  if (!options.trace.empty()) step_options.trace_ranks = kTracedRanks;
  if (options.given.contains("trace-ranks")) {
    step_options.trace_rank_list = parse_rank_list(options.trace_ranks);
    // A rank past a variant's GPUs is the command line's mistake, refused before anything
    // runs (whether a rank is replayed, folding decides as the step is built).
    for (const fleetsim::Variant& variant : scenario.variants) {
      const int layout_ranks = variant.inputs.plan.world_size();
      if (step_options.trace_rank_list.back() < layout_ranks) continue;
      throw po::error("--trace-ranks: rank " + std::to_string(step_options.trace_rank_list.back()) +
                      " is not in variant \"" + variant.name + "\"'s " +
                      std::to_string(layout_ranks) + " ranks (trace ranks 0 to " +
                      std::to_string(layout_ranks - 1) + ")");
    }
  }
  step_options.fold = !options.no_fold;
  if (options.attribute && scenario.swept) {
    std::cerr << "error: " << options.file
              << ": --attribute explains compare: entries, and this scenario sweeps (hint: "
                 "compare two of its points in a compare: list)\n";
    return kBadInput;
  }
  if (options.attribute && scenario.variants.size() < 2) {
    std::cerr << "error: " << options.file
              << ": nothing to attribute, the scenario has no compare: entries (hint: add "
                 "compare: [{name: b200, cluster: {node: dgx-b200}}])\n";
    return kBadInput;
  }
  RunReport report = simulate(scenario, step_options, ranks, options.quiet);
  if (ranks.rank() != 0) return kOk;  // rank 0 has every rank's results and reports them
  const char* const variants = sweep ? "points" : "variants";
  if (report.partial && report.variants.empty()) {
    std::cerr << "fleetsim: " << report.partial->stopped_by << " before any of the " << variants
              << " finished: nothing written\n";
    return fleetsim::exit_code(fleetsim::stop_reason());
  }
  // Attributing against a stand-in for a first variant left out would answer another question.
  const bool baseline_kept = !report.partial || !report.partial->first_variant_left_out;
  if (options.attribute && baseline_kept) {
    fleetsim::attribute_variants(report, scenario.seed, step_options);
  }
  if (options.sensitivity_draws > 0) {
    fleetsim::add_sensitivities(report, scenario.seed, options.sensitivity_draws, step_options);
  }
  // A benchmark repeats a finished simulation under the same limits: a stop ends its
  // repetitions, and the results stand (the exit says why it stopped).
  std::optional<BenchFigures> bench;
  if (options.bench_runs > 0 && !fleetsim::stop_requested()) {
    fleetsim::StepOptions bench_options;
    bench_options.fold = step_options.fold;
    bench = measure_bench(scenario, bench_options, options.bench_runs, ranks);
  }
  // The results are decided here: stopped or not, what follows writes them whole. A limit no
  // longer applies, and Ctrl-C ends the process as usual (its files are written atomically).
  watch.reset();
  fleetsim::stop_ending_process_on_signals();
  fleetsim::StopReason stopped = fleetsim::stop_reason();
  fleetsim::StopReason bench_stopped = fleetsim::StopReason::none;
  if (bench) {
    // Whatever stopped came after the simulation: the benchmark's, not the results'.
    bench_stopped = stopped;
    stopped = fleetsim::StopReason::none;
    fleetsim::clear_stop_request();
  }
  if (stopped != fleetsim::StopReason::none) {
    fleetsim::note_stopped_analyses(report, stopped, options.attribute,
                                    options.sensitivity_draws > 0);
  }
  // Files first: a launcher that ends a stopped process soon after (mpirun) is likelier to
  // find them written. A file that cannot be written fails the command once the report is
  // printed.
  std::exception_ptr write_failure;
  try {
    const fleetsim::OutputLock lock({options.output, options.trace}, fleetsim::say_waiting_for);
    if (!options.output.empty()) fleetsim::write_hdf5(report, options.output);
    if (!options.trace.empty()) {
      fleetsim::write_text_atomically(options.trace, fleetsim::render_trace(report));
    }
  } catch (const fleetsim::ModelError&) {
    write_failure = std::current_exception();
  }
  std::cout << (options.json  ? fleetsim::render_json(report, link_detail(options)) + "\n"
                : options.csv ? fleetsim::render_summary_csv(fleetsim::summary_table(report))
                : sweep       ? fleetsim::render_sweep(report)
                              : fleetsim::render_console(report));
  if (write_failure) std::rethrow_exception(write_failure);
  if (bench) print_bench(*bench);
  if (bench_stopped != fleetsim::StopReason::none) {
    std::cerr << "fleetsim: " << fleetsim::describe(bench_stopped)
              << ": the benchmark's repetitions stopped\n";
    return fleetsim::exit_code(bench_stopped);
  }
  if (stopped != fleetsim::StopReason::none) {
    std::cerr << "fleetsim: " << report.partial->stopped_by << ": the " << report.variants.size()
              << " of " << fleetsim::planned_variants(report) << " " << variants
              << " that finished are reported, marked partial\n";
    return fleetsim::exit_code(stopped);
  }
  // A sweep reports the points that do not fit, or whose run cannot finish, as such: it fails
  // only when none is answered.
  const auto answered = [](const auto& v) {
    return v.outcome.simulated && (!v.run || v.job_result);
  };
  const bool ok = sweep ? std::any_of(report.variants.begin(), report.variants.end(), answered)
                        : std::all_of(report.variants.begin(), report.variants.end(), answered);
  return ok ? kOk : kSimulationFailed;
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<fleetsim::Ranks> ranks;
  try {
    ranks.emplace(argc, argv);
  } catch (const std::invalid_argument& error) {  // launched as copies that are not one job
    std::cerr << "error: " << error.what() << "\n";
    return kBadInput;
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << "\n";
    return kSimulationFailed;
  }
  // Under MPI every rank runs this program; only rank 0 speaks, but for its own errors.
  std::streambuf* const stderr_buffer = std::cerr.rdbuf();
  if (ranks->rank() != 0) {
    std::cout.rdbuf(nullptr);
    std::cerr.rdbuf(nullptr);
  }
  int code = kOk;
  std::string failure;
  try {
    if (argc == 1) {  // no command: the usage, as a mistake
      std::cerr << kUsage;
      return kBadInput;
    }
    bool exit_now = false;
    const Options options = parse_options(argc, argv, exit_now);
    if (exit_now) return kOk;
    const std::vector<std::string> commands{"run",        "sweep",     "validate", "memory", "plan",
                                            "collective", "calibrate", "list",     "report"};
    if (std::find(commands.begin(), commands.end(), options.command) == commands.end()) {
      std::cerr << "fleetsim: unknown command '" << options.command << "' (try --help)\n";
      return kBadInput;
    }
    if (ranks->size() > 1 && options.command != "run" && options.command != "sweep") {
      std::cerr << "fleetsim: '" << options.command
                << "' runs in one process; only run and sweep spread over MPI ranks (start it "
                   "without mpirun)\n";
      return kBadInput;
    }
    if (ranks->size() > 1 && options.bench_runs > 0) {
      std::cerr << "fleetsim: --bench times one process; start it without mpirun\n";
      return kBadInput;
    }
    code = run_command(options, *ranks);
    // Results that did not reach standard output (a full disk, /dev/full) are a failure.
    if (ranks->rank() == 0 && !(std::cout << std::flush)) {
      throw fleetsim::ModelError("cannot write the results to standard output");
    }
    return code;
  } catch (const fleetsim::ScenarioError& error) {
    code = kBadInput;
    failure = std::string("error: ") + error.what();
  } catch (const fleetsim::NcclLogError& error) {
    code = kBadInput;
    failure = std::string("error: ") + error.what();
  } catch (const fleetsim::MicrobenchError& error) {
    code = kBadInput;
    failure = std::string("error: ") + error.what();
  } catch (const po::error& error) {
    code = kBadInput;
    failure = std::string("fleetsim: ") + error.what() + " (try --help)";
  } catch (const fleetsim::Stopped& stopped) {  // a command that writes nothing partial
    code = fleetsim::exit_code(stopped.reason());
    failure = std::string("fleetsim: ") + stopped.what() + ": nothing written";
  } catch (const std::exception& error) {  // ModelError and the rest: the simulation failed
    code = kSimulationFailed;
    failure = std::string("error: ") + error.what();
  }
  std::cerr.rdbuf(stderr_buffer);
  // A bad input is every rank's alike: rank 0 says it and ends the job (the other ranks may be
  // waiting for it in the gather: a failure ends them all); another rank gives it 5 s to, and
  // says it itself if the job still runs then (a problem of its own: a file missing on its
  // node). Control bytes as \xNN: one line.
  if (ranks->size() > 1 && code == kBadInput && ranks->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(5));
  }
  std::cerr << (ranks->rank() != 0 ? "rank " + std::to_string(ranks->rank()) + ": " : "")
            << fleetsim::escaped(failure) << "\n";
  if (ranks->size() > 1) ranks->abort(code);
  return code;
}
