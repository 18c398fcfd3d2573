#include <tbb/global_control.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <tuple>

#include "common/small_job.hpp"
#include "sim/engine/errors.hpp"
#include "sim/plan/planner.hpp"
#include "sim/step/step_executor.hpp"
#include "topology/topology.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/transformer_ops.hpp"

using namespace fleetsim;
using fleetsim::testing::small_job;

namespace {

// The small job on two nodes (16 GPUs), 64 sequences per step: tp 1-8, pp 1-8 and dp to match.
StepInputs two_nodes() {
  StepInputs in = small_job();
  in.nodes = 2;
  in.training.global_batch = 64;
  return in;
}

std::string describe(const PlannedLayout& layout) {
  const ParallelPlan& plan = layout.inputs.plan;
  return "tp" + std::to_string(plan.tp) + " pp" + std::to_string(plan.pp) + " vpp" +
         std::to_string(plan.vpp) + " dp" + std::to_string(plan.dp) + " zero" +
         std::to_string(plan.zero_stage) + " " + to_string(plan.recompute) + " mb" +
         std::to_string(layout.inputs.training.micro_batch);
}

// `base` on GPUs whose memory fits a 16-way ZeRO-1 replica with full recomputation but not
// without: a third of the way from the one to the other.
StepInputs fitting_only_recomputed(StepInputs base) {
  StepInputs probe = base;
  probe.plan.dp = 16;
  probe.plan.zero_stage = 1;
  probe.plan.recompute = Recompute::none;
  const double none_bytes = check_memory(probe).memory.total_bytes;
  probe.plan.recompute = Recompute::full;
  const double full_bytes = check_memory(probe).memory.total_bytes;
  REQUIRE(full_bytes < none_bytes);
  base.gpu.hbm_capacity_bytes.value = full_bytes + (none_bytes - full_bytes) / 3;
  return base;
}

// Every layout of `base` that fits, replayed and ranked.
PlanResult every_layout(const StepInputs& base) {
  PlanOptions everything;
  everything.top = 1000;
  return search_layouts(base, everything);
}

}  // namespace

TEST_CASE("planner: the bound never exceeds the replayed step, with the overlaps or without") {
  // With collectives holding SMs (24 of 132) or none: an overlapped GEMM then runs slower.
  // With a GEMM library's tiles, waves make chunks of a GEMM (userbuffers') faster or slower
  // than the whole: the bound must follow.
  for (const auto& [overlap, comm_sms, tiles] :
       {std::tuple{false, 0.0, false}, std::tuple{true, 0.0, false}, std::tuple{false, 24.0, false},
        std::tuple{true, 24.0, false}, std::tuple{true, 24.0, true}}) {
    CAPTURE(overlap, comm_sms, tiles);
    StepInputs base = two_nodes();
    base.gpu.comm_sms.value = comm_sms;
    if (tiles) base.gpu.gemm_tiles = {{128, 256}, {256, 128}, {128, 128}, {64, 128}};
    base.plan.tp_comm_overlap = overlap;
    base.plan.overlap_param_gather = overlap;
    PlanOptions everything;
    everything.top = 1000;  // every layout that fits is replayed
    const PlanResult all = search_layouts(base, everything);
    REQUIRE(all.replayed > 20);
    CHECK(all.bounded_out == 0);
    int overlapped = 0;
    for (const PlannedLayout& layout : all.ranked) {
      INFO(describe(layout));
      overlapped += layout.inputs.plan.tp_comm_overlap;
      CHECK(layout.inputs.plan.tp_comm_overlap == (overlap && layout.inputs.plan.tp > 1));
      CHECK(layout.lower_bound_s == Approx(step_lower_bound_s(layout.inputs)));
      CHECK(layout.lower_bound_s <= layout.outcome.step.step_time_s);
      // Not a vacuous bound: it holds most of the step.
      CHECK(layout.lower_bound_s > 0.5 * layout.outcome.step.step_time_s);
    }
    CHECK((overlapped > 0) == overlap);
  }
}

TEST_CASE("planner: without sequence parallelism the bound still holds, overlapped or not") {
  // Layouts with tp > 1 run without sequence parallelism (all-reduces, whole-sequence norms),
  // their input gradients' all-reduces beside the weight gradients under tp_comm_overlap.
  for (const bool overlap : {false, true}) {
    CAPTURE(overlap);
    StepInputs base = two_nodes();
    base.gpu.comm_sms.value = 24;
    base.plan.sequence_parallel = false;
    base.plan.tp_comm_overlap = overlap;
    const PlanResult all = every_layout(base);
    int without = 0;
    for (const PlannedLayout& layout : all.ranked) {
      INFO(describe(layout));
      const ParallelPlan& plan = layout.inputs.plan;
      CHECK(plan.sequence_parallel == (plan.tp == 1));
      without += plan.tp > 1;
      CHECK(layout.lower_bound_s <= layout.outcome.step.step_time_s);
    }
    CHECK(without > 0);
  }
}

TEST_CASE("planner: gradients reduced after the backward, or FP16, keep the bound below the step") {
  // Held-back reductions (ZeRO 0 and 1; ZeRO 2 and 3 reduce as they go, overlap_grad_reduce
  // forced true there) and FP16's unscale pass: the bound leaves the first out, counts the
  // second as the step does.
  StepInputs base = two_nodes();
  base.plan.overlap_grad_reduce = false;
  base.training.precision = Precision::fp16;
  const PlanResult all = every_layout(base);
  int held_back = 0;
  for (const PlannedLayout& layout : all.ranked) {
    INFO(describe(layout));
    const ParallelPlan& plan = layout.inputs.plan;
    CHECK(plan.overlap_grad_reduce == (plan.zero_stage > 1));
    held_back += !plan.overlap_grad_reduce;
    CHECK(layout.lower_bound_s <= layout.outcome.step.step_time_s);
  }
  CHECK(held_back > 0);
}

TEST_CASE("planner: FP8 primary weights gathered in FP8 keep the bound below the step") {
  // Under fp8_params the distributed optimizer's gather after the step moves the projections
  // in FP8: the bound's gather must not count them as BF16. ZeRO 0 and 3 are refused.
  StepInputs base = two_nodes();
  base.gpu.fp8 = Fp8Gemm{};  // twice the BF16 rate, fitted as the BF16 entries are
  base.gpu.fp8->dense_flops_per_s.value = 2 * base.gpu.dense_bf16_flops_per_s.value;
  base.gpu.fp8->gemm_efficiency.value = base.gpu.gemm_efficiency.value;
  base.gpu.fp8->kernel_launch_s.value = base.gpu.kernel_launch_s.value;
  base.training.precision = Precision::fp8;
  base.training.fp8_params = true;
  const PlanResult all = every_layout(base);
  REQUIRE(!all.ranked.empty());
  CHECK(all.refused > 0);
  int gathered_after = 0;
  for (const PlannedLayout& layout : all.ranked) {
    INFO(describe(layout));
    const int zero = layout.inputs.plan.zero_stage;
    CHECK((zero == 1 || zero == 2));
    CHECK(layout.lower_bound_s <= layout.outcome.step.step_time_s);
    // The gather after the step, where it enters a node through its NICs (a data-parallel
    // group across nodes), moves less than BF16 weights would: the bound is lower than the
    // same layout's with the weights kept in BF16.
    const ParallelPlan& plan = layout.inputs.plan;
    if (!plan.overlap_param_gather && plan.tp * plan.cp * plan.dp > base.node.gpus) {
      StepInputs bf16 = layout.inputs;
      bf16.training.fp8_params = false;
      CHECK(layout.lower_bound_s < step_lower_bound_s(bf16));
      ++gathered_after;
    }
  }
  CHECK(gathered_after > 0);
}

TEST_CASE("planner: pruning by the bound keeps the exhaustive ranking") {
  PlanOptions everything;
  everything.top = 1000;
  const PlanResult all = search_layouts(two_nodes(), everything);
  PlanOptions top5;
  top5.top = 5;
  const PlanResult pruned = search_layouts(two_nodes(), top5);
  REQUIRE(pruned.ranked.size() == 5);
  CHECK(pruned.bounded_out > 0);
  CHECK(pruned.replayed < all.replayed);
  for (std::size_t i = 0; i < 5; ++i) {
    INFO(i);
    CHECK(describe(pruned.ranked[i]) == describe(all.ranked[i]));
    CHECK(pruned.ranked[i].outcome.step.step_time_s == all.ranked[i].outcome.step.step_time_s);
  }
  // Every layout is accounted for, and the ranking is fastest first.
  CHECK(pruned.refused + pruned.not_fitting + pruned.replayed + pruned.bounded_out ==
        pruned.layouts);
  for (std::size_t i = 1; i < all.ranked.size(); ++i) {
    CHECK(all.ranked[i - 1].outcome.step.step_time_s <= all.ranked[i].outcome.step.step_time_s);
  }
}

TEST_CASE(
    "planner: a layout the memory model rejects never runs, and recomputation is the least that "
    "fits") {
  StepInputs in = two_nodes();
  in.gpu.hbm_capacity_bytes.value = 12e9;  // tight: many layouts need recomputation or sharding
  PlanOptions everything;
  everything.top = 1000;
  const PlanResult result = search_layouts(in, everything);
  REQUIRE(!result.ranked.empty());
  CHECK(result.not_fitting > 0);
  bool some_recompute = false;
  for (const PlannedLayout& layout : result.ranked) {
    INFO(describe(layout));
    CHECK(layout.outcome.simulated);
    CHECK(layout.outcome.memory.fits());
    if (layout.inputs.plan.recompute == Recompute::none) continue;
    some_recompute = true;
    StepInputs less = layout.inputs;
    less.plan.recompute =
        layout.inputs.plan.recompute == Recompute::full ? Recompute::selective : Recompute::none;
    less.plan.recompute_layers = 0;
    CHECK_FALSE(check_memory(less).memory.fits());
  }
  CHECK(some_recompute);
}

TEST_CASE("planner: with a minimum headroom only layouts leaving that much free are ranked") {
  // On 12 GB GPUs the small job's layouts fill memory to various levels: asking for 30% free
  // turns away every layout above 70% (more not fitting, none ranked over the line), and keeps
  // the rest as they were, in the same order.
  StepInputs in = two_nodes();
  in.gpu.hbm_capacity_bytes.value = 12e9;
  PlanOptions everything;
  everything.top = 1000;
  const PlanResult all = search_layouts(in, everything);
  PlanOptions roomy = everything;
  roomy.min_headroom = 0.30;
  const PlanResult kept = search_layouts(in, roomy);
  REQUIRE(!kept.ranked.empty());
  CHECK(kept.not_fitting > all.not_fitting);
  CHECK(kept.ranked.size() < all.ranked.size());
  std::vector<std::string> expected;
  for (const PlannedLayout& layout : all.ranked) {
    if (layout.outcome.memory.headroom_fraction() >= 0.30) expected.push_back(describe(layout));
  }
  std::vector<std::string> ranked;
  for (const PlannedLayout& layout : kept.ranked) {
    CHECK(layout.outcome.memory.headroom_fraction() >= 0.30);
    ranked.push_back(describe(layout));
  }
  // A layout turned away at its least recomputation may come back with more of it: those are
  // the only ones not in the plain ranking.
  for (const std::string& name : expected) {
    INFO(name);
    CHECK(std::find(ranked.begin(), ranked.end(), name) != ranked.end());
  }
  PlanOptions full = everything;
  full.min_headroom = 1.0;
  CHECK_THROWS_AS(search_layouts(in, full), ModelError);
}

TEST_CASE("planner: the same ranking on one thread or many") {
  PlanOptions options;
  options.top = 6;
  const PlanResult many = search_layouts(two_nodes(), options);
  PlanResult one;
  {
    tbb::global_control single(tbb::global_control::max_allowed_parallelism, 1);
    one = search_layouts(two_nodes(), options);
  }
  REQUIRE(one.ranked.size() == many.ranked.size());
  CHECK(one.replayed == many.replayed);
  for (std::size_t i = 0; i < one.ranked.size(); ++i) {
    CHECK(describe(one.ranked[i]) == describe(many.ranked[i]));
    CHECK(one.ranked[i].outcome.step.step_time_s == many.ranked[i].outcome.step.step_time_s);
  }
}

TEST_CASE("planner: on an ideal pipeline the bound is the bubble formula") {
  // Communication free (huge links, no latency), balanced stages: the replayed 1F1B step is the
  // bound's (m + pp - 1) chunk times within the head and embedding's small share.
  StepInputs in = testing::pipelined_job();
  in.node.nvlink_bytes_per_s = 1e18;
  in.node.nic_bytes_per_s = 1e18;
  in.node.pcie_bytes_per_s = 1e18;
  in.node.host_bytes_per_s = 1e18;
  in.gpu.collectives = CollectiveCosts::simple_only(SimTime{}, SimTime{});
  const StepOutcome out = simulate_step(in);
  REQUIRE(out.simulated);
  CHECK(step_lower_bound_s(in) <= out.step.step_time_s);
  CHECK(step_lower_bound_s(in) == Approx(out.step.step_time_s).epsilon(0.03));
}

TEST_CASE("planner: when nothing fits it names the leanest layout and by how much it is over") {
  StepInputs in = two_nodes();
  in.gpu.hbm_capacity_bytes.value = 1e9;  // no more than the framework overhead alone
  const PlanResult result = search_layouts(in);
  CHECK(result.ranked.empty());
  CHECK(result.replayed == 0);
  REQUIRE(result.leanest);
  const MemoryBreakdown& leanest = result.leanest->outcome.memory;
  CHECK_FALSE(leanest.fits());
  // No layout of the search, in any recomputation mode, needs less.
  for (const int zero : {0, 1, 2, 3}) {
    StepInputs other = in;
    other.plan.zero_stage = zero;
    other.plan.dp = 16;
    other.training.micro_batch = 1;
    other.plan.recompute = Recompute::full;
    CHECK(check_memory(other).memory.total_bytes >= leanest.total_bytes);
  }
}

TEST_CASE("the lower bound holds for offloaded layouts, the host's share included") {
  StepInputs in = fleetsim::testing::small_job();
  in.node.host_memory_bytes_per_s = 400e9;
  in.node.host_memory_capacity_bytes = 2e12;
  in.node.cpu_cores = 64;
  in.node.cpu_clock_hz = 2e9;
  in.plan.offload_optimizer = true;
  for (const double cycles : {0.5, 100.0}) {
    in.node.cpu_adam_cycles_per_parameter = cycles;
    for (const int zero : {1, 2, 3}) {
      INFO("zero " << zero << ", " << cycles << " cycles per parameter");
      in.plan.zero_stage = zero;
      const double step_s = simulate_step(in).step.step_time_s;
      const double bound_s = step_lower_bound_s(in);
      CHECK(bound_s <= step_s);
      StepInputs on_gpu = in;
      on_gpu.plan.offload_optimizer = false;
      CHECK(bound_s > step_lower_bound_s(on_gpu));  // the host's time is in it
    }
  }
}

TEST_CASE("under ZeRO-3 the bound counts the gathers each node must take in through its NICs") {
  // Two nodes, one replica per GPU: every micro-batch gathers each unit before its forward and
  // its backward, half of it from the other node. With slow NICs those gathers are the step.
  StepInputs in = two_nodes();
  in.plan.dp = 16;
  in.plan.zero_stage = 3;
  in.node.nic_bytes_per_s = 2e9;
  const double step_s = simulate_step(in).step.step_time_s;
  const double bound_s = step_lower_bound_s(in);
  CHECK(bound_s <= step_s);
  // The gathers bound it, and the reduce-scatters of every micro-batch's gradients add to them:
  // rings, which send out of a node as much as they take in, so both load each direction. The
  // bound is then over half the step (a third with the two in different directions); the rest
  // is mostly the rings' route, which crosses between the nodes with 15/16 of the data where
  // the bound counts the half a node lacks.
  CHECK(bound_s > 0.5 * step_s);
  // NICs half as fast, a bound twice as long.
  StepInputs slower = in;
  slower.node.nic_bytes_per_s /= 2;
  CHECK(step_lower_bound_s(slower) == Approx(2 * bound_s).epsilon(1e-9));
  CHECK(step_lower_bound_s(slower) <= simulate_step(slower).step.step_time_s);
  // In one node nothing crosses a NIC.
  StepInputs one_node = in;
  one_node.nodes = 1;
  one_node.plan.dp = 8;
  CHECK(step_lower_bound_s(one_node) <= simulate_step(one_node).step.step_time_s);
}

TEST_CASE("under ZeRO 2 with a pipeline the bound counts the reductions each node sends out") {
  // Four nodes, pp 2 and dp 16, a stage's replicas on two nodes: every micro-batch
  // reduce-scatters the stage's gradients (FP32 here) over its 16 replicas, half of them on the
  // other node. With slow NICs those reductions are the step, after the first micro-batch's
  // forward through every layer (no gradient before it): NICs half as fast, a bound longer by
  // the reductions' time, each below its replayed step.
  StepInputs in = two_nodes();
  in.nodes = 4;
  in.plan.pp = 2;
  in.plan.dp = 16;
  in.plan.zero_stage = 2;
  in.training.grad_reduce_bytes = 4;
  in.node.nic_bytes_per_s = 1e9;
  const double bound_s = step_lower_bound_s(in);
  CHECK(bound_s <= simulate_step(in).step.step_time_s);
  // By hand: m micro-batches, each the first stage's parameters in FP32, of which the 8 of 16
  // replicas on the other node keep half, through the node's NICs at their usable rate.
  const double micro_batches = 64.0 / (16 * in.training.micro_batch);
  const double usable =
      in.node.nics * in.node.nic_bytes_per_s *
      in.gpu.link_efficiency.at(to_string(fabric_link_kind(in.node.nic_kind))).value;
  const double reductions_s =
      micro_batches * rank_parameters(in.model, in.plan, 0).dense * 4 * (1 - 8.0 / 16) / usable;
  CHECK(bound_s > reductions_s);
  CHECK(bound_s < 1.2 * reductions_s);
  StepInputs slower = in;
  slower.node.nic_bytes_per_s /= 2;
  CHECK(step_lower_bound_s(slower) == Approx(bound_s + reductions_s).epsilon(1e-9));
  CHECK(step_lower_bound_s(slower) <= simulate_step(slower).step.step_time_s);
  // ZeRO 1 reduces once a step: a lower bound.
  StepInputs once = in;
  once.plan.zero_stage = 1;
  CHECK(step_lower_bound_s(once) < bound_s);
  // The updated parameters' gather overlapped with the forward adds to the reductions, with a
  // pipeline or without, and with multi-token prediction modules among the layers the first
  // gradient waits for: each bound below its step.
  for (const int pp : {1, 2}) {
    for (const int mtp_layers : {0, 1}) {
      StepInputs ahead = in;
      ahead.plan.pp = pp;
      ahead.plan.dp = 32 / pp;
      ahead.plan.overlap_param_gather = true;
      ahead.model.mtp_layers = mtp_layers;
      CAPTURE(pp, mtp_layers);
      CHECK(step_lower_bound_s(ahead) <= simulate_step(ahead).step.step_time_s);
    }
  }
}

TEST_CASE("under FSDP-QLoRA the bound counts the 4-bit bases the gathers move") {
  // ZeRO-3 over two nodes with slow NICs: the decoder layers' frozen bases are gathered packed
  // in NF4, about a quarter of BF16's bytes; counted as BF16 the bound would pass the step.
  StepInputs in = two_nodes();
  in.plan.dp = 16;
  in.plan.zero_stage = 3;
  in.node.nic_bytes_per_s = 2e9;
  in.training.lora = LoraSpec{};
  in.training.lora->quantized_base = true;
  const double step_s = simulate_step(in).step.step_time_s;
  CHECK(step_lower_bound_s(in) <= step_s);
  CHECK(step_lower_bound_s(in) > 0.2 * step_s);  // the gathers still bound it
}

TEST_CASE("the planner tries cp up to the scenario's, and bounds those layouts too") {
  StepInputs base = two_nodes();
  base.plan.cp = 4;
  PlanOptions everything;
  everything.top = 1000;
  const PlanResult all = search_layouts(base, everything);
  std::set<int> sizes;
  for (const PlannedLayout& layout : all.ranked) {
    INFO(describe(layout) << " cp" << layout.inputs.plan.cp);
    sizes.insert(layout.inputs.plan.cp);
    CHECK(layout.inputs.plan.world_size() == 16);
    CHECK(layout.lower_bound_s <= layout.outcome.step.step_time_s);
  }
  CHECK(sizes == std::set<int>{1, 2, 4});
}

TEST_CASE("the planner tries tp across whole trays of an NVLink domain") {
  // Two 4-GPU trays: in one NVLink domain tp 8 spans both; as separate nodes it cannot.
  StepInputs in = fleetsim::testing::two_trays();
  in.training.global_batch = 16;
  in.node.nvlink_domain_nodes = 1;
  const PlanResult separate = search_layouts(in, PlanOptions{});
  in.node.nvlink_domain_nodes = 2;
  PlanOptions all;
  all.top = 1000;
  const PlanResult domain = search_layouts(in, all);
  CHECK(domain.layouts > separate.layouts);
  bool across = false;
  for (const PlannedLayout& layout : domain.ranked) across |= layout.inputs.plan.tp == 8;
  CHECK(across);
}

TEST_CASE("the lower bound holds under expert parallelism, and the planner tries it") {
  StepInputs in = fleetsim::testing::with_experts(small_job());
  for (const int zero : {1, 3}) {
    for (const int ep : {2, 8}) {
      INFO("ZeRO " << zero << ", ep " << ep);
      StepInputs sharded = in;
      sharded.plan.zero_stage = zero;
      sharded.plan.ep = ep;
      CHECK(step_lower_bound_s(sharded) <= simulate_step(sharded).step.step_time_s);
    }
  }
  in.plan.ep = 8;
  // An expert group across two trays: its all-to-all timed on both.
  StepInputs trays = fleetsim::testing::with_experts(fleetsim::testing::two_trays());
  trays.plan.ep = 8;
  trays.training.global_batch = 16;
  CHECK(step_lower_bound_s(trays) <= simulate_step(trays).step.step_time_s);
  // A base with overlap_param_gather still gets expert-parallel layouts (without it).
  in.plan.overlap_param_gather = true;
  PlanOptions all;
  all.top = 1000;
  const PlanResult plan = search_layouts(in, all);
  bool expert_parallel = false;
  for (const PlannedLayout& layout : plan.ranked) expert_parallel |= layout.inputs.plan.ep > 1;
  CHECK(expert_parallel);
  // With each expert whole (expert_tp 1) the bound holds at tp 2 and 4, and the planner tries
  // expert groups across tp ranks: ep above dp, as many as tp x dp.
  for (const int tp : {2, 4}) {
    INFO("expert_tp 1, tp " << tp);
    StepInputs whole = in;
    whole.plan.overlap_param_gather = false;
    whole.plan.tp = tp;
    whole.plan.dp = 8 / tp;
    whole.plan.ep = 8;
    whole.plan.expert_tp = 1;
    whole.training.global_batch = 2 * whole.plan.dp;
    CHECK(step_lower_bound_s(whole) <= simulate_step(whole).step.step_time_s);
  }
  StepInputs whole_experts = in;
  whole_experts.plan.expert_tp = 1;
  bool across_tp = false;
  for (const PlannedLayout& layout : search_layouts(whole_experts, all).ranked) {
    const ParallelPlan& p = layout.inputs.plan;
    if (p.ep > p.dp) {
      across_tp = true;
      CHECK(p.expert_tp == 1);
    }
  }
  CHECK(across_tp);
}

TEST_CASE("planner: with ep_comm_overlap the bound counts no all-to-all and stays below the step") {
  // Merged passes hide the experts' exchanges; the lone warm-up and cool-down passes expose
  // theirs, which the bound leaves out: below the replay, and below the bound with them
  // counted.
  StepInputs in = fleetsim::testing::with_experts(small_job());
  in.plan.ep = 8;
  StepInputs overlapped = in;
  overlapped.plan.ep_comm_overlap = true;
  CHECK(step_lower_bound_s(overlapped) <= simulate_step(overlapped).step.step_time_s);
  CHECK(step_lower_bound_s(overlapped) < step_lower_bound_s(in));
  // Sequences of 16,384 tokens on 20 GB GPUs: nothing fits without full recomputation (29 GB
  // with ep 8, 12 GB recomputing), which the overlap rules out; the planner tries each layout
  // with the overlap and without, and ranks the latter, recomputing.
  overlapped.training.seq_len = 16384;
  overlapped.training.global_batch = 8;
  overlapped.training.micro_batch = 1;
  overlapped.gpu.hbm_capacity_bytes.value = 20e9;
  PlanOptions all;
  all.top = 1000;
  int on = 0, off = 0, recomputed = 0;
  for (const PlannedLayout& layout : search_layouts(overlapped, all).ranked) {
    const ParallelPlan& p = layout.inputs.plan;
    INFO(describe(layout));
    CHECK(layout.lower_bound_s <= layout.outcome.step.step_time_s);
    if (p.ep_comm_overlap) CHECK(p.recompute != Recompute::full);
    on += p.ep_comm_overlap ? 1 : 0;
    off += p.ep > 1 && !p.ep_comm_overlap ? 1 : 0;
    recomputed += p.recompute == Recompute::full ? 1 : 0;
  }
  CHECK(off > 0);
  CHECK(recomputed > 0);
  // At the small job's own length it fits without: both kinds are ranked.
  overlapped.training = in.training;
  overlapped.gpu = in.gpu;
  on = 0;
  for (const PlannedLayout& layout : search_layouts(overlapped, all).ranked) {
    on += layout.inputs.plan.ep_comm_overlap ? 1 : 0;
  }
  CHECK(on > 0);
}

TEST_CASE("planner: uneven pipeline stages are searched, and bounded below their step") {
  // Ten layers on 16 GPUs: pp 4 splits them 2, 3, 3, 2 (no power of two but 2 divides them;
  // pp 8 would leave a stage one layer, and is not tried).
  StepInputs base = two_nodes();
  base.model.layers = 10;
  const PlanResult all = every_layout(base);
  int uneven = 0;
  for (const PlannedLayout& layout : all.ranked) {
    INFO(describe(layout));
    CHECK(layout.lower_bound_s <= layout.outcome.step.step_time_s);
    if (layout.inputs.plan.pp == 4) {
      ++uneven;
      CHECK(layout.inputs.plan.vpp == 1);
      CHECK(stage_layers(layout.inputs.model, layout.inputs.plan, 0) == 2);
      CHECK(stage_layers(layout.inputs.model, layout.inputs.plan, 1) == 3);
    }
    CHECK(layout.inputs.plan.pp != 8);
  }
  CHECK(uneven > 0);
}

TEST_CASE("planner: under full recomputation only the fewest layers that fit are rerun") {
  // A layout that fits only with recomputation keeps the least depth N of recompute_layers that
  // fits (N - 1 does not), or every layer (0) where only that fits; fewer reruns than full
  // recomputation of every layer, so a step no slower, and its bound still below the step.
  StepInputs base = two_nodes();
  base.training.micro_batch = 4;
  const auto fits = [](StepInputs inputs, int layers) {
    inputs.plan.recompute_layers = layers;
    return check_memory(inputs).memory.fits();
  };
  const PlanResult all = every_layout(fitting_only_recomputed(base));
  int partial = 0;
  for (const PlannedLayout& layout : all.ranked) {
    INFO(describe(layout) << " recompute_layers " << layout.inputs.plan.recompute_layers);
    const ParallelPlan& plan = layout.inputs.plan;
    CHECK(layout.lower_bound_s <= layout.outcome.step.step_time_s);
    if (plan.recompute != Recompute::full || plan.recompute_layers == 0) continue;
    ++partial;
    CHECK(fits(layout.inputs, plan.recompute_layers));
    if (plan.recompute_layers > 1) CHECK_FALSE(fits(layout.inputs, plan.recompute_layers - 1));
    StepInputs every = layout.inputs;
    every.plan.recompute_layers = 0;
    CHECK(layout.outcome.step.step_time_s <= simulate_step(every).step.step_time_s);
  }
  CHECK(partial > 0);
}

TEST_CASE("planner: the bound counts the last stage's reruns under partial recomputation") {
  // Without a pipeline the bound is m x layers x (forward + backward) plus, under full
  // recomputation, each rerun layer's forward once a micro-batch: rerunning N of L layers adds
  // N / L of what rerunning every layer adds. With two stages the last one's N rerun layers add
  // theirs too: the bound grows with N.
  StepInputs in = two_nodes();
  in.plan.dp = 16;
  in.plan.zero_stage = 1;
  const int layers = in.model.layers;
  const auto bound = [&](StepInputs inputs, Recompute mode, int rerun) {
    inputs.plan.recompute = mode;
    inputs.plan.recompute_layers = rerun;
    return step_lower_bound_s(inputs);
  };
  const double none = bound(in, Recompute::none, 0);
  const double every = bound(in, Recompute::full, 0);
  REQUIRE(every > none);
  for (const int n : {1, layers / 2, layers - 1}) {
    INFO("N = " << n);
    CHECK(bound(in, Recompute::full, n) - none ==
          Approx((every - none) * n / layers).epsilon(1e-9));
  }
  StepInputs pipelined = in;
  pipelined.plan.pp = 2;
  pipelined.plan.dp = 8;
  CHECK(bound(pipelined, Recompute::full, 1) > bound(pipelined, Recompute::none, 0));
  CHECK(bound(pipelined, Recompute::full, 2) > bound(pipelined, Recompute::full, 1));
}

TEST_CASE("planner: activation offload of the fewest layers that fit, its bound below its step") {
  // Where a layout on one stage fits only with recomputation, offloading the first N layers'
  // activations to the host may fit too: the planner replays it beside the recomputation, with
  // the least N that fits (N - 1 does not), and its bound, counting the copies each PCIe link
  // and the host's memory must carry, stays below its step.
  StepInputs base = two_nodes();
  base.training.micro_batch = 4;
  base.node.host_memory_bytes_per_s = 400e9;
  base.node.host_memory_capacity_bytes = 2e12;
  const auto fits = [](StepInputs inputs, int layers) {
    inputs.plan.activation_offload_layers = layers;
    return check_memory(inputs).memory.fits();
  };
  int offloaded = 0;
  for (const PlannedLayout& layout : every_layout(fitting_only_recomputed(base)).ranked) {
    const ParallelPlan& plan = layout.inputs.plan;
    INFO(describe(layout) << " offloaded " << plan.activation_offload_layers);
    CHECK(layout.lower_bound_s <= layout.outcome.step.step_time_s);
    if (plan.activation_offload_layers == 0) continue;
    ++offloaded;
    CHECK(plan.pp == 1);
    CHECK(plan.recompute == Recompute::none);
    CHECK(fits(layout.inputs, plan.activation_offload_layers));
    CHECK_FALSE(fits(layout.inputs, plan.activation_offload_layers - 1));
  }
  CHECK(offloaded > 0);
}

TEST_CASE("planner: with local attention in most layers the bound counts each layer's own") {
  // Every third layer attends fully, the others within 256 of the 2,048 tokens: the last
  // stage's layers are bounded by their own attention, and the bound stays below every step.
  StepInputs base = two_nodes();
  base.model.layers = 12;
  base.model.attention_window = 256;
  base.model.full_attention_every = 3;
  const PlanResult all = every_layout(base);
  REQUIRE(all.ranked.size() > 4);
  for (const PlannedLayout& layout : all.ranked) {
    INFO(describe(layout));
    CHECK(layout.lower_bound_s <= layout.outcome.step.step_time_s);
    CHECK(layout.lower_bound_s > 0.5 * layout.outcome.step.step_time_s);
    // Local attention does less work: the same layout with full attention everywhere takes
    // longer, and its bound is higher.
    StepInputs full = layout.inputs;
    full.model.attention_window = 0;
    full.model.full_attention_every = 0;
    CHECK(step_lower_bound_s(full) > layout.lower_bound_s);
  }
}

TEST_CASE("the lower bound holds with the shared expert beside the all-to-alls") {
  // A mixture of experts with a shared expert over 4 expert-parallel ranks, tp 1 and 2, with
  // collectives holding SMs or none: each all-to-all beside a GEMM of the shared expert
  // (shared_expert_overlap) lowers the bound no more than the replay.
  for (const double comm_sms : {0.0, 24.0}) {
    for (const int tp : {1, 2}) {
      CAPTURE(comm_sms, tp);
      StepInputs in = fleetsim::testing::with_experts(fleetsim::testing::small_job());
      in.model.shared_expert_ffn = 4096;
      in.gpu.comm_sms.value = comm_sms;
      in.plan.tp = tp;
      in.plan.dp = 8 / tp;
      in.plan.ep = 4;
      in.training.shared_expert_overlap = true;
      const double step_s = simulate_step(in).step.step_time_s;
      const double bound_s = step_lower_bound_s(in);
      CHECK(bound_s <= step_s);
      StepInputs serial = in;
      serial.training.shared_expert_overlap = false;
      CHECK(bound_s <= step_lower_bound_s(serial));
    }
  }
}
