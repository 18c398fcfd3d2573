// A trace's counters: the memory a traced rank holds as its passes' layers save and free their
// tensors, and the load on its links, checked against the memory model and the bytes the links
// carried.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "common/small_job.hpp"
#include "sim/step/step_executor.hpp"
#include "workloads/memory_model.hpp"

using namespace fleetsim;
using fleetsim::testing::small_job;

namespace {

// The pipelined small job (4 stages of 2 layers), `vpp` chunks a stage (2: of one layer each).
StepInputs pipelined(PipelineSchedule schedule, int vpp, int microbatch_group) {
  StepInputs in = testing::pipelined_job(schedule);
  in.plan.vpp = vpp;
  in.plan.microbatch_group = microbatch_group;
  return in;
}

double activations_item(const MemoryBreakdown& memory) {
  for (const MemoryItem& item : memory.items) {
    if (item.name == kActivationsItem) return item.bytes;
  }
  FAIL("no activations item");
  return 0;
}

}  // namespace

TEST_CASE("trace memory: the layers a stage holds peak where the memory model counts them") {
  // The replay's saved layers come from the schedule as it ran (a layer's forward takes its
  // tensors, its backward frees them); the memory model counts the passes in flight from the
  // schedule's shape (1F1B: pp - stage; GPipe: all m; interleaved: the warm-up plus one, whose
  // length the micro-batches a chunk runs in a row set: pp by default, here also all 8). They
  // must agree, and every layer taken must be freed by the step's end. The counter's bytes:
  // each layer its share of the model's activations item, beside the rest of the peak but
  // what is held at one moment only.
  struct Case {
    PipelineSchedule schedule;
    int vpp;
    int microbatch_group;
  };
  for (const Case c :
       {Case{PipelineSchedule::one_f_one_b, 1, 0}, Case{PipelineSchedule::gpipe, 1, 0},
        Case{PipelineSchedule::one_f_one_b, 2, 0}, Case{PipelineSchedule::one_f_one_b, 2, 8}}) {
    CAPTURE(to_string(c.schedule), c.vpp, c.microbatch_group);
    const StepInputs in = pipelined(c.schedule, c.vpp, c.microbatch_group);
    StepOptions options;
    options.trace_ranks = 4;  // the first rank of each stage: 0, 2, 4, 6
    const StepOutcome out = simulate_step(in, options);
    REQUIRE(out.simulated);
    std::map<int, int> most, last;
    std::map<int, double> most_bytes, state;
    SimTime previous{};
    for (const StepResult::MemoryInUse& sample : out.step.trace_memory) {
      CHECK(sample.at >= previous);
      previous = sample.at;
      CHECK(sample.saved_layers >= 0);
      most[sample.rank] = std::max(most[sample.rank], sample.saved_layers);
      most_bytes[sample.rank] = std::max(most_bytes[sample.rank], sample.activation_bytes);
      last[sample.rank] = sample.saved_layers;
      if (state.contains(sample.rank)) CHECK(sample.state_bytes == state[sample.rank]);
      state[sample.rank] = sample.state_bytes;
    }
    REQUIRE(most.size() == 4);
    for (int stage = 0; stage < 4; ++stage) {
      const int rank = 2 * stage;
      CAPTURE(stage);
      CHECK(last[rank] == 0);
      CHECK(most[rank] == in_flight(in.model, in.training, in.plan, stage).layers);
      const MemoryBreakdown memory =
          estimate_stage_memory(in.model, in.training, in.plan, memory_device(in), stage);
      CHECK(most_bytes[rank] == Approx(activations_item(memory)).epsilon(1e-12));
      double moment = 0;  // the larger of the items held at one moment only
      for (const MemoryItem& item : memory.items) {
        if (item.moment != MemoryMoment::all_along) moment = std::max(moment, item.bytes);
      }
      CHECK(state[rank] ==
            Approx(memory.total_bytes - activations_item(memory) - moment).epsilon(1e-12));
    }
    // The fullest stage's peak is the step's memory verdict's.
    CHECK(most_bytes[0] == Approx(activations_item(out.memory)).epsilon(1e-12));
  }
}

TEST_CASE("trace links: a traced GPU's link loads stay within capacity and sum to its bytes") {
  // ZeRO-3 over two nodes: the traced GPU's NVLink port and its NIC's fabric links carry the
  // gathers and reductions. Each link's load, held from one sample to the next, integrates to
  // the bytes the step reports it carried, and a little more: a flow ends at the first whole
  // nanosecond its bytes are through, so each adds under a nanosecond of its rate (the links'
  // few thousand flows, at most some 10^-5 of what they carry).
  StepInputs in = small_job();
  in.nodes = 2;
  in.plan.dp = 16;
  StepOptions options;
  options.trace_rank_list = {0};
  const StepOutcome out = simulate_step(in, options);
  REQUIRE(out.simulated);
  const StepResult& step = out.step;
  REQUIRE_FALSE(step.trace_link_load.empty());
  std::map<int, std::pair<SimTime, double>> held;  // by link: since when, at what load
  std::map<int, double> integral;
  bool nvlink = false, fabric = false;
  for (const StepResult::LinkLoad& load : step.trace_link_load) {
    const LinkUsage& link = step.links.at(load.link);
    nvlink |= link.kind == "nvlink";
    fabric |= link.kind == "infiniband";
    const double usable = link.capacity_bytes_per_s * in.gpu.link_efficiency.at(link.kind).value;
    CHECK(load.bytes_per_s >= 0);
    CHECK(load.bytes_per_s <= usable * (1 + 1e-9));
    if (const auto before = held.find(load.link); before != held.end()) {
      CHECK(load.at > before->second.first);  // one sample an instant
      integral[load.link] += before->second.second * (load.at - before->second.first).seconds();
    }
    held[load.link] = {load.at, load.bytes_per_s};
  }
  CHECK(nvlink);
  CHECK(fabric);
  for (const auto& [link, last] : held) {
    const LinkUsage& usage = step.links[link];
    CAPTURE(usage.name);
    CHECK(last.second == 0);  // every flow done by the step's end
    CHECK(integral[link] >= usage.bytes * (1 - 1e-12));
    CHECK(integral[link] <= usage.bytes * (1 + 1e-5));
  }
}
