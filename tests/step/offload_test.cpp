// Optimizer offload (ZeRO-Offload): what moves to the host, and how long the host takes.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "common/folded_steps.hpp"
#include "common/small_job.hpp"
#include "sim/step/step_executor.hpp"
#include "workloads/task_graph.hpp"
#include "workloads/transformer_ops.hpp"

using namespace fleetsim;

namespace {

constexpr double kHostMemoryBytesPerS = 400e9;
constexpr int kCores = 64;
constexpr double kClockHz = 2e9;

// A job (the small one: ZeRO-3 over 8 GPUs), its optimizer on a host of round numbers.
StepInputs offloaded_job(double cycles_per_parameter = 0.5, StepInputs in = testing::small_job()) {
  in.node.host_memory_bytes_per_s = kHostMemoryBytesPerS;
  in.node.host_memory_capacity_bytes = 2e12;
  in.node.cpu_cores = kCores;
  in.node.cpu_clock_hz = kClockHz;
  in.node.cpu_adam_cycles_per_parameter = cycles_per_parameter;
  in.plan.offload_optimizer = true;
  return in;
}

// The bytes a step's traffic moved through the host memory of the node named by `node` ("n1.").
double host_memory_bytes(const StepResult& step, const std::string& node) {
  double bytes = 0;
  for (const LinkUsage& link : step.links) {
    if (link.kind == "host_memory" && link.name.rfind(node, 0) == 0) bytes += link.bytes;
  }
  return bytes;
}

// Every rank's duration of the task named `name` (one per rank).
std::map<int, double> task_seconds(const StepResult& step, const std::string& name) {
  std::map<int, double> seconds;
  for (const TraceSlice& slice : step.trace) {
    if (slice.name == name) seconds[slice.rank] = (slice.end - slice.begin).seconds();
  }
  return seconds;
}

StepResult traced_step(const StepInputs& in, bool fold = false) {
  StepOptions options;
  options.trace_ranks = in.plan.dp;
  options.fold = fold;
  const StepOutcome out = simulate_step(in, options);
  REQUIRE(out.simulated);
  return out.step;
}

// Every replayed rank's CPU Adam takes `expected` seconds, unfolded (all 8 ranks) and folded
// (replica 0's, beside its copies in the other replicas).
void check_adam_seconds(const StepInputs& in, double expected, double epsilon) {
  for (const bool fold : {false, true}) {
    INFO("fold " << fold);
    const std::map<int, double> adam = task_seconds(traced_step(in, fold), "optimizer.cpu_adam");
    REQUIRE(adam.size() == (fold ? 1 : 8));
    for (const auto& [rank, seconds] : adam) {
      INFO("rank " << rank);
      CHECK(seconds == Approx(expected).epsilon(epsilon));
    }
  }
}

}  // namespace

TEST_CASE("offload: the node's ranks run CPU Adam together through its host memory") {
  // Memory-bound: 8 ranks x 30 bytes per parameter of their shard through 400 GB/s.
  const StepInputs in = offloaded_job();
  const double shard = in.model.parameters() / 8;
  check_adam_seconds(in, 8 * 30 * shard / kHostMemoryBytesPerS, 1e-3);
}

TEST_CASE("offload: a slow CPU bounds Adam by its cores, shared among the node's ranks") {
  // 100 cycles per parameter: each rank's 8 cores update 160 M parameters/s, and the 8 ranks
  // together move only 8 x 30 x 160 M = 38 GB/s through memory.
  const StepInputs in = offloaded_job(100);
  const double shard = in.model.parameters() / 8;
  check_adam_seconds(in, shard * 100 / (kCores / 8 * kClockHz), 1e-6);
}

TEST_CASE("offload: host memory carries every byte the graph moves there, PCIe every copy") {
  const StepInputs in = offloaded_job();
  const TaskGraph graph = build_data_parallel_step(in.model, in.training, in.plan);
  double host_bytes = 0, to_host = 0, to_gpu = 0;
  for (const Task& task : graph.stages[0]) {
    const auto* work = std::get_if<HostWork>(&task.work);
    if (!work) continue;
    host_bytes += work->bytes;
    if (work->op == HostOp::copy_to_host) to_host += work->bytes;
    if (work->op == HostOp::copy_to_gpu) to_gpu += work->bytes;
  }
  REQUIRE(to_host > 0);
  // ZeRO-3: each micro-batch's gradients, reduce-scattered, reach the host as the rank's BF16
  // shard; the updated BF16 shard comes back once.
  const double shard = in.model.parameters() / 8;
  const double micro_batches = 32.0 / (2 * 8);
  CHECK(to_host == Approx(micro_batches * 2 * shard));
  CHECK(to_gpu == Approx(2 * shard));
  const StepOutcome out = simulate_step(in);
  std::map<std::string, double> carried;
  for (const LinkUsage& link : out.step.links) carried[link.name] = link.bytes;
  CHECK(carried["n0.host->n0.memory"] == Approx(8 * host_bytes));
  CHECK(carried["n0.gpu0->n0.pcie0"] == Approx(to_host));  // one node: no NIC traffic
  CHECK(carried["n0.pcie0->n0.gpu0"] == Approx(to_gpu));
}

TEST_CASE("offload: the optimizer's states and sharded gradients leave the GPU for the host") {
  // Against DeepSpeed's ZeRO-3 on the GPU, whose BF16 shards stay there when it offloads.
  StepInputs on_gpu = offloaded_job();
  on_gpu.plan.offload_optimizer = false;
  on_gpu.plan.bf16_shards = true;
  const StepOutcome kept = check_memory(on_gpu);
  const StepOutcome moved = check_memory(offloaded_job());
  // ZeRO-3 beside BF16 shards: 12 bytes of master weight and moments and 2 of gradient in the
  // (BF16) reduce dtype per shard parameter leave the GPU; the host keeps the gradient in FP32.
  const double shard = on_gpu.model.parameters() / 8;
  CHECK(kept.memory.total_bytes - moved.memory.total_bytes == Approx(14 * shard));
  CHECK(moved.memory.host_bytes_per_rank == Approx(16 * shard));
  CHECK(moved.memory.host_bytes_per_node == Approx(8 * 16 * shard));
  CHECK(kept.memory.host_bytes_per_node == 0);
  // A host too small for the node's shards refuses the layout.
  StepInputs small_host = offloaded_job();
  small_host.node.host_memory_capacity_bytes = 8 * 16 * shard * 0.99;
  const StepOutcome refused = simulate_step(small_host);
  CHECK(refused.memory.gpu_fits());
  CHECK_FALSE(refused.memory.fits());
  CHECK_FALSE(refused.simulated);
  REQUIRE(refused.warnings.size() == 1);
  CHECK_THAT(refused.warnings[0], Catch::Contains("host memory per node"));
}

TEST_CASE("offload: more host bandwidth or a faster CPU never slows the step") {
  const double base = simulate_step(offloaded_job()).step.step_time_s;
  StepInputs wider = offloaded_job();
  wider.node.host_memory_bytes_per_s *= 2;
  CHECK(simulate_step(wider).step.step_time_s <= base);
  CHECK(simulate_step(offloaded_job(100)).step.step_time_s >= base);
  StepInputs on_gpu = offloaded_job();
  on_gpu.plan.offload_optimizer = false;
  CHECK(simulate_step(on_gpu).step.step_time_s < base);  // the GPU's HBM outruns the host
}

TEST_CASE("offload: folded runs agree with every rank replayed, hosts shared or not") {
  // One node of 8 replicas sharing its host; 16 replicas on two nodes; ZeRO-1 with tp 2, four
  // replicas to a node. Replica 0's tp rank 0 stands for the others, with copies of its host work
  // on its node.
  StepInputs one_node = offloaded_job();
  StepInputs two_nodes = offloaded_job();
  two_nodes.nodes = 2;
  two_nodes.plan.dp = 16;
  two_nodes.training.global_batch = 64;
  StepInputs tensor_parallel = offloaded_job();
  tensor_parallel.plan.tp = 2;
  tensor_parallel.plan.dp = 4;
  tensor_parallel.plan.zero_stage = 1;
  for (const StepInputs& in : {one_node, two_nodes, tensor_parallel}) {
    INFO("tp " << in.plan.tp << " dp " << in.plan.dp << " nodes " << in.nodes);
    StepOptions unfolded;
    unfolded.fold = false;
    const StepResult folded = simulate_step(in).step;
    const StepResult every = simulate_step(in, unfolded).step;
    CHECK(folded.replayed_ranks == 1);  // replica 0's tp rank 0
    CHECK(every.replayed_ranks == in.plan.tp * in.plan.dp);
    CHECK(folded.step_time_s == Approx(every.step_time_s).epsilon(1e-3));
  }
}

TEST_CASE("offload: Adam waits for every gradient on the host, the update for Adam, the gather") {
  for (const int zero : {1, 2, 3}) {
    INFO("zero " << zero);
    StepInputs in = offloaded_job();
    in.plan.zero_stage = zero;
    const StepResult step = traced_step(in);
    SimTime last_gradient{}, adam_begin{}, adam_end{}, back_begin{}, back_end{}, gather_begin{};
    int gathers = 0;
    for (const TraceSlice& slice : step.trace) {
      if (slice.rank != 0) continue;
      const bool gradient = slice.name.find(".to_host") != std::string::npos ||
                            slice.name.find(".accumulate") != std::string::npos;
      if (gradient) last_gradient = std::max(last_gradient, slice.end);
      if (slice.name == "optimizer.cpu_adam")
        std::tie(adam_begin, adam_end) = std::pair{slice.begin, slice.end};
      if (slice.name == "optimizer.to_gpu")
        std::tie(back_begin, back_end) = std::pair{slice.begin, slice.end};
      if (slice.name == "optimizer.all_gather") {
        gather_begin = slice.begin;
        ++gathers;
      }
    }
    CHECK(last_gradient > SimTime{});
    CHECK(adam_begin >= last_gradient);
    CHECK(back_begin >= adam_end);
    CHECK(back_end > back_begin);
    CHECK(gathers == (zero == 3 ? 0 : 1));  // ZeRO-3 keeps only its shard
    if (gathers > 0) CHECK(gather_begin >= back_end);
    CHECK(step.step_time_s >= back_end.seconds());
  }
}

TEST_CASE("offload: gradient copies keep pace with the reductions, two buffers at most") {
  // Each reduction waits for the copy of the one two before it, not for the one before.
  const StepInputs in = offloaded_job();
  const TaskGraph graph = build_data_parallel_step(in.model, in.training, in.plan);
  const Program& program = graph.stages[0];
  std::vector<TaskIndex> copies;  // so far, in program order
  int reductions = 0;
  const auto waits_for = [&](TaskIndex t, TaskIndex d) {
    return std::find(program[t].deps.begin(), program[t].deps.end(), d) != program[t].deps.end();
  };
  for (TaskIndex t = 0; t < program.size(); ++t) {
    const auto* work = std::get_if<CollectiveWork>(&program[t].work);
    if (work && work->op == CollectiveOp::reduce_scatter) {
      ++reductions;
      if (copies.size() >= 2) CHECK(waits_for(t, copies[copies.size() - 2]));
      if (!copies.empty()) CHECK_FALSE(waits_for(t, copies.back()));
    }
    const auto* host = std::get_if<HostWork>(&program[t].work);
    if (host && host->op == HostOp::copy_to_host) copies.push_back(t);
  }
  CHECK(reductions > 2);
}

TEST_CASE("context parallelism: each cp rank's offloaded shard counts in its node's host memory") {
  StepInputs in = offloaded_job();
  in.plan.zero_stage = 1;
  in.plan.cp = 4;
  in.plan.dp = 2;
  in.training.global_batch = 4;
  const StepOutcome out = check_memory(in);
  REQUIRE(out.memory.host_bytes_per_rank > 0);
  CHECK(out.memory.host_bytes_per_node == Approx(8 * out.memory.host_bytes_per_rank));
  // Each rank's shard is 1 / (dp x cp) of the parameters: 16 bytes each (master, moments,
  // gradients).
  CHECK(out.memory.host_bytes_per_rank == Approx(16 * in.model.parameters() / 8));
}

TEST_CASE("offload: gradients reduced after the backward go to the host as the overlapped do") {
  // ZeRO-1 reduces each bucket's parameters once a step, overlapped or held back to the end of
  // the backward (overlap_grad_reduce: false): each reduced bucket's FP32 shard goes to the host
  // once, the same copies and bytes, none summed back through the GPU; CPU Adam under FP16 moves
  // 8 more bytes a parameter (the check and unscale of its gradient).
  StepInputs in = offloaded_job();
  in.plan.zero_stage = 1;
  const auto host_copies = [&](const StepInputs& job) {
    const TaskGraph graph = build_data_parallel_step(job.model, job.training, job.plan);
    std::map<HostOp, std::pair<int, double>> copies;
    double adam_bytes = 0;
    for (const Task& task : graph.stages.front()) {
      const auto* work = std::get_if<HostWork>(&task.work);
      if (!work) continue;
      if (task.name == "optimizer.cpu_adam") adam_bytes = work->bytes;
      auto& [count, bytes] = copies[work->op];
      ++count;
      bytes += work->bytes;
    }
    return std::pair{copies, adam_bytes};
  };
  const auto [overlapped, adam] = host_copies(in);
  in.plan.overlap_grad_reduce = false;
  const auto [held_back, held_adam] = host_copies(in);
  CHECK(held_back == overlapped);
  CHECK(held_adam == adam);
  in.training.precision = Precision::fp16;
  const double local = adam / optimizer_step_bytes_per_parameter(TrainingSpec{});
  CHECK(host_copies(in).second == Approx(adam + 8 * local));
}

TEST_CASE("offload: host work on nodes that mirror the first node's is left out, step unchanged") {
  // tp 4 x pp 2 x dp 4 on four nodes, two replicas a node: every node's host work, PCIe and
  // NIC traffic meet the cluster as the first node of its stage does. The first nodes' ranks
  // run their host work (the replayed rank's and its copies), the others' is left out: the
  // step is every rank's to rounding, node 0's host memory carries what it carries with every
  // rank replayed and node 1's nothing. Node 1's NVLink carries its data-parallel rings alone
  // (its replicas' tensor groups, which share it, are left out too).
  StepInputs in = offloaded_job();
  in.nodes = 4;
  in.model.kv_heads = 8;
  in.plan.tp = 4;
  in.plan.pp = 2;
  in.plan.dp = 4;
  in.plan.zero_stage = 1;
  in.training.global_batch = 32;
  in.training.micro_batch = 1;
  const auto [folded, every] = testing::folded_and_unfolded(in);
  CHECK(folded.replayed_ranks == 2);
  CHECK(folded.step_time_s == Approx(every.step_time_s).epsilon(1e-9));
  CHECK(host_memory_bytes(every, "n1.") > 0);
  CHECK(host_memory_bytes(folded, "n0.") == Approx(host_memory_bytes(every, "n0.")).epsilon(1e-9));
  CHECK(host_memory_bytes(folded, "n1.") == 0);
  const std::string node_1_nvlink = "n1.gpu0->n1.nvswitch";
  CHECK(testing::link_bytes(folded, node_1_nvlink) > 0);
  CHECK(testing::link_bytes(folded, node_1_nvlink) < testing::link_bytes(every, node_1_nvlink));
}

TEST_CASE("offload: a copy's host work runs on its own node's host, in a domain of several nodes") {
  // Two NVLink domains of two 4-GPU trays (nodes), tp 4 x dp 4: a tensor group fills a tray and
  // a domain holds two replicas. Replica 1 (node 1) runs as a copy beside replica 0 (node 0),
  // its host work on node 1's host memory and cores; replicas 2 and 3 (the second domain,
  // mirroring the first) are left out. The step is every rank's to rounding, and each host
  // memory of the first domain carries what it carries with every rank replayed.
  StepInputs in = offloaded_job(0.5, testing::two_trays());
  in.nodes = 4;
  in.plan.tp = 4;
  in.plan.dp = 4;
  in.plan.zero_stage = 1;
  in.training.global_batch = 16;
  in.training.micro_batch = 1;
  const auto [folded, every] = testing::folded_and_unfolded(in);
  CHECK(folded.replayed_ranks == 1);
  CHECK(folded.step_time_s == Approx(every.step_time_s).epsilon(1e-9));
  for (const std::string node : {"n0.", "n1."}) {
    CAPTURE(node);
    CHECK(host_memory_bytes(every, node) > 0);
    CHECK(host_memory_bytes(folded, node) == Approx(host_memory_bytes(every, node)).epsilon(1e-9));
  }
  CHECK(host_memory_bytes(folded, "n2.") == 0);
}
