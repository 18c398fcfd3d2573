#include "workloads/task_graph.hpp"

#include <algorithm>
#include <optional>
#include <string>

#include "sim/engine/errors.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

constexpr double kBf16 = 2;

// A unit of parameters that is gathered, reduced and bucketed as a whole: the embedding, each
// decoder layer, the head. It matches an FSDP wrapping of one module per layer.
struct Unit {
  std::string name;
  double parameters;
  LayerOps ops;
};

std::vector<Unit> model_units(const ModelSpec& model, const TrainingSpec& training) {
  const int mb = training.micro_batch;
  const int s = training.seq_len;
  std::vector<Unit> units;
  units.push_back({"embed", embedding_parameters(model), embedding_ops(model, mb, s)});
  const LayerOps layer = decoder_layer_ops(model, mb, s);
  for (int l = 0; l < model.layers; ++l) {
    units.push_back({"L" + std::to_string(l), decoder_layer_parameters(model), layer});
  }
  units.push_back({"head", head_parameters(model), head_ops(model, mb, s)});
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
  TaskIndex collective(const std::string& name, CollectiveOp op, double size_bytes,
                       std::vector<TaskIndex> deps) {
    return add(Task{name, Stream::comm, CollectiveWork{op, size_bytes}, std::move(deps)});
  }
  // Runs a list of ops back to back; the first waits for `deps`. Returns the last task.
  TaskIndex ops(const std::string& prefix, const std::vector<Op>& list, std::vector<TaskIndex> deps,
                bool recomputed = false) {
    std::optional<TaskIndex> last;
    for (const Op& op : list) {
      last = compute(prefix + op.name, op, last ? std::vector<TaskIndex>{} : deps, recomputed);
    }
    return *last;
  }

 private:
  TaskIndex add(Task task) {
    graph_->program.push_back(std::move(task));
    return static_cast<TaskIndex>(graph_->program.size() - 1);
  }
  TaskGraph* graph_;
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

void check_plan(const ModelSpec& model, const TrainingSpec& training, const ParallelPlan& plan) {
  if (model.layers < 1 || model.hidden < 1 || model.heads < 1) {
    throw ModelError("model " + model.name + " needs layers, hidden size and heads");
  }
  if (training.micro_batch < 1 || training.seq_len < 1 || plan.dp < 1) {
    throw ModelError("micro-batch, sequence length and dp must be positive");
  }
  if (training.global_batch % (training.micro_batch * plan.dp) != 0) {
    throw ModelError("global batch " + std::to_string(training.global_batch) +
                     " is not a multiple of micro_batch x dp = " +
                     std::to_string(training.micro_batch * plan.dp));
  }
  if (plan.zero_stage < 0 || plan.zero_stage > 3)
    throw ModelError("ZeRO stage must be 0-3");
}

}  // namespace

TaskGraph build_data_parallel_step(const ModelSpec& model, const TrainingSpec& training,
                                   const ParallelPlan& plan) {
  check_plan(model, training, plan);
  TaskGraph graph;
  graph.ranks = plan.dp;
  graph.micro_batches = training.global_batch / (training.micro_batch * plan.dp);
  graph.tokens_per_step = static_cast<double>(training.global_batch) * training.seq_len;

  const std::vector<Unit> units = model_units(model, training);
  const std::size_t n = units.size();
  const bool shard_params = plan.zero_stage >= 3;
  // ZeRO-2/3 shard gradients, so they must be reduced after every micro-batch; stages 0/1 keep
  // full gradients and accumulate locally, reducing only after the last micro-batch.
  const bool reduce_every_micro_batch = plan.zero_stage >= 2;
  const CollectiveOp grad_op =
      plan.zero_stage == 0 ? CollectiveOp::all_reduce : CollectiveOp::reduce_scatter;
  const double grad_bytes = training.grad_reduce_bytes;
  const bool recompute = plan.recompute == Recompute::full;

  ProgramBuilder build(graph);
  std::optional<TaskIndex> last_reduction;
  std::optional<TaskIndex> previous_micro_batch_end;
  for (int mb = 0; mb < graph.micro_batches; ++mb) {
    const std::string tag = "mb" + std::to_string(mb) + ".";
    const bool reduce_now = reduce_every_micro_batch || mb == graph.micro_batches - 1;

    // Forward. With sharded parameters each unit is all-gathered first; a gather may run at most
    // two units ahead of the compute that needs it (FSDP's forward prefetch with a limit).
    std::vector<TaskIndex> forward_end(n);
    std::vector<TaskIndex> gathered(n);
    for (std::size_t u = 0; u < n; ++u) {
      std::vector<TaskIndex> deps;
      if (shard_params) {
        std::vector<TaskIndex> gather_deps;
        if (u >= 2)
          gather_deps.push_back(forward_end[u - 2]);
        gathered[u] =
            build.collective(tag + units[u].name + ".fwd.all_gather", CollectiveOp::all_gather,
                             units[u].parameters * kBf16, gather_deps);
        deps.push_back(gathered[u]);
      }
      if (u == 0 && previous_micro_batch_end)
        deps.push_back(*previous_micro_batch_end);
      forward_end[u] = build.ops(tag + units[u].name + ".", units[u].ops.forward, deps);
    }

    // Backward, last unit first. Gradients of a unit are reduced once its backward is done.
    // With sharded parameters each unit is gathered again (parameters are resharded after the
    // forward pass); as FSDP's backward prefetch does, the gather of the next unit is issued
    // before the reduce-scatter of the current one, so it overlaps the current backward, and
    // it waits for the unit two places back to finish (at most two units gathered ahead).
    std::vector<TaskIndex> backward_end(n);
    std::vector<TaskIndex> regathered(n);
    std::vector<Bucket> buckets;
    if (reduce_now && !shard_params)
      buckets = gradient_buckets(units, grad_bytes, plan.bucket_bytes);
    std::size_t next_bucket = 0;
    auto regather = [&](std::size_t u) {
      std::vector<TaskIndex> gather_deps;
      if (u + 2 < n)
        gather_deps.push_back(backward_end[u + 2]);
      regathered[u] =
          build.collective(tag + units[u].name + ".bwd.all_gather", CollectiveOp::all_gather,
                           units[u].parameters * kBf16, gather_deps);
    };
    if (shard_params)
      regather(n - 1);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t u = n - 1 - i;
      if (shard_params && u >= 1)
        regather(u - 1);
      std::vector<TaskIndex> deps;
      if (shard_params)
        deps.push_back(regathered[u]);
      if (recompute && u != 0 && u != n - 1) {
        deps.push_back(build.ops(tag + units[u].name + ".recompute.", units[u].ops.forward, deps,
                                 /*recomputed=*/true));
      }
      backward_end[u] = build.ops(tag + units[u].name + ".", units[u].ops.backward, deps);
      if (!reduce_now)
        continue;
      if (shard_params) {
        last_reduction =
            build.collective(tag + units[u].name + ".reduce_scatter", CollectiveOp::reduce_scatter,
                             units[u].parameters * grad_bytes, {backward_end[u]});
      } else if (next_bucket < buckets.size() && buckets[next_bucket].ready_after_unit == u) {
        last_reduction = build.collective(
            tag + "bucket" + std::to_string(next_bucket) + "." + to_string(grad_op), grad_op,
            buckets[next_bucket].bytes, {backward_end[u]});
        ++next_bucket;
      }
    }
    previous_micro_batch_end = backward_end[0];
  }

  // Optimizer step on the local shard (the whole model without ZeRO), after the last reduction.
  const double parameters = model.parameters();
  const double local = plan.zero_stage >= 1 ? parameters / plan.dp : parameters;
  std::vector<TaskIndex> deps{*previous_micro_batch_end};
  if (last_reduction)
    deps.push_back(*last_reduction);
  const TaskIndex step = build.compute("optimizer.adam", adam_step_op(local), deps);
  // ZeRO-1/2 keep full BF16 weights: every rank gathers the shards the others updated.
  if (plan.zero_stage == 1 || plan.zero_stage == 2) {
    build.collective("optimizer.all_gather", CollectiveOp::all_gather, parameters * kBf16, {step});
  }
  return graph;
}

}  // namespace fleetsim
