#include "sim/job/job.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/errors.hpp"
#include "sim/engine/stop.hpp"
#include "sim/engine/time.hpp"
#include "sim/job/replication.hpp"
#include "workloads/layout/sharding.hpp"
#include "workloads/lora_ops.hpp"
#include "workloads/precision.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

constexpr double kZ99 = 2.5758293035489004;  // two-sided 99% normal quantile
// A segment (or the downtime) that an interruption cuts short e^(rate x length) times on average
// before one gets through: past e^kMaxExposure (about 22,000 tries) the run never ends in
// practice, and is refused rather than simulated.
constexpr double kMaxExposure = 10;

void check(const JobSpec& job) {
  if (!(job.steps >= 1) || !(job.step_s > 0) || !std::isfinite(job.steps * job.step_s) ||
      job.gpus < 1) {
    throw ModelError("a run needs at least one step, a positive step time and GPUs");
  }
  for (const double seconds :
       {job.checkpoint_write_s, job.restore_s, job.detection_s, job.restart_s}) {
    if (!(seconds >= 0) || !std::isfinite(seconds)) {
      throw ModelError("checkpoint, restore, detection and restart times must be finite and >= 0");
    }
  }
  for (const InterruptionCause& cause : job.causes) {
    if (!(cause.per_gpu_day >= 0)) {
      throw ModelError("interruption cause " + cause.name + " has a negative rate");
    }
  }
  if (job.policy.kind != CheckpointPolicy::Kind::young_daly && !(job.policy.value > 0)) {
    throw ModelError("a checkpoint interval must be positive");
  }
  if (!(job.checkpoint_copy_s >= 0) || !std::isfinite(job.checkpoint_copy_s) ||
      !(job.node_repair_s >= 0) || !std::isfinite(job.node_repair_s) || job.hot_spares < 0) {
    throw ModelError("checkpoint copy and node repair times must be finite and >= 0, spares too");
  }
  for (const auto& [degradation, step_s] : job.degradations) {
    if (!(degradation.fraction >= 0) || !(degradation.per_gpu_day >= 0) || !(step_s > 0) ||
        !std::isfinite(step_s)) {
      throw ModelError("degradation " + degradation.name +
                       " needs a fraction and a rate >= 0 and its step time");
    }
  }
  if (job.evict_degraded_after_s && !(*job.evict_degraded_after_s >= 0)) {
    throw ModelError("degraded nodes are evicted after a time >= 0");
  }
  if (job.nodes < 1 || job.replicas < 1 || !(job.shrunk_step_s >= 0) ||
      !std::isfinite(job.shrunk_step_s)) {
    throw ModelError("a run needs nodes and replicas, and a shrunk step time >= 0");
  }
  for (const InterruptionCause& cause : job.causes) {
    if (cause.nodes_out < 0) {
      throw ModelError("interruption cause " + cause.name + " takes a negative number of nodes");
    }
  }
  if (job.write == CheckpointWrite::in_memory &&
      (job.spot || job.nodes < 2 || !(job.persist_every_s > 0) || !(job.peer_copy_s >= 0) ||
       !(job.peer_restore_s >= 0))) {
    throw ModelError(
        "in-memory checkpoints need two nodes or more, a persist interval and no spot capacity "
        "(reclaimed nodes take the peers' copies with them)");
  }
  if (job.hot_spares > 0 && !(job.node_repair_s > 0)) {
    throw ModelError("hot spares need a node repair time: how long a node taken out stays out");
  }
  // What integer time holds (sim/job/replication.hpp says why), the steps as rounded there.
  // The times a scenario gives or its storage and links imply (the loader bounds them: past
  // 10 years, a mistake in the input), then the training the simulated step implies (an answer:
  // the run cannot finish).
  double longest =
      std::max({job.checkpoint_write_s, job.checkpoint_copy_s, job.peer_copy_s, job.peer_restore_s,
                job.persist_every_s, job.restore_s, job.detection_s, job.restart_s,
                job.node_repair_s, job.evict_degraded_after_s.value_or(0.0)});
  if (job.spot) longest = std::max({longest, job.spot->notice_s, job.spot->capacity_return_s});
  if (!(longest <= kLongestDuration_s) || !(job.steps <= kMostSteps)) {
    throw ModelError(
        "a run's steps (at most 10^15) and each of its times (checkpoint write, copy and "
        "restore, persist interval, detection, restart, node repair, eviction, spot notice and "
        "capacity return) must be under 10 years");
  }
  const auto run_of = [&](double step_s) { return job.steps * from_seconds(step_s).seconds(); };
  double training = std::max(run_of(job.step_s), run_of(job.shrunk_step_s));
  for (const DegradedStep& degraded : job.degradations) {
    training = std::max(training, run_of(degraded.step_s));
  }
  if (!(training <= kLongestDuration_s)) {
    throw RunCannotFinish("its " + std::to_string(static_cast<long long>(job.steps)) +
                          " steps would train for over 10 years");
  }
  if (job.spot && (!(job.spot->preemptions_per_node_hour >= 0) || !(job.spot->notice_s >= 0) ||
                   !(job.spot->capacity_return_s >= 0) ||
                   !std::isfinite(job.spot->capacity_return_s) || job.nodes < 1)) {
    throw ModelError("spot capacity needs a preemption rate, a notice and a capacity delay >= 0");
  }
}

// At the longest, from the start of `training_s` of training to the checkpoint after it being
// written: the training, or the previous checkpoint's drain if longer (the copy waits for it;
// it ends within one drain), then the stall and the drain.
double until_written_s(const JobSpec& job, double training_s) {
  return std::max(training_s, drain_s(job)) + checkpoint_stall_s(job) + drain_s(job);
}

// Refuses a run whose segments or downtime interruptions would almost never let through.
// `rate`: interruptions per second; `losing_rate`: those and the preemptions whose notice has
// no room for an emergency checkpoint, which cut a segment short as well.
void check_exposure(const JobSpec& job, double interval_steps, double rate, double losing_rate) {
  // At the slowest the job can run: with degraded hardware, one replica short.
  double step_s = job.step_s;
  for (const DegradedStep& degraded : job.degradations) {
    step_s = std::max(step_s, degraded.step_s);
  }
  if (job.when_short == ShortagePolicy::shrink && job.replicas > 1) {
    step_s *= static_cast<double>(job.replicas) / (job.replicas - 1);
  }
  const double segment = until_written_s(job, interval_steps * step_s);
  const double downtime = job.detection_s + job.restart_s + job.restore_s;
  double exposure = std::max(losing_rate * segment, rate * downtime);
  if (job.write == CheckpointWrite::in_memory) {
    // A fault of several nodes throws the job back to storage, written every persist interval;
    // and the last write to storage needs a stretch without interruptions.
    const double several_rate = per_gpu_day_taking(job, 2) * job.gpus / kSecondsPerDay;
    exposure =
        std::max({exposure, several_rate * (job.persist_every_s + job.checkpoint_write_s + segment),
                  rate * job.checkpoint_write_s});
  }
  if (exposure > kMaxExposure) {
    throw RunCannotFinish(
        "with a segment of " + std::to_string(segment / 3600) +
        " h between checkpoints and a downtime of " + std::to_string(downtime / 3600) +
        " h, interruptions (and preemptions with too short a notice) every " +
        std::to_string(1 / losing_rate / 3600) + " h would cut them short about e^" +
        std::to_string(exposure) +
        " times before one got through: checkpoint more often, or check the rates and the "
        "downtime");
  }
  // Arrivals while the job waits for capacity or a repaired node are drawn and skipped: bound
  // that work too.
  const double skipped = losing_rate * (job.spot ? job.spot->capacity_return_s : 0.0);
  if (skipped > 1e6) {
    throw RunCannotFinish("a capacity return of " +
                          std::to_string(job.spot->capacity_return_s / 3600) +
                          " h is too long to simulate against these rates");
  }
  if (rate * job.node_repair_s > 1e6) {
    throw RunCannotFinish("a node repair of " + std::to_string(job.node_repair_s / 3600) +
                          " h is too long to simulate against these rates");
  }
}

double percentile(const std::vector<double>& sorted, double fraction) {
  // Nearest rank: the smallest sample with at least `fraction` of them at or below it.
  const auto rank = static_cast<std::size_t>(std::ceil(fraction * sorted.size()));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace

double expected_max_of_normals(int n) {
  if (n < 1) throw ModelError("the maximum of no draws");
  if (n == 1) return 0;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1), by Simpson's rule over [-12, 12], the
  // upper tail's Phi as 1 - Q so that Phi^(n-1) keeps its precision for large n.
  constexpr int kIntervals = 24000;
  constexpr double kFrom = -12;
  constexpr double kTo = 12;
  const double h = (kTo - kFrom) / kIntervals;
  const auto integrand = [n](double x) {
    const double density = std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    const double upper_tail = 0.5 * std::erfc(x / std::numbers::sqrt2);
    return x * n * density * std::exp((n - 1) * std::log1p(-upper_tail));
  };
  double sum = integrand(kFrom) + integrand(kTo);
  for (int i = 1; i < kIntervals; ++i) sum += (i % 2 == 1 ? 4 : 2) * integrand(kFrom + i * h);
  return sum * h / 3;
}

double synchronous_jitter_factor(double cv, int ranks) {
  return 1 + cv * expected_max_of_normals(ranks);
}

std::string to_string(CheckpointWrite write) {
  switch (write) {
    case CheckpointWrite::blocking: return "blocking";
    case CheckpointWrite::async: return "async";
    case CheckpointWrite::in_memory: return "in_memory";
  }
  return "blocking";
}

double paid_gpus(const JobSpec& job) {
  return job.gpus + static_cast<double>(job.hot_spares) * job.gpus / job.nodes;
}

double run_cost_usd(const JobSpec& job, double wall_s) {
  return wall_s * paid_gpus(job) / kSecondsPerHour * job.usd_per_gpu_hour;
}

double checkpoint_stall_s(const JobSpec& job) {
  return job.write == CheckpointWrite::blocking ? job.checkpoint_write_s : job.checkpoint_copy_s;
}

double interruptions_per_second(const JobSpec& job) {
  return per_gpu_day_taking(job, 0) * job.gpus / kSecondsPerDay;
}

double young_daly_interval_s(double checkpoint_s, double mtbf_s) {
  if (!(checkpoint_s < 2 * mtbf_s)) return mtbf_s;
  const double ratio = checkpoint_s / (2 * mtbf_s);
  return std::sqrt(2 * checkpoint_s * mtbf_s) * (1 + std::sqrt(ratio) / 3 + ratio / 9) -
         checkpoint_s;
}

namespace {

// Interruptions, and preemptions whose notice may have no room for the step in progress and an
// emergency checkpoint: what loses work, per second.
double losing_rate(const JobSpec& job) {
  // An emergency checkpoint follows the step in progress.
  const bool notice_saves = job.spot && job.spot->notice_s >= until_written_s(job, job.step_s);
  return interruptions_per_second(job) + (notice_saves ? 0.0 : preemptions_per_second(job));
}

}  // namespace

double checkpoint_interval_steps(const JobSpec& job) {
  double steps = 0;
  switch (job.policy.kind) {
    case CheckpointPolicy::Kind::every_steps: steps = job.policy.value; break;
    case CheckpointPolicy::Kind::every_seconds: steps = job.policy.value / job.step_s; break;
    case CheckpointPolicy::Kind::young_daly: {
      const double rate = losing_rate(job);
      if (!(rate > 0)) return job.steps;  // nothing fails: one checkpoint, at the end
      // What a checkpoint costs is the time training stands still for it. Asynchronous ones
      // no more often than their writes drain: below that interval each waits for the last
      // one's write, and a shorter interval only stalls more for the same loss per failure.
      steps = std::max(young_daly_interval_s(checkpoint_stall_s(job), 1 / rate), drain_s(job)) /
              job.step_s;
      break;
    }
  }
  return std::clamp(std::round(steps), 1.0, job.steps);
}

double daly_expected_wall_s(const JobSpec& job) {
  check(job);
  if (job.write != CheckpointWrite::blocking || job.spot ||
      (job.node_repair_s > 0 && per_gpu_day_taking(job, 1) > 0)) {
    throw ModelError("Daly's closed form is for blocking checkpoints without waits for capacity");
  }
  const double rate = interruptions_per_second(job);
  const double interval = checkpoint_interval_steps(job);
  const double downtime = job.detection_s + job.restart_s + job.restore_s;
  const auto segment_s = [&](double steps) {
    const double length = steps * job.step_s + job.checkpoint_write_s;
    if (!(rate > 0)) return length;
    return std::exp(rate * downtime) * std::expm1(rate * length) / rate;
  };
  const double full = std::floor(job.steps / interval);
  const double rest = job.steps - full * interval;
  return full * segment_s(interval) + (rest > 0 ? segment_s(rest) : 0.0);
}

SampleSummary summarise(std::vector<double> samples) {
  SampleSummary summary;
  if (samples.empty()) return summary;
  double sum = 0;
  for (const double x : samples) sum += x;
  const double n = static_cast<double>(samples.size());
  summary.mean = sum / n;
  if (samples.size() > 1) {
    double squares = 0;
    for (const double x : samples) squares += (x - summary.mean) * (x - summary.mean);
    summary.ci99_half_width = kZ99 * std::sqrt(squares / (n - 1) / n);
  }
  std::sort(samples.begin(), samples.end());
  summary.p50 = percentile(samples, 0.50);
  summary.p90 = percentile(samples, 0.90);
  summary.p99 = percentile(samples, 0.99);
  return summary;
}

JobResult simulate_job(const JobSpec& job, int replications, std::uint64_t seed,
                       const std::function<void()>& replication_done, OnStop on_stop) {
  check(job);
  if (replications < 1) throw ModelError("a Monte Carlo needs at least one replication");
  JobResult result;
  const double rate = interruptions_per_second(job);
  result.mtbf_s = rate > 0 ? 1 / rate : std::numeric_limits<double>::infinity();
  result.interval_steps = checkpoint_interval_steps(job);
  check_exposure(job, result.interval_steps, rate, losing_rate(job));
  result.useful_s = job.steps * job.step_s;
  result.replications.resize(static_cast<std::size_t>(replications));
  std::vector<char> finished(result.replications.size(), 0);  // not vector<bool>: shared bits
  const ReplicationTimes times = replication_times(job);
  tbb::parallel_for(0, replications, [&](int i) {
    if (stop_requested()) return;
    result.replications[static_cast<std::size_t>(i)] =
        replicate(job, times, result.interval_steps, rate, seed, static_cast<std::uint64_t>(i));
    finished[static_cast<std::size_t>(i)] = 1;
    if (replication_done) replication_done();
  });
  // Stopped: the replications up to the first one not finished, which are exactly those a run
  // of that many replications draws.
  const auto done =
      static_cast<std::size_t>(std::find(finished.begin(), finished.end(), 0) - finished.begin());
  if (done < finished.size() && (done == 0 || on_stop == OnStop::throw_stopped)) throw Stopped();
  result.replications.resize(done);
  const double gpus = paid_gpus(job);
  const double tokens = job.steps * job.tokens_per_step;
  std::vector<double> wall, goodput, interruptions, preemptions, lost, node_wait, shrunk, regrows,
      degraded, evictions, memory_lost, cost, per_million_tokens, per_checkpoint;
  for (const JobReplication& run : result.replications) {
    wall.push_back(run.wall_s);
    goodput.push_back(result.useful_s / run.wall_s);
    interruptions.push_back(static_cast<double>(run.interruptions));
    preemptions.push_back(static_cast<double>(run.preemptions));
    lost.push_back((run.wall_s * gpus - result.useful_s * job.gpus) / kSecondsPerHour);
    node_wait.push_back(run.node_wait_s);
    shrunk.push_back(run.shrunk_s);
    regrows.push_back(static_cast<double>(run.regrows));
    degraded.push_back(run.degraded_s);
    evictions.push_back(static_cast<double>(run.evictions));
    memory_lost.push_back(static_cast<double>(run.memory_lost));
    const double usd = run_cost_usd(job, run.wall_s);
    cost.push_back(usd);
    if (tokens > 0) per_million_tokens.push_back(usd / tokens * 1e6);
    const auto scheduled = std::max<std::int64_t>(1, run.checkpoints - run.emergency_checkpoints);
    per_checkpoint.push_back(run.checkpoint_stall_s * job.gpus / kSecondsPerHour *
                             job.usd_per_gpu_hour / static_cast<double>(scheduled));
  }
  result.wall_s = summarise(std::move(wall));
  result.goodput = summarise(std::move(goodput));
  result.interruptions = summarise(std::move(interruptions));
  result.preemptions = summarise(std::move(preemptions));
  result.lost_gpu_hours = summarise(std::move(lost));
  result.node_wait_s = summarise(std::move(node_wait));
  result.shrunk_s = summarise(std::move(shrunk));
  result.regrows = summarise(std::move(regrows));
  result.degraded_s = summarise(std::move(degraded));
  result.evictions = summarise(std::move(evictions));
  result.memory_lost = summarise(std::move(memory_lost));
  result.cost_usd = summarise(std::move(cost));
  result.usd_per_million_tokens = summarise(std::move(per_million_tokens));
  result.usd_per_checkpoint = summarise(std::move(per_checkpoint));
  return result;
}

double checkpoint_bytes(const ModelSpec& model, const TrainingSpec& training,
                        const ParallelPlan& plan) {
  // Per trained parameter: the BF16 weight (unless the FP32 master is the parameter), and the
  // optimizer's FP32 master weight and moments.
  const double per_trained = (Sharding(plan).master_is_parameter() ? 0.0 : kBf16Bytes) +
                             optimizer_state_bytes_per_parameter(training.optimizer);
  const double trained = training.lora ? lora_parameters_per_layer(model, training) * model.layers
                                       : model.parameters();
  return trained * per_trained;
}

double restore_bytes(const ModelSpec& model, const TrainingSpec& training,
                     const ParallelPlan& plan) {
  const double base = training.lora ? model.parameters() * kBf16Bytes : 0.0;
  return checkpoint_bytes(model, training, plan) + base;
}

double checkpoint_bytes_per_s(double storage_bytes_per_s, const NodeSpec& node, int nodes) {
  const double nics = static_cast<double>(nodes) * node.nics * node.nic_bytes_per_s;
  return nics > 0 ? std::min(storage_bytes_per_s, nics) : storage_bytes_per_s;
}

std::optional<std::string> in_memory_checkpoint_problem(bool spot, int nodes,
                                                        const NodeSpec& node) {
  if (spot) return "in-memory checkpoints do not survive spot capacity taken back";
  if (nodes < 2) return "in-memory checkpoints go to a peer node, and the job has one node";
  if (!(node.nics * node.nic_bytes_per_s > 0)) {
    return "in-memory checkpoints go to a peer node over the NICs, and node " + node.name +
           " has none";
  }
  return std::nullopt;
}

double training_steps(double tokens, const TrainingSpec& training) {
  return std::ceil(tokens / training.tokens_per_step());
}

CheckpointTimes checkpoint_times(const RunSpec& run, const ModelSpec& model,
                                 const TrainingSpec& training, const ParallelPlan& plan,
                                 const NodeSpec& node, int nodes) {
  return {checkpoint_bytes(model, training, plan) /
              checkpoint_bytes_per_s(run.storage_write_bytes_per_s, node, nodes),
          restore_bytes(model, training, plan) /
              checkpoint_bytes_per_s(run.storage_read_bytes_per_s, node, nodes)};
}

JobSpec job_spec(const RunSpec& run, const ModelSpec& model, const TrainingSpec& training,
                 const ParallelPlan& plan, const NodeSpec& node, int nodes,
                 const RunStepTimes& steps) {
  if (!(run.tokens > 0)) throw ModelError("a run needs training.tokens");
  if (!(run.storage_write_bytes_per_s > 0) || !(run.storage_read_bytes_per_s > 0)) {
    throw ModelError("a run needs its checkpoint storage's write and read rates");
  }
  JobSpec job;
  job.steps = training_steps(run.tokens, training);
  job.gpus = nodes * node.gpus;
  if (!(run.step_jitter >= 0)) throw ModelError("step jitter must be >= 0");
  job.jitter_factor = synchronous_jitter_factor(run.step_jitter, job.gpus);
  job.step_s = steps.healthy_s * job.jitter_factor;
  job.nodes = nodes;
  job.spot = run.spot;
  const double bytes = checkpoint_bytes(model, training, plan);
  const CheckpointTimes times = checkpoint_times(run, model, training, plan, node, nodes);
  job.checkpoint_write_s = times.write_s;
  job.write = run.write;
  if (run.write == CheckpointWrite::in_memory) {
    if (const auto problem = in_memory_checkpoint_problem(run.spot.has_value(), nodes, node)) {
      throw ModelError(*problem);
    }
    // Each node's share to a peer node over its compute NICs, and back after a restart (under
    // LoRA the frozen base still comes from storage).
    const double nics = static_cast<double>(nodes) * node.nics * node.nic_bytes_per_s;
    job.peer_copy_s = bytes / nics;
    job.peer_restore_s =
        bytes / nics + (restore_bytes(model, training, plan) - bytes) /
                           checkpoint_bytes_per_s(run.storage_read_bytes_per_s, node, nodes);
    job.persist_every_s = run.persist_every_s;
  }
  if (run.write != CheckpointWrite::blocking) {
    if (!(node.pcie_bytes_per_s > 0)) {
      throw ModelError("an asynchronous checkpoint is copied over PCIe: node " + node.name +
                       " does not give its PCIe rate");
    }
    job.checkpoint_copy_s = bytes / job.gpus / node.pcie_bytes_per_s;
  }
  job.node_repair_s = run.node_repair_s;
  job.hot_spares = run.hot_spares;
  job.when_short = run.when_short;
  if (job.when_short == ShortagePolicy::shrink) {
    if (steps.shrunk_s) {
      job.shrunk_step_s = *steps.shrunk_s * job.jitter_factor;
    } else {
      job.when_short = ShortagePolicy::wait;
    }
  }
  if (steps.degraded_s.size() != run.degradations.size()) {
    throw ModelError("a run with " + std::to_string(run.degradations.size()) +
                     " kinds of degraded hardware needs a step time for each");
  }
  for (std::size_t kind = 0; kind < run.degradations.size(); ++kind) {
    job.degradations.push_back(
        {run.degradations[kind], steps.degraded_s[kind] * job.jitter_factor});
  }
  job.evict_degraded_after_s = run.evict_degraded_after_s;
  job.replicas = plan.dp;
  job.tokens_per_step = training.tokens_per_step();
  job.restore_s = times.restore_s;
  job.detection_s = run.detection_s;
  job.restart_s = run.restart_s;
  job.causes = run.causes;
  job.policy = run.policy;
  job.usd_per_gpu_hour =
      run.spot && run.spot_priced ? run.spot_usd_per_gpu_hour : run.usd_per_gpu_hour;
  return job;
}

}  // namespace fleetsim
