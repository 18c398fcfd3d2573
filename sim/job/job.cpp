#include "sim/job/job.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "sim/engine/errors.hpp"
#include "sim/engine/rng.hpp"
#include "workloads/precision.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

constexpr double kSecondsPerDay = 86400;
constexpr double kSecondsPerHour = 3600;
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
  if (job.spot && (!(job.spot->preemptions_per_node_hour >= 0) || !(job.spot->notice_s >= 0) ||
                   !(job.spot->capacity_return_s >= 0) ||
                   !std::isfinite(job.spot->capacity_return_s) || job.nodes < 1)) {
    throw ModelError("spot capacity needs a preemption rate, a notice and a capacity delay >= 0");
  }
}

// Refuses a run whose segments or downtime interruptions would almost never let through.
// `rate`: interruptions per second; `losing_rate`: those and the preemptions whose notice has
// no room for an emergency checkpoint, which cut a segment short as well.
void check_exposure(const JobSpec& job, double interval_steps, double rate, double losing_rate) {
  const double segment = interval_steps * job.step_s + job.checkpoint_write_s;
  const double downtime = job.detection_s + job.restart_s + job.restore_s;
  const double exposure = std::max(losing_rate * segment, rate * downtime);
  if (exposure > kMaxExposure) {
    throw ModelError(
        "with a segment of " + std::to_string(segment / 3600) +
        " h between checkpoints and a downtime of " + std::to_string(downtime / 3600) +
        " h, interruptions (and preemptions with too short a notice) every " +
        std::to_string(1 / losing_rate / 3600) + " h would cut them short about e^" +
        std::to_string(exposure) +
        " times before one got through: checkpoint more often, or check the rates and the "
        "downtime");
  }
  // Arrivals while the job waits for capacity are drawn and skipped: bound that work too.
  const double skipped = losing_rate * (job.spot ? job.spot->capacity_return_s : 0.0);
  if (skipped > 1e6) {
    throw ModelError("a capacity return of " + std::to_string(job.spot->capacity_return_s / 3600) +
                     " h is too long to simulate against these rates");
  }
}

// One run: segments of training and checkpoint, interruptions at the arrival times the stream
// gives (a Poisson process in wall-clock time, drawn in order whatever happens between them).
// Spot preemptions arrive over the job's nodes at this rate per second (0 without spot).
double preemptions_per_second(const JobSpec& job) {
  return job.spot ? job.spot->preemptions_per_node_hour * job.nodes / 3600 : 0.0;
}

JobReplication replicate(const JobSpec& job, double interval_steps, double rate,
                         RngStream interruptions, RngStream preemptions) {
  const double infinity = std::numeric_limits<double>::infinity();
  const double preemption_rate = preemptions_per_second(job);
  const auto next_interruption = [&](double after) {
    return rate > 0 ? after + interruptions.exponential(rate) : infinity;
  };
  const auto next_preemption = [&](double after) {
    return preemption_rate > 0 ? after + preemptions.exponential(preemption_rate) : infinity;
  };
  const double downtime = job.detection_s + job.restart_s + job.restore_s;
  JobReplication run;
  double now = 0;
  double committed = 0;  // steps in the last completed checkpoint
  double interruption = next_interruption(0);
  double preemption = next_preemption(0);
  // Recovery of `duration` from `from`; an interruption during it starts over a recovery of
  // `again` (the whole downtime).
  const auto recover = [&](double from, double duration, double again) {
    while (interruption < from) interruption = next_interruption(interruption);
    now = from;
    while (interruption < now + duration) {
      ++run.interruptions;
      now = interruption;
      interruption = next_interruption(interruption);
      duration = again;
    }
    now += duration;
  };
  while (committed < job.steps) {
    // Nothing is interrupted or preempted while the job holds no capacity.
    while (interruption < now) interruption = next_interruption(interruption);
    while (preemption < now) preemption = next_preemption(preemption);
    const double steps = std::min(interval_steps, job.steps - committed);
    const double training_end = now + steps * job.step_s;
    const double segment_end = training_end + job.checkpoint_write_s;
    if (std::min(interruption, preemption) >= segment_end) {
      now = segment_end;
      committed += steps;
      ++run.checkpoints;
      continue;
    }
    if (interruption <= preemption) {
      // The segment is lost; the downtime runs until it passes without an interruption.
      ++run.interruptions;
      const double at = interruption;
      run.lost_training_s += std::min(at, training_end) - now;
      interruption = next_interruption(at);
      recover(at, downtime, downtime);
      continue;
    }
    // A preemption notice: finish the step in progress (or the checkpoint being written) and
    // checkpoint, if that fits in the notice and no interruption comes first; else stop now
    // and lose the segment. The wait for capacity starts when the node is reclaimed, at the
    // notice's end.
    ++run.preemptions;
    const double notice = preemption;
    preemption = next_preemption(notice);
    const double reclaimed = notice + job.spot->notice_s;
    const double done =
        notice >= training_end ? steps : std::min(steps, std::ceil((notice - now) / job.step_s));
    const double saved_at = notice >= training_end ? segment_end
                            : done > 0 ? now + done * job.step_s + job.checkpoint_write_s
                                       : notice;
    if (saved_at <= reclaimed && interruption >= saved_at) {
      committed += done;
      if (done > 0) ++run.checkpoints;
    } else {
      run.lost_training_s += std::min(notice, training_end) - now;
      if (interruption < reclaimed) {  // the job held its nodes: a failure counts
        ++run.interruptions;
        interruption = next_interruption(interruption);
      }
    }
    // Restart and restore after capacity returns; an interruption then starts over the whole
    // downtime, detection included.
    recover(reclaimed + job.spot->capacity_return_s, job.restart_s + job.restore_s, downtime);
  }
  run.wall_s = now;
  return run;
}

double percentile(const std::vector<double>& sorted, double fraction) {
  // Nearest rank: the smallest sample with at least `fraction` of them at or below it.
  const auto rank = static_cast<std::size_t>(std::ceil(fraction * sorted.size()));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace

double interruptions_per_second(const JobSpec& job) {
  double per_gpu_day = 0;
  for (const InterruptionCause& cause : job.causes) per_gpu_day += cause.per_gpu_day;
  return per_gpu_day * job.gpus / kSecondsPerDay;
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
  const bool notice_saves = job.spot && job.spot->notice_s >= job.step_s + job.checkpoint_write_s;
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
      steps = young_daly_interval_s(job.checkpoint_write_s, 1 / rate) / job.step_s;
      break;
    }
  }
  return std::clamp(std::round(steps), 1.0, job.steps);
}

double daly_expected_wall_s(const JobSpec& job) {
  check(job);
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

JobResult simulate_job(const JobSpec& job, int replications, std::uint64_t seed) {
  check(job);
  if (replications < 1) throw ModelError("a Monte Carlo needs at least one replication");
  JobResult result;
  const double rate = interruptions_per_second(job);
  result.mtbf_s = rate > 0 ? 1 / rate : std::numeric_limits<double>::infinity();
  result.interval_steps = checkpoint_interval_steps(job);
  check_exposure(job, result.interval_steps, rate, losing_rate(job));
  result.useful_s = job.steps * job.step_s;
  result.replications.resize(static_cast<std::size_t>(replications));
  tbb::parallel_for(0, replications, [&](int i) {
    result.replications[static_cast<std::size_t>(i)] =
        replicate(job, result.interval_steps, rate,
                  RngStream(seed, "job.interruptions", static_cast<std::uint64_t>(i)),
                  RngStream(seed, "job.preemptions", static_cast<std::uint64_t>(i)));
  });
  std::vector<double> wall, goodput, interruptions, preemptions, lost, cost;
  for (const JobReplication& run : result.replications) {
    wall.push_back(run.wall_s);
    goodput.push_back(result.useful_s / run.wall_s);
    interruptions.push_back(static_cast<double>(run.interruptions));
    preemptions.push_back(static_cast<double>(run.preemptions));
    lost.push_back((run.wall_s - result.useful_s) * job.gpus / kSecondsPerHour);
    cost.push_back(run.wall_s * job.gpus / kSecondsPerHour * job.usd_per_gpu_hour);
  }
  result.wall_s = summarise(std::move(wall));
  result.goodput = summarise(std::move(goodput));
  result.interruptions = summarise(std::move(interruptions));
  result.preemptions = summarise(std::move(preemptions));
  result.lost_gpu_hours = summarise(std::move(lost));
  result.cost_usd = summarise(std::move(cost));
  return result;
}

double checkpoint_bytes(const ModelSpec& model, const TrainingSpec& training) {
  // Per trained parameter: the BF16 weight, and the optimizer's FP32 master weight and moments.
  const double per_trained = kBf16Bytes + optimizer_state_bytes_per_parameter(training.optimizer);
  const double trained = training.lora ? lora_parameters_per_layer(model, training) * model.layers
                                       : model.parameters();
  return trained * per_trained;
}

double restore_bytes(const ModelSpec& model, const TrainingSpec& training) {
  const double base = training.lora ? model.parameters() * kBf16Bytes : 0.0;
  return checkpoint_bytes(model, training) + base;
}

double checkpoint_bytes_per_s(double storage_bytes_per_s, const NodeSpec& node, int nodes) {
  const double nics = static_cast<double>(nodes) * node.nics * node.nic_bytes_per_s;
  return nics > 0 ? std::min(storage_bytes_per_s, nics) : storage_bytes_per_s;
}

JobSpec job_spec(const RunSpec& run, const ModelSpec& model, const TrainingSpec& training,
                 const NodeSpec& node, int nodes, double step_s) {
  if (!(run.tokens > 0)) throw ModelError("a run needs training.tokens");
  if (!(run.storage_write_bytes_per_s > 0) || !(run.storage_read_bytes_per_s > 0)) {
    throw ModelError("a run needs its checkpoint storage's write and read rates");
  }
  JobSpec job;
  const double tokens_per_step = static_cast<double>(training.global_batch) * training.seq_len;
  job.steps = std::ceil(run.tokens / tokens_per_step);
  job.step_s = step_s;
  job.gpus = nodes * node.gpus;
  job.nodes = nodes;
  job.spot = run.spot;
  job.checkpoint_write_s = checkpoint_bytes(model, training) /
                           checkpoint_bytes_per_s(run.storage_write_bytes_per_s, node, nodes);
  job.restore_s = restore_bytes(model, training) /
                  checkpoint_bytes_per_s(run.storage_read_bytes_per_s, node, nodes);
  job.detection_s = run.detection_s;
  job.restart_s = run.restart_s;
  job.causes = run.causes;
  job.policy = run.policy;
  job.usd_per_gpu_hour =
      run.spot && run.spot_priced ? run.spot_usd_per_gpu_hour : run.usd_per_gpu_hour;
  return job;
}

}  // namespace fleetsim
