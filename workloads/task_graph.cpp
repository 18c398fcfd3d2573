#include "workloads/task_graph.hpp"

#include <optional>
#include <string>

#include "sim/engine/errors.hpp"
#include "workloads/precision.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

struct Unit {
  std::string name;
  double parameters;
  LayerOps ops;
};

// The units of one tensor-parallel rank: its share of each unit's parameters (norms, which
// Megatron replicates, are a rounding error and counted split too) and its ops.
std::vector<Unit> model_units(const ModelSpec& model, const TrainingSpec& training,
                              const ParallelPlan& plan) {
  const int tp = plan.tp;
  const int mb = training.micro_batch;
  const int s = training.seq_len;
  const std::vector<double> parameters = fsdp_unit_parameters(model);
  std::vector<Unit> units;
  units.push_back({"embed", parameters.front() / tp, embedding_ops(model, mb, s, tp)});
  const LayerOps layer = decoder_layer_ops(model, training, tp, plan.recompute);
  for (int l = 0; l < model.layers; ++l) {
    units.push_back({"L" + std::to_string(l), parameters[l + 1] / tp, layer});
  }
  units.push_back({"head", parameters.back() / tp, head_ops(model, mb, s, tp)});
  return units;
}

class ProgramBuilder {
 public:
  explicit ProgramBuilder(TaskGraph& graph) : graph_(&graph) {}

  TaskIndex compute(const std::string& name, const Op& op, std::vector<TaskIndex> deps,
                    bool recomputed = false) {
    const double model_flops = recomputed ? 0.0 : op.model_flops;
    graph_->model_flops_per_rank += model_flops;
    graph_->hardware_flops_per_rank += op.kernel.flops;
    return add(Task{name, Stream::compute, ComputeWork{op.kernel, model_flops}, std::move(deps)});
  }
  // A data-parallel collective: parameter gathers on one stream, gradient reductions on another.
  TaskIndex collective(const std::string& name, CollectiveOp op, double size_bytes,
                       std::vector<TaskIndex> deps) {
    const Stream stream = op == CollectiveOp::all_gather ? Stream::gather : Stream::reduce;
    return add(
        Task{name, stream, CollectiveWork{op, size_bytes, Group::data_parallel}, std::move(deps)});
  }
  // Runs a non-empty list of ops back to back; the first waits for `deps`. A tensor-parallel
  // collective in the list runs on its stream between the kernels around it. Returns the last.
  TaskIndex ops(const std::string& prefix, const std::vector<Op>& list, std::vector<TaskIndex> deps,
                bool recomputed = false) {
    if (list.empty()) throw ModelError("no kernels for " + prefix);
    std::optional<TaskIndex> last;
    for (const Op& op : list) {
      // Kernels and tensor-parallel collectives form one chain in program order: a kernel after
      // a kernel needs no edge (the compute stream runs in order), anything else waits for the
      // op before it, across units too (a layer reads the embedding's reduce-scatter).
      std::vector<TaskIndex> after = last ? std::vector<TaskIndex>{} : deps;
      const bool crosses_streams =
          chain_end_ && (op.collective ||
                         !std::holds_alternative<ComputeWork>(graph_->program[*chain_end_].work));
      if (crosses_streams) after.push_back(*chain_end_);
      if (op.collective) {
        last = add(Task{
            prefix + op.name, Stream::tensor,
            CollectiveWork{op.collective->op, op.collective->size_bytes, Group::tensor_parallel},
            std::move(after)});
      } else {
        last = compute(prefix + op.name, op, std::move(after), recomputed);
      }
      chain_end_ = last;
    }
    return *last;
  }

 private:
  TaskIndex add(Task task) {
    graph_->program.push_back(std::move(task));
    return static_cast<TaskIndex>(graph_->program.size() - 1);
  }
  TaskGraph* graph_;
  std::optional<TaskIndex> chain_end_;  // the last kernel or tensor-parallel collective
};

// Groups units, from the last to the first (the order their gradients become ready), into
// buckets of at least `bucket_bytes` of gradients, as PyTorch DDP does. A bucket is ready when
// the backward of its lowest unit, the last of it to run, is done.
struct Bucket {
  std::size_t ready_after_unit;
  double bytes;
};
std::vector<Bucket> gradient_buckets(const std::vector<Unit>& units, double bytes_per_parameter,
                                     double bucket_bytes) {
  std::vector<Bucket> buckets;
  double pending = 0;
  for (std::size_t i = units.size(); i-- > 0;) {
    pending += units[i].parameters * bytes_per_parameter;
    if (pending >= bucket_bytes || i == 0) {
      buckets.push_back({i, pending});
      pending = 0;
    }
  }
  return buckets;
}

// One micro-batch's forward and backward, with the collectives the ZeRO stage needs.
class MicroBatchBuilder {
 public:
  MicroBatchBuilder(ProgramBuilder& build, const std::vector<Unit>& units,
                    const TrainingSpec& training, const ParallelPlan& plan)
      : build_(&build), units_(&units), training_(&training), plan_(&plan) {}

  // Returns the last backward task; `last_reduction` is set when gradients were reduced.
  TaskIndex build(int mb, bool reduce_gradients, std::optional<TaskIndex> previous_end,
                  std::optional<TaskIndex>& last_reduction) {
    tag_ = "mb" + std::to_string(mb) + ".";
    forward(previous_end);
    return backward(reduce_gradients, last_reduction);
  }

 private:
  bool sharded() const { return plan_->zero_stage >= 3; }
  std::size_t count() const { return units_->size(); }
  const Unit& unit(std::size_t u) const { return (*units_)[u]; }

  TaskIndex gather(std::size_t u, const std::string& pass, std::optional<TaskIndex> after) {
    std::vector<TaskIndex> deps;
    if (after) deps.push_back(*after);
    return build_->collective(tag_ + unit(u).name + "." + pass + ".all_gather",
                              CollectiveOp::all_gather, unit(u).parameters * kBf16Bytes, deps);
  }

  // With sharded parameters each unit is all-gathered before its forward; the gather of unit u
  // waits until unit u - kFsdpUnitsGathered has finished, so at most that many are gathered.
  void forward(std::optional<TaskIndex> previous_end) {
    forward_end_.assign(count(), 0);
    for (std::size_t u = 0; u < count(); ++u) {
      std::vector<TaskIndex> deps;
      if (sharded()) {
        std::optional<TaskIndex> after;
        if (u >= kFsdpUnitsGathered) after = forward_end_[u - kFsdpUnitsGathered];
        deps.push_back(gather(u, "fwd", after));
      }
      if (u == 0 && previous_end) deps.push_back(*previous_end);
      forward_end_[u] = build_->ops(tag_ + unit(u).name + ".", unit(u).ops.forward, deps);
    }
  }

  // Backward, last unit first. With sharded parameters each unit is gathered again (FSDP
  // reshards after the forward pass), the next one prefetched while the current one computes.
  TaskIndex backward(bool reduce_gradients, std::optional<TaskIndex>& last_reduction) {
    const std::size_t n = count();
    backward_end_.assign(n, 0);
    std::vector<TaskIndex> regathered(n);
    auto regather = [&](std::size_t u) {
      std::optional<TaskIndex> after;
      if (u + kFsdpUnitsGathered < n) after = backward_end_[u + kFsdpUnitsGathered];
      regathered[u] = gather(u, "bwd", after);
    };
    const double grad_bytes = training_->grad_reduce_bytes;
    std::vector<Bucket> buckets;
    if (reduce_gradients && !sharded()) {
      buckets = gradient_buckets(*units_, grad_bytes, plan_->bucket_bytes);
    }
    const CollectiveOp bucket_op =
        plan_->zero_stage == 0 ? CollectiveOp::all_reduce : CollectiveOp::reduce_scatter;
    const bool recompute = plan_->recompute == Recompute::full;
    std::size_t next_bucket = 0;
    if (sharded()) regather(n - 1);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t u = n - 1 - i;
      if (sharded() && u >= 1) regather(u - 1);
      std::vector<TaskIndex> deps;
      if (sharded()) deps.push_back(regathered[u]);
      const bool is_layer = u != 0 && u != n - 1;
      if (recompute && is_layer) {
        deps.push_back(build_->ops(tag_ + unit(u).name + ".recompute.", unit(u).ops.forward, deps,
                                   /*recomputed=*/true));
      }
      backward_end_[u] = build_->ops(tag_ + unit(u).name + ".", unit(u).ops.backward, deps);
      if (!reduce_gradients) continue;
      if (sharded()) {
        last_reduction = build_->collective(tag_ + unit(u).name + ".reduce_scatter",
                                            CollectiveOp::reduce_scatter,
                                            unit(u).parameters * grad_bytes, {backward_end_[u]});
      } else if (next_bucket < buckets.size() && buckets[next_bucket].ready_after_unit == u) {
        last_reduction = build_->collective(
            tag_ + "bucket" + std::to_string(next_bucket) + "." + to_string(bucket_op), bucket_op,
            buckets[next_bucket].bytes, {backward_end_[u]});
        ++next_bucket;
      }
    }
    return backward_end_[0];
  }

  ProgramBuilder* build_;
  const std::vector<Unit>* units_;
  const TrainingSpec* training_;
  const ParallelPlan* plan_;
  std::string tag_;
  std::vector<TaskIndex> forward_end_;
  std::vector<TaskIndex> backward_end_;
};

}  // namespace

TaskGraph build_data_parallel_step(const ModelSpec& model, const TrainingSpec& training,
                                   const ParallelPlan& plan) {
  validate_job(model, training, plan);
  TaskGraph graph;
  graph.tp = plan.tp;
  graph.ranks = plan.tp * plan.dp;
  graph.micro_batches = training.global_batch / (training.micro_batch * plan.dp);
  graph.tokens_per_step = static_cast<double>(training.global_batch) * training.seq_len;

  const std::vector<Unit> units = model_units(model, training, plan);
  ProgramBuilder build(graph);
  MicroBatchBuilder micro_batch(build, units, training, plan);
  // ZeRO-2/3 shard gradients, so they are reduced after every micro-batch; stages 0/1 keep full
  // gradients, accumulate them locally and reduce only after the last micro-batch.
  const bool reduce_every_micro_batch = plan.zero_stage >= 2;
  std::optional<TaskIndex> last_reduction;
  std::optional<TaskIndex> previous_end;
  for (int mb = 0; mb < graph.micro_batches; ++mb) {
    const bool reduce = reduce_every_micro_batch || mb == graph.micro_batches - 1;
    previous_end = micro_batch.build(mb, reduce, previous_end, last_reduction);
  }

  // Optimizer step on the local shard (the rank's tensor-parallel part without ZeRO), after the
  // last reduction.
  const double parameters = model.parameters() / plan.tp;
  const double local = plan.zero_stage >= 1 ? parameters / plan.dp : parameters;
  std::vector<TaskIndex> deps{*previous_end};
  if (last_reduction) deps.push_back(*last_reduction);
  const TaskIndex step =
      build.compute("optimizer.adam", adam_step_op(local, training.optimizer), deps);
  // ZeRO-1/2 keep full BF16 weights: every rank gathers the shards the others updated.
  if (plan.zero_stage == 1 || plan.zero_stage == 2) {
    build.collective("optimizer.all_gather", CollectiveOp::all_gather, parameters * kBf16Bytes,
                     {step});
  }
  return graph;
}

}  // namespace fleetsim
