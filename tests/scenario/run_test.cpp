// The run: block: what a training run's Monte Carlo reads from a scenario, and its mistakes.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "scenario/fixture.hpp"
#include "sim/engine/errors.hpp"
#include "workloads/lora_ops.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

using testing::load_error;
using testing::load_text;
using testing::with;

// Line numbers in the tests below count from here.
const std::string kRun =
    "name: run\n"                                  // 1
    "model: llama3-8b\n"                           // 2
    "training:\n"                                  // 3
    "  seq_len: 4096\n"                            // 4
    "  global_batch: 256\n"                        // 5
    "  micro_batch: 2\n"                           // 6
    "  tokens: 1e11\n"                             // 7
    "layout:\n"                                    // 8
    "  dp: 8\n"                                    // 9
    "  zero: 3\n"                                  // 10
    "cluster:\n"                                   // 11
    "  node: dgx-h100\n"                           // 12
    "  storage: {write: 50GB/s, read: 100GB/s}\n"  // 13
    "pricing: {gpu_hour: 2.95USD/h}\n"             // 14
    "run:\n"                                       // 15
    "  interruptions: llama3-405b\n"               // 16
    "  checkpoint: young_daly\n"                   // 17
    "  detection: 5min\n"                          // 18
    "  restart: 10min\n"                           // 19
    "  replications: 200\n";                       // 20

TEST_CASE("a run: block reads the Llama 3 interruption rates, storage, price and policy") {
  const Scenario s = load_text(kRun);
  REQUIRE(s.variants[0].run);
  const RunSpec& run = *s.variants[0].run;
  CHECK(run.tokens == 1e11);
  CHECK(run.interruptions == "llama3-405b");
  REQUIRE(run.causes.size() == 18);
  CHECK(run.causes.front().name == "faulty GPU");
  CHECK(run.causes.front().per_gpu_day == Approx(148.0 / (16384 * 54)));
  double total = 0;
  for (const InterruptionCause& cause : run.causes) total += cause.per_gpu_day;
  CHECK(total == Approx(419.0 / (16384 * 54)));  // the report's 419 unexpected interruptions
  CHECK_THAT(run.causes.front().source, Catch::StartsWith("published: Llama Team"));
  // Hardware causes take their node out; software bugs, timeouts and dependencies do not.
  double in_place = 0;
  for (const InterruptionCause& cause : run.causes) {
    if (cause.nodes_out == 0) in_place += cause.per_gpu_day * 16384 * 54;
    CHECK(cause.nodes_out <= 1);
  }
  CHECK(in_place == Approx(54 + 7 + 2));
  CHECK(run.write == CheckpointWrite::blocking);
  CHECK(run.node_repair_s == 0);
  CHECK(run.hot_spares == 0);
  CHECK(run.policy.kind == CheckpointPolicy::Kind::young_daly);
  CHECK(run.detection_s == 300);
  CHECK(run.restart_s == 600);
  CHECK(run.replications == 200);
  CHECK(run.storage_write_bytes_per_s == 50e9);
  CHECK(run.storage_read_bytes_per_s == 100e9);
  CHECK(run.usd_per_gpu_hour == 2.95);
  // A compare entry changes the policy; listed causes carry their provenance.
  const Scenario two = load_text(kRun +
                                 "compare:\n"
                                 "  - name: hourly\n"
                                 "    run: {checkpoint: 1h}\n"
                                 "  - name: listed\n"
                                 "    run:\n"
                                 "      interruptions:\n"
                                 "        - {cause: spot, per_gpu_day: 0.01, source: 'assumed: "
                                 "no published rate'}\n");
  REQUIRE(two.variants.size() == 3);
  CHECK(two.variants[1].run->policy.kind == CheckpointPolicy::Kind::every_seconds);
  CHECK(two.variants[1].run->policy.value == 3600);
  CHECK(two.variants[1].run->causes.size() == 18);
  REQUIRE(two.variants[2].run->causes.size() == 1);
  CHECK(two.variants[2].run->causes[0].per_gpu_day == 0.01);
  CHECK(two.variants[2].run->interruptions == "listed");
  // Spot capacity, with its own price.
  const Scenario spot = load_text(
      with(with(kRun, "  replications: 200\n",
                "  replications: 200\n"
                "  spot: {preemptions_per_node_hour: 0.001, notice: 2min, capacity_return: 1h,\n"
                "         source: 'assumed: no published rate'}\n"),
           "{gpu_hour: 2.95USD/h}", "{gpu_hour: 2.95USD/h, spot_gpu_hour: 1.5USD/h}"));
  REQUIRE(spot.variants[0].run->spot);
  CHECK(spot.variants[0].run->spot->preemptions_per_node_hour == 0.001);
  CHECK(spot.variants[0].run->spot->notice_s == 120);
  CHECK(spot.variants[0].run->spot->capacity_return_s == 3600);
  const Scenario spot_priced = load_text(
      with(with(kRun, "  replications: 200\n",
                "  replications: 200\n"
                "  spot: {preemptions_per_node_hour: 0.001, notice: 2min, capacity_return: 1h,\n"
                "         source: 'assumed: no published rate'}\n"),
           "{gpu_hour: 2.95USD/h}", "{gpu_hour: 2.95USD/h, spot_gpu_hour: 1.5USD/h}"));
  const StepInputs& in = spot_priced.variants[0].inputs;
  const JobSpec spot_job = job_spec(*spot_priced.variants[0].run, in.model, in.training, in.plan,
                                    in.node, in.nodes, {.healthy_s = 5.0});
  CHECK(spot_job.usd_per_gpu_hour == 1.5);
  CHECK(spot_job.nodes == 1);
  const auto unsourced_spot = load_error(
      with(kRun, "  replications: 200\n",
           "  replications: 200\n  spot: {preemptions_per_node_hour: 0.001, notice: 2min, "
           "capacity_return: 1h}\n"));
  REQUIRE(unsourced_spot);
  CHECK_THAT(unsourced_spot->what(), Catch::Contains("source"));
  // A priced spot run needs its spot price.
  const auto unpriced = load_error(
      with(kRun, "  replications: 200\n",
           "  replications: 200\n"
           "  spot: {preemptions_per_node_hour: 0.001, notice: 2min, capacity_return: 1h,\n"
           "         source: 'assumed: no published rate'}\n"));
  REQUIRE(unpriced);
  CHECK(unpriced->key() == "run.spot");
  CHECK_THAT(unpriced->what(), Catch::Contains("needs pricing.spot_gpu_hour"));
  // No run: block, no run; and then no price, which only a run would use.
  const std::string no_run = kRun.substr(0, kRun.find("run:\n"));
  const auto unused_price = load_error(no_run);
  REQUIRE(unused_price);
  CHECK(unused_price->key() == "pricing");
  CHECK_THAT(unused_price->what(), Catch::Contains("no variant has a run"));
  CHECK_FALSE(load_text(with(no_run, "pricing: {gpu_hour: 2.95USD/h}\n", "")).variants[0].run);
}

TEST_CASE("a run: block's mistakes name the key and what to do") {
  const auto tokens = load_error(with(kRun, "  tokens: 1e11\n", ""));
  REQUIRE(tokens);
  CHECK(tokens->key() == "training");
  CHECK_THAT(tokens->what(), Catch::Contains("a run needs training.tokens"));
  const auto storage = load_error(with(kRun, "  storage: {write: 50GB/s, read: 100GB/s}\n", ""));
  REQUIRE(storage);
  CHECK_THAT(storage->what(), Catch::Contains("it needs cluster.storage"));
  const auto preset = load_error(with(kRun, "llama3-405b", "llama3-450b"));
  REQUIRE(preset);
  CHECK(preset->key() == "run.interruptions");
  CHECK(preset->line() == 16);
  CHECK_THAT(preset->what(), Catch::Contains("unknown interruption preset \"llama3-450b\""));
  CHECK_THAT(preset->what(), Catch::Contains("did you mean \"llama3-405b\"?"));
  const auto policy = load_error(with(kRun, "young_daly", "0min"));
  REQUIRE(policy);
  CHECK_THAT(policy->what(), Catch::Contains("a checkpoint interval must be positive"));
  const auto neither = load_error(with(kRun, "young_daly", "often"));
  REQUIRE(neither);
  CHECK(neither->key() == "run.checkpoint");
  CHECK_THAT(neither->what(), Catch::Contains("expected young_daly, a step count or a duration"));
  const auto steps = load_error(with(kRun, "young_daly", "0 steps"));
  REQUIRE(steps);
  CHECK_THAT(steps->what(), Catch::Contains("expected a positive number of steps"));
  // A compare entry replaces the base's policy whatever its form.
  const Scenario forms = load_text(with(kRun, "young_daly", "500 steps") +
                                   "compare:\n"
                                   "  - name: timed\n"
                                   "    run: {checkpoint: 30min}\n");
  CHECK(forms.variants[0].run->policy.kind == CheckpointPolicy::Kind::every_steps);
  CHECK(forms.variants[0].run->policy.value == 500);
  CHECK(forms.variants[1].run->policy.kind == CheckpointPolicy::Kind::every_seconds);
  CHECK(forms.variants[1].run->policy.value == 1800);
  // Storage and pricing are checked even without a run.
  const std::string no_run = kRun.substr(0, kRun.find("run:\n"));
  CHECK(load_error(with(no_run, "2.95USD/h", "2.95EUR/h")));
  CHECK(load_error(with(no_run, "write: 50GB/s", "write: 50GB")));
  const auto many = load_error(with(kRun, "replications: 200", "replications: 5000000"));
  REQUIRE(many);
  CHECK(many->key() == "run.replications");
  CHECK_THAT(many->what(), Catch::Contains("more than 1000000 replications is refused"));
  const auto price = load_error(with(kRun, "2.95USD/h", "2.95EUR/h"));
  REQUIRE(price);
  CHECK(price->key() == "pricing.gpu_hour");
  const auto unsourced =
      load_error(with(kRun, "  interruptions: llama3-405b\n",
                      "  interruptions:\n    - {cause: spot, per_gpu_day: 0.01, source: guess}\n"));
  REQUIRE(unsourced);
  CHECK_THAT(unsourced->what(), Catch::Contains("expected a provenance starting with its kind"));
}

TEST_CASE("a run's asynchronous checkpoints, node repairs and hot spares") {
  const Scenario s = load_text(with(kRun, "  replications: 200\n",
                                    "  replications: 200\n"
                                    "  checkpoint_write: async\n"
                                    "  node_repair: 8h\n"
                                    "  hot_spares: 2\n") +
                               "compare:\n"
                               "  - name: blocking, no spares\n"
                               "    run: {checkpoint_write: blocking, hot_spares: 0}\n");
  const RunSpec& run = *s.variants[0].run;
  CHECK(run.write == CheckpointWrite::async);
  CHECK(run.node_repair_s == 8 * 3600);
  CHECK(run.hot_spares == 2);
  CHECK(s.variants[1].run->write == CheckpointWrite::blocking);
  CHECK(s.variants[1].run->hot_spares == 0);
  CHECK(s.variants[1].run->node_repair_s == 8 * 3600);
  // Every GPU copies its share of the checkpoint over its own PCIe link at once.
  const StepInputs& in = s.variants[0].inputs;
  const JobSpec job =
      job_spec(run, in.model, in.training, in.plan, in.node, in.nodes, {.healthy_s = 5.0});
  CHECK(job.checkpoint_copy_s ==
        Approx(checkpoint_bytes(in.model, in.training, in.plan) / 8 / in.node.pcie_bytes_per_s));
  CHECK(job.checkpoint_copy_s < job.checkpoint_write_s / 4);
  CHECK(checkpoint_stall_s(job) == job.checkpoint_copy_s);
  CHECK(paid_gpus(job) == 8 + 2 * 8);
  CHECK(job.replicas == 8);
  CHECK(job.when_short == ShortagePolicy::wait);
  // Shrinking, and a correlated cause: a leaf switch takes its 16 nodes out.
  const Scenario shrink = load_text(with(kRun, "  interruptions: llama3-405b\n",
                                         "  interruptions:\n"
                                         "    - {cause: leaf switch, per_gpu_day: 0.001, "
                                         "source: 'assumed: a guess', nodes_out: 16}\n"
                                         "  node_repair: 4h\n"
                                         "  when_short: shrink\n"));
  CHECK(shrink.variants[0].run->when_short == ShortagePolicy::shrink);
  CHECK(shrink.variants[0].run->causes[0].nodes_out == 16);
  // A component's MTBF: a node of 8 GPUs failing every 50,000 h is 24 / 50,000 / 8 per GPU-day.
  const Scenario mtbf = load_text(with(kRun, "  interruptions: llama3-405b\n",
                                       "  interruptions:\n"
                                       "    - {cause: node, mtbf: 50000h, gpus_per_component: 8, "
                                       "source: 'assumed: a guess'}\n"));
  CHECK(mtbf.variants[0].run->causes[0].per_gpu_day == Approx(24.0 / 50000 / 8));
  const auto both = load_error(with(kRun, "  interruptions: llama3-405b\n",
                                    "  interruptions:\n"
                                    "    - {cause: node, mtbf: 50000h, per_gpu_day: 0.1, "
                                    "source: 'assumed: a guess'}\n"));
  REQUIRE(both);
  CHECK_THAT(both->what(), Catch::Contains("per_gpu_day or mtbf, one of them"));
  const auto alone = load_error(with(kRun, "  interruptions: llama3-405b\n",
                                     "  interruptions:\n"
                                     "    - {cause: node, mtbf: 50000h, "
                                     "source: 'assumed: a guess'}\n"));
  REQUIRE(alone);
  CHECK_THAT(alone->what(), Catch::Contains("needs gpus_per_component"));
  const auto unrepaired = load_error(
      with(kRun, "  replications: 200\n", "  replications: 200\n  when_short: shrink\n"));
  REQUIRE(unrepaired);
  CHECK(unrepaired->key() == "run.when_short");
  CHECK_THAT(unrepaired->what(), Catch::Contains("needs node_repair"));
  // Degraded hardware, and a link cannot lose all its bandwidth.
  const std::string degraded = with(kRun, "  replications: 200\n",
                                    "  replications: 200\n"
                                    "  evict_degraded: 30min\n"
                                    "  degraded:\n"
                                    "    - {cause: slow GPU, slows: compute, fraction: 0.1, "
                                    "per_gpu_day: 0.0001, source: 'assumed: a guess'}\n");
  const RunSpec slow = *load_text(degraded).variants[0].run;
  REQUIRE(slow.degradations.size() == 1);
  CHECK(slow.degradations[0].kind == Degradation::Kind::compute);
  CHECK(slow.degradations[0].fraction == 0.1);
  CHECK(slow.evict_degraded_after_s == 1800);
  const auto dead_link = load_error(with(with(degraded, "compute", "network"), "0.1", "1.5"));
  REQUIRE(dead_link);
  CHECK(dead_link->key() == "run.degraded[0].fraction");
  CHECK_THAT(dead_link->what(), Catch::Contains("the fraction lost is at most 0.99"));
  // A link keeping under 1% of its bandwidth, or a GPU over 100 times slower, is out of
  // service: its step would outlast the integer clock as a rate under the floors would.
  const auto all_but_dead = load_error(with(with(degraded, "compute", "network"), "0.1", "0.999"));
  REQUIRE(all_but_dead);
  CHECK_THAT(all_but_dead->what(), Catch::Contains("at most 0.99"));
  CHECK(load_text(with(degraded, "0.1", "100")).variants[0].run->degradations[0].fraction == 100);
  const auto dead_gpu = load_error(with(degraded, "0.1", "101"));
  REQUIRE(dead_gpu);
  CHECK_THAT(dead_gpu->what(), Catch::Contains("expected at most 100"));
  const auto policy = load_error(with(kRun, "  replications: 200\n",
                                      "  replications: 200\n  node_repair: 1h\n"
                                      "  when_short: pray\n"));
  REQUIRE(policy);
  CHECK_THAT(policy->what(), Catch::Contains("expected one of wait, shrink"));
  CHECK(job.tokens_per_step == 256.0 * 4096);

  // In memory: persist is required with it (and checked, not used, without it: a compare entry
  // may turn in-memory checkpoints off).
  const std::string in_memory = with(kRun, "  replications: 200\n",
                                     "  replications: 200\n"
                                     "  checkpoint_write: in_memory\n"
                                     "  persist: 2h\n");
  const Scenario memory = load_text(with(with(in_memory, "  dp: 8\n", "  dp: 16\n"),
                                         "  node: dgx-h100\n", "  node: dgx-h100\n  nodes: 2\n"));
  CHECK(memory.variants[0].run->write == CheckpointWrite::in_memory);
  CHECK(memory.variants[0].run->persist_every_s == 7200);
  // One node has no peer.
  const auto no_peer = load_error(in_memory);
  REQUIRE(no_peer);
  CHECK(no_peer->key() == "run.checkpoint_write");
  CHECK_THAT(no_peer->what(), Catch::Contains("the job has one node"));
  // The job itself refuses what the loader refuses, by the same rule: one node, spot capacity,
  // a node without NICs.
  const StepInputs& two_nodes = memory.variants[0].inputs;
  const RunSpec& kept = *memory.variants[0].run;
  const auto job_of = [&](const RunSpec& run, const NodeSpec& node, int nodes) {
    return job_spec(run, two_nodes.model, two_nodes.training, two_nodes.plan, node, nodes,
                    {.healthy_s = 5.0});
  };
  CHECK(job_of(kept, two_nodes.node, 2).peer_copy_s > 0);
  CHECK_THROWS_WITH(job_of(kept, two_nodes.node, 1), Catch::Contains("the job has one node"));
  RunSpec on_spot = kept;
  on_spot.spot = SpotCapacity{};
  CHECK_THROWS_WITH(job_of(on_spot, two_nodes.node, 2), Catch::Contains("spot capacity"));
  NodeSpec no_nics = two_nodes.node;
  no_nics.nics = 0;
  CHECK_THROWS_WITH(job_of(kept, no_nics, 2), Catch::Contains("has none"));
  const auto unpersisted = load_error(with(kRun, "  replications: 200\n",
                                           "  replications: 200\n"
                                           "  checkpoint_write: in_memory\n"));
  REQUIRE(unpersisted);
  CHECK_THAT(unpersisted->what(), Catch::Contains("needs persist"));
  const auto stray =
      load_error(with(kRun, "  replications: 200\n", "  replications: 200\n  persist: 2 hours\n"));
  REQUIRE(stray);
  CHECK(stray->key() == "run.persist");
  const auto write = load_error(
      with(kRun, "  replications: 200\n", "  replications: 200\n  checkpoint_write: lazy\n"));
  REQUIRE(write);
  CHECK(write->key() == "run.checkpoint_write");
  CHECK_THAT(write->what(), Catch::Contains("expected one of blocking, async, in_memory"));
  const auto spares =
      load_error(with(kRun, "  replications: 200\n", "  replications: 200\n  hot_spares: 4\n"));
  REQUIRE(spares);
  CHECK(spares->key() == "run.hot_spares");
  CHECK(spares->line() == 21);
  CHECK_THAT(spares->what(), Catch::Contains("needs node_repair"));
  const auto negative =
      load_error(with(kRun, "  replications: 200\n", "  replications: 200\n  hot_spares: -1\n"));
  REQUIRE(negative);
  CHECK(negative->key() == "run.hot_spares");
  const auto scope = load_error(
      with(kRun, "  interruptions: llama3-405b\n",
           "  interruptions:\n    - {cause: bug, per_gpu_day: 0.01, source: 'assumed: a guess', "
           "nodes_out: some}\n"));
  REQUIRE(scope);
  CHECK(scope->key() == "run.interruptions[0].nodes_out");
}

TEST_CASE("BLOOM-176B's checkpoint is about the published 2.3 TB") {
  // BigScience's tr11 README: "each checkpoint with fp32 optim states and bf16+fp32 weights is
  // 2.3TB" (github.com/bigscience-workshop/bigscience, train/tr11-176B-ml). 14 bytes for each of
  // 176.2 B parameters is 2.47 TB (2.24 TiB): within 8% of the published figure. Megatron-
  // DeepSpeed's ZeRO 1, as BLOOM trained.
  const Scenario s =
      load_text(with(with(kRun, "model: llama3-8b", "model: bloom-176b"), "zero: 3", "zero: 1"));
  const StepInputs& in = s.variants[0].inputs;
  CHECK(in.model.parameters() == Approx(176.2e9).epsilon(0.002));
  CHECK(checkpoint_bytes(in.model, in.training, in.plan) == Approx(2.3e12).epsilon(0.08));
}

TEST_CASE("a run's job: steps from tokens, checkpoint bytes and times from storage and NICs") {
  const Scenario s = load_text(kRun);
  const StepInputs& in = s.variants[0].inputs;
  const JobSpec job = job_spec(*s.variants[0].run, in.model, in.training, in.plan, in.node,
                               in.nodes, {.healthy_s = 5.0});
  CHECK(job.steps == std::ceil(1e11 / (256.0 * 4096)));
  CHECK(job.gpus == 8);
  // Under PyTorch's FSDP (zero 3) 12 bytes per parameter (the FP32 shards, which are the
  // parameters, and two FP32 moments) at the storage's 50 GB/s (eight 400 Gb/s NICs would take
  // 400 GB/s); where a BF16 copy is kept (ZeRO 1, or ZeRO 3 with bf16_shards) 14.
  CHECK(checkpoint_bytes(in.model, in.training, in.plan) == Approx(12 * in.model.parameters()));
  CHECK(job.checkpoint_write_s == Approx(12 * in.model.parameters() / 50e9));
  CHECK(job.restore_s == Approx(12 * in.model.parameters() / 100e9));
  ParallelPlan distributed = in.plan;
  distributed.zero_stage = 1;
  CHECK(checkpoint_bytes(in.model, in.training, distributed) == Approx(14 * in.model.parameters()));
  ParallelPlan bf16_shards = in.plan;
  bf16_shards.bf16_shards = true;
  CHECK(checkpoint_bytes(in.model, in.training, bf16_shards) == Approx(14 * in.model.parameters()));
  // A storage faster than the node's NICs runs at the NICs' rate.
  CHECK(checkpoint_bytes_per_s(1e15, in.node, 1) == Approx(8 * 50e9));
  // LoRA checkpoints its adapters' weights and optimizer states only; a restart also reads the
  // frozen base back.
  TrainingSpec lora = in.training;
  lora.lora = LoraSpec{};
  const double adapters = lora_parameters_per_layer(in.model, lora) * in.model.layers;
  CHECK(checkpoint_bytes(in.model, lora, in.plan) == Approx(12 * adapters));
  CHECK(restore_bytes(in.model, lora, in.plan) ==
        Approx(12 * adapters + 2 * in.model.parameters()));
  // DoRA checkpoints its magnitudes beside: one per output feature of each adapted projection.
  TrainingSpec dora = lora;
  dora.lora->weight_decomposed = true;
  const ModelSpec& m = in.model;
  const double outputs = m.query_width() + m.key_width() + m.value_width() + m.hidden +
                         (m.gated_mlp() ? 2 : 1) * m.ffn + m.hidden;
  CHECK(checkpoint_bytes(m, dora, in.plan) == Approx(12 * (adapters + outputs * m.layers)));
}

TEST_CASE("a run's job is complete when built: every step time it replays, with jitter") {
  const Scenario s = load_text(kRun);
  const StepInputs& in = s.variants[0].inputs;
  RunSpec run = *s.variants[0].run;
  run.step_jitter = 0.01;
  run.when_short = ShortagePolicy::shrink;
  run.degradations = {{"slow GPU", Degradation::Kind::compute, 0.1, 1e-4, "test"},
                      {"slow link", Degradation::Kind::network, 0.5, 1e-4, "test"}};
  const RunStepTimes steps{.healthy_s = 5.0, .shrunk_s = 4.5, .degraded_s = {5.5, 6.0}};
  const JobSpec job = job_spec(run, in.model, in.training, in.plan, in.node, in.nodes, steps);
  // Eight ranks at 1% each: the slowest of eight normals is 1.4236 sigma above the mean
  // (Harter 1961), the step 1.4% longer.
  CHECK(job.jitter_factor == Approx(1.014236).epsilon(1e-5));
  CHECK(job.step_s == 5.0 * job.jitter_factor);
  CHECK(job.when_short == ShortagePolicy::shrink);
  CHECK(job.shrunk_step_s == 4.5 * job.jitter_factor);
  REQUIRE(job.degradations.size() == 2);
  CHECK(job.degradations[0].degradation == run.degradations[0]);
  CHECK(job.degradations[0].step_s == 5.5 * job.jitter_factor);
  CHECK(job.degradations[1].step_s == 6.0 * job.jitter_factor);
  // A layout that cannot run a replica short waits for repairs instead.
  RunStepTimes unshrinkable = steps;
  unshrinkable.shrunk_s.reset();
  CHECK(job_spec(run, in.model, in.training, in.plan, in.node, in.nodes, unshrinkable).when_short ==
        ShortagePolicy::wait);
  // A degraded step missing is refused, not taken as a healthy one.
  RunStepTimes missing = steps;
  missing.degraded_s.pop_back();
  CHECK_THROWS_AS(job_spec(run, in.model, in.training, in.plan, in.node, in.nodes, missing),
                  ModelError);
}

TEST_CASE("a spot run can replay a trace of preemption times") {
  testing::TempDir dir;
  dir.write("preemptions.yaml",
            "source: 'measured: a test fleet'\n"
            "hours: [2, 5.5, 30]\n");
  const std::string spot = with(kRun, "  replications: 200\n",
                                "  replications: 200\n"
                                "  spot: {trace: preemptions.yaml, notice: 2min, "
                                "capacity_return: 1h}\n");
  const std::string priced =
      with(spot, "{gpu_hour: 2.95USD/h}", "{gpu_hour: 2.95USD/h, spot_gpu_hour: 1.5USD/h}");
  const Scenario s = load_scenario(dir.write("scenario.yaml", priced), testing::source_data());
  const SpotCapacity& capacity = *s.variants[0].run->spot;
  CHECK(capacity.trace_s == std::vector<double>{2 * 3600.0, 5.5 * 3600, 30 * 3600});
  CHECK(capacity.source == "measured: a test fleet");
  CHECK(capacity.preemptions_per_node_hour == 0);

  // Times that go back, a rate beside a trace, a source in the scenario: each named.
  dir.write("preemptions.yaml", "source: 'measured: a test fleet'\nhours: [2, 1]\n");
  const auto backwards = testing::file_error(dir.path() / "scenario.yaml");
  REQUIRE(backwards);
  CHECK_THAT(backwards->file(), Catch::EndsWith("preemptions.yaml"));
  CHECK(backwards->line() == 2);
  CHECK_THAT(backwards->what(), Catch::Contains("must not go back"));
  const auto both = load_error(with(priced, "{trace: preemptions.yaml,",
                                    "{trace: preemptions.yaml, preemptions_per_node_hour: 0.1,"));
  REQUIRE(both);
  CHECK_THAT(both->what(), Catch::Contains("one of them"));
}

}  // namespace
}  // namespace fleetsim
