#include "sim/job/job.hpp"

#include "common/stop_guard.hpp"
#include "sim/engine/stop.hpp"
#include "sim/job/replication.hpp"

#include <tbb/global_control.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <vector>

using namespace fleetsim;

namespace {

// 10,000 steps of 10 s on 1,000 GPUs interrupted every 20,000 s on average (0.00432 per GPU-day),
// a 300 s checkpoint, 13 minutes of downtime (detection, restart, restore).
JobSpec interrupted_job() {
  JobSpec job;
  job.steps = 10000;
  job.step_s = 10;
  job.gpus = 1000;
  job.checkpoint_write_s = 300;
  job.detection_s = 60;
  job.restart_s = 600;
  job.restore_s = 120;
  job.causes = {{"hardware", 0.00432, "assumed: a test's"}};
  job.policy = {CheckpointPolicy::Kind::every_steps, 200};
  job.usd_per_gpu_hour = 2;
  return job;
}

}  // namespace

TEST_CASE("job: Daly's expected wall time lies in the simulation's 99% confidence interval") {
  JobSpec job = interrupted_job();
  CHECK(1 / interruptions_per_second(job) == Approx(20000));
  for (const double steps : {10000.0, 10050.0}) {  // the second ends on a shorter segment
    INFO(steps << " steps");
    job.steps = steps;
    const JobResult result = simulate_job(job, 4000, 7);
    const double expected = daly_expected_wall_s(job);
    CHECK(std::abs(result.wall_s.mean - expected) <= result.wall_s.ci99_half_width);
    // Not a vacuous interval: under a percent of the mean.
    CHECK(result.wall_s.ci99_half_width < 0.01 * expected);
    CHECK(result.interruptions.mean > 5);
  }
}

TEST_CASE("job: the waste over a sweep of intervals is least at the Young-Daly interval") {
  JobSpec job = interrupted_job();
  job.steps = 50000;
  job.policy = {CheckpointPolicy::Kind::young_daly, 0};
  const double optimum = checkpoint_interval_steps(job);
  // Daly's estimate for delta = 300 s, M = 20,000 s: sqrt(2 delta M) (1 + ...) - delta.
  CHECK(optimum * job.step_s == Approx(young_daly_interval_s(300, 20000)).margin(job.step_s));
  const auto waste = [&](double interval_steps) {
    JobSpec fixed = job;
    fixed.policy = {CheckpointPolicy::Kind::every_steps, interval_steps};
    const JobResult result = simulate_job(fixed, 1000, 3);
    return result.wall_s.mean / result.useful_s - 1;
  };
  const double at_optimum = waste(optimum);
  for (const double factor : {0.25, 0.5, 2.0, 4.0}) {
    INFO("interval x " << factor);
    CHECK(waste(std::round(optimum * factor)) > at_optimum);
  }
  // And the closed form agrees: its waste at the optimum is below its waste around it.
  const auto daly_waste = [&](double interval_steps) {
    JobSpec fixed = job;
    fixed.policy = {CheckpointPolicy::Kind::every_steps, interval_steps};
    return daly_expected_wall_s(fixed) / (job.steps * job.step_s) - 1;
  };
  CHECK(daly_waste(optimum) < daly_waste(optimum * 0.8));
  CHECK(daly_waste(optimum) < daly_waste(optimum * 1.25));
}

TEST_CASE("job: Young-Daly is Young's sqrt(2 delta M) for short checkpoints, M for long ones") {
  CHECK(young_daly_interval_s(1, 1e6) == Approx(std::sqrt(2e6)).epsilon(1e-3));
  CHECK(young_daly_interval_s(5000, 2000) == 2000);
}

TEST_CASE("job: without interruptions and with free checkpoints, goodput is exactly 1") {
  JobSpec job = interrupted_job();
  job.causes.clear();
  job.checkpoint_write_s = 0;
  const JobResult result = simulate_job(job, 10, 1);
  CHECK(result.goodput.mean == 1);
  CHECK(result.goodput.p99 == 1);
  CHECK(result.wall_s.p50 == job.steps * job.step_s);
  CHECK(result.lost_gpu_hours.mean == 0);
  CHECK(result.cost_usd.mean == Approx(job.steps * job.step_s / 3600 * job.gpus * 2));
  // An interval past the run's end (10^9 steps of 10 s, past what integer time holds) checkpoints
  // once, at the end: 100,000 s of training and the 300 s write.
  JobSpec once = interrupted_job();
  once.causes.clear();
  once.policy = {CheckpointPolicy::Kind::every_steps, 1e9};
  const JobResult at_end = simulate_job(once, 2, 1);
  CHECK(at_end.wall_s.p50 == Approx(100300).epsilon(1e-12));
  CHECK(at_end.replications[0].checkpoints == 1);
  // Young-Daly with nothing to fear writes one checkpoint, at the end.
  job.policy = {CheckpointPolicy::Kind::young_daly, 0};
  CHECK(checkpoint_interval_steps(job) == job.steps);
}

TEST_CASE("job: the same interruptions whatever the policy or the thread count") {
  // Common random numbers: each replication's interruption arrivals do not depend on the
  // policy, so a replication that runs longer has seen at least as many.
  JobSpec often = interrupted_job();
  often.policy = {CheckpointPolicy::Kind::every_steps, 50};
  JobSpec rarely = interrupted_job();
  rarely.policy = {CheckpointPolicy::Kind::every_steps, 2000};
  const JobResult a = simulate_job(often, 200, 11);
  const JobResult b = simulate_job(rarely, 200, 11);
  for (std::size_t i = 0; i < a.replications.size(); ++i) {
    INFO("replication " << i);
    const JobReplication& x = a.replications[i];
    const JobReplication& y = b.replications[i];
    if (x.wall_s <= y.wall_s) CHECK(x.interruptions <= y.interruptions);
    if (y.wall_s <= x.wall_s) CHECK(y.interruptions <= x.interruptions);
  }
  std::vector<double> one_thread;
  {
    tbb::global_control single(tbb::global_control::max_allowed_parallelism, 1);
    for (const JobReplication& run : simulate_job(often, 200, 11).replications) {
      one_thread.push_back(run.wall_s);
    }
  }
  for (std::size_t i = 0; i < a.replications.size(); ++i) {
    CHECK(a.replications[i].wall_s == one_thread[i]);
  }
}

TEST_CASE("job: a run that interruptions would practically never let finish is refused") {
  // A segment of 30 days between checkpoints at one interruption every 5.5 hours: the run would
  // restart it about e^130 times before one got through. Well formed, it cannot finish: an
  // answer about the run (RunCannotFinish), not a mistake in its input.
  JobSpec job = interrupted_job();
  job.policy = {CheckpointPolicy::Kind::every_seconds, 30 * 86400.0};
  job.steps = 1e6;
  CHECK_THROWS_WITH(simulate_job(job, 10, 1), Catch::Contains("checkpoint more often"));
  CHECK_THROWS_AS(simulate_job(job, 10, 1), RunCannotFinish);
  // So would a downtime of days.
  job = interrupted_job();
  job.restart_s = 10 * 86400;
  CHECK_THROWS_WITH(simulate_job(job, 10, 1), Catch::Contains("downtime"));
  CHECK_THROWS_AS(simulate_job(job, 10, 1), RunCannotFinish);
}

TEST_CASE("job: a run that cannot be simulated is refused") {
  // Mistakes in the job itself, which the loader refuses first: ModelError, not an answer.
  const auto mistake = [](const JobSpec& job, int replications) {
    try {
      simulate_job(job, replications, 1);
    } catch (const RunCannotFinish&) {
      return false;
    } catch (const ModelError&) {
      return true;
    }
    return false;
  };
  JobSpec job = interrupted_job();
  job.step_s = 0;
  CHECK_THROWS_WITH(simulate_job(job, 10, 1), Catch::Contains("positive step time"));
  CHECK(mistake(job, 10));
  job = interrupted_job();
  job.policy = {CheckpointPolicy::Kind::every_seconds, 0};
  CHECK_THROWS_WITH(simulate_job(job, 10, 1), Catch::Contains("interval must be positive"));
  CHECK(mistake(job, 10));
  CHECK_THROWS_WITH(simulate_job(interrupted_job(), 0, 1), Catch::Contains("replication"));
  job = interrupted_job();
  job.detection_s = 11 * 365.25 * 86400;  // the loader's bound on a given time: past it, a mistake
  CHECK_THROWS_WITH(simulate_job(job, 10, 1), Catch::Contains("under 10 years"));
  CHECK(mistake(job, 10));
}

TEST_CASE("job: a run's clock is the engine's integer time") {
  // Every instant is a whole nanosecond: the interruptions' arrivals, the lost work and the
  // waits are rounded once, when drawn or converted, and never again, so the wall time of an
  // interrupted run, and each of its parts, is a whole number of nanoseconds.
  const JobResult result = simulate_job(interrupted_job(), 20, 5);
  const auto whole_ns = [](double seconds) {
    const double ns = seconds * 1e9;
    return std::abs(ns - std::round(ns)) < 1e-3 * std::max(1.0, ns * 1e-12);
  };
  // About six interruptions a run (its 120,000 s at one every 20,000 s).
  CHECK(result.interruptions.mean > 3);
  for (const JobReplication& run : result.replications) {
    CHECK(whole_ns(run.wall_s));
    CHECK(whole_ns(run.lost_training_s));
    CHECK(whole_ns(run.checkpoint_stall_s));
  }
  // A run that integer time cannot hold is refused: 10^8 steps of 10 s are 32 years.
  JobSpec decades = interrupted_job();
  decades.causes.clear();
  decades.steps = 1e8;
  CHECK_THROWS_WITH(simulate_job(decades, 1, 1), Catch::Contains("train for over 10 years"));
  CHECK_THROWS_AS(simulate_job(decades, 1, 1), RunCannotFinish);
  // One segment of 9.5 years (10^5 steps of 3,000 s) against an interruption every 1.9 years:
  // e^5, about 150, tries before one gets through (within the e^10 the exposure check allows),
  // some 280 years of wall time: the replication is refused when its clock passes 50.
  JobSpec centuries = interrupted_job();
  centuries.steps = 1e5;
  centuries.step_s = 3000;
  centuries.policy = {CheckpointPolicy::Kind::every_steps, 1e5};
  centuries.causes = {{"hardware", 1.44e-6, "assumed: a test's"}};
  CHECK_THROWS_WITH(simulate_job(centuries, 1, 1), Catch::Contains("50 years"));
  CHECK_THROWS_AS(simulate_job(centuries, 1, 1), RunCannotFinish);
  // Nothing interrupts a run of 100 one-step segments, each stalled a year by its blocking
  // checkpoint: the clock passes 50 years at the 50th, though nothing happens in any of them
  // and the segments are played together (the whole run would end at about 100 years).
  JobSpec stalled = interrupted_job();
  stalled.causes.clear();
  stalled.steps = 100;
  stalled.policy = {CheckpointPolicy::Kind::every_steps, 1};
  stalled.checkpoint_write_s = kSecondsPerYear;
  CHECK_THROWS_WITH(simulate_job(stalled, 1, 1), Catch::Contains("50 years"));
}

TEST_CASE("job: a spot notice long enough for the step and checkpoint loses no work") {
  // No interruptions; 64 nodes preempted at 0.002 per node-hour (one every 7.8 hours), a 2-minute
  // notice for a 10 s step and a 60 s checkpoint: every preemption ends in an emergency
  // checkpoint, so the wall time is the training, the checkpoints and the waits (from the
  // notice's end, after at most the notice idle).
  JobSpec job = interrupted_job();
  job.causes.clear();
  job.checkpoint_write_s = 60;
  job.nodes = 64;
  job.spot = SpotCapacity{0.002, "assumed: a test's", 120, 1800};
  const JobResult result = simulate_job(job, 300, 5);
  double preempted = 0;
  for (const JobReplication& run : result.replications) {
    INFO("preemptions " << run.preemptions);
    CHECK(run.lost_training_s == 0);
    CHECK(run.interruptions == 0);
    const double waits = run.preemptions * (1800 + job.restart_s + job.restore_s);
    const double busy = result.useful_s + run.checkpoints * 60.0 + waits;
    CHECK(run.wall_s >= busy * (1 - 1e-12));
    CHECK(run.wall_s <= busy + run.preemptions * 120.0 * (1 + 1e-12));
    preempted += run.preemptions;
  }
  CHECK(preempted / 300 > 3);  // not vacuous: 100,000 s of training, a preemption per 28,000 s
  // So does an asynchronous one whose copy and write fit in the notice after the step in
  // progress and the previous checkpoint's write, always under way here: max(10, 50) + 5 + 50
  // s <= 120 s.
  JobSpec async = job;
  async.write = CheckpointWrite::async;
  async.checkpoint_copy_s = 5;
  async.checkpoint_write_s = 50;
  async.policy = {CheckpointPolicy::Kind::every_steps, 5};  // a write always under way
  std::int64_t emergency = 0;
  for (const JobReplication& run : simulate_job(async, 300, 5).replications) {
    CHECK(run.lost_training_s == 0);
    emergency += run.emergency_checkpoints;
  }
  CHECK(emergency > 300);
  // A notice shorter than the checkpoint loses the segment (unless it comes in the regular
  // write's last seconds).
  job.spot->notice_s = 30;
  const JobResult short_notice = simulate_job(job, 300, 5);
  double lost = 0;
  for (const JobReplication& run : short_notice.replications) lost += run.lost_training_s;
  CHECK(lost > 0);
  CHECK(short_notice.goodput.mean < result.goodput.mean);
}

TEST_CASE("job: an asynchronous checkpoint stalls training for its copy only") {
  // Without interruptions: 10,000 steps of 10 s, a checkpoint every 200 steps (50 of them), a
  // 300 s write behind a 20 s copy. Training stalls 20 s per checkpoint, and the run ends when
  // the last write drains: 100,000 + 50 x 20 + 300 = 101,300 s.
  JobSpec job = interrupted_job();
  job.causes.clear();
  job.write = CheckpointWrite::async;
  job.checkpoint_copy_s = 20;
  JobResult result = simulate_job(job, 5, 1);
  CHECK(result.wall_s.p50 == Approx(101300).epsilon(1e-12));
  CHECK(result.replications[0].checkpoints == 50);
  CHECK(result.replications[0].checkpoint_stall_s == Approx(50 * 20.0));
  // Every 20 steps (200 s) a write of 300 s cannot drain before the next copy, which waits for
  // it: each checkpoint then holds training up for 300 - 200 + 20 = 120 s, the first 20 s.
  job.policy = {CheckpointPolicy::Kind::every_steps, 20};
  result = simulate_job(job, 5, 1);
  CHECK(result.wall_s.p50 == Approx(100000 + 20 + 499 * 120.0 + 300).epsilon(1e-12));
  CHECK(result.replications[0].checkpoint_stall_s == Approx(20 + 499 * 120.0));

  // Under interruptions, with a write 15 times the copy, asynchronous checkpoints finish
  // sooner on average than blocking ones at the same interval, over the same histories.
  JobSpec blocking = interrupted_job();
  JobSpec async = blocking;
  async.write = CheckpointWrite::async;
  async.checkpoint_copy_s = 20;
  const JobResult a = simulate_job(async, 2000, 9);
  const JobResult b = simulate_job(blocking, 2000, 9);
  CHECK(a.wall_s.mean + a.wall_s.ci99_half_width < b.wall_s.mean - b.wall_s.ci99_half_width);
  // But an interruption costs it more: the work back to the last checkpoint written, which
  // may be the one before the last copy.
  CHECK(a.replications.size() == b.replications.size());
  CHECK(a.lost_gpu_hours.mean > 0);
  double lost_async = 0, lost_blocking = 0;
  for (std::size_t i = 0; i < a.replications.size(); ++i) {
    lost_async +=
        a.replications[i].lost_training_s / std::max<double>(1, a.replications[i].interruptions);
    lost_blocking +=
        b.replications[i].lost_training_s / std::max<double>(1, b.replications[i].interruptions);
  }
  CHECK(lost_async > lost_blocking);
  // Young-Daly prices a checkpoint at its stall: a copy checkpoints more often than a write...
  async.policy = blocking.policy = {CheckpointPolicy::Kind::young_daly, 0};
  CHECK(checkpoint_interval_steps(async) < checkpoint_interval_steps(blocking) / 3);
  // ...but no more often than its writes drain: a 0.01 s copy would checkpoint every 20 s, each
  // then waiting for the last 300 s write.
  async.checkpoint_copy_s = 0.01;
  CHECK(young_daly_interval_s(0.01, 20000) < 30);
  CHECK(checkpoint_interval_steps(async) == 30);
  const JobResult fast_copy = simulate_job(async, 2000, 9);
  const JobResult blocking_optimum = simulate_job(blocking, 2000, 9);
  CHECK(fast_copy.wall_s.mean < blocking_optimum.wall_s.mean);
}

TEST_CASE("job: a node taken out waits for its repair unless a hot spare takes its place") {
  // Interruptions every 20,000 s that all take a node, each out for 4 h; 60 s of detection.
  JobSpec job = interrupted_job();
  job.nodes = 125;
  job.node_repair_s = 4 * 3600;
  const JobResult no_spares = simulate_job(job, 1000, 21);
  // Most repairs overlap no other, so the wait per interruption is nearly the repair after the
  // detection, 14,340 s: less when a repair was already under way, or when an interruption
  // during detection or restart starts the downtime over.
  const double per_interruption = no_spares.node_wait_s.mean / no_spares.interruptions.mean;
  CHECK(per_interruption < 14340);
  CHECK(per_interruption > 0.8 * 14340);

  JobSpec spares = job;
  spares.hot_spares = 1;
  const JobResult one = simulate_job(spares, 1000, 21);
  spares.hot_spares = 8;
  const JobResult eight = simulate_job(spares, 1000, 21);
  JobSpec no_repair = job;
  no_repair.node_repair_s = 0;
  const JobResult never_waits = simulate_job(no_repair, 1000, 21);
  CHECK(one.node_wait_s.mean < 0.5 * no_spares.node_wait_s.mean);
  CHECK(one.wall_s.mean < no_spares.wall_s.mean);
  // Eight spares are never all out at once here (4 h repairs, 5.6 h between failures), so the
  // run is the one whose failed nodes come back at once, replication by replication.
  CHECK(eight.node_wait_s.p99 == 0);
  for (std::size_t i = 0; i < eight.replications.size(); ++i) {
    CHECK(eight.replications[i].wall_s == never_waits.replications[i].wall_s);
  }
  // Spares are paid for: eight of 8 GPUs beside the job's 1,000, all the wall time.
  CHECK(paid_gpus(spares) == 1064);
  CHECK(eight.cost_usd.mean == Approx(eight.wall_s.mean / 3600 * 1064 * 2));
  CHECK(eight.lost_gpu_hours.mean ==
        Approx((eight.wall_s.mean * 1064 - eight.useful_s * 1000) / 3600));

  // An interruption that leaves the nodes in service (a software fault) waits for nothing.
  JobSpec software = job;
  software.causes = {{"software bug", 0.00432, "assumed: a test's", 0}};
  const JobResult in_place = simulate_job(software, 200, 21);
  CHECK(in_place.node_wait_s.p99 == 0);
  CHECK(in_place.interruptions.mean > 5);

  // Spares without a repair time mean nothing, and are refused.
  no_repair.hot_spares = 2;
  CHECK_THROWS_WITH(simulate_job(no_repair, 10, 1), Catch::Contains("repair time"));
}

TEST_CASE("job: a switch fault takes all its nodes out at once") {
  // Interruptions every 20,000 s, each taking 4 nodes out for 4 h: spares for one fault at a
  // time are not enough when two overlap (they do, 4 h in 5.6 h between), spares for four are.
  JobSpec job = interrupted_job();
  job.nodes = 125;
  job.node_repair_s = 4 * 3600;
  job.causes = {{"leaf switch", 0.00432, "assumed: a test's", 4}};
  job.hot_spares = 4;
  const JobResult four = simulate_job(job, 1000, 21);
  job.hot_spares = 16;
  const JobResult sixteen = simulate_job(job, 1000, 21);
  job.hot_spares = 3;
  const JobResult three = simulate_job(job, 1000, 21);
  CHECK(four.node_wait_s.mean > 0);
  CHECK(sixteen.node_wait_s.mean < four.node_wait_s.mean);
  // Three spares for four nodes: every fault waits for its repair, as a one-node fault
  // without spares does, replication by replication.
  JobSpec single = job;
  single.causes = {{"GPU", 0.00432, "assumed: a test's", 1}};
  single.hot_spares = 0;
  const JobResult one_node = simulate_job(single, 1000, 21);
  for (std::size_t i = 0; i < three.replications.size(); ++i) {
    CHECK(three.replications[i].wall_s == one_node.replications[i].wall_s);
  }
  // Causes are drawn by their share of the rate: half switches, half software bugs wait about
  // half as much as switches alone.
  JobSpec mixed = job;
  mixed.hot_spares = 3;
  mixed.causes = {{"leaf switch", 0.00216, "assumed: a test's", 4},
                  {"software bug", 0.00216, "assumed: a test's", 0}};
  const JobResult half = simulate_job(mixed, 1000, 21);
  CHECK(half.interruptions.mean == Approx(three.interruptions.mean).epsilon(0.05));
  const double ratio = half.node_wait_s.mean / three.node_wait_s.mean;
  CHECK(ratio > 0.4);
  CHECK(ratio < 0.6);
}

TEST_CASE("job: shrinking runs on without a replica while its node is repaired") {
  // 125 replicas of one node each, interruptions every 20,000 s taking a node out for 4 h.
  JobSpec job = interrupted_job();
  job.nodes = 125;
  job.replicas = 125;
  job.node_repair_s = 4 * 3600;
  const JobResult waits = simulate_job(job, 1000, 21);
  job.when_short = ShortagePolicy::shrink;
  const JobResult shrinks = simulate_job(job, 1000, 21);
  JobSpec no_repair = job;
  no_repair.node_repair_s = 0;
  const JobResult never_short = simulate_job(no_repair, 1000, 21);
  // It never waits for a node, and takes the replica back at a checkpoint, at most once an
  // interruption. It trains short while some node is out: repairs of 4 h starting as a Poisson
  // process of 1 / 20,000 s cover (1 - e^(-14,400 / 20,000)) x 20,000 = 10,265 s per
  // interruption (overlapping ones share it), less the downtime and segments lost, more the
  // wait for the checkpoint after a repair.
  CHECK(shrinks.node_wait_s.p99 == 0);
  double shrunk = 0, regrows = 0;
  for (const JobReplication& run : shrinks.replications) {
    shrunk += run.shrunk_s;
    regrows += static_cast<double>(run.regrows);
    CHECK(run.regrows <= run.interruptions);
  }
  const double per_interruption = shrunk / (shrinks.interruptions.mean * 1000);
  CHECK(per_interruption > 0.7 * 10265);
  CHECK(per_interruption < 1.2 * 10265);
  // At least once a stretch with nodes out, which a failure starts when none is out: a share
  // e^(-14,400 / 20,000) = 0.49 of them.
  CHECK(regrows > 0.45 * shrinks.interruptions.mean * 1000);
  // A 1/125 slower step for hours and a restart to regrow cost far less than stopping for the
  // repair, and more than no repair at all.
  CHECK(shrinks.wall_s.mean < waits.wall_s.mean - waits.wall_s.ci99_half_width);
  CHECK(shrinks.wall_s.mean > never_short.wall_s.mean);
  // With one replica there is nothing to drop: shrinking is waiting.
  JobSpec one = job;
  one.replicas = 1;
  JobSpec one_waits = one;
  one_waits.when_short = ShortagePolicy::wait;
  const JobResult a = simulate_job(one, 200, 4);
  const JobResult b = simulate_job(one_waits, 200, 4);
  for (std::size_t i = 0; i < a.replications.size(); ++i) {
    CHECK(a.replications[i].wall_s == b.replications[i].wall_s);
  }
}

TEST_CASE("job: a shrunk run that integer time cannot hold is refused when it shrinks") {
  // 125 one-node replicas, 8.9 years of training at full size (under the 10 a run may take),
  // each interruption (one every 20,000 s at full size) taking its node out for 9.5 years:
  // nodes go out one by one and none comes back. Once 114 are out, the step is 125 / 11 = 11.4
  // times the full one, and the run would train for over 100 years: refused then.
  JobSpec job = interrupted_job();
  job.nodes = 125;
  job.replicas = 125;
  job.node_repair_s = 3e8;
  job.when_short = ShortagePolicy::shrink;
  job.shrunk_step_s = job.step_s;
  job.steps = 2.8e7;
  CHECK_THROWS_WITH(simulate_job(job, 1, 1), Catch::Contains("over 100 years"));
  // Repaired in 4 hours, it never runs that short.
  job.node_repair_s = 4 * 3600;
  job.steps = 1e5;
  CHECK_NOTHROW(simulate_job(job, 1, 1));
}

TEST_CASE("job: degraded hardware slows every step until evicted") {
  // No interruptions; a GPU 20% slow appears about once a second (86.4 per GPU-day on 1,000
  // GPUs), so from the second segment on the job always has one: 200 steps at 10 s, then 9,800
  // at the degraded step's 12 s, and 50 checkpoints of 300 s.
  JobSpec job = interrupted_job();
  job.causes.clear();
  job.nodes = 125;
  job.degradations = {
      {{"slow GPU", Degradation::Kind::compute, 0.2, 86.4, "assumed: a test's"}, 12}};
  JobResult kept = simulate_job(job, 3, 1);
  CHECK(kept.wall_s.p50 == Approx(200 * 10 + 9800 * 12.0 + 50 * 300).epsilon(1e-12));
  CHECK(kept.replications[0].degraded_s == Approx(9800 * 12.0 + 49 * 300));
  CHECK(kept.evictions.mean == 0);

  // Rare ones (every 28 h on average): evicting one at the next checkpoint (a restart, 720 s)
  // beats keeping it for the rest of the run when it slows the run by 20%, not when by 0.5%.
  job.degradations[0].degradation.per_gpu_day = 0.00086;
  JobSpec evicts = job;
  evicts.evict_degraded_after_s = 0;
  const JobResult slow_kept = simulate_job(job, 2000, 3);
  const JobResult slow_evicted = simulate_job(evicts, 2000, 3);
  CHECK(slow_evicted.evictions.mean > 0.5);
  CHECK(slow_evicted.wall_s.mean < slow_kept.wall_s.mean);
  CHECK(slow_evicted.degraded_s.mean < slow_kept.degraded_s.mean);
  job.degradations[0].step_s = evicts.degradations[0].step_s = 10.05;
  const JobResult mild_kept = simulate_job(job, 2000, 3);
  const JobResult mild_evicted = simulate_job(evicts, 2000, 3);
  CHECK(mild_kept.wall_s.mean < mild_evicted.wall_s.mean);
}

TEST_CASE("job: a synchronous step waits for its slowest rank") {
  // The mean of the larger of two standard normals is 1/sqrt(pi), of three 3/(2 sqrt(pi)).
  CHECK(expected_max_of_normals(1) == 0);
  CHECK(expected_max_of_normals(2) == Approx(1 / std::sqrt(M_PI)).epsilon(1e-9));
  CHECK(expected_max_of_normals(3) == Approx(1.5 / std::sqrt(M_PI)).epsilon(1e-9));
  // Tabulated expected normal order statistics (H. L. Harter, "Expected values of normal order
  // statistics", Biometrika 48 (1961)): 1.16296 for 5, 2.50759 for 100.
  CHECK(expected_max_of_normals(5) == Approx(1.16296).epsilon(1e-4));
  CHECK(expected_max_of_normals(100) == Approx(2.50759).epsilon(1e-4));
  // Growing without bound, ever slower: more ranks never make the step faster.
  double last = 0;
  for (const int n : {2, 8, 64, 512, 4096, 16384, 131072}) {
    const double e = expected_max_of_normals(n);
    CHECK(e > last);
    CHECK(e < std::sqrt(2 * std::log(n)));
    last = e;
  }
  CHECK(synchronous_jitter_factor(0.01, 2) == Approx(1 + 0.01 / std::sqrt(M_PI)));
  CHECK(synchronous_jitter_factor(0, 16384) == 1);
}

TEST_CASE("job: a preemption trace is replayed alike in every replication") {
  // No interruptions; preemptions at 2 h, 5.5 h and 50 h of a run of 28 h of training, each with
  // a notice long enough for the step and a checkpoint: every run meets the first two (the
  // third comes after it ends, waits and checkpoints counted), loses nothing, and takes the same
  // time.
  JobSpec job = interrupted_job();
  job.causes.clear();
  job.nodes = 64;
  job.spot = SpotCapacity{0, "measured: a test's", 600, 1800, {2 * 3600.0, 5.5 * 3600, 50 * 3600}};
  const JobResult result = simulate_job(job, 20, 5);
  for (const JobReplication& run : result.replications) {
    CHECK(run.preemptions == 2);
    CHECK(run.lost_training_s == 0);
    CHECK(run.wall_s == result.replications[0].wall_s);
  }
  // Training, the checkpoints (two of them emergency ones), two waits of 1,800 s for capacity
  // and 720 s to restart, plus what the notices left idle (at most the notice each).
  const JobReplication& run = result.replications[0];
  CHECK(run.emergency_checkpoints == 2);
  const double busy = 100000 + run.checkpoints * 300.0 + 2 * (1800 + 720);
  CHECK(run.wall_s >= busy);
  CHECK(run.wall_s <= busy + 2 * 600);
}

TEST_CASE("job: in-memory checkpoints restart from the peers' copy, or from storage") {
  // No interruptions: 50 copies of 20 s stall training; the run ends when the last state is on
  // storage, 300 s after the last copy (its 30 s to the peer ends sooner).
  JobSpec job = interrupted_job();
  job.causes.clear();
  job.nodes = 125;
  job.write = CheckpointWrite::in_memory;
  job.checkpoint_copy_s = 20;
  job.peer_copy_s = 30;
  job.peer_restore_s = 30;
  job.persist_every_s = 3 * 3600;
  const JobResult quiet = simulate_job(job, 3, 1);
  CHECK(quiet.wall_s.p50 == Approx(100000 + 50 * 20.0 + 300).epsilon(1e-12));

  // Interruptions that take one node: the peers' copy survives, restores in 30 s, not 120 s.
  job.causes = interrupted_job().causes;
  JobSpec async = job;
  async.write = CheckpointWrite::async;
  const JobResult memory = simulate_job(job, 2000, 13);
  const JobResult storage = simulate_job(async, 2000, 13);
  CHECK(memory.wall_s.mean < storage.wall_s.mean - storage.wall_s.ci99_half_width);
  CHECK(memory.memory_lost.p99 == 0);
  // Half of them taking two nodes: those lose the copy (when one was made since the last write
  // to storage), the others never.
  JobSpec mixed = job;
  mixed.causes = {{"GPU", 0.00216, "assumed: a test's", 1},
                  {"switch", 0.00216, "assumed: a test's", 2}};
  const JobResult half = simulate_job(mixed, 2000, 13);
  CHECK(half.memory_lost.mean > 0.3 * half.interruptions.mean);
  CHECK(half.memory_lost.mean < 0.5 * half.interruptions.mean);

  // Interruptions that take two nodes lose the peers' copy: back to the last write to storage,
  // every 3 h, which loses far more work.
  std::int64_t lost_copies = 0;
  JobSpec correlated = job;
  correlated.causes[0].nodes_out = 2;
  const JobResult fallen = simulate_job(correlated, 2000, 13);
  for (const JobReplication& run : fallen.replications) lost_copies += run.memory_lost;
  CHECK(lost_copies > 0.5 * fallen.interruptions.mean * 2000);
  CHECK(fallen.wall_s.mean > memory.wall_s.mean + memory.wall_s.ci99_half_width);
  CHECK(fallen.lost_gpu_hours.mean > 2 * memory.lost_gpu_hours.mean);

  // Spot capacity takes the peers' copies with it: refused.
  correlated.spot = SpotCapacity{0.001, "assumed: a test's", 120, 600};
  CHECK_THROWS_WITH(simulate_job(correlated, 10, 1), Catch::Contains("no spot capacity"));
}

TEST_CASE("job: a spot notice that lets the last checkpoint through ends the run") {
  // 100 steps of 10 s in one segment, a 60 s write; a notice at 995 s with 120 s to go: the
  // last step ends at 1,000 s and its checkpoint at 1,060 s, inside the notice. The run is
  // done then, with no wait for capacity and no restart.
  JobSpec job = interrupted_job();
  job.causes.clear();
  job.steps = 100;
  job.checkpoint_write_s = 60;
  job.nodes = 2;
  job.policy = {CheckpointPolicy::Kind::every_steps, 100};
  job.spot = SpotCapacity{0, "measured: a test's", 120, 3600, {995}};
  const JobResult result = simulate_job(job, 3, 1);
  CHECK(result.replications[0].preemptions == 1);
  CHECK(result.wall_s.p50 == 1060);
}

TEST_CASE("job: a Monte Carlo stopped partway keeps, if asked, what a shorter run would draw") {
  const JobSpec job = interrupted_job();
  const JobResult whole = simulate_job(job, 400, 5);
  for (const int threads : {1, 2}) {
    INFO(threads << " threads");
    const fleetsim::testing::StopGuard guard;
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    std::atomic<int> done{0};
    const auto stop_after_40 = [&done] {
      if (++done == 40) request_stop(StopReason::interrupt);
    };
    std::optional<JobResult> result;
    try {
      result = simulate_job(job, 400, 5, stop_after_40, OnStop::keep_finished);
    } catch (const Stopped&) {
      // With two threads the other one may finish 40 before replication 0 is finished: no
      // prefix then, which is what Stopped says.
      CHECK(threads > 1);
      continue;
    }
    clear_stop_request();
    const JobResult& stopped = *result;
    // No replication starts after the stop; some in flight may finish. What is kept is a
    // prefix: exactly what a run of that many replications gives.
    const std::size_t kept = stopped.replications.size();
    CHECK(kept >= 1);
    CHECK(kept < 400);
    CHECK(kept <= static_cast<std::size_t>(done.load()));
    if (threads == 1) CHECK(kept == 40);
    const JobResult shorter = simulate_job(job, static_cast<int>(kept), 5);
    CHECK(stopped == shorter);
    CHECK(std::equal(stopped.replications.begin(), stopped.replications.end(),
                     whole.replications.begin()));
  }
  // By default a Monte Carlo cut short is no result: Stopped, as when none finished at all.
  const fleetsim::testing::StopGuard guard;
  std::atomic<int> done{0};
  CHECK_THROWS_AS(simulate_job(job, 400, 5,
                               [&done] {
                                 if (++done == 40) request_stop(StopReason::interrupt);
                               }),
                  Stopped);
  CHECK_THROWS_AS(simulate_job(job, 10, 5, {}, OnStop::keep_finished), Stopped);
}
