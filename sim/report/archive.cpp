// A variant's results as bytes (Boost.Serialization's binary archive) and back: what one rank
// of a distributed sweep sends rank 0. Binary archives keep every double's bits, so rank 0
// renders what a single process would have; they are read by the same build that wrote them.
#include <boost/archive/binary_iarchive.hpp>
#include <boost/archive/binary_oarchive.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <variant>

#include "sim/engine/errors.hpp"
#include "sim/report/report.hpp"
#include "workloads/layout/dimensions.hpp"

namespace boost::serialization {

// Every field of a struct through the archive, in order (one call, where `a & x & y` would read
// to clang-format as declarations).
template <class Archive, class... Fields>
void fields(Archive& a, Fields&... field) {
  (a & ... & field);
}

// Boost 1.74 has boost::optional's, not std::optional's: a flag, then the value.
template <class Archive, class T>
void save(Archive& archive, const std::optional<T>& value, unsigned) {
  const bool present = value.has_value();
  archive << present;
  if (present) archive << *value;
}
template <class Archive, class T>
void load(Archive& archive, std::optional<T>& value, unsigned) {
  bool present = false;
  archive >> present;
  if (!present) {
    value.reset();
    return;
  }
  T loaded{};
  archive >> loaded;
  value = std::move(loaded);
}
template <class Archive, class T>
void serialize(Archive& archive, std::optional<T>& value, unsigned version) {
  split_free(archive, value, version);
}

template <class Archive>
void save(Archive& archive, const fleetsim::SimTime& time, unsigned) {
  const std::int64_t ns = time.ns();
  archive << ns;
}
template <class Archive>
void load(Archive& archive, fleetsim::SimTime& time, unsigned) {
  std::int64_t ns = 0;
  archive >> ns;
  time = fleetsim::SimTime::from_ns(ns);
}
template <class Archive>
void serialize(Archive& archive, fleetsim::SimTime& time, unsigned version) {
  split_free(archive, time, version);
}

template <class Archive>
void serialize(Archive& a, fleetsim::LinkUsage& l, unsigned) {
  fields(a, l.name, l.kind, l.capacity_bytes_per_s, l.bytes, l.utilisation);
}
template <class Archive>
void serialize(Archive& a, fleetsim::StepBreakdown& b, unsigned) {
  fields(a, b.compute_s, b.exposed_comm_s, b.idle_s);
  for (const fleetsim::ExposedPart& part : fleetsim::kExposedParts) a&(b.*part.seconds);
}
template <class Archive>
void serialize(Archive& a, fleetsim::TraceSlice& t, unsigned) {
  fields(a, t.rank, t.stream, t.name, t.begin, t.end, t.flops, t.bytes, t.sms_held, t.op, t.group,
         t.algorithm, t.peer, t.sends, t.transfer, t.collective);
}
template <class Archive>
void serialize(Archive& a, fleetsim::StepResult::CommLoad& c, unsigned) {
  fields(a, c.rank, c.at, c.sms_held, c.hbm_bytes_per_s);
}
template <class Archive>
void serialize(Archive& a, fleetsim::StepResult::LinkLoad& l, unsigned) {
  fields(a, l.link, l.at, l.bytes_per_s);
}
template <class Archive>
void serialize(Archive& a, fleetsim::StepResult::MemoryInUse& m, unsigned) {
  fields(a, m.rank, m.at, m.saved_layers, m.state_bytes, m.activation_bytes);
}
template <class Archive>
void serialize(Archive& a, fleetsim::StepResult& r, unsigned) {
  fields(a, r.step_time_s, r.breakdown, r.tokens_per_s, r.model_flops, r.hardware_flops, r.mfu,
         r.hfu, r.comm_bytes_per_gpu, r.events, r.replayed_ranks, r.links, r.trace,
         r.trace_comm_load, r.trace_link_load, r.trace_memory);
}
template <class Archive>
void serialize(Archive& a, fleetsim::MemoryItem& m, unsigned) {
  fields(a, m.name, m.bytes, m.basis, m.moment);
}
template <class Archive>
void serialize(Archive& a, fleetsim::MemoryBreakdown& m, unsigned) {
  fields(a, m.items, m.peak, m.total_bytes, m.allocator_gap_bytes, m.activation_layers,
         m.capacity_bytes, m.host_bytes_per_rank, m.host_bytes_per_node, m.host_capacity_bytes);
}
template <class Archive>
void serialize(Archive& a, fleetsim::StepOutcome& o, unsigned) {
  fields(a, o.step, o.memory, o.warnings, o.simulated);
}
template <class Archive>
void serialize(Archive& a, fleetsim::InterruptionCause& c, unsigned) {
  fields(a, c.name, c.per_gpu_day, c.source, c.nodes_out, c.per_gpu_day_sigma);
}
template <class Archive>
void serialize(Archive& a, fleetsim::CheckpointPolicy& p, unsigned) {
  fields(a, p.kind, p.value);
}
template <class Archive>
void serialize(Archive& a, fleetsim::SpotCapacity& s, unsigned) {
  fields(a, s.preemptions_per_node_hour, s.source, s.notice_s, s.capacity_return_s, s.trace_s);
}
template <class Archive>
void serialize(Archive& a, fleetsim::Degradation& d, unsigned) {
  fields(a, d.name, d.kind, d.fraction, d.per_gpu_day, d.source);
}
template <class Archive>
void serialize(Archive& a, fleetsim::DegradedStep& d, unsigned) {
  fields(a, d.degradation, d.step_s);
}
template <class Archive>
void serialize(Archive& a, fleetsim::JobSpec& j, unsigned) {
  fields(a, j.steps, j.step_s, j.jitter_factor, j.gpus, j.nodes, j.checkpoint_write_s, j.write,
         j.checkpoint_copy_s, j.peer_copy_s, j.peer_restore_s, j.persist_every_s, j.restore_s,
         j.detection_s, j.restart_s, j.causes, j.policy, j.spot, j.node_repair_s, j.hot_spares,
         j.when_short, j.replicas, j.shrunk_step_s, j.degradations, j.evict_degraded_after_s,
         j.tokens_per_step, j.usd_per_gpu_hour);
}
template <class Archive>
void serialize(Archive& a, fleetsim::JobReplication& r, unsigned) {
  fields(a, r.wall_s, r.interruptions, r.preemptions, r.checkpoints, r.emergency_checkpoints,
         r.memory_lost, r.lost_training_s, r.checkpoint_stall_s, r.node_wait_s, r.shrunk_s,
         r.regrows, r.degraded_s, r.evictions);
}
template <class Archive>
void serialize(Archive& a, fleetsim::SampleSummary& s, unsigned) {
  fields(a, s.mean, s.ci99_half_width, s.p50, s.p90, s.p99);
}
template <class Archive>
void serialize(Archive& a, fleetsim::JobResult& r, unsigned) {
  fields(a, r.interval_steps, r.mtbf_s, r.useful_s, r.replications, r.wall_s, r.goodput,
         r.interruptions, r.preemptions, r.lost_gpu_hours, r.node_wait_s, r.shrunk_s, r.regrows,
         r.degraded_s, r.evictions, r.memory_lost, r.cost_usd, r.usd_per_million_tokens,
         r.usd_per_checkpoint);
}
// A layout, dimension by dimension (workloads/layout/dimensions.hpp), each as its value's type.
template <class Archive>
void save(Archive& a, const fleetsim::ParallelPlan& p, unsigned) {
  for (const fleetsim::LayoutDimension& dimension : fleetsim::layout_dimensions()) {
    std::visit([&a](const auto& value) { a << value; }, dimension.get(p));
  }
}
template <class Archive>
void load(Archive& a, fleetsim::ParallelPlan& p, unsigned) {
  for (const fleetsim::LayoutDimension& dimension : fleetsim::layout_dimensions()) {
    fleetsim::DimensionValue value = dimension.get(p);  // of the type the dimension holds
    std::visit([&a](auto& held) { a >> held; }, value);
    dimension.set(p, value);
  }
}
template <class Archive>
void serialize(Archive& a, fleetsim::ParallelPlan& p, unsigned version) {
  split_free(a, p, version);
}

}  // namespace boost::serialization

namespace fleetsim {

// What every archive starts with: bytes that are not one are refused before Boost reads a
// length out of them (and would try to allocate it).
constexpr std::string_view kMagic = "fleetsim results 1\n";

std::string results_to_bytes(const RunReport& report, const std::vector<std::size_t>& indices) {
  std::ostringstream bytes(std::ios::binary);
  bytes << kMagic;
  {
    boost::archive::binary_oarchive archive(bytes);
    const std::size_t count = indices.size();
    archive << count;
    // What a variant's simulation adds to the scenario's inputs: a re-planned point's layout
    // and micro-batch, the step's outcome, and a run's job and Monte Carlo.
    for (std::size_t index : indices) {
      const VariantReport& variant = report.variants.at(index);
      archive << index << variant.inputs.plan << variant.inputs.training.micro_batch
              << variant.outcome << variant.job << variant.job_result;
    }
  }
  return bytes.str();
}

std::vector<std::size_t> results_from_bytes(const std::string& bytes, RunReport& report) {
  if (!bytes.starts_with(kMagic)) {
    throw ModelError("cannot read variants' results back: not fleetsim's results archive");
  }
  std::vector<std::size_t> indices;
  try {
    std::istringstream in(bytes.substr(kMagic.size()), std::ios::binary);
    boost::archive::binary_iarchive archive(in);
    std::size_t count = 0;
    archive >> count;
    for (std::size_t i = 0; i < count; ++i) {
      std::size_t index = 0;
      archive >> index;
      if (index >= report.variants.size()) {
        throw ModelError("variant " + std::to_string(index) + " of " +
                         std::to_string(report.variants.size()));
      }
      indices.push_back(index);
      VariantReport& variant = report.variants[index];
      archive >> variant.inputs.plan >> variant.inputs.training.micro_batch >> variant.outcome >>
          variant.job >> variant.job_result;
    }
  } catch (const std::exception& error) {
    throw ModelError(std::string("cannot read variants' results back: ") + error.what());
  }
  return indices;
}

}  // namespace fleetsim
