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
#include "sim/engine/rng.hpp"
#include "sim/engine/stop.hpp"
#include "sim/engine/time.hpp"
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

constexpr SimTime kNever = SimTime::max();  // an arrival that never comes

// A run's time stays well inside SimTime's 292 years: the job's durations (its training too) are
// at most 10 years, arrivals past 60 years never come, and a replication is refused once its
// clock passes 50 years, so the additions between two checks end before 100 years.
constexpr double kLongestDuration_s = 10 * 365.25 * kSecondsPerDay;
constexpr double kLatestArrival_s = 60 * 365.25 * kSecondsPerDay;
constexpr double kHorizon_s = 50 * 365.25 * kSecondsPerDay;

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
  // What integer time holds (kLongestDuration_s says why).
  double longest =
      std::max({job.steps * job.step_s, job.steps * job.shrunk_step_s, job.checkpoint_write_s,
                job.checkpoint_copy_s, job.peer_copy_s, job.peer_restore_s, job.persist_every_s,
                job.restore_s, job.detection_s, job.restart_s, job.node_repair_s,
                job.evict_degraded_after_s.value_or(0.0)});
  for (const DegradedStep& degraded : job.degradations) {
    longest = std::max(longest, job.steps * degraded.step_s);
  }
  if (job.spot) longest = std::max({longest, job.spot->notice_s, job.spot->capacity_return_s});
  if (!(longest <= kLongestDuration_s)) {
    throw ModelError(
        "a run's training, and each of its times (checkpoint, restore, repair, "
        "notice, capacity return), must be under 10 years");
  }
  if (job.spot && (!(job.spot->preemptions_per_node_hour >= 0) || !(job.spot->notice_s >= 0) ||
                   !(job.spot->capacity_return_s >= 0) ||
                   !std::isfinite(job.spot->capacity_return_s) || job.nodes < 1)) {
    throw ModelError("spot capacity needs a preemption rate, a notice and a capacity delay >= 0");
  }
}

// Interruptions per GPU-day of the causes that take at least `nodes` nodes out (0: all).
double per_gpu_day_taking(const JobSpec& job, int nodes) {
  double per_gpu_day = 0;
  for (const InterruptionCause& cause : job.causes) {
    if (cause.nodes_out >= nodes) per_gpu_day += cause.per_gpu_day;
  }
  return per_gpu_day;
}

// Onsets of one kind of degraded hardware per second, over the job's GPUs.
double degradations_per_second(const JobSpec& job, const Degradation& degradation) {
  return degradation.per_gpu_day * job.gpus / kSecondsPerDay;
}

// Spot preemptions arrive over the job's nodes at this rate per second (0 without spot).
// A trace's: its preemptions over its span.
double preemptions_per_second(const JobSpec& job) {
  if (!job.spot) return 0.0;
  const std::vector<double>& trace = job.spot->trace_s;
  if (!trace.empty()) return trace.back() > 0 ? trace.size() / trace.back() : 0.0;
  return job.spot->preemptions_per_node_hour * job.nodes / kSecondsPerHour;
}

// How long an asynchronous checkpoint's write to storage drains behind training (0 blocking).
// An in-memory checkpoint's drain is its copy to the peers.
double drain_s(const JobSpec& job) {
  switch (job.write) {
    case CheckpointWrite::blocking: return 0.0;
    case CheckpointWrite::async: return job.checkpoint_write_s;
    case CheckpointWrite::in_memory: return job.peer_copy_s;
  }
  return 0.0;
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
    throw ModelError(
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
    throw ModelError("a capacity return of " + std::to_string(job.spot->capacity_return_s / 3600) +
                     " h is too long to simulate against these rates");
  }
  if (rate * job.node_repair_s > 1e6) {
    throw ModelError("a node repair of " + std::to_string(job.node_repair_s / 3600) +
                     " h is too long to simulate against these rates");
  }
}

// An arrival `delay_s` after `after`: never, past the latest that comes.
SimTime arrival(SimTime after, double delay_s) {
  if (!(delay_s < kLatestArrival_s - after.seconds())) return kNever;
  return after + from_seconds(delay_s);
}

// `steps` steps of `step` each: exact for whole steps (a run's are), rounded up for a fraction.
SimTime steps_of(double steps, SimTime step) {
  const double whole = std::floor(steps);
  return step * static_cast<std::int64_t>(whole) + from_seconds((steps - whole) * step.seconds());
}

// One run, drawn from its replication's streams, on the engine's integer time: the job's
// durations are rounded to nanoseconds once, here, and every instant is exact from then on.
// Interruption and preemption arrivals are drawn in order whatever happens between them, each
// interruption's cause (how many nodes it takes out) from a third stream in step with them:
// policies compared see the same histories.
class Replication {
 public:
  Replication(const JobSpec& job, double interval_steps, double rate, std::uint64_t seed,
              std::uint64_t index)
      : job_(job),
        interval_steps_(interval_steps),
        rate_(rate),
        preemption_rate_(preemptions_per_second(job)),
        stall_(from_seconds(checkpoint_stall_s(job))),
        drain_(from_seconds(drain_s(job))),
        checkpoint_write_(from_seconds(job.checkpoint_write_s)),
        detection_(from_seconds(job.detection_s)),
        restart_(from_seconds(job.restart_s)),
        persist_every_(from_seconds(job.persist_every_s)),
        node_repair_(from_seconds(job.node_repair_s)),
        notice_(from_seconds(job.spot ? job.spot->notice_s : 0.0)),
        capacity_return_(from_seconds(job.spot ? job.spot->capacity_return_s : 0.0)),
        healthy_step_(from_seconds(job.step_s)),
        step_(healthy_step_),
        restore_(from_seconds(job.restore_s)),
        interruptions_(seed, "job.interruptions", index),
        causes_(seed, "job.interruption_scopes", index),
        preemptions_(seed, "job.preemptions", index),
        degradations_(seed, "job.degradations", index),
        degradation_kinds_(seed, "job.degradation_kinds", index),
        present_(job.degradations.size(), false) {
    // Causes by their share of the rate, drawn only where repairs make the node count matter
    // and the causes differ in it.
    double total = 0;
    for (const InterruptionCause& cause : job.causes) {
      total += cause.per_gpu_day;
      cumulative_share_.push_back(total);
      if (cause.nodes_out != job.causes.front().nodes_out) draws_cause_ = true;
    }
    for (double& share : cumulative_share_) share /= total > 0 ? total : 1.0;
    // The nodes a cause takes matter with repairs, and to in-memory checkpoints.
    draws_cause_ =
        draws_cause_ && (job.node_repair_s > 0 || job.write == CheckpointWrite::in_memory);
    if (!job.causes.empty()) nodes_out_ = job.causes.front().nodes_out;
    for (const DegradedStep& degraded : job.degradations) {
      degradation_rate_ += degradations_per_second(job, degraded.degradation);
    }
    if (job.spot) {
      for (const double at : job.spot->trace_s) trace_.push_back(arrival(SimTime{}, at));
    }
    draw_interruption(SimTime{});
    draw_preemption(SimTime{});
    draw_degradation(SimTime{});
  }

  JobReplication run() {
    while (!finished()) {
      if (now_.seconds() > kHorizon_s) {
        throw ModelError(
            "a replication of the run passed 50 years of wall time: check the "
            "rates, the downtime and the checkpoint interval");
      }
      // Nothing is interrupted or preempted while the job holds no capacity.
      while (interruption_ < now_) draw_interruption(interruption_);
      while (preemption_ < now_) draw_preemption(preemption_);
      // Hardware degrades whatever the job does; it slows the job from its next segment.
      degrade_until(now_);
      if (trained_ == job_.steps) {
        drain_last();
      } else {
        segment();
      }
    }
    result_.wall_s = now_.seconds();
    result_.lost_training_s = lost_training_.seconds();
    result_.checkpoint_stall_s = checkpoint_stall_.seconds();
    result_.node_wait_s = node_wait_.seconds();
    result_.shrunk_s = shrunk_.seconds();
    result_.degraded_s = degraded_.seconds();
    return result_;
  }

 private:
  bool in_memory() const { return job_.write == CheckpointWrite::in_memory; }

  // Done when the last step's checkpoint is written (in memory: on storage too).
  bool finished() const {
    return committed_ >= job_.steps && (!in_memory() || persisted_ >= job_.steps);
  }

  // In memory: the writes to storage that end by `at` are done.
  void settle_persists(SimTime at) {
    while (!persists_.empty() && persists_.front().durable_at <= at) {
      persisted_ = persists_.front().steps;
      persists_.erase(persists_.begin());
    }
  }

  // In memory, after the checkpoint just copied at `at`: a write to storage from host memory
  // when `persist_every_s` of training has passed since the last one began, or at the end
  // (after the one under way).
  void maybe_persist(SimTime at) {
    settle_persists(at);
    const bool last = trained_ >= job_.steps;
    const bool due = steps_of(trained_ - persist_began_steps_, healthy_step_) >= persist_every_;
    if (!(last || (due && persists_.empty()))) return;
    const SimTime start = persists_.empty() ? at : std::max(at, persists_.back().durable_at);
    persists_.push_back({trained_, start + checkpoint_write_});
    persist_began_steps_ = trained_;
  }

  // In memory, at an interruption at `at` once the work since the peers' copy is lost: the
  // writes to storage under way stop, and an interruption that took more than one node out
  // loses the peers' copy too (a peer may be among them), the job falling back to storage.
  void fall_back(SimTime at) {
    if (!in_memory()) return;
    settle_persists(at);
    persists_.clear();
    persist_began_steps_ = persisted_;
    if (nodes_out_ >= 2) {
      if (committed_ > persisted_) {
        lost_training_ += steps_of(committed_ - persisted_, step_);
        ++result_.memory_lost;
        committed_ = trained_ = persisted_;
      }
      peer_copy_ = false;  // until the next copy to the peers
    }
    restore_ = from_seconds(peer_copy_ ? job_.peer_restore_s : job_.restore_s);
  }

  struct Written {
    double steps = 0;      // the checkpoint holds the run up to this step
    SimTime durable_at{};  // when its write to storage ends
  };

  void draw_interruption(SimTime after) {
    interruption_ = rate_ > 0 ? arrival(after, interruptions_.exponential(rate_)) : kNever;
    if (draws_cause_) {
      const double u = causes_.uniform01();
      const auto cause =
          std::upper_bound(cumulative_share_.begin(), cumulative_share_.end() - 1, u) -
          cumulative_share_.begin();
      nodes_out_ = job_.causes[static_cast<std::size_t>(cause)].nodes_out;
    }
  }
  void draw_degradation(SimTime after) {
    degradation_ = degradation_rate_ > 0
                       ? arrival(after, degradations_.exponential(degradation_rate_))
                       : kNever;
  }

  // The degradations due by `at` appear, each of a kind drawn by the kinds' shares of the rate.
  void degrade_until(SimTime at) {
    while (degradation_ <= at) degrade();
  }
  void degrade() {
    double u = degradation_kinds_.uniform01() * degradation_rate_;
    std::size_t kind = 0;
    for (; kind + 1 < job_.degradations.size(); ++kind) {
      u -= degradations_per_second(job_, job_.degradations[kind].degradation);
      if (u < 0) break;
    }
    if (degraded_count_ == 0) degraded_since_ = degradation_;
    degraded_count_ = std::min(degraded_count_ + 1, job_.nodes);
    present_[kind] = true;
    draw_degradation(degradation_);
    update_step();
  }

  // At a checkpoint, when the job evicts degraded nodes and one has been present long enough:
  // it stops, lets the checkpoint in flight finish writing, takes them out for repair and
  // restarts without them (on spares, short, or after waiting, as for a failure).
  // Returns whether it restarted.
  bool evict_degraded() {
    if (!job_.evict_degraded_after_s || degraded_count_ == 0 ||
        now_ < degraded_since_ + from_seconds(*job_.evict_degraded_after_s)) {
      return false;
    }
    const auto from = planned_stop();
    if (!from) return false;
    result_.evictions += degraded_count_;
    if (job_.node_repair_s > 0) take_nodes_out(*from, degraded_count_);
    degraded_count_ = 0;
    std::fill(present_.begin(), present_.end(), false);
    restart(nodes_for_restart(*from));
    return true;
  }

  // A restart the job chooses, after a checkpoint: once the run still has steps to train and
  // the checkpoint in flight is written before anything interrupts or preempts it (else the
  // job trains on and the event is met as any other). Returns when the job stops, its last
  // checkpoint written.
  std::optional<SimTime> planned_stop() {
    if (trained_ >= job_.steps) return std::nullopt;
    const SimTime from = pending_ ? std::max(now_, pending_->durable_at) : now_;
    if (std::min(interruption_, preemption_) < from) return std::nullopt;
    if (pending_) complete_pending();
    if (in_memory()) restore_ = from_seconds(job_.peer_restore_s);  // in healthy nodes' memory
    return from;
  }

  void draw_preemption(SimTime after) {
    if (!trace_.empty()) {  // the trace's next, alike for every run
      preemption_ = next_in_trace_ < trace_.size() ? trace_[next_in_trace_++] : kNever;
      return;
    }
    preemption_ =
        preemption_rate_ > 0 ? arrival(after, preemptions_.exponential(preemption_rate_)) : kNever;
  }

  // Train for the interval, then checkpoint: the copy (or the blocking write) starts when the
  // training ends and the previous checkpoint's write has drained.
  void segment() {
    const double steps = std::min(interval_steps_, job_.steps - trained_);
    const SimTime training_end = now_ + steps_of(steps, step_);
    const SimTime write_start = std::max(training_end, pending_ ? pending_->durable_at : SimTime{});
    const SimTime resume = write_start + stall_;
    const SimTime first = std::min(interruption_, preemption_);
    if (first > training_end) checkpoint_stall_ += std::min(first, resume) - training_end;
    if (first >= resume) {
      if (pending_) complete_pending();
      trained_ += steps;
      pending_ = Written{trained_, resume + drain_};
      if (drain_ == SimTime{}) complete_pending();
      if (in_memory()) maybe_persist(resume);
      if (short_replicas_ > 0) shrunk_ += resume - now_;
      if (degraded_count_ > 0) degraded_ += resume - now_;
      now_ = resume;
      degrade_until(now_);  // one that showed in the segment counts now
      if (!evict_degraded()) regrow();
      return;
    }
    if (interruption_ <= preemption_) {
      if (pending_ && pending_->durable_at <= interruption_) complete_pending();
      lose_work(std::min(interruption_, training_end));
      fail();
      return;
    }
    preempted(steps, training_end);
  }

  // Everything is trained: the run ends when the last checkpoint is on storage.
  void drain_last() {
    // In memory, the last state goes to storage too (again, after an interruption).
    if (in_memory() && (persists_.empty() || persists_.back().steps < job_.steps) &&
        persisted_ < job_.steps) {
      maybe_persist(now_);
    }
    const SimTime end = std::max(pending_ ? pending_->durable_at : now_,
                                 persists_.empty() ? now_ : persists_.back().durable_at);
    if (std::min(interruption_, preemption_) >= end) {
      if (pending_) complete_pending();
      settle_persists(end);
      now_ = end;
      return;
    }
    if (interruption_ <= preemption_) {
      if (pending_ && pending_->durable_at <= interruption_) complete_pending();
      lose_work(now_);
      fail();
      return;
    }
    preempted(0, now_);
  }

  void complete_pending() {
    committed_ = pending_->steps;
    ++result_.checkpoints;
    pending_.reset();
    peer_copy_ = true;
  }

  // The training since the last written checkpoint is lost, up to `until` in this segment.
  void lose_work(SimTime until) {
    lost_training_ += steps_of(trained_ - committed_, step_);
    if (until > now_) lost_training_ += until - now_;
    trained_ = committed_;
    pending_.reset();
  }

  // A spot notice arrives during a segment of `steps` steps whose training ends at
  // `training_end`. The job finishes the step in progress (or the checkpoint under way) and
  // checkpoints, when the checkpoint is written within the notice and no interruption comes
  // first; else it loses the work since its last written checkpoint. The wait for capacity
  // starts when the nodes are reclaimed, at the notice's end.
  void preempted(double steps, SimTime training_end) {
    ++result_.preemptions;
    const SimTime notice = preemption_;
    draw_preemption(notice);
    const SimTime reclaimed = notice + notice_;
    const double in_progress =
        std::ceil(static_cast<double>((notice - now_).ns()) / static_cast<double>(step_.ns()));
    const double done = notice >= training_end ? steps : std::min(steps, in_progress);
    const double target = trained_ + done;
    const SimTime trained_by = now_ + steps_of(done, step_);
    SimTime saved_at = notice;  // nothing new to save
    if (pending_ && target == pending_->steps) {
      saved_at = pending_->durable_at;
    } else if (target > committed_) {
      saved_at =
          std::max(trained_by, pending_ ? pending_->durable_at : SimTime{}) + stall_ + drain_;
    }
    // A checkpoint already being written is kept if it is done before the nodes go.
    if (pending_ && pending_->steps < target &&
        pending_->durable_at <= std::min(reclaimed, interruption_)) {
      complete_pending();
    }
    if (saved_at <= reclaimed && interruption_ >= saved_at) {
      if (target > committed_) {
        ++result_.checkpoints;
        if (!(pending_ && target == pending_->steps)) ++result_.emergency_checkpoints;
      }
      committed_ = target;
      trained_ = target;
      pending_.reset();
      if (committed_ >= job_.steps) {  // the run's last checkpoint: done, nothing to wait for
        now_ = std::max(saved_at, now_);
        return;
      }
    } else {
      lose_work(std::min(notice, training_end));
      if (interruption_ < reclaimed) {  // the job held its nodes: a failure counts
        ++result_.interruptions;
        draw_interruption(interruption_);
      }
    }
    // Capacity returns as a full set of healthy nodes: none of the reclaimed is under repair or
    // degraded.
    under_repair_.clear();
    degraded_count_ = 0;
    std::fill(present_.begin(), present_.end(), false);
    shrink_to(0);
    restart(reclaimed + capacity_return_);
  }

  // Restart and read the checkpoint back from `from`; an interruption during that is a
  // failure like any other.
  void restart(SimTime from) {
    while (interruption_ < from) draw_interruption(interruption_);
    const SimTime end = from + restart_ + restore_;
    if (interruption_ < end) {
      fail();
    } else {
      now_ = end;
    }
  }

  // The interruption now due stops the job: detection; then, once it has its nodes, restart
  // and restore. An interruption during detection, restart or restore starts it all over;
  // none arrives while the job waits for a node.
  void fail() {
    for (;;) {
      const SimTime at = interruption_;
      ++result_.interruptions;
      fall_back(at);
      if (job_.node_repair_s > 0) take_nodes_out(at, nodes_out_);
      draw_interruption(at);
      const SimTime detected = at + detection_;
      if (interruption_ < detected) continue;
      const SimTime start = nodes_for_restart(detected);
      while (interruption_ < start) draw_interruption(interruption_);
      const SimTime end = start + restart_ + restore_;
      if (interruption_ < end) continue;
      now_ = end;
      return;
    }
  }

  void take_nodes_out(SimTime at, int nodes) {
    const SimTime back = at + node_repair_;
    under_repair_.insert(std::upper_bound(under_repair_.begin(), under_repair_.end(), back),
                         static_cast<std::size_t>(nodes), back);
  }

  // The job's nodes that neither the cluster nor the spares can give at `at`.
  int nodes_missing(SimTime at) {
    const auto repaired = std::upper_bound(under_repair_.begin(), under_repair_.end(), at);
    under_repair_.erase(under_repair_.begin(), repaired);
    return std::max(0, static_cast<int>(under_repair_.size()) - job_.hot_spares);
  }

  // When the job, stopped at `at`, can restart: at once on spares, or short of nodes without
  // the replicas they belonged to if it shrinks and keeps one, else when enough are repaired.
  SimTime nodes_for_restart(SimTime at) {
    const int lost = replicas_lost(nodes_missing(at));
    const bool shrinks = job_.when_short == ShortagePolicy::shrink && lost < job_.replicas;
    shrink_to(shrinks ? lost : 0);
    const SimTime start = shrinks ? at : nodes_ready_at(at);
    node_wait_ += start - at;
    return start;
  }

  // When, from `at`, the job has all its nodes: at once while the nodes under repair are no
  // more than the spares, else when enough of them are back.
  SimTime nodes_ready_at(SimTime at) {
    const int missing = nodes_missing(at);
    if (missing == 0) return at;
    return under_repair_[static_cast<std::size_t>(missing - 1)];
  }

  // Data-parallel replicas a shortfall of `nodes` nodes costs: one a node when a replica spans
  // one or more (each missing node in another replica, the worst case), all those on the node
  // when several share one.
  int replicas_lost(int nodes) const {
    if (nodes == 0) return 0;
    const double per_node = std::max(1.0, static_cast<double>(job_.replicas) / job_.nodes);
    return std::min(job_.replicas, static_cast<int>(std::ceil(nodes * per_node)));
  }

  // Runs `replicas` short: each step trains that share fewer tokens (the replicas' batch is
  // kept), so a full step's tokens take proportionally longer.
  void shrink_to(int replicas) {
    short_replicas_ = replicas;
    update_step();
  }

  // A full step's tokens at the job's size and state now: the slowest degradation present,
  // and a shrunk job's step scaled from the executor's one replica short.
  void update_step() {
    double step = job_.step_s;
    for (std::size_t kind = 0; kind < present_.size(); ++kind) {
      if (present_[kind]) step = std::max(step, job_.degradations[kind].step_s);
    }
    if (short_replicas_ > 0 && job_.shrunk_step_s > 0) step *= job_.shrunk_step_s / job_.step_s;
    step = step * job_.replicas / (job_.replicas - short_replicas_);
    if (!(job_.steps * step <= kLongestDuration_s)) {
      throw ModelError("with " + std::to_string(short_replicas_) + " of its " +
                       std::to_string(job_.replicas) +
                       " replicas out for repair the run would train for over 10 years: check "
                       "the repair time and the spares");
    }
    step_ = from_seconds(step);
  }

  // After a checkpoint of a shrunk run: when repairs would give it replicas back, it stops,
  // lets the checkpoint in flight finish writing (nothing interrupts the idle job), and
  // restarts larger.
  void regrow() {
    if (short_replicas_ == 0 || replicas_lost(nodes_missing(now_)) >= short_replicas_) return;
    const auto from = planned_stop();
    if (!from) return;
    ++result_.regrows;
    shrink_to(replicas_lost(nodes_missing(*from)));
    restart(*from);
  }

  const JobSpec& job_;
  const double interval_steps_;
  const double rate_;
  const double preemption_rate_;
  // The job's durations, in integer time.
  const SimTime stall_;
  const SimTime drain_;
  const SimTime checkpoint_write_;
  const SimTime detection_;
  const SimTime restart_;
  const SimTime persist_every_;
  const SimTime node_repair_;
  const SimTime notice_;
  const SimTime capacity_return_;
  const SimTime healthy_step_;
  SimTime step_;                // the time of a full step's tokens at the job's size now
  SimTime restore_;             // reading back the checkpoint the job restarts from
  std::vector<SimTime> trace_;  // spot preemptions replayed from a trace
  RngStream interruptions_;
  RngStream causes_;
  RngStream preemptions_;
  std::vector<double> cumulative_share_;  // of the causes' rates, ending at 1
  bool draws_cause_ = false;
  SimTime interruption_{};  // the next interruption's arrival
  int nodes_out_ = 0;       // the nodes it takes out of service
  SimTime preemption_{};    // the next spot notice's arrival
  std::size_t next_in_trace_ = 0;
  SimTime now_{};
  double trained_ = 0;                 // steps the job holds in memory
  double committed_ = 0;               // steps in the last written checkpoint
  std::optional<Written> pending_;     // a checkpoint on its way to storage
  std::vector<SimTime> under_repair_;  // when each node taken out is back, ascending
  int short_replicas_ = 0;             // data-parallel replicas the job runs without
  bool peer_copy_ = false;             // in memory: the peers hold the committed state
  double persisted_ = 0;               // in memory: steps in the last copy on storage
  double persist_began_steps_ = 0;     // in memory: steps of the last write to storage begun
  std::vector<Written> persists_;      // in memory: writes to storage under way, in order
  RngStream degradations_;
  RngStream degradation_kinds_;
  double degradation_rate_ = 0;  // onsets per second, all kinds
  SimTime degradation_{};        // the next one's onset
  std::vector<bool> present_;    // by kind: one or more present
  int degraded_count_ = 0;       // degraded nodes in the job
  SimTime degraded_since_{};     // the first present's onset
  // What the run spent, summed as it goes.
  SimTime lost_training_{};
  SimTime checkpoint_stall_{};
  SimTime node_wait_{};
  SimTime shrunk_{};
  SimTime degraded_{};
  JobReplication result_;
};

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
  tbb::parallel_for(0, replications, [&](int i) {
    if (stop_requested()) return;
    result.replications[static_cast<std::size_t>(i)] =
        Replication(job, result.interval_steps, rate, seed, static_cast<std::uint64_t>(i)).run();
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
                 const ParallelPlan& plan, const NodeSpec& node, int nodes,
                 const RunStepTimes& steps) {
  if (!(run.tokens > 0)) throw ModelError("a run needs training.tokens");
  if (!(run.storage_write_bytes_per_s > 0) || !(run.storage_read_bytes_per_s > 0)) {
    throw ModelError("a run needs its checkpoint storage's write and read rates");
  }
  JobSpec job;
  const double tokens_per_step = static_cast<double>(training.global_batch) * training.seq_len;
  job.steps = std::ceil(run.tokens / tokens_per_step);
  job.gpus = nodes * node.gpus;
  if (!(run.step_jitter >= 0)) throw ModelError("step jitter must be >= 0");
  job.jitter_factor = synchronous_jitter_factor(run.step_jitter, job.gpus);
  job.step_s = steps.healthy_s * job.jitter_factor;
  job.nodes = nodes;
  job.spot = run.spot;
  const double bytes = checkpoint_bytes(model, training);
  job.checkpoint_write_s =
      bytes / checkpoint_bytes_per_s(run.storage_write_bytes_per_s, node, nodes);
  job.write = run.write;
  if (run.write == CheckpointWrite::in_memory) {
    // Each node's share to a peer node over its compute NICs, and back after a restart (under
    // LoRA the frozen base still comes from storage).
    const double nics = static_cast<double>(nodes) * node.nics * node.nic_bytes_per_s;
    if (!(nics > 0)) {
      throw ModelError("in-memory checkpoints go to peer nodes over the NICs: node " + node.name +
                       " gives none");
    }
    job.peer_copy_s = bytes / nics;
    job.peer_restore_s =
        bytes / nics + (restore_bytes(model, training) - bytes) /
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
  job.tokens_per_step = tokens_per_step;
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
