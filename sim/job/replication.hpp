// One replication of a run's Monte Carlo (sim/job/job.hpp says what the process is), on the
// engine's integer time, and the rates and limits it shares with the job's checks.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "sim/engine/time.hpp"
#include "sim/job/job.hpp"

namespace fleetsim {

inline constexpr double kSecondsPerDay = 86400;
inline constexpr double kSecondsPerHour = 3600;
inline constexpr double kSecondsPerYear = 365.25 * kSecondsPerDay;  // a Julian year

// A replication's time stays inside SimTime's 292 years: each of the job's durations, and its
// training at full size, is at most 10 years (the job's check refuses more), a run's training at
// the size it has after losses at most 100 (a replication is refused past that), arrivals past
// 60 years never come, and a replication is refused once its clock, checked after each segment
// or restart, passes 50 years. One segment with its checkpoint, restart and repairs then ends
// before 220 years; at most 10^15 steps keep step counts exact in a double.
inline constexpr double kLongestDuration_s = 10 * kSecondsPerYear;
inline constexpr double kLongestShrunkRun_s = 100 * kSecondsPerYear;
inline constexpr double kLatestArrival_s = 60 * kSecondsPerYear;
inline constexpr double kHorizon_s = 50 * kSecondsPerYear;
inline constexpr double kMostSteps = 1e15;

// Interruptions per GPU-day of the causes that take at least `nodes` nodes out (0: all).
double per_gpu_day_taking(const JobSpec& job, int nodes);
// Onsets of one kind of degraded hardware per second, over the job's GPUs.
double degradations_per_second(const JobSpec& job, const Degradation& degradation);
// Spot preemptions per second over the job's nodes (0 without spot); a trace's: its
// preemptions over its span.
double preemptions_per_second(const JobSpec& job);
// How long an asynchronous checkpoint's write to storage drains behind training (0 blocking);
// an in-memory checkpoint's drain is its copy to the peers.
double drain_s(const JobSpec& job);

// A job's durations in integer time, rounded once for all its replications: every instant of
// a replication is exact from then on.
struct ReplicationTimes {
  SimTime stall;  // training stands still for a checkpoint
  SimTime drain;  // a checkpoint's write (async) or copy to the peers (in memory) behind training
  SimTime checkpoint_write;
  SimTime detection;
  SimTime restart;
  SimTime persist_every;
  SimTime node_repair;
  SimTime notice;
  SimTime capacity_return;
  SimTime healthy_step;
  SimTime storage_restore;
  SimTime peer_restore;
  std::optional<SimTime> evict_after;
  std::vector<SimTime> trace;  // spot preemptions replayed from a trace; past 60 years dropped
};
ReplicationTimes replication_times(const JobSpec& job);

// Replication `index` of `job` (its times from replication_times) under `seed`, checkpointing
// every `interval_steps`, with `rate` interruptions per second. Throws RunCannotFinish when its
// clock passes kHorizon_s or the job, short of replicas, would train for over
// kLongestShrunkRun_s.
JobReplication replicate(const JobSpec& job, const ReplicationTimes& times, double interval_steps,
                         double rate, std::uint64_t seed, std::uint64_t index);

}  // namespace fleetsim
