#include <catch2/catch.hpp>
#include <vector>

#include "sim/engine/engine.hpp"
#include "sim/engine/errors.hpp"
#include "sim/engine/rng.hpp"

using fleetsim::Engine;
using fleetsim::SimTime;

TEST_CASE("events run in time order, ties in scheduling order") {
  Engine engine;
  std::vector<int> order;
  engine.schedule_at(SimTime::from_ns(30), [&] { order.push_back(3); });
  engine.schedule_at(SimTime::from_ns(10), [&] { order.push_back(1); });
  engine.schedule_at(SimTime::from_ns(20), [&] { order.push_back(21); });
  engine.schedule_at(SimTime::from_ns(20), [&] { order.push_back(22); });
  engine.schedule_at(SimTime::from_ns(20), [&] { order.push_back(23); });
  engine.run();
  CHECK(order == std::vector<int>{1, 21, 22, 23, 3});
  CHECK(engine.now() == SimTime::from_ns(30));
  CHECK(engine.events_processed() == 5);
}

TEST_CASE("an event scheduled for now from inside an event runs after the events already due") {
  Engine engine;
  std::vector<int> order;
  engine.schedule_at(SimTime::from_ns(5), [&] {
    order.push_back(1);
    engine.schedule_after(SimTime{}, [&] { order.push_back(3); });
  });
  engine.schedule_at(SimTime::from_ns(5), [&] { order.push_back(2); });
  engine.run();
  CHECK(order == std::vector<int>{1, 2, 3});
}

TEST_CASE("cancelled events never run and cancelling twice is harmless") {
  Engine engine;
  int ran = 0;
  auto keep = engine.schedule_at(SimTime::from_ns(1), [&] { ran += 1; });
  auto drop = engine.schedule_at(SimTime::from_ns(2), [&] { ran += 100; });
  CHECK(engine.cancel(drop));
  CHECK_FALSE(engine.cancel(drop));
  CHECK(engine.pending() == 1);
  engine.run();
  CHECK(ran == 1);
  CHECK_FALSE(engine.cancel(keep));  // already ran
  // The freed slot is reused; the stale handle must not cancel the new event.
  engine.schedule_after(SimTime::from_ns(1), [&] { ran += 10; });
  CHECK_FALSE(engine.cancel(drop));
  engine.run();
  CHECK(ran == 11);
}

TEST_CASE("run(until) stops before later events and resumes") {
  Engine engine;
  int ran = 0;
  engine.schedule_at(SimTime::from_ns(10), [&] { ++ran; });
  engine.schedule_at(SimTime::from_ns(20), [&] { ++ran; });
  engine.run(SimTime::from_ns(15));
  CHECK(ran == 1);
  CHECK(engine.now() == SimTime::from_ns(15));
  engine.run();
  CHECK(ran == 2);
}

TEST_CASE("scheduling in the past is a model error") {
  Engine engine;
  engine.schedule_at(SimTime::from_ns(10), [] {});
  engine.run();
  CHECK_THROWS_AS(engine.schedule_at(SimTime::from_ns(5), [] {}), fleetsim::ModelError);
}

TEST_CASE("durations round up to whole nanoseconds, once") {
  CHECK(fleetsim::from_seconds(1e-9).ns() == 1);
  CHECK(fleetsim::from_seconds(0.2e-9).ns() == 1);  // a cost is never dropped
  CHECK(fleetsim::from_seconds(0.0).ns() == 0);
  CHECK(fleetsim::from_us(3.4).ns() == 3400);
  CHECK(fleetsim::from_seconds(-1.0).ns() == 0);
  CHECK(fleetsim::from_seconds(0.6e-6).ns() == 600);  // binary noise is not a nanosecond
  CHECK(fleetsim::from_seconds(0.7000000004).ns() == 700'000'001);  // real fractions round up
  CHECK(fleetsim::from_seconds(12.5).ns() == 12'500'000'000);
  CHECK(fleetsim::from_seconds(1e30) == SimTime::max());
}

TEST_CASE("random streams are reproducible and independent by purpose and entity") {
  fleetsim::RngStream a(42, "failures", 3), b(42, "failures", 3);
  fleetsim::RngStream other_purpose(42, "jitter", 3), other_entity(42, "failures", 4);
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next_u64();
    CHECK(x == b.next_u64());
    CHECK(x != other_purpose.next_u64());
    CHECK(x != other_entity.next_u64());
  }
}

TEST_CASE("distributions have the moments they should") {
  // Mean of Exp(rate) is 1/rate; of a standard normal 0 with variance 1. With n = 200k draws
  // the standard error of the mean is about 1/sqrt(n) = 0.0022 (times 1/rate for the
  // exponential), so 0.01 is over four standard errors.
  fleetsim::RngStream rng(7, "moments");
  constexpr int n = 200'000;
  double exp_sum = 0, normal_sum = 0, normal_sq = 0, uniform_min = 1, uniform_max = 0;
  for (int i = 0; i < n; ++i) {
    exp_sum += rng.exponential(2.0);
    const double z = rng.normal();
    normal_sum += z;
    normal_sq += z * z;
    const double u = rng.uniform01();
    uniform_min = std::min(uniform_min, u);
    uniform_max = std::max(uniform_max, u);
  }
  CHECK(exp_sum / n == Approx(0.5).margin(0.01));
  CHECK(normal_sum / n == Approx(0.0).margin(0.01));
  CHECK(normal_sq / n == Approx(1.0).margin(0.01));
  CHECK(uniform_min >= 0.0);
  CHECK(uniform_max < 1.0);
}

TEST_CASE("the reference workload processes its events and the chains' last ones") {
  // `pending` chains share one count of N: the events up to the N-th each schedule the next of
  // their chain, the N-th and the other chains' last pending ones schedule nothing, so
  // N + pending - 1 run in all. Benchmarks quote this workload's rate as their yardstick.
  CHECK(fleetsim::run_reference_events(1, 1000) == 1000);
  CHECK(fleetsim::run_reference_events(8, 1000) == 1007);
  CHECK(fleetsim::run_reference_events(1024, 100'000) == 101'023);
}
