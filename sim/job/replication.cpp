#include "sim/job/replication.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/errors.hpp"
#include "sim/engine/rng.hpp"
#include "sim/engine/time.hpp"

namespace fleetsim {

double per_gpu_day_taking(const JobSpec& job, int nodes) {
  double per_gpu_day = 0;
  for (const InterruptionCause& cause : job.causes) {
    if (cause.nodes_out >= nodes) per_gpu_day += cause.per_gpu_day;
  }
  return per_gpu_day;
}

double degradations_per_second(const JobSpec& job, const Degradation& degradation) {
  return degradation.per_gpu_day * job.gpus / kSecondsPerDay;
}

double preemptions_per_second(const JobSpec& job) {
  if (!job.spot) return 0.0;
  const std::vector<double>& trace = job.spot->trace_s;
  if (!trace.empty()) return trace.back() > 0 ? trace.size() / trace.back() : 0.0;
  return job.spot->preemptions_per_node_hour * job.nodes / kSecondsPerHour;
}

double drain_s(const JobSpec& job) {
  switch (job.write) {
    case CheckpointWrite::blocking: return 0.0;
    case CheckpointWrite::async: return job.checkpoint_write_s;
    case CheckpointWrite::in_memory: return job.peer_copy_s;
  }
  return 0.0;
}

namespace {

constexpr SimTime kNever = SimTime::max();  // an arrival that never comes
// Whole numbers of steps up to this (2^53) are doubles whose sums and differences are exact.
constexpr double kExactSteps = 9007199254740992.0;

// An arrival `delay_s` after `after`: never, past the latest that comes.
SimTime arrival(SimTime after, double delay_s) {
  if (!(delay_s < kLatestArrival_s - after.seconds())) return kNever;
  return after + from_seconds(delay_s);
}

// Adds to a sum of what a run spent, stopping at SimTime's end.
void spend(SimTime& sum, SimTime more) {
  sum = more < kNever - sum ? sum + more : kNever;
}

// `steps` steps of `step` each: exact for whole steps (a run's are), rounded up for a fraction.
SimTime steps_of(double steps, SimTime step) {
  const double whole = std::floor(steps);
  return step * static_cast<std::int64_t>(whole) + from_seconds((steps - whole) * step.seconds());
}

// One run, drawn from its replication's streams, on the engine's integer time (the job's
// durations rounded once, for all replications, by replication_times).
// Interruption and preemption arrivals are drawn in order whatever happens between them, each
// interruption's cause (how many nodes it takes out) from a third stream in step with them:
// policies compared see the same histories.
class Replication {
 public:
  Replication(const JobSpec& job, const ReplicationTimes& times, double interval_steps, double rate,
              std::uint64_t seed, std::uint64_t index)
      : job_(job),
        times_(times),
        interval_steps_(interval_steps),
        rate_(rate),
        preemption_rate_(preemptions_per_second(job)),
        step_(times.healthy_step),
        restore_(times.storage_restore),
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
    draw_interruption(SimTime{});
    draw_preemption(SimTime{});
    draw_degradation(SimTime{});
  }

  JobReplication run() {
    while (!finished()) {
      if (now_.seconds() > kHorizon_s) {
        throw RunCannotFinish(
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
      } else if (!skip_quiet_segments()) {
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
    const bool due =
        steps_of(trained_ - persist_began_steps_, times_.healthy_step) >= times_.persist_every;
    if (!(last || (due && persists_.empty()))) return;
    const SimTime start = persists_.empty() ? at : std::max(at, persists_.back().durable_at);
    persists_.push_back({trained_, start + times_.checkpoint_write});
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
        spend(lost_training_, steps_of(committed_ - persisted_, step_));
        ++result_.memory_lost;
        committed_ = trained_ = persisted_;
      }
      peer_copy_ = false;  // until the next copy to the peers
    }
    restore_ = peer_copy_ ? times_.peer_restore : times_.storage_restore;
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
        now_ < degraded_since_ + *times_.evict_after) {
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
    if (in_memory()) restore_ = times_.peer_restore;  // in healthy nodes' memory
    return from;
  }

  void draw_preemption(SimTime after) {
    if (!times_.trace.empty()) {  // the trace's next, alike for every run
      preemption_ = next_in_trace_ < times_.trace.size() ? times_.trace[next_in_trace_++] : kNever;
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
    const SimTime resume = write_start + times_.stall;
    const SimTime first = std::min(interruption_, preemption_);
    if (first > training_end) spend(checkpoint_stall_, std::min(first, resume) - training_end);
    if (first >= resume) {
      if (pending_) complete_pending();
      trained_ += steps;
      pending_ = Written{trained_, resume + times_.drain};
      if (times_.drain == SimTime{}) complete_pending();
      if (in_memory()) maybe_persist(resume);
      if (short_replicas_ > 0) spend(shrunk_, resume - now_);
      if (degraded_count_ > 0) spend(degraded_, resume - now_);
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

  // The segments ahead in which nothing happens, trained and checkpointed at once, each as
  // segment() would: a run checkpointing thousands of times between two interruptions costs an
  // addition a checkpoint, not a segment's bookkeeping. Only while the job copies nothing to peers
  // and each checkpoint's write has drained before the next is due (so every segment lasts its
  // interval's training and its stall, write_start being the training's end), and only up to
  // the last segment that trains a full interval and ends before anything changes the job: an
  // interruption, a spot notice, a degradation, a repair that would let a shrunk job regrow,
  // degraded nodes due for eviction. Returns whether it skipped any.
  bool skip_quiet_segments() {
    // A whole interval left to train, at the least (an interval past the run's end would also
    // be a time past what SimTime holds).
    if (in_memory() || !(interval_steps_ <= job_.steps - trained_)) return false;
    const SimTime training = steps_of(interval_steps_, step_);
    const SimTime period = training + times_.stall;
    if (times_.drain > training || !(period > SimTime{})) return false;
    if (pending_ && pending_->durable_at > now_ + training) return false;
    // Segment j (from 1) resumes at now_ + j x period: on or before the next interruption or
    // notice (segment() meets one due at its resume after it), before anything that would act
    // at a resume (degrade_until, evict_degraded, regrow).
    const SimTime just_before = SimTime::from_ns(1);
    SimTime quiet_until =
        std::min(std::min(interruption_, preemption_), degradation_ - just_before);
    if (degraded_count_ > 0 && job_.evict_degraded_after_s) {
      quiet_until = std::min(quiet_until, degraded_since_ + *times_.evict_after - just_before);
    }
    if (short_replicas_ > 0) {
      // regrow() waits while the nodes still missing cost as many replicas, until a repair.
      if (replicas_lost(nodes_missing(now_)) < short_replicas_) return false;
      if (!under_repair_.empty())
        quiet_until = std::min(quiet_until, under_repair_.front() - just_before);
    }
    if (quiet_until < now_ + period) return false;
    // Nor past the segment that ends beyond the horizon, where run() gives up: with nothing
    // due, the steps alone would bound the segments, far past it.
    const SimTime horizon = from_seconds(kHorizon_s);
    const std::int64_t most =
        std::min((quiet_until - now_).ns() / period.ns(),
                 std::max<std::int64_t>(0, (horizon - now_).ns() / period.ns() + 1));
    // Steps add one interval at a time, as segment() adds them (the same rounding): in closed
    // form where they are whole numbers that doubles hold exactly (a run's are), whose sums
    // round nothing.
    std::int64_t segments = 0;
    double trained = trained_;
    double trained_before = trained_;
    const auto exact = [](double steps) {
      return steps >= 0 && steps <= kExactSteps && steps == std::floor(steps);
    };
    if (exact(trained_) && exact(job_.steps) && exact(interval_steps_) && interval_steps_ >= 1) {
      const auto left = static_cast<std::int64_t>(job_.steps - trained_);
      segments = std::min(most, left / static_cast<std::int64_t>(interval_steps_));
      trained = trained_ + static_cast<double>(segments) * interval_steps_;
      if (segments > 0) trained_before = trained - interval_steps_;
    } else {
      for (; segments < most && interval_steps_ <= job_.steps - trained; ++segments) {
        trained_before = trained;
        trained += interval_steps_;
      }
    }
    if (segments == 0) return false;
    const SimTime resume = now_ + period * segments;
    // Each segment writes the previous one's checkpoint off (the one pending before the first
    // included), and its own too where nothing drains.
    const bool drains = times_.drain > SimTime{};
    result_.checkpoints += drains ? segments - 1 + (pending_ ? 1 : 0) : segments;
    if (!drains) {
      committed_ = trained;
      pending_.reset();
      peer_copy_ = true;
    } else {
      if (segments > 1) {
        committed_ = trained_before;
        peer_copy_ = true;
      } else if (pending_) {
        committed_ = pending_->steps;
        peer_copy_ = true;
      }
      pending_ = Written{trained, resume + times_.drain};
    }
    spend(checkpoint_stall_, times_.stall * segments);
    if (short_replicas_ > 0) spend(shrunk_, period * segments);
    if (degraded_count_ > 0) spend(degraded_, period * segments);
    trained_ = trained;
    now_ = resume;
    return true;
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
    spend(lost_training_, steps_of(trained_ - committed_, step_));
    if (until > now_) spend(lost_training_, until - now_);
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
    const SimTime reclaimed = notice + times_.notice;
    // Steps begun by the notice (arrivals are never before now).
    const auto in_progress =
        static_cast<double>(((notice - now_).ns() + step_.ns() - 1) / step_.ns());
    const double done = notice >= training_end ? steps : std::min(steps, in_progress);
    const double target = trained_ + done;
    const SimTime trained_by = now_ + steps_of(done, step_);
    SimTime saved_at = notice;  // nothing new to save
    if (pending_ && target == pending_->steps) {
      saved_at = pending_->durable_at;
    } else if (target > committed_) {
      saved_at = std::max(trained_by, pending_ ? pending_->durable_at : SimTime{}) + times_.stall +
                 times_.drain;
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
    restart(reclaimed + times_.capacity_return);
  }

  // Restart and read the checkpoint back from `from`; an interruption during that is a
  // failure like any other.
  void restart(SimTime from) {
    while (interruption_ < from) draw_interruption(interruption_);
    const SimTime end = from + times_.restart + restore_;
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
      const SimTime detected = at + times_.detection;
      if (interruption_ < detected) continue;
      const SimTime start = nodes_for_restart(detected);
      while (interruption_ < start) draw_interruption(interruption_);
      const SimTime end = start + times_.restart + restore_;
      if (interruption_ < end) continue;
      now_ = end;
      return;
    }
  }

  void take_nodes_out(SimTime at, int nodes) {
    const SimTime back = at + times_.node_repair;
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
    spend(node_wait_, start - at);
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
    const double seconds = step * job_.replicas / (job_.replicas - short_replicas_);
    // Most calls (every restart's) find the job as it was: nothing to round or check again.
    if (seconds == step_seconds_) return;
    step_ = from_seconds(seconds);
    if (!(job_.steps * step_.seconds() <= kLongestShrunkRun_s)) {
      throw RunCannotFinish(
          "with " + std::to_string(short_replicas_) + " of its " + std::to_string(job_.replicas) +
          " replicas out for repair the run would train for over 100 years: check "
          "the repair time and the spares");
    }
    step_seconds_ = seconds;
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
  const ReplicationTimes& times_;
  const double interval_steps_;
  const double rate_;
  const double preemption_rate_;
  SimTime step_;  // the time of a full step's tokens at the job's size now
  double step_seconds_ = std::numeric_limits<double>::quiet_NaN();  // what step_ was rounded from
  SimTime restore_;  // reading back the checkpoint the job restarts from
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

}  // namespace

ReplicationTimes replication_times(const JobSpec& job) {
  ReplicationTimes times{
      .stall = from_seconds(checkpoint_stall_s(job)),
      .drain = from_seconds(drain_s(job)),
      .checkpoint_write = from_seconds(job.checkpoint_write_s),
      .detection = from_seconds(job.detection_s),
      .restart = from_seconds(job.restart_s),
      .persist_every = from_seconds(job.persist_every_s),
      .node_repair = from_seconds(job.node_repair_s),
      .notice = from_seconds(job.spot ? job.spot->notice_s : 0.0),
      .capacity_return = from_seconds(job.spot ? job.spot->capacity_return_s : 0.0),
      .healthy_step = from_seconds(job.step_s),
      .storage_restore = from_seconds(job.restore_s),
      .peer_restore = from_seconds(job.peer_restore_s),
      .evict_after = std::nullopt,
      .trace = {},
  };
  if (job.evict_degraded_after_s) times.evict_after = from_seconds(*job.evict_degraded_after_s);
  if (job.spot) {
    for (const double at : job.spot->trace_s) times.trace.push_back(arrival(SimTime{}, at));
  }
  return times;
}

JobReplication replicate(const JobSpec& job, const ReplicationTimes& times, double interval_steps,
                         double rate, std::uint64_t seed, std::uint64_t index) {
  return Replication(job, times, interval_steps, rate, seed, index).run();
}

}  // namespace fleetsim
