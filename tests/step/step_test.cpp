#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <utility>

#include "common/memory_items.hpp"
#include "common/small_job.hpp"
#include "sim/step/step_executor.hpp"
#include "workloads/transformer_ops.hpp"

using namespace fleetsim;

using fleetsim::testing::pipelined_job;
using fleetsim::testing::small_job;

namespace {

// The bytes of the named item of a step's memory breakdown (-1 when it has none).
double memory_item(const StepOutcome& out, const std::string& name) {
  return fleetsim::testing::memory_item(out.memory, name);
}

// The exposed time of every kind together.
double exposed_by_kind(const StepBreakdown& b) {
  double sum = 0;
  for (const ExposedPart& part : kExposedParts) sum += b.*part.seconds;
  return sum;
}

// The job on its 8 GPUs as dp 8 / cp x cp, one micro-batch per replica.
StepOutcome on_one_node_over_cp(StepInputs in, int cp) {
  in.plan.cp = cp;
  in.plan.dp = 8 / cp;
  in.training.global_batch = in.training.micro_batch * in.plan.dp;
  const StepOutcome out = simulate_step(in);
  REQUIRE(out.simulated);
  return out;
}

}  // namespace

TEST_CASE("MFU is a fraction and the step is no faster than its FLOPs at peak") {
  for (const int zero : {0, 1, 2, 3}) {
    StepInputs in = small_job();
    in.plan.zero_stage = zero;
    const StepOutcome out = simulate_step(in);
    REQUIRE(out.simulated);
    const StepResult& step = out.step;
    CHECK(step.mfu > 0.0);
    CHECK(step.mfu < 1.0);
    CHECK(step.hfu >= step.mfu);
    CHECK(step.step_time_s >= step.model_flops / (8 * in.gpu.dense_bf16_flops_per_s.value));
    CHECK(step.tokens_per_s == Approx(32.0 * 2048 / step.step_time_s));
  }
}

TEST_CASE("the breakdown adds up to the step time and no part is negative") {
  const StepOutcome out = simulate_step(small_job());
  const StepBreakdown& b = out.step.breakdown;
  CHECK(b.compute_s + b.exposed_comm_s + b.idle_s == Approx(out.step.step_time_s).epsilon(1e-9));
  CHECK(b.compute_s > 0);
  CHECK(b.exposed_comm_s > 0);  // ZeRO-3 cannot hide the first gather of each micro-batch
  CHECK(b.idle_s >= 0);
  // Pure data parallelism: all of it is data-parallel communication.
  CHECK(b.exposed_dp_s == Approx(b.exposed_comm_s).epsilon(1e-12));
  CHECK(b.exposed_tp_s == 0);
  CHECK(b.exposed_pp_s == 0);
}

TEST_CASE("one GPU: the step is exactly the sum of its kernels") {
  // dp = 1: every collective has one member and costs nothing, so the step is the compute
  // stream run back to back: the sum of each kernel's duration, rounded up to the nanosecond.
  StepInputs in = small_job();
  in.plan.dp = 1;
  in.plan.zero_stage = 0;
  in.training.global_batch = 4;
  const TaskGraph graph = build_data_parallel_step(in.model, in.training, in.plan);
  SimTime expected{};
  for (const Task& task : graph.stages[0]) {
    if (const auto* work = std::get_if<ComputeWork>(&task.work)) {
      expected += from_seconds(kernel_seconds(in.gpu, *work->kernel));
    }
  }
  const StepOutcome out = simulate_step(in);
  CHECK(from_seconds(out.step.step_time_s) == expected);
  CHECK(out.step.breakdown.exposed_comm_s == 0.0);
  CHECK(out.step.breakdown.idle_s == Approx(0.0).margin(1e-12));
}

TEST_CASE("one GPU in FP16: the BF16 step and the loss scaling's pass over the gradients") {
  // FP16 runs the BF16 entries; its dynamic loss scaling adds one pass over the FP32
  // gradients before Adam (read and written, 8 bytes a parameter): on one GPU, every
  // parameter's, at the sustained HBM rate.
  StepInputs in = small_job();
  in.plan.dp = 1;
  in.plan.zero_stage = 0;
  in.training.global_batch = 4;
  const double bf16 = simulate_step(in).step.step_time_s;
  in.training.precision = Precision::fp16;
  const double fp16 = simulate_step(in).step.step_time_s;
  const double unscale_s =
      8 * in.model.parameters() / (in.gpu.hbm_bytes_per_s.value * in.gpu.memory_efficiency.value);
  CHECK(fp16 - bf16 == Approx(unscale_s).epsilon(1e-6));
}

TEST_CASE("the same inputs give bit-identical results") {
  const StepOutcome a = simulate_step(small_job());
  const StepOutcome b = simulate_step(small_job());
  CHECK(a.step.step_time_s == b.step.step_time_s);
  CHECK(a.step.events == b.step.events);
  REQUIRE(a.step.links.size() == b.step.links.size());
  for (std::size_t i = 0; i < a.step.links.size(); ++i) {
    CHECK(a.step.links[i].name == b.step.links[i].name);
    CHECK(a.step.links[i].bytes == b.step.links[i].bytes);
  }
}

TEST_CASE("NVLink carries the collective bytes: (p-1)/p of each payload per GPU port") {
  // ZeRO-3, one micro-batch per rank per step: each unit is gathered twice and its gradients
  // reduce-scattered once, 3 x 2 bytes x N of payload S; a ring sends 7/8 of S per GPU.
  StepInputs in = small_job();
  in.training.global_batch = 16;
  const StepOutcome out = simulate_step(in);
  const double n = in.model.parameters();
  CHECK(out.step.comm_bytes_per_gpu == Approx(7.0 / 8 * 3 * 2 * n));
  double uplink_bytes = 0;
  for (const LinkUsage& link : out.step.links) {
    if (link.name == "n0.gpu0->n0.nvswitch") uplink_bytes = link.bytes;
  }
  CHECK(uplink_bytes == Approx(out.step.comm_bytes_per_gpu));
}

TEST_CASE("more NVLink bandwidth or a faster GPU never makes the step slower") {
  const double base = simulate_step(small_job()).step.step_time_s;
  StepInputs faster_links = small_job();
  faster_links.node.nvlink_bytes_per_s *= 2;
  CHECK(simulate_step(faster_links).step.step_time_s <= base);
  StepInputs slower_links = small_job();
  slower_links.node.nvlink_bytes_per_s /= 20;
  CHECK(simulate_step(slower_links).step.step_time_s > base);
  StepInputs faster_gpu = small_job();
  faster_gpu.gpu.dense_bf16_flops_per_s.value *= 2;
  faster_gpu.gpu.hbm_bytes_per_s.value *= 2;
  CHECK(simulate_step(faster_gpu).step.step_time_s < base);
}

TEST_CASE("compute beside communication runs on the SMs the collectives leave it") {
  // ZeRO-3 gathers and reduces beside the compute stream. The more SMs each collective holds,
  // the longer the compute (never shorter), and the step with it; each kernel runs at most on
  // all but three collectives' SMs, which bounds the compute; without collectives (one GPU)
  // nothing changes.
  StepInputs in = small_job();
  const StepOutcome free = simulate_step(in);
  REQUIRE(free.simulated);
  double previous_compute = free.step.breakdown.compute_s;
  double previous_step = free.step.step_time_s;
  for (const double sms : {6.0, 13.0, 26.0}) {
    in.gpu.comm_sms.value = sms;
    const StepOutcome slowed = simulate_step(in);
    REQUIRE(slowed.simulated);
    CHECK(slowed.step.breakdown.compute_s >= previous_compute);
    CHECK(slowed.step.step_time_s >= previous_step);
    previous_compute = slowed.step.breakdown.compute_s;
    previous_step = slowed.step.step_time_s;
  }
  CHECK(previous_compute > 1.01 * free.step.breakdown.compute_s);
  // Three collectives' 78 SMs leave 54 of 132: no kernel runs slower than 132 / 54 times its
  // time alone, twice that with a wave's tail.
  CHECK(previous_compute < 2 * 132.0 / 54 * free.step.breakdown.compute_s);
  StepInputs alone = small_job();
  alone.node.gpus = 1;
  alone.plan.dp = 1;
  alone.training.global_batch = 4;
  const StepOutcome alone_free = simulate_step(alone);
  alone.gpu.comm_sms.value = 26;
  CHECK(simulate_step(alone).step.step_time_s == alone_free.step.step_time_s);
}

TEST_CASE("compute beside communication moves its bytes on the HBM the collectives leave") {
  // Plain data parallelism runs each GPU's kernels as one GPU alone does, its gradient
  // all-reduces beside the backward pass. With collectives holding no SMs, only HBM separates
  // them: while an all-reduce moves 0.82 x 450 GB/s over NVLink it takes 3x that of HBM
  // (kCommHbmBytesPerLinkByte), 1.11 of the 2.91 TB/s compute sustains, so memory-bound kernels
  // beside it run at most 2.91 / 1.80 = 1.6x as long and the compute lengthens, by less than
  // that.
  StepInputs dp8 = small_job();
  dp8.plan.dp = 8;
  dp8.plan.zero_stage = 0;
  dp8.gpu.comm_sms.value = 0;
  StepInputs alone = dp8;
  alone.node.gpus = 1;
  alone.plan.dp = 1;
  alone.training.global_batch = dp8.training.global_batch / 8;
  const StepOutcome together = simulate_step(dp8);
  const StepOutcome one = simulate_step(alone);
  REQUIRE(together.simulated);
  REQUIRE(one.simulated);
  const double sustained = 3.35e12 * 0.87;
  const double taken = kCommHbmBytesPerLinkByte * 0.82 * 450e9;
  CHECK(together.step.breakdown.compute_s > 1.001 * one.step.breakdown.compute_s);
  CHECK(together.step.breakdown.compute_s <
        sustained / (sustained - taken) * one.step.breakdown.compute_s);
}

TEST_CASE("tensor parallelism keeps the FLOPs, splits the memory and talks over NVLink only") {
  // The small model on one 8-GPU node: tp 8 against plain data parallelism over the same GPUs.
  StepInputs data = small_job();
  data.model.kv_heads = 8;  // tp 8 splits the key/value heads too
  data.plan.zero_stage = 0;
  StepInputs tensor = data;
  tensor.plan.tp = 8;
  tensor.plan.dp = 1;
  tensor.training.global_batch = 4;  // 2 micro-batches of 2 for the one replica
  data.training.global_batch = 32;   // the same 2 micro-batches on each of the 8 replicas
  const StepOutcome dp = simulate_step(data);
  const StepOutcome tp = simulate_step(tensor);
  REQUIRE(dp.simulated);
  REQUIRE(tp.simulated);
  // 8x fewer tokens, the same model FLOPs per token.
  CHECK(tp.step.model_flops * 8 == Approx(dp.step.model_flops).epsilon(1e-12));
  // Weights, gradients and optimizer states split eight ways.
  for (std::size_t item = 0; item < 3; ++item) {
    INFO(dp.memory.items[item].name);
    CHECK(tp.memory.items[item].bytes * 8 == Approx(dp.memory.items[item].bytes));
  }
  // Every byte of the tensor-parallel collectives crosses NVLink: none goes over PCIe or a NIC.
  double other_bytes = 0, nvlink_bytes = 0;
  for (const LinkUsage& link : tp.step.links) {
    (link.kind == "nvlink" ? nvlink_bytes : other_bytes) += link.bytes;
  }
  CHECK(nvlink_bytes > 0);
  CHECK(other_bytes == 0);
  // Per micro-batch each of the 8 layers gathers and scatters twice forward and six times
  // backward (mirrors and two re-gathers), the embedding once each way, the head once each
  // way and a re-gather for the logits' weight gradient: 85 collectives of S = 2 bytes x T x
  // hidden, each moving 7/8 S per GPU.
  const double s = 2.0 * (2 * 2048) * 2048;
  CHECK(tp.step.comm_bytes_per_gpu == Approx(2 * 85 * 7.0 / 8 * s).epsilon(1e-12));
}

TEST_CASE("tp x dp: each GPU moves its tensor-parallel and its data-parallel share, no more") {
  // 2 nodes: tp 2 (GPU pairs) x dp 8 replicas, plain DDP. Per GPU: 2 micro-batches of 85
  // tensor-parallel collectives of S = 2 T hidden bytes at bus factor 1/2, and the all-reduce
  // of its half of the gradients (BF16) over the 8 replicas at bus factor 2 x 7/8.
  StepInputs in = small_job();
  in.model.kv_heads = 8;
  in.nodes = 2;
  in.plan.tp = 2;
  in.plan.dp = 8;
  in.plan.zero_stage = 0;
  in.training.global_batch = 32;  // 2 micro-batches of 2 per replica
  const StepOutcome out = simulate_step(in);
  REQUIRE(out.simulated);
  const double s = 2.0 * (2 * 2048) * 2048;
  const double tensor = 2 * 85 * 0.5 * s;
  const double data = 2 * 7.0 / 8 * in.model.parameters() / 2 * 2;
  CHECK(out.step.comm_bytes_per_gpu == Approx(tensor + data).epsilon(1e-9));
  // The replicas' gradient rings cross the fabric; the pairs' collectives stay on NVLink.
  double nic_bytes = 0;
  for (const LinkUsage& link : out.step.links) {
    if (link.kind == "infiniband") nic_bytes += link.bytes;
  }
  CHECK(nic_bytes > 0);
  CHECK(nic_bytes < data * 16);  // only data-parallel bytes cross: all 16 GPUs' shares at most
}

TEST_CASE("a layout that does not fit is reported, not replayed") {
  StepInputs in = small_job();
  in.gpu.hbm_capacity_bytes.value = 4e9;
  const StepOutcome out = simulate_step(in);
  CHECK_FALSE(out.simulated);
  CHECK_FALSE(out.memory.fits());
  REQUIRE_FALSE(out.warnings.empty());
  CHECK(out.warnings.front().find("does not fit") != std::string::npos);
}

TEST_CASE("two nodes: the data-parallel ring crosses the fabric") {
  StepInputs in = small_job();
  in.nodes = 2;
  in.plan.dp = 16;
  in.training.global_batch = 32;
  const StepOutcome out = simulate_step(in);
  REQUIRE(out.simulated);
  bool fabric_used = false;
  for (const LinkUsage& link : out.step.links) fabric_used |= link.kind == "infiniband";
  CHECK(fabric_used);
  // 16 GPUs behind 50 GB/s NICs: the step must be slower than on one node's NVLink alone.
  CHECK(out.step.breakdown.exposed_comm_s >= 0);
}

namespace {

void set_layout(StepInputs& in, int tp, int pp, int dp, int zero_stage) {
  in.plan.tp = tp;
  in.plan.pp = pp;
  in.plan.dp = dp;
  in.plan.zero_stage = zero_stage;
}

}  // namespace

TEST_CASE("pipeline: a stage idles (pp - 1) / (m + pp - 1) of the step, GPipe and 1F1B alike") {
  // Narayanan et al. 2021, Section 2.2: with m micro-batches and p stages each stage waits
  // (p - 1) forward-backward times, of m + p - 1. Transfers, the gradient reduction and the
  // optimizer step add a little to it.
  const double bubble = 3.0 / (8 + 3);
  for (const auto schedule : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe}) {
    const StepOutcome out = simulate_step(pipelined_job(schedule));
    REQUIRE(out.simulated);
    const StepResult& step = out.step;
    const double idle = step.breakdown.idle_s / step.step_time_s;
    CHECK(idle == Approx(bubble).margin(0.03));
    CHECK(idle >= bubble * 0.98);
    // Each stage computes m forward-backward times and waits p - 1 of them.
    CHECK(step.breakdown.idle_s == Approx(3.0 / 8 * step.breakdown.compute_s).epsilon(0.03));
    CHECK(step.breakdown.compute_s + step.breakdown.exposed_comm_s + step.breakdown.idle_s ==
          Approx(step.step_time_s).epsilon(1e-9));
  }
}

TEST_CASE("pipeline: same model FLOPs as data parallelism, 1F1B holds pp micro-batches") {
  StepInputs flat = small_job();
  flat.model.vocab = 256;
  flat.plan.zero_stage = 1;
  flat.training.global_batch = 32;
  const StepOutcome data_parallel = simulate_step(flat);
  const StepOutcome one_f_one_b = simulate_step(pipelined_job(PipelineSchedule::one_f_one_b));
  const StepOutcome gpipe = simulate_step(pipelined_job(PipelineSchedule::gpipe));
  CHECK(one_f_one_b.step.model_flops == Approx(data_parallel.step.model_flops).epsilon(1e-12));
  CHECK(gpipe.step.model_flops == Approx(data_parallel.step.model_flops).epsilon(1e-12));
  const auto activations = [](const StepOutcome& out) { return memory_item(out, "activations"); };
  // Stage 0 under 1F1B: pp = 4 micro-batches of its 2 layers, as much as one micro-batch of all
  // 8 layers without a pipeline; GPipe: all m = 8.
  CHECK(activations(one_f_one_b) == Approx(activations(data_parallel)));
  CHECK(activations(gpipe) == Approx(2 * activations(one_f_one_b)));
  // 1F1B frees activations early and idles no more than GPipe.
  CHECK(one_f_one_b.step.step_time_s <= gpipe.step.step_time_s * 1.001);
}

TEST_CASE("pipeline: a trace records one rank per stage, the later stages starting later") {
  StepOptions options;
  options.trace_ranks = 8;
  const StepOutcome out = simulate_step(pipelined_job(PipelineSchedule::one_f_one_b), options);
  REQUIRE(out.simulated);
  std::map<int, SimTime> first_kernel;  // by rank
  for (const TraceSlice& slice : out.step.trace) {
    if (slice.stream != Stream::compute) continue;
    auto [at, inserted] = first_kernel.try_emplace(slice.rank, slice.begin);
    if (!inserted) at->second = std::min(at->second, slice.begin);
  }
  // tp 1 x dp 2: stage s starts at rank 2s.
  REQUIRE(first_kernel.size() == 4);
  CHECK(first_kernel.count(0) + first_kernel.count(2) + first_kernel.count(4) +
            first_kernel.count(6) ==
        4);
  CHECK(first_kernel[0] < first_kernel[2]);
  CHECK(first_kernel[2] < first_kernel[4]);
  CHECK(first_kernel[4] < first_kernel[6]);
}

TEST_CASE("pipeline: interleaving vpp chunks per stage cuts the bubble vpp-fold") {
  // Narayanan et al. 2021, Section 2.2.2: with v model chunks per stage the bubble is
  // (p - 1) / (v m) of the ideal time. 8 layers over 4 stages x 2 chunks of one layer.
  StepInputs in = pipelined_job(PipelineSchedule::one_f_one_b);
  in.plan.vpp = 2;
  const StepOutcome interleaved = simulate_step(in);
  REQUIRE(interleaved.simulated);
  const StepBreakdown& b = interleaved.step.breakdown;
  // Within 10%: each pass is half as long, so the transfers between passes weigh twice as much
  // (without interleaving the idle time would be 3/8 of the compute, twice this).
  CHECK(b.idle_s == Approx(3.0 / (2 * 8) * b.compute_s).epsilon(0.10));
  const StepOutcome plain = simulate_step(pipelined_job(PipelineSchedule::one_f_one_b));
  CHECK(interleaved.step.step_time_s < plain.step.step_time_s);
  CHECK(interleaved.step.model_flops == Approx(plain.step.model_flops).epsilon(1e-12));
  // Twice the transfers, each of the same size.
  CHECK(interleaved.step.comm_bytes_per_gpu > plain.step.comm_bytes_per_gpu);
  // Stage 0 holds its warm-up passes plus one: (4 - 1) x 2 + (2 - 1) x 4 + 1 = 11 passes of one
  // layer, against 1F1B's 4 micro-batches of 2 layers.
  const auto activations = [](const StepOutcome& out) { return memory_item(out, "activations"); };
  CHECK(activations(interleaved) == Approx(activations(plain) * 11 / 8));
}

TEST_CASE("pipeline: a larger micro-batch group holds more passes for the same bubble") {
  // All 8 micro-batches through chunk 0 before chunk 1 (microbatch_group 8, the breadth-first
  // order): the warm-up of stage 0 is (4 - 1) x 2 + (2 - 1) x 8 = 14 passes, so it holds 15
  // passes of one layer against the default group's 11. A stage still idles only while the
  // first micro-batch reaches it and the last one's backward comes back, (p - 1) / (v m) of
  // the compute, as with the default group.
  StepInputs in = pipelined_job(PipelineSchedule::one_f_one_b);
  in.plan.vpp = 2;
  const StepOutcome by_pp = simulate_step(in);
  in.plan.microbatch_group = 8;
  const StepOutcome whole = simulate_step(in);
  REQUIRE(by_pp.simulated);
  REQUIRE(whole.simulated);
  const auto activations = [](const StepOutcome& out) { return memory_item(out, "activations"); };
  CHECK(activations(whole) == Approx(activations(by_pp) * 15 / 11));
  const StepBreakdown& b = whole.step.breakdown;
  CHECK(b.idle_s == Approx(3.0 / (2 * 8) * b.compute_s).epsilon(0.10));
  CHECK(whole.step.model_flops == Approx(by_pp.step.model_flops).epsilon(1e-12));
  CHECK(whole.step.comm_bytes_per_gpu == Approx(by_pp.step.comm_bytes_per_gpu).epsilon(1e-12));
}

namespace {

// 256 GPUs, tp 4 x pp 2 x dp 32, on a 4:1 oversubscribed rail fat tree of 8-port leaves: the
// pipeline transfers of different replicas meet on the leaves' uplinks, and under hash routing
// they collide on spines, so the folded replicas' traffic must be kept for the result to hold
// (left out, the step comes out 0.2-0.3% faster). A Llama-3-8B-sized model, sequence 4,096.
StepInputs oversubscribed_256(FabricRouting routing) {
  StepInputs in = small_job();
  in.model.layers = 32;
  in.model.hidden = 4096;
  in.model.ffn = 14336;
  in.model.heads = 32;
  in.model.kv_heads = 8;
  in.model.vocab = 128256;
  in.training.seq_len = 4096;
  in.nodes = 32;
  in.fabric.oversubscription = 4;
  in.fabric.leaf_ports = 8;
  in.fabric.routing = routing;
  set_layout(in, 4, 2, 32, 1);
  in.training.global_batch = 256;
  in.training.micro_batch = 1;
  return in;
}

// The step folded (the default) and unfolded.
std::pair<StepOutcome, StepOutcome> folded_and_unfolded(const StepInputs& in) {
  StepOptions unfold;
  unfold.fold = false;
  std::pair<StepOutcome, StepOutcome> both{simulate_step(in), simulate_step(in, unfold)};
  REQUIRE(both.first.simulated);
  REQUIRE(both.second.simulated);
  return both;
}

// A folded step within 0.1% of the unfolded one, the bytes sent equal, `per_stage` ranks a
// stage replayed (1 where its tp ranks fold too, else replica 0's tp) and fewer events by
// `fewer_events` times at least.
void check_folded_agrees(const StepInputs& in, int fewer_events, int per_stage) {
  const auto [folded, unfolded] = folded_and_unfolded(in);
  CHECK(folded.step.replayed_ranks == per_stage * in.plan.pp);
  CHECK(folded.step.step_time_s == Approx(unfolded.step.step_time_s).epsilon(1e-3));
  CHECK(folded.step.mfu == Approx(unfolded.step.mfu).epsilon(1e-3));
  CHECK(folded.step.comm_bytes_per_gpu == Approx(unfolded.step.comm_bytes_per_gpu).epsilon(1e-9));
  CHECK(folded.step.breakdown.compute_s == Approx(unfolded.step.breakdown.compute_s).epsilon(1e-3));
  CHECK(folded.step.events * fewer_events < unfolded.step.events);
}

// A layout folding must leave alone: every rank replayed, the step the unfolded one's exactly.
void check_every_rank_replayed(const StepInputs& in) {
  const auto [folded, unfolded] = folded_and_unfolded(in);
  CHECK(folded.step.replayed_ranks == in.plan.tp * in.plan.cp * in.plan.dp * in.plan.pp);
  CHECK(folded.step.step_time_s == unfolded.step.step_time_s);
}

}  // namespace

TEST_CASE("folding: one replica per stage replayed agrees with all replicas within 0.1%") {
  // A 128th of the ranks replayed, plus the other ranks' traffic where it meets; under hash
  // routing each tp rank's flows collide in their own way, so a 32nd (replica 0's tp ranks).
  check_folded_agrees(oversubscribed_256(FabricRouting::adaptive), 8, 1);
  check_folded_agrees(oversubscribed_256(FabricRouting::hash), 8, 4);
}

TEST_CASE("folding: replicas that share no links are left out, and change nothing") {
  // One node per replica: tp 4 fills each 4-GPU node's NVSwitch, so no replica's
  // tensor-parallel traffic meets another's, and the data-parallel ring is replayed whole.
  StepInputs in = small_job();
  in.node.gpus = 4;
  in.node.nics = 4;
  in.node.pcie_switches = 2;
  in.nodes = 4;
  set_layout(in, 4, 1, 4, 1);
  const auto [folded, unfolded] = folded_and_unfolded(in);
  CHECK(folded.step.step_time_s == unfolded.step.step_time_s);
  CHECK(folded.step.comm_bytes_per_gpu == Approx(unfolded.step.comm_bytes_per_gpu).epsilon(1e-12));
  CHECK(folded.step.events * 2 < unfolded.step.events);  // a quarter of the ranks replayed
}

TEST_CASE("folding: ZeRO-3, interleaving with tied embeddings and PCIe-only nodes agree too") {
  // Replicas that share PCIe switches (tp 2 on PCIe-only nodes: two replicas per switch) run
  // their copies; the others change nothing.
  StepInputs zero3 = small_job();
  zero3.nodes = 2;
  set_layout(zero3, 2, 1, 8, 3);
  StepInputs interleaved = small_job();
  interleaved.nodes = 2;
  interleaved.model.vocab = 256;
  interleaved.model.tied_embeddings = true;
  set_layout(interleaved, 2, 2, 4, 1);
  interleaved.plan.vpp = 2;
  StepInputs pcie = small_job();
  pcie.node.gpu_fabric = GpuFabric::pcie_only;
  pcie.nodes = 2;
  set_layout(pcie, 2, 2, 4, 1);
  for (const StepInputs& in : {zero3, interleaved, pcie}) {
    CAPTURE(in.plan.tp, in.plan.pp, in.plan.zero_stage);
    const auto [folded, unfolded] = folded_and_unfolded(in);
    CHECK(folded.step.replayed_ranks == in.plan.pp);  // tp rank 0 of replica 0 a stage
    CHECK(folded.step.step_time_s == Approx(unfolded.step.step_time_s).epsilon(1e-3));
    CHECK(folded.step.comm_bytes_per_gpu == Approx(unfolded.step.comm_bytes_per_gpu).epsilon(1e-9));
  }
}

namespace {

// The 256 GPUs of the oversubscribed fat tree, with leaves of 8 nodes (10 ports at 4:1) or of
// 6 (8 ports). Context parallelism: tp 4 x cp 4 x pp 2 x dp 8, each ring over two nodes' NICs,
// sharing them with the pipeline transfers of its replicas and the uplinks with the other
// rings. Expert parallelism: 16 experts over ep 16 (two nodes) x pp 2 x dp 128, the
// all-to-alls and the expert gradients' reductions crossing the fabric. Both: cp 2 x ep 8
// (a node) x pp 2 x dp 64.
std::array<StepInputs, 3> context_and_experts_256(FabricRouting routing, int leaf_ports) {
  StepInputs context = oversubscribed_256(routing);
  context.fabric.leaf_ports = leaf_ports;
  set_layout(context, 4, 2, 8, 1);
  context.plan.cp = 4;
  context.training.global_batch = 64;
  StepInputs experts = testing::with_experts(oversubscribed_256(routing));
  experts.model.layers = 8;
  experts.model.experts = 16;
  experts.fabric.leaf_ports = leaf_ports;
  set_layout(experts, 1, 2, 128, 1);
  experts.plan.ep = 16;
  StepInputs both = experts;
  set_layout(both, 1, 2, 64, 1);
  both.plan.cp = 2;
  both.plan.ep = 8;
  return {context, experts, both};
}

}  // namespace

TEST_CASE("folding: context and expert groups run whole beside replica 0, within 0.1%") {
  // Folded, replica 0 of each stage is replayed and the groups it belongs to run whole; the
  // blocks of replicas they join sit alike on the nodes and under the 8-node leaves.
  for (const StepInputs& in : context_and_experts_256(FabricRouting::adaptive, 10)) {
    CAPTURE(in.plan.cp, in.plan.ep);
    check_folded_agrees(in, 2, 1);
  }
}

TEST_CASE("folding: context and expert groups on hashed or misaligned leaves replay every rank") {
  // Every layer waits for a group's slowest member. Under hash routing each replica's flows
  // collide in their own way; under 6-node leaves the 16-node stages do not fill whole leaves,
  // so a leaf's uplinks carry other replicas' traffic than block 0's do: replica 0 stands for
  // neither (folded, the step came out 0.3-2% faster than with every rank).
  for (const auto& [routing, leaf_ports] :
       {std::pair{FabricRouting::hash, 10}, std::pair{FabricRouting::adaptive, 8}}) {
    for (const StepInputs& in : context_and_experts_256(routing, leaf_ports)) {
      CAPTURE(static_cast<int>(routing), leaf_ports, in.plan.cp, in.plan.ep);
      check_every_rank_replayed(in);
    }
  }
}

TEST_CASE("folding: replicas or blocks that do not sit alike on the nodes are all replayed") {
  // tp 1 x dp 3 x pp 8 on three 8-GPU nodes: stage s on GPUs 3s to 3s + 2, so replica 0's
  // transfer from stage 1 to 2 stays in node 0 (GPU 3 to 6) while replica 2's crosses to node
  // 1 (GPU 5 to 8): replica 0 cannot stand for the others.
  StepInputs pipelined = small_job();
  pipelined.nodes = 3;
  set_layout(pipelined, 1, 8, 3, 1);
  pipelined.training.global_batch = 24;
  // tp 2 x cp 3 on 8-GPU nodes: a context group's three replicas fill 6 GPUs, so the second
  // group straddles nodes 0 and 1 where the first sits in node 0, and cannot stand for it.
  StepInputs context = small_job();
  context.nodes = 3;
  context.training.seq_len = 6144;
  set_layout(context, 2, 1, 4, 1);
  context.plan.cp = 3;
  context.training.global_batch = 8;
  for (const StepInputs& in : {pipelined, context}) {
    CAPTURE(in.plan.cp);
    check_every_rank_replayed(in);
  }
}

TEST_CASE("exposed communication splits by kind, the kinds adding up to the whole") {
  // Tensor and pipeline parallelism over data parallelism, collectives blocking the compute.
  StepInputs in = small_job();
  in.nodes = 2;
  in.training.global_batch = 32;
  set_layout(in, 4, 2, 2, 1);
  const StepOutcome out = simulate_step(in);
  REQUIRE(out.simulated);
  const StepBreakdown& b = out.step.breakdown;
  CHECK(exposed_by_kind(b) == Approx(b.exposed_comm_s).epsilon(1e-12));
  CHECK(b.exposed_cp_s == 0);
  CHECK(b.exposed_ep_s == 0);
  CHECK(b.exposed_tp_s > 0);  // blocking tensor-parallel collectives stall every layer
  CHECK(b.exposed_pp_s > 0);  // the first micro-batch's activations cross to the next stage
  CHECK(b.exposed_host_s == 0);
  // Overlapping the tensor-parallel collectives with the GEMMs hides their kind, not the others.
  in.plan.tp_comm_overlap = true;
  const StepBreakdown overlapped = simulate_step(in).step.breakdown;
  CHECK(overlapped.exposed_tp_s < 0.5 * b.exposed_tp_s);
}

TEST_CASE("tp_comm_overlap hides tensor-parallel collectives behind GEMMs, never slower") {
  StepInputs in = small_job();
  set_layout(in, 4, 1, 2, 1);
  const StepOutcome blocking = simulate_step(in);
  in.plan.tp_comm_overlap = true;
  const StepOutcome overlapped = simulate_step(in);
  REQUIRE(blocking.simulated);
  REQUIRE(overlapped.simulated);
  CHECK(overlapped.step.step_time_s < blocking.step.step_time_s);
  CHECK(overlapped.step.breakdown.exposed_comm_s < 0.5 * blocking.step.breakdown.exposed_comm_s);
  // The same kernels and bytes, only their order in time changes.
  CHECK(overlapped.step.comm_bytes_per_gpu == Approx(blocking.step.comm_bytes_per_gpu));
  CHECK(overlapped.step.model_flops == Approx(blocking.step.model_flops));
  // But GEMMs beside userbuffers' pipelined and bulk collectives run on the 16 SMs fewer they
  // leave (the profile's comm_sms, NCCL's, is 0 here): the compute takes longer.
  REQUIRE(in.gpu.comm_sms.value == 0);
  CHECK(overlapped.step.breakdown.compute_s > blocking.step.breakdown.compute_s * 1.01);
  // NCCL's SMs do not enter the layers' userbuffers collectives: with NCCL holding many, the
  // data-parallel reduction and the head's gather slow their kernels, the layers' stay.
  in.gpu.comm_sms.value = 26;
  const StepOutcome contended = simulate_step(in);
  CHECK(contended.step.breakdown.compute_s > overlapped.step.breakdown.compute_s);
  CHECK(contended.step.breakdown.compute_s < overlapped.step.breakdown.compute_s * 1.02);
}

TEST_CASE("kernels run as one event keep each kernel's time when a collective starts inside") {
  // Untraced ranks run chains of kernels as one event; traced ranks one event per kernel. With
  // collectives holding SMs, a collective that starts or ends inside a chain must slow only the
  // kernels it runs beside, as it does kernel by kernel: the step and the compute time agree
  // within a nanosecond per kernel. ZeRO-3 and tensor parallelism overlap much of the step.
  for (const int tp : {1, 4}) {
    StepInputs in = small_job();
    set_layout(in, tp, 1, 8 / tp, 3);
    in.plan.tp_comm_overlap = tp > 1;
    in.gpu.comm_sms.value = 30;
    StepOptions traced;
    traced.trace_ranks = 8;
    const StepOutcome chained = simulate_step(in);
    const StepOutcome one_by_one = simulate_step(in, traced);
    REQUIRE(chained.simulated);
    REQUIRE(one_by_one.simulated);
    std::size_t kernels = 0;
    for (const TraceSlice& slice : one_by_one.step.trace) {
      kernels += slice.stream == Stream::compute && slice.rank == 0;
    }
    REQUIRE(kernels > 100);
    const double tolerance_s = 1e-9 * static_cast<double>(kernels);
    CHECK(std::abs(chained.step.step_time_s - one_by_one.step.step_time_s) <= tolerance_s);
    CHECK(std::abs(chained.step.breakdown.compute_s - one_by_one.step.breakdown.compute_s) <=
          tolerance_s);
    // And the SMs held cost something here.
    in.gpu.comm_sms.value = 0;
    CHECK(simulate_step(in).step.step_time_s < chained.step.step_time_s);
  }
}

TEST_CASE("folding: a stage that ends inside an NVLink domain of several nodes is not folded") {
  // Domains of four 4-GPU nodes (GB200 NVL72-like trays): tp 4 x dp 3 x pp 2 puts stage 0 on
  // GPUs 0-11 and stage 1 on 12-23, so replica 0 sends from GPU 0 to 12 inside domain 0 while
  // replica 1 sends from GPU 4 to 16, across into domain 1.
  StepInputs in = testing::two_trays();
  in.model.kv_heads = 4;
  in.node.nvlink_domain_nodes = 4;
  in.nodes = 6;
  set_layout(in, 4, 2, 3, 1);
  in.training.global_batch = 24;
  check_every_rank_replayed(in);
}

TEST_CASE("overlap_param_gather moves the distributed optimizer's gather into the next forward") {
  // Two nodes, dp 16, ZeRO-1: the gather of the updated shards crosses the fabric.
  StepInputs in = small_job();
  in.nodes = 2;
  set_layout(in, 1, 1, 16, 1);
  const StepOutcome after_step = simulate_step(in);
  in.plan.overlap_param_gather = true;
  const StepOutcome ahead = simulate_step(in);
  REQUIRE(after_step.simulated);
  REQUIRE(ahead.simulated);
  CHECK(ahead.step.step_time_s < after_step.step.step_time_s);
  CHECK(ahead.step.breakdown.exposed_comm_s < after_step.step.breakdown.exposed_comm_s);
  // The same bytes, moved in time. Beside the forward kernels the gather takes their SMs and
  // 3x its fabric rate of HBM (0.96 x 50 GB/s a GPU: 144 GB/s of the 2.9 TB/s sustained), so
  // the compute grows, by less than the 5% that share bounds (the small job's collectives hold
  // no SMs).
  CHECK(ahead.step.comm_bytes_per_gpu == Approx(after_step.step.comm_bytes_per_gpu));
  CHECK(ahead.step.breakdown.compute_s > after_step.step.breakdown.compute_s);
  const double sustained = 3.35e12 * 0.87;
  CHECK(ahead.step.breakdown.compute_s < sustained /
                                             (sustained - kCommHbmBytesPerLinkByte * 0.96 * 50e9) *
                                             after_step.step.breakdown.compute_s);
}

namespace {

// The step's traffic went over NVLink, and over nothing else (PCIe, NICs, fabric).
void check_nvlink_only(const StepInputs& in) {
  const StepOutcome out = simulate_step(in);
  REQUIRE(out.simulated);
  double nvlink = 0, other = 0;
  for (const LinkUsage& link : out.step.links) {
    (link.kind == "nvlink" ? nvlink : other) += link.bytes;
  }
  CHECK(nvlink > 0);
  CHECK(other == 0);
}

}  // namespace

TEST_CASE("tp across the trays of an NVLink domain talks over NVLink only") {
  // One tensor-parallel group of 8 across both trays.
  StepInputs in = testing::two_trays();
  in.plan.tp = 8;
  in.plan.dp = 1;
  in.plan.zero_stage = 0;
  in.training.global_batch = 4;
  check_nvlink_only(in);
}

TEST_CASE("expert parallelism: each GPU sends its tokens' (ep-1)/ep to other experts, four times") {
  // A small mixture of experts (8 experts, 2 per token) on one node, dp 8 with ZeRO-1, one
  // micro-batch per rank. Each layer's dispatch and combine all-to-alls move t x k x h BF16 per
  // GPU in forward and again in backward, 7/8 of it to other GPUs. Dense gradients are reduced
  // and gathered over 8 replicas, each expert's over the dp / ep that hold it.
  StepInputs in = testing::with_experts(small_job());
  in.training.global_batch = 16;  // micro-batch 2, one per rank
  const double tokens = 2.0 * 2048;
  const double exchange = 2 * tokens * in.model.hidden * 2;  // k copies of each token, BF16
  const double experts = in.model.layers * layer_expert_parameters(in.model);
  const double dense = in.model.parameters() - experts;
  for (const int ep : {1, 2, 8}) {
    INFO("ep " << ep);
    in.plan.ep = ep;
    const StepOutcome out = simulate_step(in);
    REQUIRE(out.simulated);
    const double all_to_all = ep == 1 ? 0.0 : 4 * in.model.layers * (ep - 1.0) / ep * exchange;
    // ZeRO-1: a reduce-scatter and an all-gather of BF16 gradients and weights per group.
    const double expert_replicas = 8.0 / ep;
    const double data_parallel =
        2 * 2 * (7.0 / 8 * dense + (expert_replicas - 1) / expert_replicas * experts / ep);
    CHECK(out.step.comm_bytes_per_gpu == Approx(all_to_all + data_parallel).epsilon(1e-9));
    // Folded, replica 0 alone is replayed: its expert group's all-to-alls run whole beside it.
    CHECK(out.step.replayed_ranks == 1);
    // Each GPU holds experts / ep of every layer's experts.
    CHECK(memory_item(out, "weights") == Approx(2 * (dense + experts / ep)));
  }
}

TEST_CASE("Ulysses: Q, K, V and the output cross the cp ranks by all-to-alls, each way") {
  // The ring test's job (one node, one micro-batch of 2 x 2,048 tokens per replica, ZeRO-1
  // over dp x cp = 8) with cp_comm_type a2a: per layer each GPU trades its tokens' Q, K and V
  // (16 + 2 x 4 heads of 128) before attention and the output (16 heads) after it, and the
  // gradients of both in backward, (cp - 1) / cp of each to other ranks. Attention then runs
  // causal over the whole sequence on heads / cp heads: a sequence's FLOPs are unchanged (the
  // step's fall with its sequences, 2 x dp).
  StepInputs in = small_job();
  in.plan.zero_stage = 1;
  in.plan.cp_comm_type = ContextComm::a2a;
  const double d = in.model.head_dim();
  const double traded = 2.0 * (2 * in.model.heads + 2 * in.model.kv_heads) * d;  // BF16, a token
  const double data_parallel = 2 * 2 * 7.0 / 8 * in.model.parameters();
  double attention_cp1 = 0;
  for (const int cp : {1, 2, 4}) {
    INFO("cp " << cp);
    const StepOutcome out = on_one_node_over_cp(in, cp);
    const double tokens = 2.0 * 2048 / cp;
    const double all_to_all = 2.0 * in.model.layers * (cp - 1.0) / cp * tokens * traded;
    CHECK(out.step.comm_bytes_per_gpu == Approx(all_to_all + data_parallel).epsilon(1e-9));
    CHECK(out.step.replayed_ranks == 1);
    if (cp == 1) attention_cp1 = out.step.model_flops;
    CHECK(out.step.model_flops == Approx(attention_cp1 / cp).epsilon(1e-9));
    // The all-to-alls' outputs: Q, K, V and the output of the rank's tokens, BF16.
    const double buffers = cp == 1 ? -1.0 : tokens * traded;
    CHECK(memory_item(out, "context-parallel buffers") == Approx(buffers));
  }
}

TEST_CASE("context with expert parallelism: each rank dispatches its share of the sequence") {
  // The small mixture of experts at ep 4, ZeRO-1, one micro-batch of 2 x 2,048 tokens per
  // replica, on 8 GPUs: dp 8, or dp 4 x cp 2, the expert groups four consecutive replicas of
  // dp x cp (as Megatron-Core lays experts over tp x cp x dp). Under cp 2 each rank holds half
  // the tokens, so its all-to-alls carry half the bytes, beside the ring's three passes of the
  // sequence's K and V a layer; gradients go round the same 8 replicas and pairs of them.
  StepInputs in = testing::with_experts(small_job());
  in.plan.ep = 4;
  const auto comm = [&](int cp) {
    in.plan.cp = cp;
    in.plan.dp = 8 / cp;
    in.training.global_batch = 2 * in.plan.dp;
    const StepOutcome out = simulate_step(in);
    REQUIRE(out.simulated);
    CHECK(out.step.replayed_ranks == 1);
    return out.step.comm_bytes_per_gpu;
  };
  const double exchange = 2 * (2.0 * 2048) * in.model.hidden * 2;  // k x t x h, BF16
  const double all_to_all = 4 * in.model.layers * 3.0 / 4 * exchange;
  const double kv = in.model.kv_heads * in.model.head_dim();
  const double ring = 3.0 * in.model.layers / 2 * (2.0 * 2 * 2048 * 2 * kv);
  CHECK(comm(2) == Approx(comm(1) - all_to_all / 2 + ring).epsilon(1e-9));
}

TEST_CASE("expert parallelism with a pipeline, across trays, and its optimizer shard") {
  const StepInputs moe = testing::with_experts(small_job());
  // Two stages of four replicas, one expert group of four in each stage.
  StepInputs pipelined = moe;
  pipelined.plan.pp = 2;
  pipelined.plan.dp = 4;
  pipelined.plan.ep = 4;
  pipelined.training.global_batch = 16;
  const StepOutcome staged = simulate_step(pipelined);
  REQUIRE(staged.simulated);
  CHECK(staged.step.replayed_ranks == 2);  // replica 0 of each stage
  // Eight replicas on two trays of one NVLink domain, one expert group across both: the
  // all-to-alls stay on NVLink, and with one replica per expert nothing crosses the NICs.
  StepInputs trays = testing::with_experts(testing::two_trays());
  trays.plan.ep = 8;
  trays.training.global_batch = 16;
  check_nvlink_only(trays);
  // ZeRO-1 under ep 2: each rank updates experts / ep over dp / ep replicas, which is the same
  // share of the optimizer states as without expert parallelism.
  StepInputs two = moe;
  two.plan.ep = 2;
  const auto states = [](const StepOutcome& out) { return memory_item(out, "optimizer states"); };
  CHECK(states(check_memory(two)) == Approx(states(check_memory(moe))));
  CHECK(states(check_memory(two)) == Approx(12 * moe.model.parameters() / 8));
}

TEST_CASE("context parallelism: ring attention moves the sequence's K and V three times a layer") {
  // One node, one micro-batch of 2 x 2,048 tokens per replica, ZeRO-1 over all 8 GPUs (dp x cp
  // = 8). Each layer gathers the whole sequence's K and V of its cp group in forward, and in
  // backward gathers them again and reduce-scatters their gradients: 3 x (cp-1)/cp of them per
  // GPU. Gradients and weights go round all 8 GPUs whatever cp is.
  StepInputs in = small_job();
  in.plan.zero_stage = 1;
  const double kv = in.model.kv_heads * in.model.head_dim();
  const double sequence_kv = 2.0 * 2 * 2048 * 2 * kv;  // BF16 K and V, micro-batch 2
  const double data_parallel = 2 * 2 * 7.0 / 8 * in.model.parameters();
  double activations_cp1 = 0;
  for (const int cp : {1, 2, 8}) {
    INFO("cp " << cp);
    const StepOutcome out = on_one_node_over_cp(in, cp);
    const double ring = 3.0 * in.model.layers * (cp - 1.0) / cp * sequence_kv;
    CHECK(out.step.comm_bytes_per_gpu == Approx(ring + data_parallel).epsilon(1e-9));
    // Folded, replica 0 alone is replayed: its context group's ring runs whole beside it.
    CHECK(out.step.replayed_ranks == 1);
    // Each rank keeps the activations of its 2 x 2,048 / cp tokens.
    const double activations = memory_item(out, "activations");
    REQUIRE(activations > 0);
    if (cp == 1) activations_cp1 = activations;
    CHECK(activations == Approx(activations_cp1 / cp).epsilon(1e-12));
  }
}

TEST_CASE("context parallelism splits each rank's model FLOPs, attention's included, by cp") {
  // The same batch on one GPU and on cp of them: each does 1/cp of the work.
  StepInputs in = small_job();
  in.plan.dp = 1;
  in.plan.zero_stage = 0;
  in.training.global_batch = 4;
  const TaskGraph one = build_data_parallel_step(in.model, in.training, in.plan);
  for (const int cp : {2, 4}) {
    INFO("cp " << cp);
    in.plan.cp = cp;
    const TaskGraph split = build_data_parallel_step(in.model, in.training, in.plan);
    CHECK(split.grid.ranks() == cp);
    CHECK(split.tokens_per_step == one.tokens_per_step);
    CHECK(split.model_flops_per_rank == Approx(one.model_flops_per_rank / cp).epsilon(1e-12));
  }
}

TEST_CASE("FP8 projections: the same model FLOPs, faster GEMMs, FP8 saved inputs and weights") {
  StepInputs bf16 = small_job();
  bf16.plan.zero_stage = 1;
  bf16.gpu.fp8 = Fp8Gemm{};
  bf16.gpu.fp8->dense_flops_per_s.value = 2 * bf16.gpu.dense_bf16_flops_per_s.value;
  bf16.gpu.fp8->gemm_efficiency.value = bf16.gpu.gemm_efficiency.value;
  bf16.gpu.fp8->gemm_k_overhead.value = 100;
  bf16.gpu.fp8->kernel_launch_s.value = bf16.gpu.kernel_launch_s.value;
  StepInputs fp8 = bf16;
  fp8.training.precision = Precision::fp8;
  // Every decoder-layer projection's GEMMs run in FP8, after a cast of their input; attention,
  // the router and the output head stay BF16.
  const LayerOps layer = decoder_layer_ops(fp8.model, fp8.training);
  int fp8_gemms = 0, casts = 0;
  for (const std::vector<Op>* ops : {&layer.forward, &layer.backward}) {
    for (const Op& op : *ops) {
      fp8_gemms += op.kernel.fp8;
      casts += op.name.find("cast") != std::string::npos;
      if (op.kernel.kind == KernelKind::gemm) CHECK(op.kernel.fp8);
    }
  }
  CHECK(fp8_gemms == 4 * 3);  // qkv, o_proj, gate_up, down: forward, dgrad, wgrad
  CHECK(casts == 4 * 2);      // each input forward, each output gradient backward
  const StepOutcome slow = simulate_step(bf16);
  const StepOutcome fast = simulate_step(fp8);
  REQUIRE(slow.simulated);
  REQUIRE(fast.simulated);
  CHECK(fast.step.model_flops == Approx(slow.step.model_flops).epsilon(1e-12));
  // Faster, but by less than the peaks' ratio: casts, attention and the rest do not speed up.
  CHECK(fast.step.step_time_s < slow.step.step_time_s);
  CHECK(slow.step.step_time_s / fast.step.step_time_s < 2);
  // Each token of each layer keeps its QKV and first MLP GEMM inputs in one byte, not two, and
  // o_proj's and down's FP8 casts (O stays BF16 for attention's backward, down's BF16 input is
  // not kept): h + f bytes fewer per token and layer.
  const double tokens = 2.0 * 2048;
  const double saved = bf16.model.layers * tokens * (bf16.model.hidden + bf16.model.ffn);
  CHECK(memory_item(slow, "activations") - memory_item(fast, "activations") ==
        Approx(saved).epsilon(1e-9));
  // Each layer's projection weights in FP8 and transposed.
  CHECK(memory_item(slow, "FP8 weight copies") == -1.0);
  CHECK(memory_item(fast, "FP8 weight copies") ==
        Approx(2.0 * bf16.model.layers * layer_projection_weights(bf16.model, 0)).epsilon(1e-12));
}

TEST_CASE("FP8 with tensor parallelism: casts the shard, gathers FP8, overlaps as BF16 does") {
  const StepInputs in = small_job();
  TrainingSpec fp8 = in.training;
  fp8.precision = Precision::fp8;
  const LayerOps bf16_ops = decoder_layer_ops(in.model, in.training, 2);
  const LayerOps fp8_ops = decoder_layer_ops(in.model, fp8, 2);
  const auto overlapped = [](const std::vector<Op>& ops) {
    int count = 0;
    for (std::size_t i = 0; i < ops.size(); ++i) count += overlapped_kernel(ops, i).has_value();
    return count;
  };
  const auto gathered = [](const std::vector<Op>& ops) {
    double bytes = 0;
    for (const Op& op : ops) {
      if (op.collective && op.collective->op == CollectiveOp::all_gather) {
        bytes += op.collective->size_bytes;
      }
    }
    return bytes;
  };
  for (const auto& [bf16, fp8_list] : {std::pair{&bf16_ops.forward, &fp8_ops.forward},
                                       std::pair{&bf16_ops.backward, &fp8_ops.backward}}) {
    CHECK(overlapped(*fp8_list) == overlapped(*bf16));
    CHECK(overlapped(*fp8_list) > 0);
    CHECK(gathered(*fp8_list) == Approx(gathered(*bf16) / 2));
  }
}

TEST_CASE("the breakdown tells context- and expert-parallel exchanges from tensor-parallel ones") {
  // Ring attention's exchanges over cp 4 (no tensor parallelism) are context-parallel; a
  // mixture of experts' all-to-alls over ep 4 are expert-parallel. The kinds add up to the
  // exposed communication, each exchange in its own.
  const StepOutcome cp = on_one_node_over_cp(small_job(), 4);
  const StepBreakdown& c = cp.step.breakdown;
  CHECK(c.exposed_cp_s > 0);
  CHECK(c.exposed_tp_s == 0);
  CHECK(c.exposed_ep_s == 0);
  StepInputs experts = fleetsim::testing::with_experts(small_job());
  experts.plan.ep = 4;
  const StepOutcome ep = simulate_step(experts);
  REQUIRE(ep.simulated);
  const StepBreakdown& e = ep.step.breakdown;
  CHECK(e.exposed_ep_s > 0);
  CHECK(e.exposed_tp_s == 0);
  CHECK(e.exposed_cp_s == 0);
  for (const StepBreakdown* b : {&c, &e}) {
    CHECK(exposed_by_kind(*b) == Approx(b->exposed_comm_s).epsilon(1e-12));
  }
}
