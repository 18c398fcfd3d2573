// Activation offload (Transformer Engine's CPU offloading of the first N layers): what stays on
// the GPU, what crosses PCIe and host memory, and when each copy may start and must end.
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/small_job.hpp"
#include "sim/step/memory_check.hpp"
#include "sim/step/step_executor.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/task_graph.hpp"

using namespace fleetsim;

namespace {

// The small job (8 layers, 8 GPUs, 2 micro-batches of 2 a replica) under ZeRO 1, the first
// `layers` offloaded to a host of round numbers.
StepInputs offloading(int layers) {
  StepInputs in = testing::small_job();
  in.plan.zero_stage = 1;
  in.plan.activation_offload_layers = layers;
  in.node.host_memory_bytes_per_s = 400e9;
  in.node.host_memory_capacity_bytes = 2e12;
  return in;
}

const Program& stage0(const TaskGraph& graph) {
  return graph.stages.at(0);
}

long index_of(const Program& program, const std::string& name) {
  for (std::size_t i = 0; i < program.size(); ++i) {
    if (program[i].name == name) return static_cast<long>(i);
  }
  FAIL("no task " << name);
  return -1;
}

// The first kernel from `from` on whose name starts with `prefix` (FSDP's gathers and FSDP2's
// copies out of them, which need no activations, left out).
long first_from(const Program& program, const std::string& prefix, long from = 0) {
  for (std::size_t i = static_cast<std::size_t>(from); i < program.size(); ++i) {
    const Task& task = program[i];
    if (task.name.starts_with(prefix) && task.stream == Stream::compute &&
        !task.name.ends_with(".copy_out")) {
      return static_cast<long>(i);
    }
  }
  FAIL("no task named " << prefix << "...");
  return -1;
}

bool waits_for(const Task& task, long dep) {
  for (const TaskIndex d : task.deps) {
    if (static_cast<long>(d) == dep) return true;
  }
  return false;
}

bool waits_for_prefix(const Program& program, const Task& task, const std::string& prefix) {
  for (const TaskIndex d : task.deps) {
    if (program[d].name.starts_with(prefix)) return true;
  }
  return false;
}

// Transformer Engine's schedule for the first 5 of 8 layers offloaded, task by task (see the
// test below), and both copies of each in every micro-batch.
void check_window_schedule(const StepInputs& in) {
  const TaskGraph graph = build_data_parallel_step(in.model, in.training, in.plan);
  const Program& program = stage0(graph);
  CHECK(graph.host_work);
  CHECK_FALSE(graph.cpu_work);
  const int windows[] = {1, 3, 5, 6, 7};
  const double saved = layer_saved_bytes(in.model, in.training, in.plan);
  for (int i = 0; i < 5; ++i) {
    INFO("offloaded layer " << i);
    const std::string layer = "mb0.L" + std::to_string(i);
    const long out = index_of(program, layer + ".offload");
    const long back = index_of(program, layer + ".reload");
    for (const long copy : {out, back}) {
      const auto* work = std::get_if<HostWork>(&program[copy].work);
      REQUIRE(work);
      CHECK(program[copy].stream == Stream::host_copy);
      CHECK(work->bytes == Approx(saved));
    }
    if (i == 0) {
      CHECK(waits_for_prefix(program, program[out], "mb0.L0."));
    } else {
      const std::string before = "mb0.L" + std::to_string(windows[i - 1]) + ".";
      CHECK(waits_for_prefix(program, program[out], before));
      CHECK(
          waits_for(program[out], index_of(program, "mb0.L" + std::to_string(i - 1) + ".offload")));
    }
    const std::string next =
        windows[i] + 1 < 8 ? "mb0.L" + std::to_string(windows[i] + 1) + "." : "mb0.head.";
    CHECK(waits_for(program[first_from(program, next)], out));
    CHECK(waits_for_prefix(program, program[back], next));  // the backward above layer w(i)
    CHECK(waits_for(program[first_from(program, layer + ".", back + 1)], back));
    if (i > 0) {
      const std::string before = "mb0.L" + std::to_string(windows[i - 1]) + ".";
      CHECK(waits_for(program[first_from(program, before, back + 1)], back));
    }
  }
  // Layers past the first N stay: nothing of theirs is copied.
  for (int i = 5; i < 8; ++i) {
    for (const Task& task : program) {
      CHECK(task.name != "mb0.L" + std::to_string(i) + ".offload");
    }
  }
  // Every micro-batch copies the N layers out and back.
  double out = 0, back = 0;
  for (const Task& task : program) {
    if (const auto* work = std::get_if<HostWork>(&task.work)) {
      (work->op == HostOp::copy_to_host ? out : back) += work->bytes;
    }
  }
  CHECK(out == Approx(graph.micro_batches * 5 * saved));
  CHECK(back == Approx(graph.micro_batches * 5 * saved));
}

}  // namespace

TEST_CASE("activation offload: each of the first N layers goes out in its window, back ahead") {
  // Transformer Engine's layer_window_map for L = 8 layers, N = 5 offloaded: w(i) = (L / N)
  // (i + 1) - 1, plus i + 1 for the first L % N = 3, else 3: w = 1, 3, 5, 6, 7. Layer i's copy
  // out starts after layer 0's forward (i = 0) or when layer w(i - 1)'s ends, behind the copy
  // before; the forward after layer w(i) waits for it. Its copy back starts as layer w(i)'s
  // backward starts (after the backward above it), and layer i's backward and layer
  // w(i - 1)'s wait for it.
  check_window_schedule(offloading(5));
}

TEST_CASE("activation offload: the same schedule beside FSDP's gathers, LoRA and ring attention") {
  StepInputs zero3 = offloading(5);
  zero3.plan.zero_stage = 3;
  StepInputs fsdp2 = zero3;
  fsdp2.plan.fsdp2 = true;
  StepInputs lora = offloading(5);
  lora.training.lora = LoraSpec{};
  StepInputs ring = offloading(5);
  ring.plan.cp = 2;
  ring.plan.dp = 4;
  for (const auto& [name, in] : {std::pair{"ZeRO 3", zero3}, std::pair{"FSDP2", fsdp2},
                                 std::pair{"LoRA", lora}, std::pair{"cp 2", ring}}) {
    INFO(name);
    check_window_schedule(in);
  }
}

TEST_CASE("activation offload: L - N + 1 layers' activations on the GPU, N in host memory") {
  // One micro-batch in flight: the layers kept, and the last offloaded one until its copy
  // out ends as the last layer computes.
  const StepInputs kept = offloading(0);
  const double saved = layer_saved_bytes(kept.model, kept.training, kept.plan);
  const auto activations = [](const MemoryBreakdown& memory) {
    for (const MemoryItem& item : memory.items) {
      if (item.name == "activations") return item.bytes;
    }
    FAIL("no activations");
    return 0.0;
  };
  const MemoryBreakdown none = check_memory(kept).memory;
  CHECK(activations(none) == Approx(8 * saved));
  CHECK(none.host_bytes_per_rank == 0);
  for (const int n : {1, 5, 7}) {
    INFO(n << " layers offloaded");
    const StepOutcome outcome = check_memory(offloading(n));
    CHECK(activations(outcome.memory) == Approx((8 - n + 1) * saved));
    CHECK(outcome.memory.host_bytes_per_rank == Approx(n * saved));
    CHECK(outcome.memory.host_bytes_per_node == Approx(8 * n * saved));
  }
  // A host too small for the node's offloaded layers refuses the layout.
  StepInputs small_host = offloading(5);
  small_host.node.host_memory_capacity_bytes = 8 * 5 * saved * 0.99;
  const StepOutcome refused = simulate_step(small_host);
  CHECK(refused.memory.gpu_fits());
  CHECK_FALSE(refused.memory.fits());
  CHECK_FALSE(refused.simulated);
}

TEST_CASE("activation offload: the copies cross each GPU's PCIe link and the host's memory") {
  const StepInputs in = offloading(5);
  const double saved = layer_saved_bytes(in.model, in.training, in.plan);
  const double one_way = 2 * 5 * saved;  // two micro-batches of five layers
  for (const bool fold : {false, true}) {
    INFO("fold " << fold);
    StepOptions options;
    options.fold = fold;
    const StepOutcome offloaded = simulate_step(in, options);
    REQUIRE(offloaded.simulated);
    std::map<std::string, double> carried;
    for (const LinkUsage& link : offloaded.step.links) carried[link.name] = link.bytes;
    CHECK(carried["n0.gpu0->n0.pcie0"] == Approx(one_way));  // one node: no NIC traffic
    CHECK(carried["n0.pcie0->n0.gpu0"] == Approx(one_way));
    CHECK(carried["n0.host->n0.memory"] == Approx(8 * 2 * one_way));
    // The copies only add time: the same kernels run, some waiting for a copy.
    const StepOutcome kept = simulate_step(offloading(0), options);
    CHECK(offloaded.step.step_time_s >= kept.step.step_time_s);
    CHECK(offloaded.step.hardware_flops == Approx(kept.step.hardware_flops));
  }
}
