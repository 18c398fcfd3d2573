// run:, with the pricing: and cluster.storage it needs: interruptions (presets under
// calibration/interruptions/, or listed causes), spot capacity, checkpoints, repair and spares.
#include <cctype>
#include <charconv>
#include <cmath>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sim/job/replication.hpp"
#include "sim/scenario/loader.hpp"

namespace fleetsim {

using namespace fields;

namespace {

const Keys kRunKeys = {"interruptions", "checkpoint",     "checkpoint_write", "detection",
                       "restart",       "node_repair",    "hot_spares",       "when_short",
                       "degraded",      "evict_degraded", "step_jitter",      "replications",
                       "spot",          "persist"};
const Keys kDegradationKeys = {"cause", "slows", "fraction", "per_gpu_day", "source"};
const Keys kSpotKeys = {"preemptions_per_node_hour", "trace", "source", "notice",
                        "capacity_return"};
const Keys kSpotTraceKeys = {"source", "hours"};
const Keys kInterruptionPresetKeys = {"name", "description", "source", "gpus", "days", "causes"};
// A cause takes one node out of service unless it says otherwise (nodes_out: 0, or a switch's).
const Keys kCauseCountKeys = {"cause", "count", "nodes_out"};
const Keys kCauseCountRequired = {"cause", "count"};
// A listed cause's rate: per GPU-day, or a component's mean time between failures and the GPUs
// one component serves (1 for a GPU, 8 for a DGX node, 256 for a leaf switch of 32 of them).
const Keys kCauseRateKeys = {"cause",  "per_gpu_day", "mtbf", "gpus_per_component",
                             "source", "nodes_out"};
const Keys kCauseRateRequired = {"cause", "source"};
const Keys kStorageKeys = {"write", "read"};
const Keys kPricingKeys = {"gpu_hour", "spot_gpu_hour"};
// More replications than this is a mistake, not a study: refused before anything runs.
constexpr int kMaxReplications = 1000000;
// Above these an interruption rate or a step's spread is a mistake, not a fleet: one
// interruption a GPU-second, one preemption a node-second, a step time's standard deviation
// above its mean (the measured spreads are 1-5%).
constexpr double kMostPerGpuDay = 86400;
constexpr double kMostPreemptionsPerNodeHour = 3600;
constexpr double kMostStepJitter = 1;

// One of a run's times: at most 10 years, what a replication's clock holds
// (sim/job/replication.hpp).
double run_time(const Field& f, Zero zero = Zero::rejected) {
  const double seconds = read_quantity(f, Quantity::duration, zero);
  if (seconds > kLongestDuration_s) {
    fail(f, "expected at most 10 years, got " + describe(f.node),
         "a run's times (checkpoints, detection, restart, repairs, spot notice and return) are "
         "each under 10 years");
  }
  return seconds;
}

// `value` as 3.8e+24.
std::string scientific(double value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value, std::chars_format::scientific, 1);
  return std::string(text, end.ptr);
}

// A number >= 0 and at most `most`, with what that ceiling means.
double read_at_most(const Field& f, double most, const std::string& why) {
  const double value = read_non_negative(f);
  if (!(value <= most)) {
    fail(f, "expected at most " + rounded(most, most < 10 ? 1 : 0) + ", got " + describe(f.node),
         why);
  }
  return value;
}

// Interruptions per GPU-day of a listed cause: given, or one component's failures per day
// (24 h over its MTBF) over the GPUs it serves.
double cause_rate(const Field& cause) {
  const auto rate = find(cause, "per_gpu_day");
  const auto mtbf = find(cause, "mtbf");
  if (rate.has_value() == mtbf.has_value()) {
    fail(cause, "a cause needs per_gpu_day or mtbf, one of them",
         "per_gpu_day: 0.0005, or mtbf: 50000h with gpus_per_component: 8 (a node's)");
  }
  const auto gpus = find(cause, "gpus_per_component");
  if (rate) {
    if (gpus) fail(*gpus, "gpus_per_component goes with an mtbf", "remove it, or give mtbf");
    return read_at_most(*rate, kMostPerGpuDay, "one interruption a GPU-second at the most");
  }
  // A mean of a lifetime's distribution, not a time in the run: a million hours is fine.
  const double mtbf_s = read_quantity(*mtbf, Quantity::duration);
  if (!gpus) {
    fail(cause, "an MTBF needs gpus_per_component: the GPUs one component serves",
         "1 for a GPU, 8 for an 8-GPU node, 256 for a switch under 32 such nodes");
  }
  const double per_gpu_day = 86400 / mtbf_s / read_positive(*gpus);
  if (!(per_gpu_day <= kMostPerGpuDay)) {
    fail(*mtbf,
         "an MTBF of " + describe(mtbf->node) + " over its GPUs is " + scientific(per_gpu_day) +
             " interruptions a GPU-day, more than one a GPU-second",
         "component MTBFs are thousands to millions of hours, e.g. mtbf: 50000h");
  }
  return per_gpu_day;
}

int nodes_out(const Field& cause) {
  const auto field = find(cause, "nodes_out");
  if (!field) return 1;
  // More than a job's nodes is all of them (a switch over more nodes than the job has), but
  // not more than any cluster fleetsim simulates.
  const int nodes = read_int(*field, 0);
  if (nodes > kMaxGpus) {
    fail(*field,
         "expected at most " + rounded(kMaxGpus, 0) +
             " nodes (the most GPUs fleetsim "
             "simulates), got " +
             describe(field->node),
         "nodes_out is what one interruption takes out: 1 for a node's fault, the nodes "
         "under a switch for a switch's");
  }
  return nodes;
}

// A cause's name, one a list: the results report each cause by its name.
std::string cause_name(const Field& entry, std::set<std::string>& named) {
  const Field field = require(entry, "cause");
  std::string name = read_name(field);
  if (!named.insert(name).second) {
    fail(field, "cause " + in_quotes(name) + " is listed twice",
         "one entry a cause: add their rates, or name them apart");
  }
  return name;
}

// Interruption rates from a published run's counts by cause: count / (GPUs x days) per GPU-day.

}  // namespace

// Interruption rates from a published run's counts by cause: count / (GPUs x days) per GPU-day.
std::vector<InterruptionCause> Loader::interruption_preset(const Field& name) {
  const Preset& p =
      preset(name, data_.root / "calibration" / "interruptions", "interruption preset");
  const Field root{p.root, &p.doc, ""};
  expect_map(root, kInterruptionPresetKeys);
  require_keys(root, kInterruptionPresetKeys);
  const Field name_field = require(root, "name");
  if (read_string(name_field) != read_string(name)) {
    fail(name_field,
         "the preset is named " + in_quotes(read_string(name_field)) + " in a file named " +
             in_quotes(read_string(name) + ".yaml"),
         "make the name match the file name");
  }
  const std::string source = read_provenance(require(root, "source"));
  const double gpus = read_positive(require(root, "gpus"));
  const double days = read_positive(require(root, "days"));
  std::vector<InterruptionCause> causes;
  std::set<std::string> named;
  for (const Field& entry : read_list(require(root, "causes"), 0, "causes")) {
    expect_map(entry, kCauseCountKeys);
    require_keys(entry, kCauseCountRequired);
    const double count = read_non_negative(require(entry, "count"));
    causes.push_back({cause_name(entry, named), count / (gpus * days), source, nodes_out(entry),
                      std::sqrt(count) / (gpus * days)});
  }
  return causes;
}

// A trace of spot preemptions: the hours from the job's start at which one of its nodes was
// preempted, ascending, with the trace's source. Relative to the scenario file.
std::vector<double> Loader::preemption_trace(const Field& path_field, std::string& source) {
  const Preset& trace = file_named_by(path_field, "preemption trace",
                                      "give the path of a YAML file {source, hours: [...]}, "
                                      "relative to the scenario file");
  const Field root{trace.root, &trace.doc, ""};
  expect_map(root, kSpotTraceKeys);
  require_keys(root, kSpotTraceKeys);
  source = read_provenance(require(root, "source"));
  std::vector<double> seconds;
  for (const Field& entry : read_list(require(root, "hours"), 0, "preemption hours")) {
    const double hours = read_non_negative(entry);
    if (!seconds.empty() && hours * 3600 < seconds.back()) {
      fail(entry,
           "preemption times must not go back: " + describe(entry.node) + " after " +
               std::to_string(seconds.back() / 3600) + " h",
           "list the hours of each preemption from the job's start, ascending");
    }
    seconds.push_back(hours * 3600);
  }
  return seconds;
}

// The preset's description, once its causes have been read and checked.
std::string Loader::interruption_preset_description(const Field& name) {
  interruption_preset(name);
  const Preset& p =
      preset(name, data_.root / "calibration" / "interruptions", "interruption preset");
  return read_string(require(Field{p.root, &p.doc, ""}, "description"));
}

// The run: block with what it needs from the rest of the file: the tokens to train, the
// checkpoint storage and, if given, the price.
std::optional<RunSpec> Loader::parse_run(const Field& root) {
  RunSpec run;
  // Storage and pricing are checked wherever they appear; only a run uses them.
  const auto storage = find(require(root, "cluster"), "storage");
  if (storage) {
    expect_map(*storage, kStorageKeys);
    require_keys(*storage, kStorageKeys);
    run.storage_write_bytes_per_s = read_quantity(require(*storage, "write"), Quantity::bandwidth);
    run.storage_read_bytes_per_s = read_quantity(require(*storage, "read"), Quantity::bandwidth);
  }
  if (const auto pricing = find(root, "pricing")) {
    expect_map(*pricing, kPricingKeys);
    run.usd_per_gpu_hour =
        read_quantity(require(*pricing, "gpu_hour"), Quantity::hourly_price, Zero::allowed);
    run.priced = true;
    if (const auto spot_price = find(*pricing, "spot_gpu_hour")) {
      run.spot_usd_per_gpu_hour = read_quantity(*spot_price, Quantity::hourly_price, Zero::allowed);
      run.spot_priced = true;
    }
  }
  const auto block = find(root, "run");
  if (!block) return std::nullopt;
  expect_map(*block, kRunKeys);
  const Field training = require(root, "training");
  const auto tokens = find(training, "tokens");
  if (!tokens) {
    fail(training, "a run needs training.tokens, the tokens it trains",
         "add tokens: under training, e.g. tokens: 15e12");
  }
  run.tokens = read_positive(*tokens);
  if (!storage) {
    fail(require(root, "cluster"), "a run writes checkpoints: it needs cluster.storage",
         "add storage: {write: 200GB/s, read: 400GB/s} under cluster (the storage's aggregate "
         "rates)");
  }
  const auto listed = find(*block, "interruptions");
  if (!listed) {
    fail(*block, "a run needs its interruptions",
         "interruptions: llama3-405b (a preset under calibration/interruptions/), or a list of "
         "{cause, per_gpu_day, source}");
  }
  const Field interruptions = *listed;
  if (interruptions.node.IsScalar()) {
    run.interruptions = read_string(interruptions);
    run.causes = interruption_preset(interruptions);
  } else {
    run.interruptions = "listed";
    std::set<std::string> named;
    for (const Field& entry : read_list(interruptions, 0, "causes")) {
      expect_map(entry, kCauseRateKeys);
      require_keys(entry, kCauseRateRequired);
      run.causes.push_back({cause_name(entry, named), cause_rate(entry),
                            read_provenance(require(entry, "source")), nodes_out(entry)});
    }
  }
  // One scalar, so that a compare entry replaces it whole: young_daly, "500 steps" or a
  // duration of training between checkpoints.
  if (const auto checkpoint = find(*block, "checkpoint")) {
    const std::string text = scalar(*checkpoint, "young_daly, a step count or a duration");
    const std::string hint = "checkpoint: young_daly, 500 steps (of training) or 30min";
    if (text == "young_daly") {
      run.policy = {CheckpointPolicy::Kind::young_daly, 0};
    } else if (text.ends_with("steps")) {
      std::string count = text.substr(0, text.size() - 5);
      while (!count.empty() && count.back() == ' ') count.pop_back();
      const auto steps = parse_whole<int>(count);
      if (!steps || *steps < 1) {
        fail(*checkpoint, "expected a positive number of steps, got " + describe(checkpoint->node),
             hint);
      }
      run.policy = {CheckpointPolicy::Kind::every_steps, static_cast<double>(*steps)};
    } else {
      // Text that is no number at all is none of the three; a number with a unit is read as a
      // duration, with that reading's own message where it is not one.
      if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text.front())) ||
                            text.front() == '.' || text.front() == '+')) {
        fail(*checkpoint,
             "expected young_daly, a step count or a duration, got " + describe(checkpoint->node),
             hint);
      }
      const double seconds = run_time(*checkpoint, Zero::allowed);
      if (!(seconds > 0)) fail(*checkpoint, "a checkpoint interval must be positive", hint);
      run.policy = {CheckpointPolicy::Kind::every_seconds, seconds};
    }
  }
  if (const auto spot = find(*block, "spot")) {
    expect_map(*spot, kSpotKeys);
    require_keys(*spot, {"notice", "capacity_return"});
    // A rate, or a trace of preemption times with its own source.
    const auto rate = find(*spot, "preemptions_per_node_hour");
    const auto trace = find(*spot, "trace");
    if (rate.has_value() == trace.has_value()) {
      fail(*spot, "spot capacity needs preemptions_per_node_hour or a trace, one of them",
           "preemptions_per_node_hour: 0.0001, or trace: preemptions.yaml (hours of each "
           "preemption from the job's start)");
    }
    SpotCapacity capacity;
    if (rate) {
      capacity.preemptions_per_node_hour = read_at_most(*rate, kMostPreemptionsPerNodeHour,
                                                        "one preemption a node-second at the most");
      capacity.source = read_provenance(require(*spot, "source"));
    } else {
      if (const auto source = find(*spot, "source")) {
        fail(*source, "a trace names its own source", "move source: into the trace file");
      }
      capacity.trace_s = preemption_trace(*trace, capacity.source);
    }
    capacity.notice_s = run_time(require(*spot, "notice"), Zero::allowed);
    capacity.capacity_return_s = run_time(require(*spot, "capacity_return"), Zero::allowed);
    run.spot = std::move(capacity);
    if (run.priced && !run.spot_priced) {
      fail(*spot, "a priced run on spot capacity needs pricing.spot_gpu_hour",
           "add spot_gpu_hour: to pricing, e.g. {gpu_hour: 2.95USD/h, spot_gpu_hour: 1.50USD/h}");
    }
  }
  if (const auto write = find(*block, "checkpoint_write")) {
    const std::string mode = read_choice(*write, {"blocking", "async", "in_memory"});
    run.write = mode == "async"       ? CheckpointWrite::async
                : mode == "in_memory" ? CheckpointWrite::in_memory
                                      : CheckpointWrite::blocking;
    if (run.write == CheckpointWrite::in_memory && !find(*block, "persist")) {
      fail(*write, "in-memory checkpoints also go to storage now and then: the run needs persist",
           "add persist: 1h (training between writes to storage)");
    }
  }
  // Read wherever it is (a compare entry may turn in-memory checkpoints off); only they use it.
  if (const auto persist = find(*block, "persist")) {
    run.persist_every_s = run_time(*persist);
  }
  run.detection_s = run_time(require(*block, "detection"), Zero::allowed);
  run.restart_s = run_time(require(*block, "restart"), Zero::allowed);
  if (const auto repair = find(*block, "node_repair")) {
    run.node_repair_s = run_time(*repair, Zero::allowed);
  }
  if (const auto policy = find(*block, "when_short")) {
    run.when_short = read_choice(*policy, {"wait", "shrink"}) == "shrink" ? ShortagePolicy::shrink
                                                                          : ShortagePolicy::wait;
    if (!(run.node_repair_s > 0)) {
      fail(*policy, "a run short of nodes needs node_repair: how long a node stays out",
           "add node_repair: 8h");
    }
  }
  if (const auto spares = find(*block, "hot_spares")) {
    run.hot_spares = read_int(*spares, 0);
    if (run.hot_spares > 0 && !(run.node_repair_s > 0)) {
      fail(*spares, "hot spares replace nodes under repair: the run needs node_repair",
           "add node_repair: 8h (how long a node a hardware fault takes out stays out)");
    }
  }
  if (const auto degraded = find(*block, "degraded")) {
    std::set<std::string> named;
    for (const Field& entry : read_list(*degraded, 0, "degradations")) {
      expect_map(entry, kDegradationKeys);
      require_keys(entry, kDegradationKeys);
      Degradation degradation;
      degradation.name = cause_name(entry, named);
      degradation.kind = read_choice(require(entry, "slows"), {"compute", "network"}) == "network"
                             ? Degradation::Kind::network
                             : Degradation::Kind::compute;
      // Degraded, hardware still works: a GPU at most 100 times slower, a link keeping 1% of
      // its bandwidth or more. Past that it is out of service (an interruption cause), and its
      // step's kernels and transfers would outlast the integer clock as the floors on rates
      // (sim/scenario/units.hpp) guard against.
      const Field fraction = require(entry, "fraction");
      degradation.fraction = read_positive(fraction);
      const bool network = degradation.kind == Degradation::Kind::network;
      if (!(degradation.fraction <= (network ? 0.99 : 100))) {
        fail(fraction,
             network ? "a degraded link keeps part of its bandwidth: the fraction lost is at "
                       "most 0.99"
                     : "expected at most 100, got " + describe(fraction.node),
             network ? "fraction: 0.5 for a 400 Gb/s link running at 200"
                     : "kernels 100 times slower are a GPU out of service: list it as an "
                       "interruption cause");
      }
      degradation.per_gpu_day = read_at_most(require(entry, "per_gpu_day"), kMostPerGpuDay,
                                             "one degradation a GPU-second at the most");
      degradation.source = read_provenance(require(entry, "source"));
      run.degradations.push_back(std::move(degradation));
    }
  }
  if (const auto jitter = find(*block, "step_jitter")) {
    run.step_jitter = read_at_most(*jitter, kMostStepJitter,
                                   "step_jitter is each rank's step-time coefficient of "
                                   "variation: measured ones are 0.01 to 0.05");
  }
  if (const auto evict = find(*block, "evict_degraded")) {
    run.evict_degraded_after_s = run_time(*evict, Zero::allowed);
  }
  if (const auto replications = find(*block, "replications")) {
    run.replications = read_int(*replications, 1);
    if (run.replications > kMaxReplications) {
      fail(*replications,
           "more than " + std::to_string(kMaxReplications) + " replications is refused",
           "a thousand give a P99 to a few percent");
    }
  }
  return run;
}

void Loader::check_run_against_job(const Field& root, const Variant& variant) {
  const RunSpec& run = *variant.run;
  const double steps = training_steps(run.tokens, variant.inputs.training);
  if (!(steps <= kMostSteps)) {
    fail(require(require(root, "training"), "tokens"),
         "the run would take " + scientific(steps) + " steps, more than the 10^15 it simulates",
         "tokens is what the whole run trains, e.g. 15e12; a step trains global_batch x seq_len");
  }
  // A checkpoint's write and a restart's read, as the run's job takes them: one that outlasts
  // what a run's time may be is refused at its storage rate.
  const StepInputs& in = variant.inputs;
  const CheckpointTimes times =
      checkpoint_times(run, in.model, in.training, in.plan, in.node, in.nodes);
  const std::pair<const char*, double> moves[] = {{"write", times.write_s},
                                                  {"read", times.restore_s}};
  for (const auto& [key, seconds] : moves) {
    if (!(seconds <= kLongestDuration_s)) {
      const double years = seconds / kSecondsPerYear;
      fail(require(require(require(root, "cluster"), "storage"), key),
           std::string("a checkpoint's ") + key + " would take " +
               (years < 1e6 ? rounded(years, 1) : scientific(years)) +
               " years at this rate (or the nodes' NICs, where slower), more than the 10 any "
               "of a run's times may take",
           "parallel file systems move tens of GB/s: write: 20GB/s");
    }
  }
  const double paid_gpus = (static_cast<double>(in.nodes) + run.hot_spares) * in.node.gpus;
  if (paid_gpus > kMaxGpus) {
    fail(require(require(root, "run"), "hot_spares"),
         std::to_string(run.hot_spares) + " hot spares: with the job's " +
             std::to_string(variant.inputs.nodes) +
             (variant.inputs.nodes == 1 ? " node, " : " nodes, ") + rounded(paid_gpus, 0) +
             " GPUs paid, more than fleetsim simulates (at most " + rounded(kMaxGpus, 0) + ")",
         "spares are nodes kept idle to replace the job's own under repair: a few percent of "
         "them");
  }
}

}  // namespace fleetsim
