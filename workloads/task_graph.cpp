#include "workloads/task_graph.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "sim/engine/errors.hpp"
#include "sim/engine/stop.hpp"
#include "workloads/layout/sharding.hpp"
#include "workloads/lora_ops.hpp"
#include "workloads/memory_model.hpp"
#include "workloads/precision.hpp"
#include "workloads/program_builder.hpp"
#include "workloads/stage_units.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {

TaskIndex Program::add(std::string_view name, Stream stream,
                       std::variant<ComputeWork, CollectiveWork, HostWork> work,
                       std::span<const TaskIndex> deps) {
  Storage& kept = storage();
  const std::span<const char> kept_name = kept.names.add(name);
  tasks_.push_back(
      Task{{kept_name.data(), kept_name.size()}, kept.deps.add(deps), stream, std::move(work)});
  return static_cast<TaskIndex>(tasks_.size() - 1);
}

void Program::mark_saved_layers(TaskIndex task, int change) {
  if (task >= tasks_.size() || (!saved_layers_.empty() && task <= saved_layers_.back().task)) {
    throw ModelError("saved layers marked out of program order");
  }
  saved_layers_.push_back({task, change});
}

const Kernel* Program::kernel(const Kernel& kernel) {
  auto [at, added] = storage().kernels.try_emplace(kernel);
  if (added) at->second = std::make_unique<const Kernel>(kernel);
  return at->second.get();
}

Program::Storage& Program::storage() {
  if (!storage_) storage_ = std::make_shared<Storage>();
  return *storage_;
}

namespace {

// Optimizer offload, as DeepSpeed's ZeRO-Offload moves a reduced bucket of `parameters` of the
// rank's shard to host memory once `after` is done. ZeRO-3 copies it in the reduction's dtype
// and the CPU adds it into the FP32 gradients kept there (writes them, the first time); ZeRO-1
// and 2 copy it as FP32, and accumulate a later micro-batch's through the GPU: the sum so far
// comes back, is added there (a negligible kernel, left out) and goes out again.
// An all-gather of `parameters` of a unit's: the dense ones over the data group and, under
// expert parallelism, the rank's experts among them over the replicas holding them (where
// another does: torchtitan's FSDP of experts), one after the other on the in-order gather
// stream, so the last returned ends both.
TaskIndex gather_unit_parameters(ProgramBuilder& build, const Sharding& sharding,
                                 const std::string& name, const Unit& unit, double parameters,
                                 const std::vector<TaskIndex>& deps) {
  const double experts = std::min(parameters, unit.experts);
  const TaskIndex dense = build.collective(name, CollectiveOp::all_gather,
                                           unit.gathered_bytes(parameters - experts), deps);
  if (experts <= 0 || sharding.expert_ranks() == 1) return dense;
  return build.collective(name + ".experts", CollectiveOp::all_gather, unit.gathered_bytes(experts),
                          deps, GroupKind::expert_data);
}

void offload_gradients(ProgramBuilder& build, const ParallelPlan& plan,
                       const TrainingSpec& training, const std::string& name, TaskIndex after,
                       double parameters, bool first) {
  if (!plan.offload_optimizer) return;
  if (Sharding(plan).parameters_sharded()) {
    const double bytes = parameters * training.grad_reduce_bytes;
    const TaskIndex copy = build.host(name + ".to_host", {HostOp::copy_to_host, bytes, 0}, {after});
    const double fp32_bytes = (first ? 1 : 2) * kFp32Bytes * parameters;
    build.host(name + ".accumulate", {HostOp::cpu, bytes + fp32_bytes, 0}, {copy});
    return;
  }
  const double bytes = kFp32Bytes * parameters;
  if (!first) {
    after = build.host(name + ".sum_to_gpu", {HostOp::copy_to_gpu, bytes, 0}, {after});
  }
  build.host(name + ".to_host", {HostOp::copy_to_host, bytes, 0}, {after});
}

// Groups units, from the last to the first (the order their gradients become ready), into
// buckets of at least `bucket_bytes` of gradients, as PyTorch DDP does. A bucket is ready when
// the backward of its lowest unit, the last of it to run, is done. Frozen units (no trainable
// parameters) have no gradients and close no bucket. `part` picks what of a unit the buckets
// hold: its dense parameters, or its experts under expert parallelism (reduced by another
// group).
struct Bucket {
  std::size_t ready_after_unit;
  double bytes;
};
template <typename Part>
std::vector<Bucket> gradient_buckets(const std::vector<Unit>& units, double bytes_per_parameter,
                                     double bucket_bytes, Part part) {
  std::vector<Bucket> buckets;
  double pending = 0;
  std::size_t lowest = 0;  // the last unit with gradients added to the pending bucket
  for (std::size_t i = units.size(); i-- > 0;) {
    if (part(units[i]) <= 0) continue;
    pending += part(units[i]) * bytes_per_parameter;
    lowest = i;
    if (pending >= bucket_bytes) {
      buckets.push_back({i, pending});
      pending = 0;
    }
  }
  if (pending > 0) buckets.push_back({lowest, pending});
  return buckets;
}

// A unit's ops cut at its experts' all-to-alls, for a merged pass: segments[k] runs before
// exchanges[k], the last segment after the last exchange (any segment may be empty).
struct ExchangeCuts {
  std::vector<std::vector<Op>> segments{{}};
  std::vector<Op> exchanges;
};
ExchangeCuts cut_at_exchanges(const std::vector<Op>& ops) {
  ExchangeCuts cuts;
  for (const Op& op : ops) {
    if (op.collective && is_expert_exchange(*op.collective)) {
      cuts.exchanges.push_back(op);
      cuts.segments.emplace_back();
    } else {
      cuts.segments.back().push_back(op);
    }
  }
  return cuts;
}

// One micro-batch's forward and backward, with the collectives the ZeRO stage needs.
class MicroBatchBuilder {
 public:
  MicroBatchBuilder(ProgramBuilder& build, const std::vector<Unit>& units,
                    const TrainingSpec& training, const ParallelPlan& plan)
      : build_(&build), units_(&units), training_(&training), plan_(&plan) {
    plan_offload_windows();
    if (plan.ep_comm_overlap) {
      for (const Unit& u : units) {
        forward_cuts_.push_back(cut_at_exchanges(u.ops.forward));
        backward_cuts_.push_back(cut_at_exchanges(u.ops.backward));
      }
    }
  }

  const std::vector<Unit>& units() const { return *units_; }
  // Unit u's ops cut at its all-to-alls, for a merged pass (ep_comm_overlap only).
  const ExchangeCuts& forward_cuts(std::size_t u) const { return forward_cuts_[u]; }
  const ExchangeCuts& backward_cuts(std::size_t u) const { return backward_cuts_[u]; }

  // Micro-batch mb's forward over the units, its first op after `entry`; returns its last task.
  TaskIndex forward(int mb, const std::vector<TaskIndex>& entry) {
    begin_forward(mb);
    for (std::size_t u = 0; u < count(); ++u) forward_unit(u, entry);
    return forward_end();
  }
  TaskIndex forward_end() const { return forward_end_.back(); }
  // A forward unit by unit (a merged pass runs two passes' units in turn): begin_forward, then
  // each unit in order, whole (forward_unit) or, by a caller that cuts its ops, what its first
  // op waits for (forward_deps) and forward_done with the last of them.
  void forward_unit(std::size_t u, const std::vector<TaskIndex>& entry) {
    forward_done(u, build_->ops(forward_tag_ + unit(u).name + ".", unit(u).ops.forward,
                                forward_deps(u, entry)));
  }
  void begin_forward(int mb) {
    forward_tag_ = "mb" + std::to_string(mb) + ".";
    forward_end_.assign(count(), 0);
    copied_out_.assign(group_unit_.size(), 0);
  }
  const std::string& forward_tag() const { return forward_tag_; }
  // With sharded parameters each unit is all-gathered before its forward; the gather of unit u
  // waits until unit u - kFsdpUnitsGathered has finished, so at most that many are gathered.
  std::vector<TaskIndex> forward_deps(std::size_t u, const std::vector<TaskIndex>& entry) {
    std::vector<TaskIndex> deps;
    if (u < parameter_gathers_.size() && parameter_gathers_[u]) {
      deps.push_back(*parameter_gathers_[u]);
      parameter_gathers_[u].reset();  // later micro-batches follow in compute-stream order
    }
    if (sharded()) {
      std::optional<TaskIndex> after;
      if (u >= kFsdpUnitsGathered) after = forward_end_[u - kFsdpUnitsGathered];
      deps.push_back(gather(u, /*forward=*/true, after));
    }
    if (u == 0) deps.insert(deps.end(), entry.begin(), entry.end());
    if (copies_fsdp2()) deps = {copy_out(u, /*forward=*/true, std::move(deps))};
    if (u > 0 && window_ending_at(u - 1) >= 0) {
      deps.push_back(copied_out_[window_ending_at(u - 1)]);
    }
    return deps;
  }
  void forward_done(std::size_t u, TaskIndex end) {
    forward_end_[u] = end;
    if (unit(u).layer >= 0) build_->mark_saved_layers(end, 1);
    if (unit(u).layer == 0 && !group_unit_.empty()) {
      copied_out_[0] = copy_activations(0, HostOp::copy_to_host, {end});
    }
    const int ending = window_ending_at(u);
    if (ending >= 0 && ending + 1 < static_cast<int>(group_unit_.size())) {
      copied_out_[ending + 1] =
          copy_activations(ending + 1, HostOp::copy_to_host, {end, copied_out_[ending]});
    }
  }
  // The step's first forward of each unit waits for its gathered parameters
  // (overlap_param_gather): by unit, the gather, if any.
  void set_parameter_gathers(std::vector<std::optional<TaskIndex>> gathers) {
    parameter_gathers_ = std::move(gathers);
  }

  // Micro-batch mb's backward, last unit first, after `entry`; returns its last task.
  // `last_reduction` is set when gradients were reduced. Under optimizer offload each reduced
  // shard goes to host memory (`first_reduction`: the step's first of it).
  TaskIndex backward(int mb, bool reduce_gradients, bool first_reduction,
                     const std::vector<TaskIndex>& entry,
                     std::optional<TaskIndex>& last_reduction) {
    begin_backward(mb, reduce_gradients, first_reduction);
    for (std::size_t u = count(); u-- > 0;) backward_unit(u, entry, last_reduction);
    return end_backward(last_reduction);
  }
  // A backward unit by unit, last unit first, as the forward (begin_backward, then each unit
  // whole, or for each that does not skip it backward_deps, its ops, backward_done;
  // end_backward returns where the backward ends). With sharded parameters each unit is
  // gathered again (FSDP reshards after the forward pass), the next one prefetched while the
  // current one computes.
  void backward_unit(std::size_t u, const std::vector<TaskIndex>& entry,
                     std::optional<TaskIndex>& last_reduction) {
    if (skip_frozen_backward(u)) return;
    backward_done(u,
                  build_->ops(backward_tag_ + unit(u).name + ".", unit(u).ops.backward,
                              backward_deps(u, entry)),
                  last_reduction);
  }
  void begin_backward(int mb, bool reduce_gradients, bool first_reduction) {
    backward_tag_ = "mb" + std::to_string(mb) + ".";
    reduce_gradients_ = reduce_gradients;
    first_reduction_ = first_reduction;
    const std::size_t n = count();
    backward_end_.assign(n, 0);
    regathered_.assign(n, 0);
    const double grad_bytes = training_->grad_reduce_bytes;
    // Dense gradients over every replica; under expert parallelism the experts' over the
    // replicas that hold them, in buckets of their own.
    buckets_.clear();
    expert_buckets_.clear();
    if (reduce_gradients && !sharded()) {
      buckets_ = gradient_buckets(*units_, grad_bytes, plan_->bucket_bytes,
                                  [](const Unit& u) { return u.dense_trainable(); });
      // With one rank holding each expert (expert_gradient_ranks 1) there is nothing to reduce.
      if (Sharding(*plan_).expert_ranks() > 1) {
        expert_buckets_ = gradient_buckets(*units_, grad_bytes, plan_->bucket_bytes,
                                           [](const Unit& u) { return u.expert_trainable; });
      }
    }
    next_bucket_ = 0;
    next_expert_bucket_ = 0;
    copied_back_.assign(group_unit_.size(), 0);
    if (sharded()) regather(n - 1);
  }
  const std::string& backward_tag() const { return backward_tag_; }
  // A frozen embedding: nothing to gather or compute, the layer above ended the backward.
  bool skip_frozen_backward(std::size_t u) {
    if (!unit(u).ops.backward.empty()) return false;
    backward_end_[u] = backward_end_[u + 1];
    return true;
  }
  // What unit u's backward waits for (`entry` for the first, the last unit), its recomputed
  // forward run.
  std::vector<TaskIndex> backward_deps(std::size_t u, const std::vector<TaskIndex>& entry) {
    const std::size_t n = count();
    if (sharded() && u >= 1 && !unit(u - 1).ops.backward.empty()) regather(u - 1);
    std::vector<TaskIndex> deps;
    if (sharded()) deps.push_back(regathered_[u]);
    if (u + 1 == n) deps.insert(deps.end(), entry.begin(), entry.end());
    if (copies_fsdp2()) deps = {copy_out(u, /*forward=*/false, std::move(deps))};
    if (unit(u).recomputed) {
      deps.push_back(build_->ops(backward_tag_ + unit(u).name + ".recompute.", unit(u).ops.forward,
                                 deps, /*recomputed=*/true));
    }
    // As layer w(k)'s backward starts (its commit's backward), group k's copy back starts,
    // and the layer waits for group k + 1's.
    if (const int ending = window_ending_at(u); ending >= 0 && u + 1 < n) {
      copied_back_[ending] = copy_activations(ending, HostOp::copy_to_gpu, {backward_end_[u + 1]});
      if (ending + 1 < static_cast<int>(group_unit_.size())) {
        deps.push_back(copied_back_[ending + 1]);
      }
    }
    if (unit(u).offloaded_bytes > 0) deps.push_back(copied_back_[unit(u).layer]);
    return deps;
  }
  // Unit u's backward ended at `end`: its saved tensors freed, its gradients reduced.
  void backward_done(std::size_t u, TaskIndex end, std::optional<TaskIndex>& last_reduction) {
    backward_end_[u] = end;
    if (unit(u).layer >= 0) build_->mark_saved_layers(end, -1);
    if (!reduce_gradients_ || unit(u).trainable <= 0) return;
    const std::string& tag = backward_tag_;
    const bool first = first_reduction_;
    if (sharded()) {
      const TaskIndex ready = copies_fsdp2() ? copy_in(u, end, last_reduction) : end;
      last_reduction = reduce(tag + unit(u).name + ".reduce_scatter", CollectiveOp::reduce_scatter,
                              unit(u).dense_trainable(), ready, first);
      // Its experts' gradients over the replicas holding them, if any other does.
      if (unit(u).expert_trainable > 0 && Sharding(*plan_).expert_ranks() > 1) {
        last_reduction =
            reduce(tag + unit(u).name + ".reduce_scatter.experts", CollectiveOp::reduce_scatter,
                   unit(u).expert_trainable, ready, first, GroupKind::expert_data);
      }
      return;
    }
    const CollectiveOp op = Sharding(*plan_).reduces_by_scatter() ? CollectiveOp::reduce_scatter
                                                                  : CollectiveOp::all_reduce;
    const double grad_bytes = training_->grad_reduce_bytes;
    if (next_bucket_ < buckets_.size() && buckets_[next_bucket_].ready_after_unit == u) {
      reduce_bucket(tag + "bucket" + std::to_string(next_bucket_) + "." + to_string(op), op,
                    buckets_[next_bucket_].bytes / grad_bytes, end, first, last_reduction);
      ++next_bucket_;
    }
    if (next_expert_bucket_ < expert_buckets_.size() &&
        expert_buckets_[next_expert_bucket_].ready_after_unit == u) {
      reduce_bucket(
          tag + "expert_bucket" + std::to_string(next_expert_bucket_) + "." + to_string(op), op,
          expert_buckets_[next_expert_bucket_].bytes / grad_bytes, end, first, last_reduction,
          GroupKind::expert_data);
      ++next_expert_bucket_;
    }
  }
  // FSDP2's root post-backward makes the compute stream wait for the last reduce-scatter at
  // the end of every backward: what follows on it starts after that.
  TaskIndex end_backward(const std::optional<TaskIndex>& last_reduction) const {
    if (copies_fsdp2() && reduce_gradients_ && last_reduction) return *last_reduction;
    return backward_end_[0];
  }
  // The gradient buckets the backward held back (without overlap_grad_reduce; FSDP under a
  // pipeline), reduced after `after` (the end of the stage's schedule), in the order they were
  // filled.
  void reduce_held_back(TaskIndex after, std::optional<TaskIndex>& last_reduction) {
    for (const HeldBack& bucket : held_back_) {
      last_reduction = reduce(bucket.name, bucket.op, bucket.parameters, after,
                              bucket.first_reduction, bucket.group);
    }
    held_back_.clear();
  }

 private:
  bool sharded() const { return Sharding(*plan_).parameters_sharded(); }

  // Activation offload as Transformer Engine's AsyncDoubleBufferGroupOffloadHandler runs it
  // (cpu_offload.py): one copy at a time, offloaded layer i's copy out starting after layer
  // 0's forward (i = 0) or at the end of layer w(i - 1)'s, and the forward after layer w(i)
  // waiting for it to end (its GPU tensors freed there); in backward its copy back starting
  // as layer w(i)'s backward starts, its own backward and layer w(i - 1)'s waiting for it. Its
  // layer_window_map, of L layers of which N offloaded: w(i) = (L / N) (i + 1) - 1, plus i + 1 for
  // the first L % N, else L % N.
  void plan_offload_windows() {
    int layers = 0, offloaded = 0;
    for (const Unit& u : *units_) {
      if (u.layer >= 0) ++layers;
      if (u.offloaded_bytes > 0) ++offloaded;
    }
    window_group_.assign(layers, -1);
    group_unit_.clear();
    for (std::size_t u = 0; u < count(); ++u) {
      if (unit(u).offloaded_bytes > 0) group_unit_.push_back(u);
    }
    for (int i = 0; i < offloaded; ++i) {
      const int extra = i < layers % offloaded ? i + 1 : layers % offloaded;
      window_group_[(layers / offloaded) * (i + 1) - 1 + extra] = i;
    }
  }
  // The offloaded group whose window ends at unit u (a decoder layer), or -1.
  int window_ending_at(std::size_t u) const {
    return unit(u).layer >= 0 ? window_group_[unit(u).layer] : -1;
  }
  TaskIndex copy_activations(int group, HostOp op, std::vector<TaskIndex> deps) {
    const Unit& offloaded = unit(group_unit_[group]);
    return build_->activation_copy(op == HostOp::copy_to_host
                                       ? forward_tag_ + offloaded.name + ".offload"
                                       : backward_tag_ + offloaded.name + ".reload",
                                   op, offloaded.offloaded_bytes, std::move(deps));
  }

  // FSDP2's copies around the sharded units' collectives (copy_out, copy_in).
  bool copies_fsdp2() const { return sharded() && plan_->fsdp2; }
  std::size_t count() const { return units_->size(); }
  const Unit& unit(std::size_t u) const { return (*units_)[u]; }

  // A bucket's reduction after the unit's backward, or held back until the schedule's end
  // (without overlap_grad_reduce; FSDP under a pipeline).
  void reduce_bucket(const std::string& name, CollectiveOp op, double parameters, TaskIndex after,
                     bool first_reduction, std::optional<TaskIndex>& last_reduction,
                     GroupKind group = GroupKind::data) {
    if (!Sharding(*plan_).holds_back_reductions()) {
      last_reduction = reduce(name, op, parameters, after, first_reduction, group);
    } else {
      held_back_.push_back({name, op, parameters, group, first_reduction});
    }
  }

  // A gradient reduction of `parameters` (before sharding) after the unit's backward. Offloaded,
  // the rank's shard then goes to the host; reductions alternate between two buffers, so one
  // first waits for the copy out of the reduction two before it.
  TaskIndex reduce(const std::string& name, CollectiveOp op, double parameters, TaskIndex after,
                   bool first_reduction, GroupKind group = GroupKind::data) {
    std::vector<TaskIndex> deps{after};
    if (const auto copy = build_->copy_before_last()) deps.push_back(*copy);
    const TaskIndex reduction =
        build_->collective(name, op, parameters * training_->grad_reduce_bytes, deps, group);
    offload_gradients(*build_, *plan_, *training_, name, reduction,
                      parameters / plan_->gradient_ranks(), first_reduction);
    return reduction;
  }

  // A unit's ZeRO-3 gather, whole (gather_unit_parameters).
  TaskIndex gather(std::size_t u, bool forward, std::optional<TaskIndex> after) {
    std::vector<TaskIndex> deps;
    if (after) deps.push_back(*after);
    return gather_unit_parameters(*build_, Sharding(*plan_),
                                  pass_prefix(u, forward) + ".all_gather", unit(u),
                                  unit(u).parameters, deps);
  }

  // FSDP2 (PyTorch's fully_shard, _fsdp_collectives.py) on the compute stream: a gathered unit
  // is copied out of the all-gather's buffer into its parameters (split_with_sizes_copy: its
  // BF16 parameters read and written) before the unit computes, in forward and again in
  // backward.
  TaskIndex copy_out(std::size_t u, bool forward, std::vector<TaskIndex> deps) {
    const double bytes = 2 * unit(u).gathered_bytes(unit(u).parameters);
    return build_->compute(pass_prefix(u, forward) + ".copy_out", memory_op("copy_out", bytes),
                           std::move(deps));
  }
  // And a unit's BF16 gradients are copied, cast to the reduce dtype, into the reduce-scatter's
  // input (_chunk_cat) after its backward, once the compute stream has waited for the
  // reduce-scatter before (FSDP2's post_backward waits for the previous one's event first).
  TaskIndex copy_in(std::size_t u, TaskIndex after, std::optional<TaskIndex> previous) {
    std::vector<TaskIndex> deps{after};
    if (previous) deps.push_back(*previous);
    const double bytes = (kBf16Bytes + training_->grad_reduce_bytes) * unit(u).trainable;
    return build_->compute(backward_tag_ + unit(u).name + ".reduce_scatter.copy_in",
                           memory_op("copy_in", bytes), std::move(deps));
  }

  // Unit u's ZeRO-3 gather for its backward, once the unit kFsdpUnitsGathered above is done.
  void regather(std::size_t u) {
    std::optional<TaskIndex> after;
    if (u + kFsdpUnitsGathered < count()) after = backward_end_[u + kFsdpUnitsGathered];
    regathered_[u] = gather(u, /*forward=*/false, after);
  }

  // A bucket's reduction held back until the end of the schedule.
  struct HeldBack {
    std::string name;
    CollectiveOp op;
    double parameters;
    GroupKind group;
    bool first_reduction;  // as reduce() takes it: the step's first of these parameters
  };

  ProgramBuilder* build_;
  const std::vector<Unit>* units_;
  const TrainingSpec* training_;
  const ParallelPlan* plan_;
  std::vector<HeldBack> held_back_;
  // The micro-batch each pass runs ("mb3."), the start of its tasks' names: a merged pass
  // runs a forward and a backward of different micro-batches at once.
  std::string forward_tag_;
  std::string backward_tag_;
  // Where unit u's forward or backward names its own tasks ("mb3.layer7.fwd").
  std::string pass_prefix(std::size_t u, bool forward) const {
    return (forward ? forward_tag_ : backward_tag_) + unit(u).name + (forward ? ".fwd" : ".bwd");
  }
  std::vector<TaskIndex> forward_end_;
  // Activation offload: by decoder layer, the group whose window ends there (or -1); by group,
  // its unit and its copy out in the current forward.
  std::vector<int> window_group_;
  std::vector<std::size_t> group_unit_;
  std::vector<TaskIndex> copied_out_;
  std::vector<std::optional<TaskIndex>> parameter_gathers_;
  std::vector<TaskIndex> backward_end_;
  // The backward in progress: its reductions, buckets, ZeRO-3 gathers and offload's copies back.
  bool reduce_gradients_ = false;
  bool first_reduction_ = false;
  std::vector<Bucket> buckets_;
  std::vector<Bucket> expert_buckets_;
  std::size_t next_bucket_ = 0;
  std::size_t next_expert_bucket_ = 0;
  std::vector<TaskIndex> regathered_;
  std::vector<TaskIndex> copied_back_;
  std::vector<ExchangeCuts> forward_cuts_;
  std::vector<ExchangeCuts> backward_cuts_;
};

// Forward micro-batch `f_mb` of `f`'s chunk merged with backward micro-batch `b_mb` of `b`'s
// (ep_comm_overlap), as Megatron-Core's combined 1F1B runs them (model_chunk_schedule_plan.py,
// core 0.14 on): the forward's embedding, the backward's head; then forward layer j beside
// backward layer L - 1 - j (decoder layers and prediction modules alike), the layers one side
// has over the other after them alone, the backward's first; then the forward's head and the
// backward's embedding. In each pair of layers the two passes take turns on the compute stream
// between their all-to-alls, which run on the expert stream in the order they are issued: the
// backward's combine beside the forward's attention and router, the forward's dispatch beside
// the experts' backward, the backward's dispatch beside the experts' forward, the forward's
// combine beside the attention's backward. Returns where each pass ends.
std::pair<TaskIndex, TaskIndex> merged_passes(ProgramBuilder& build, MicroBatchBuilder& f, int f_mb,
                                              const std::vector<TaskIndex>& f_entry,
                                              MicroBatchBuilder& b, int b_mb, bool reduce_gradients,
                                              bool first_reduction,
                                              const std::vector<TaskIndex>& b_entry,
                                              std::optional<TaskIndex>& last_reduction) {
  const std::vector<Unit>& f_units = f.units();
  const std::vector<Unit>& b_units = b.units();
  // Where a chunk's layers begin and end: the embedding before them, the head after.
  const auto layers = [](const std::vector<Unit>& units) {
    std::size_t first = 0;
    while (first < units.size() && units[first].layer < 0) ++first;
    std::size_t end = first;
    while (end < units.size() && units[end].layer >= 0) ++end;
    return std::pair{first, end};
  };
  const auto [f_first, f_end] = layers(f_units);
  const auto [b_first, b_end] = layers(b_units);
  f.begin_forward(f_mb);
  b.begin_backward(b_mb, reduce_gradients, first_reduction);
  const auto forward_alone = [&](std::size_t u) { f.forward_unit(u, f_entry); };
  const auto backward_alone = [&](std::size_t u) { b.backward_unit(u, b_entry, last_reduction); };
  // One pass's progress through a unit: what its next op waits for beyond the compute
  // stream's order, and its last task so far.
  struct Side {
    std::string prefix;
    std::vector<TaskIndex> deps;
    std::optional<TaskIndex> last;
  };
  const auto run = [&](Side& side, const std::vector<Op>& segment) {
    if (segment.empty()) return;
    side.last = build.ops(side.prefix, segment, side.deps);
    side.deps.clear();
  };
  const auto exchange = [&](Side& side, const Op& op) {
    std::vector<TaskIndex> after = side.deps;
    if (side.last) after.push_back(*side.last);
    side.last = build.exchange(side.prefix + op.name, *op.collective, after);
    side.deps = {*side.last};
  };
  const auto pair = [&](std::size_t fu, std::size_t bu) {
    Side forward{f.forward_tag() + f_units[fu].name + ".", f.forward_deps(fu, f_entry), {}};
    const bool backward_runs = !b.skip_frozen_backward(bu);
    Side backward{b.backward_tag() + b_units[bu].name + ".",
                  backward_runs ? b.backward_deps(bu, b_entry) : std::vector<TaskIndex>{},
                  {}};
    const ExchangeCuts& fc = f.forward_cuts(fu);
    const ExchangeCuts empty;
    const ExchangeCuts& bc = backward_runs ? b.backward_cuts(bu) : empty;
    for (std::size_t k = 0; k < std::max(fc.segments.size(), bc.segments.size()); ++k) {
      if (k < bc.segments.size()) run(backward, bc.segments[k]);
      if (k < bc.exchanges.size()) exchange(backward, bc.exchanges[k]);
      if (k < fc.segments.size()) run(forward, fc.segments[k]);
      if (k < fc.exchanges.size()) exchange(forward, fc.exchanges[k]);
    }
    if (!forward.last) throw ModelError("no kernels for " + forward.prefix);
    // Saved layers are marked in program order: the side that ended first first.
    const auto backward_done = [&] {
      if (backward.last) b.backward_done(bu, *backward.last, last_reduction);
    };
    if (backward.last && *backward.last < *forward.last) backward_done();
    f.forward_done(fu, *forward.last);
    if (backward.last && *backward.last > *forward.last) backward_done();
  };
  for (std::size_t u = 0; u < f_first; ++u) forward_alone(u);
  for (std::size_t u = b_units.size(); u-- > b_end;) backward_alone(u);
  const std::size_t pairs = std::min(f_end - f_first, b_end - b_first);
  for (std::size_t k = 0; k < pairs; ++k) pair(f_first + k, b_end - 1 - k);
  for (std::size_t u = b_end - pairs; u-- > b_first;) backward_alone(u);
  for (std::size_t u = f_first + pairs; u < f_units.size(); ++u) forward_alone(u);
  for (std::size_t u = b_first; u-- > 0;) backward_alone(u);
  return {f.forward_end(), b.end_backward(last_reduction)};
}

// The embedding's gradient the first and last stages exchange (the last's copy: tied
// embeddings, multi-token prediction): none when it is frozen.
double embedding_exchange_parameters(const ModelSpec& model, const TrainingSpec& training, int pp) {
  return training.lora ? 0.0 : embedding_copy_parameters(model, pp);
}

// Builds stage `stage`'s program: its micro-batches in schedule order through each of its model
// chunks, the transfers to and from the neighbouring virtual stages, its gradient reductions and
// its optimizer step. Chunk c of stage p is virtual stage c x pp + p; without interleaving each
// stage has one chunk and virtual stages are stages.
void build_stage(TaskGraph& graph, const ModelSpec& model, const TrainingSpec& training,
                 const ParallelPlan& plan, int stage) {
  const int pp = plan.pp;
  const int virtual_stages = pp * plan.vpp;
  const int m = graph.micro_batches;
  std::vector<std::vector<Unit>> chunks;
  for (int chunk = 0; chunk < plan.vpp; ++chunk) {
    chunks.push_back(stage_units(model, training, plan, chunk * pp + stage));
  }
  // Room for every micro-batch's ops (recomputed too) and a few collectives per unit: the
  // program then grows in place instead of being copied as it doubles.
  const bool overlap_tp = plan.tp_comm_overlap && plan.tp > 1;
  // The tasks a list adds to its ops under userbuffers: GEMM chunks, reductions' last chunks.
  const auto userbuffers_tasks = [&](const std::vector<Op>& ops) {
    std::size_t tasks = 0;
    for (std::size_t i = 0; overlap_tp && i < ops.size(); ++i) {
      tasks += static_cast<std::size_t>(userbuffers_gemm(ops, i, plan.tp).chunks - 1);
      const std::optional<UserbuffersOverlap> overlap = userbuffers_collective(ops, i);
      tasks += overlap && overlap->after_gemm_share > 0 ? 1 : 0;
    }
    return tasks;
  };
  std::size_t ops_per_micro_batch = 0;
  for (const std::vector<Unit>& units : chunks) {
    for (const Unit& unit : units) {
      ops_per_micro_batch += 2 * (unit.ops.forward.size() + userbuffers_tasks(unit.ops.forward)) +
                             unit.ops.backward.size() + userbuffers_tasks(unit.ops.backward) + 4;
    }
  }
  graph.stages[stage].reserve(ops_per_micro_batch * m + 16);
  ProgramBuilder build(graph, graph.stages[stage], overlap_tp, plan.tp);
  std::vector<MicroBatchBuilder> micro_batch;
  for (const std::vector<Unit>& units : chunks)
    micro_batch.emplace_back(build, units, training, plan);
  // The distributed optimizer's gather of the last step's updates (FSDP's under a pipeline),
  // overlapped with this step's forward: one all-gather per trained unit, in the order the
  // forward needs them.
  const Sharding sharding(plan);
  const bool gather_ahead = sharding.gathers_ahead();
  if (gather_ahead) {
    for (std::size_t chunk = 0; chunk < chunks.size(); ++chunk) {
      std::vector<std::optional<TaskIndex>> gathers(chunks[chunk].size());
      for (std::size_t u = 0; u < chunks[chunk].size(); ++u) {
        const Unit& unit = chunks[chunk][u];
        // The distributed optimizer gathers what it updated; FSDP shards every parameter, a
        // LoRA's frozen base too.
        const double gathered = sharding.gathered_for_step() ? unit.parameters : unit.trainable;
        if (gathered <= 0) continue;
        gathers[u] = gather_unit_parameters(
            build, sharding, "c" + std::to_string(chunk) + "." + unit.name + ".param_gather", unit,
            gathered, {});
      }
      micro_batch[chunk].set_parameter_gathers(std::move(gathers));
    }
  }
  // With sequence parallelism each tp rank sends its sequence shard of the T x hidden
  // activations (Megatron's p2p tensors are scattered too); without it, the whole tensor, as
  // Megatron-Core sends it (get_tensor_shapes divides by tp only under sequence parallelism;
  // older engines sent a 1/tp piece and all-gathered it on arrival); each cp rank its chunks'.
  const double activation_bytes = kBf16Bytes * static_cast<double>(training.micro_batch) *
                                  training.seq_len / plan.cp * model.hidden /
                                  plan.sequence_shards();
  // Transfer ids: boundary b (between virtual stages b and b + 1), micro-batch i, forward or
  // backward.
  const auto transfer_id = [m](int boundary, int i, bool forward) {
    return (boundary * m + i) * 2 + (forward ? 0 : 1);
  };
  // ZeRO-2/3 shard gradients, so they are reduced after every micro-batch; stages 0/1 keep full
  // gradients, accumulate them locally and reduce only after the last micro-batch.
  const bool reduce_every_micro_batch = sharding.reduces_every_micro_batch();
  std::optional<TaskIndex> last_reduction;
  std::optional<TaskIndex> previous_end;
  // A pass's receive before it and its send after it, to and from the neighbouring virtual
  // stages.
  const auto receive = [&](const Pass& pass) {
    const int v = pass.chunk * pp + stage;
    const std::string tag = "mb" + std::to_string(pass.micro_batch) + ".";
    std::vector<TaskIndex> entry;
    if (pass.forward && v > 0) {
      entry.push_back(build.transfer(tag + "recv_activations",
                                     transfer_id(v - 1, pass.micro_batch, true), false,
                                     activation_bytes, {}));
    } else if (!pass.forward && v < virtual_stages - 1) {
      entry.push_back(build.transfer(tag + "recv_gradients",
                                     transfer_id(v, pass.micro_batch, false), false,
                                     activation_bytes, {}));
    }
    return entry;
  };
  const auto send = [&](const Pass& pass, TaskIndex end) {
    const int v = pass.chunk * pp + stage;
    const std::string tag = "mb" + std::to_string(pass.micro_batch) + ".";
    if (pass.forward && v < virtual_stages - 1) {
      build.transfer(tag + "send_activations", transfer_id(v, pass.micro_batch, true), true,
                     activation_bytes, {end});
    } else if (!pass.forward && v > 0) {
      build.transfer(tag + "send_gradients", transfer_id(v - 1, pass.micro_batch, false), true,
                     activation_bytes, {end});
    }
  };
  const auto reduces = [&](const Pass& pass) {
    return reduce_every_micro_batch || pass.micro_batch == m - 1;
  };
  const auto first_reduction = [&](const Pass& pass) {
    return !reduce_every_micro_batch || pass.micro_batch == 0;
  };
  const std::vector<Pass> schedule = pipeline_schedule(plan, stage, m);
  for (std::size_t k = 0; k < schedule.size(); ++k) {
    // A step of many micro-batches takes seconds to build: a stop (a limit, a signal) is
    // honoured here too, as the replay honours it.
    throw_if_stop_requested();
    const Pass& pass = schedule[k];
    std::vector<TaskIndex> entry = receive(pass);
    // Under ep_comm_overlap each steady-state forward is merged with the backward after it.
    if (pass.merged) {
      const Pass& next = schedule[k + 1];
      const std::vector<TaskIndex> next_entry = receive(next);
      const auto [forward_end, backward_end] = merged_passes(
          build, micro_batch[pass.chunk], pass.micro_batch, entry, micro_batch[next.chunk],
          next.micro_batch, reduces(next), first_reduction(next), next_entry, last_reduction);
      send(pass, forward_end);
      send(next, backward_end);
      previous_end = backward_end;
      ++k;
      continue;
    }
    // Gradient accumulation alone: a forward follows the previous micro-batch's backward.
    if (pp == 1 && pass.forward && previous_end) entry.push_back(*previous_end);
    previous_end = pass.forward ? micro_batch[pass.chunk].forward(pass.micro_batch, entry)
                                : micro_batch[pass.chunk].backward(pass.micro_batch, reduces(pass),
                                                                   first_reduction(pass), entry,
                                                                   last_reduction);
    send(pass, *previous_end);
  }

  // Optimizer step on the local shard (the rank's tensor-parallel part of its stage without
  // ZeRO), after the last reduction (the reduce stream runs in order).
  // ZeRO shards the dense parameters over every replica, the experts over the ranks that hold
  // them (ParallelPlan::expert_gradient_ranks).
  double parameters = 0;
  double experts = 0;
  double gathered_bytes = 0;  // of the dense parameters, and of the experts
  double gathered_expert_bytes = 0;
  for (const std::vector<Unit>& units : chunks) {
    for (const Unit& unit : units) {
      parameters += unit.dense_trainable();
      experts += unit.expert_trainable;
      gathered_bytes += unit.gathered_bytes(unit.dense_trainable());
      gathered_expert_bytes += unit.gathered_bytes(unit.expert_trainable);
    }
  }
  const double local = sharding.optimizer_parameters(parameters, experts);
  std::vector<TaskIndex> deps{*previous_end};
  std::optional<TaskIndex> tied_received;
  // The embedding on both ends of a pipeline (tied embeddings, multi-token prediction): the
  // first and last stages each hold it and all-reduce its gradient (Megatron's embedding
  // group), as two ranks exchanging it (whole, or their shard where gradients are sharded): the
  // bytes and time of a two-rank ring all-reduce.
  if (const double tied = embedding_exchange_parameters(model, training, plan.pp);
      tied > 0 && (stage == 0 || stage == pp - 1)) {
    // Sharded gradients (ZeRO 2 under a pipeline) were reduce-scattered every micro-batch:
    // each rank exchanges its shard of the tied gradient.
    const double bytes = tied / plan.tp * training.grad_reduce_bytes / sharding.gradient_shards();
    const int from_first = graph.transfers - 2;
    const int from_last = graph.transfers - 1;
    const bool first = stage == 0;
    deps.push_back(build.transfer("embedding_grad.send", first ? from_first : from_last, true,
                                  bytes, {*previous_end}));
    const TaskIndex received =
        build.transfer("embedding_grad.recv", first ? from_last : from_first, false, bytes, {});
    deps.push_back(received);
    tied_received = received;
    // Offloaded, the other stage's share reaches the host shard too.
    offload_gradients(build, plan, training, "embedding_grad", received,
                      tied / plan.tp / plan.gradient_ranks(), /*first=*/false);
  }
  // Held back, every chunk's buckets are reduced once the schedule is done,
  // after the embedding's exchange (DeepSpeed's pipeline engine: ReduceTiedGrads, then
  // ReduceGrads; Megatron-LM runs the two one after the other too).
  for (MicroBatchBuilder& chunk : micro_batch) {
    chunk.reduce_held_back(tied_received.value_or(*previous_end), last_reduction);
  }
  if (last_reduction) deps.push_back(*last_reduction);
  // Offloaded, the step waits for every gradient to reach the host.
  if (const auto copy = build.last_copy_to_host()) deps.push_back(*copy);
  // Offloaded, CPU Adam updates the shard in host memory once every gradient is there (and,
  // the cpu stream running in order, after the last accumulation), and the BF16 shard goes
  // back.
  const TaskIndex step =
      plan.offload_optimizer
          ? build.host("optimizer.to_gpu", {HostOp::copy_to_gpu, kBf16Bytes * local, 0},
                       {build.host("optimizer.cpu_adam",
                                   {HostOp::cpu,
                                    optimizer_step_bytes_per_parameter(training) * local, local},
                                   deps)})
          : build.compute("optimizer.adam", adam_step_op(local, training), deps);
  // ZeRO-1/2 keep full weights (BF16, or FP8 primary weights): every rank gathers the shards
  // the others updated.
  if (sharding.gathers_updated_shards() && !gather_ahead) {
    build.collective("optimizer.all_gather", CollectiveOp::all_gather, gathered_bytes, {step});
    if (experts > 0 && sharding.expert_ranks() > 1) {
      build.collective("optimizer.expert_all_gather", CollectiveOp::all_gather,
                       gathered_expert_bytes, {step}, GroupKind::expert_data);
    }
  }
}

}  // namespace

TaskGraph build_data_parallel_step(const ModelSpec& model, const TrainingSpec& training,
                                   const ParallelPlan& plan) {
  validate_job(model, training, plan);
  TaskGraph graph;
  graph.grid = RankGrid(plan);
  graph.micro_batches = training.global_batch / (training.micro_batch * plan.dp);
  graph.tokens_per_step = training.tokens_per_step();
  graph.stages.resize(plan.pp);
  // Activations and gradients across each stage boundary, and the embedding's exchange.
  graph.transfers = 2 * (plan.pp * plan.vpp - 1) * graph.micro_batches +
                    (embedding_exchange_parameters(model, training, plan.pp) > 0 ? 2 : 0);
  for (int stage = 0; stage < plan.pp; ++stage) build_stage(graph, model, training, plan, stage);
  // The builders summed every stage's FLOPs; a rank runs one stage.
  graph.model_flops_per_rank /= plan.pp;
  graph.hardware_flops_per_rank /= plan.pp;
  return graph;
}

}  // namespace fleetsim
