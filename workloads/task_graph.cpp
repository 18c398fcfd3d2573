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

struct Unit {
  std::string name;
  double parameters;  // held (and gathered under ZeRO-3)
  double trainable;   // with gradients and optimizer states: all, or LoRA's adapters
  LayerOps ops;
  // Its forward rerun before its backward: a decoder layer under full recomputation (every
  // layer of the chunk, or its first recompute_layers).
  bool recomputed = false;
  // Under expert parallelism, the part of `trainable` that is the rank's experts: reduced and
  // sharded over the expert's data-parallel group, the rest over all replicas.
  double expert_trainable = 0;
  // The share of its parameters kept in FP8 (fp8_params: a layer's projections; its norms and
  // router, a rounding error, counted with them).
  double fp8_share = 0;
  // Under activation offload, its saved tensors, copied to host memory after its forward and
  // back before its backward (a decoder layer among the first activation_offload_layers).
  double offloaded_bytes = 0;
  // Its place among the chunk's decoder layers and multi-token prediction modules; -1: the
  // embedding or the head.
  int layer = -1;
  // The share of its parameters in QLoRA's 4-bit NF4: a decoder layer's frozen base, not its
  // adapters.
  double nf4_share = 0;
  // Under expert parallelism, the part of `parameters` that is the rank's experts: gathered
  // over the replicas holding them where parameters are sharded.
  double experts = 0;
  double dense_trainable() const { return trainable - expert_trainable; }
  // What an all-gather moves of `count` of its parameters: FP8 primary weights are gathered in
  // FP8 (Megatron-Core's --fp8-param-gather), QLoRA's base packed in NF4, the rest BF16.
  double gathered_bytes(double count) const {
    return weight_gather_bytes(count, count * fp8_share, count * nf4_share);
  }
};

// The units of one tensor-parallel rank of virtual pipeline stage `stage` (of pp x vpp): its
// share of each unit's parameters (norms and a router, which Megatron replicates, are a
// rounding error and counted split too) and its ops. The first virtual stage has the
// embedding, the last the multi-token prediction modules and the head, each its share of the
// layers.
std::vector<Unit> stage_units(const ModelSpec& model, const TrainingSpec& training,
                              const ParallelPlan& plan, int stage) {
  const int tp = plan.tp;
  const int mb = training.micro_batch;
  const int s = training.seq_len / plan.cp;  // the rank's share of each sequence
  const std::vector<double> parameters = fsdp_unit_parameters(model);
  const std::size_t head_index = parameters.size() - 1;
  // Under LoRA only each layer's adapters train; the embedding and head are frozen.
  const bool frozen = training.lora.has_value();
  const bool quantized = frozen && training.lora->quantized_base;
  const double adapters = lora_parameters_per_layer(model, training) / tp;
  // A layer of each kind, built once: an experts' layer or a dense one (a mixture of experts'
  // dense layers, every layer of a dense model), its ops attending fully or within the model's
  // window. Under expert parallelism an experts' layer holds experts / ep of its experts.
  struct LayerKind {
    LayerOps full;
    LayerOps local;
    double experts = 0;  // the rank's experts' parameters
    // What tensor_rank_layer_parameters counts of the layer's experts (a tp part of every
    // one) beyond the rank's own (negative where each expert is whole and ep < tp).
    double absent_experts = 0;
    double fp8 = 0;  // FP8 primary weights a distributed optimizer gathers
    double saved_bytes = 0;
  };
  const auto build_kind = [&](const ModelSpec& kind) {
    const auto layer_ops = [&](bool attends_locally) {
      return decoder_layer_ops(kind, training, tp, plan.recompute, plan.ep, plan.cp,
                               plan.sequence_parallel, plan.recompute_modules, attends_locally,
                               plan.tp_comm_overlap, plan.cp_comm_type, plan.experts_split());
    };
    LayerKind built;
    built.full = layer_ops(false);
    built.local = kind.has_local_layers(training.seq_len) ? layer_ops(true) : built.full;
    built.experts =
        plan.ep > 1 ? layer_expert_parameters(kind) / plan.ep / plan.experts_split() : 0.0;
    built.absent_experts =
        plan.ep > 1 ? layer_expert_parameters(kind) / plan.tp - built.experts : 0.0;
    // (A LoRA's frozen FP8 base is not gathered: only its BF16 adapters train.)
    built.fp8 = training.fp8_params && !frozen ? rank_layer_projection_weights(kind, plan) : 0.0;
    // (Only activation offload copies them.)
    built.saved_bytes =
        plan.activation_offload_layers > 0 ? layer_saved_bytes(kind, training, plan) : 0.0;
    return built;
  };
  std::optional<LayerKind> expert_layer, dense_layer;
  const auto kind_of = [&](int layer) -> const LayerKind& {
    if (model.layer_has_experts(layer)) {
      if (!expert_layer) expert_layer = build_kind(model);
      return *expert_layer;
    }
    if (!dense_layer) {
      dense_layer = build_kind(model.has_dense_layers() ? model.dense_layer_model() : model);
    }
    return *dense_layer;
  };
  std::vector<Unit> units;
  int layers_before = 0;  // the chunk's layers before this one
  for (const std::size_t index : virtual_stage_units(model, plan.pp * plan.vpp, stage)) {
    if (index == 0) {
      const double embed = parameters.front() / tp;
      units.push_back({"embed", embed, frozen ? 0.0 : embed,
                       embedding_ops(model, mb, s, tp, frozen, plan.sequence_parallel), false});
    } else if (index == head_index) {
      const double head = (parameters.back() + embedding_copy_parameters(model, plan.pp)) / tp;
      units.push_back(
          {"head", head, frozen ? 0.0 : head,
           head_ops(model, mb, s, tp, frozen, training.cross_entropy, plan.sequence_parallel),
           false});
    } else {
      // A decoder layer, or after the last a multi-token prediction module around a layer of
      // the last one's kind.
      const int layer = static_cast<int>(index) - 1;
      const int module = layer - model.layers + 1;  // 1, 2, ... for the modules
      const int kind_layer = module > 0 ? model.layers - 1 : layer;
      const LayerKind& kind = kind_of(kind_layer);
      const LayerOps& layer_ops = model.attends_locally(kind_layer) ? kind.local : kind.full;
      const double held = tensor_rank_layer_parameters(model, parameters[index], 1, tp) -
                          kind.absent_experts + adapters;
      const bool recomputed = plan.recompute == Recompute::full &&
                              (plan.recompute_layers == 0 || layers_before < plan.recompute_layers);
      const bool offloaded = layers_before < plan.activation_offload_layers;
      ++layers_before;
      Unit unit{module > 0 ? "mtp" + std::to_string(module) : "L" + std::to_string(layer),
                held,
                frozen ? adapters : held,
                module > 0
                    ? mtp_module_ops(model, training, layer_ops, s, tp, plan.sequence_parallel)
                    : layer_ops,
                recomputed,
                frozen ? 0.0 : kind.experts,
                kind.fp8 / held,
                offloaded ? kind.saved_bytes : 0.0,
                layers_before - 1};
      if (quantized) unit.nf4_share = (held - adapters) / held;
      unit.experts = kind.experts;
      units.push_back(std::move(unit));
    }
  }
  return units;
}

class ProgramBuilder {
 public:
  // overlap_tp: tensor-parallel collectives of tp ranks run beside their GEMMs.
  ProgramBuilder(TaskGraph& graph, Program& program, bool overlap_tp, int tp)
      : graph_(&graph), program_(&program), overlap_tp_(overlap_tp), tp_(tp) {}

  TaskIndex compute(const std::string& name, const Op& op, std::vector<TaskIndex> deps,
                    bool recomputed = false) {
    const double model_flops = recomputed ? 0.0 : op.model_flops;
    graph_->model_flops_per_rank += model_flops;
    graph_->hardware_flops_per_rank += op.kernel.flops;
    return add(name, Stream::compute, ComputeWork{program_->kernel(op.kernel), model_flops},
               std::move(deps));
  }
  // A data-parallel collective (of all replicas, or of an expert's): parameter gathers on one
  // stream, gradient reductions on another.
  TaskIndex collective(const std::string& name, CollectiveOp op, double size_bytes,
                       std::vector<TaskIndex> deps, GroupKind group = GroupKind::data) {
    const Stream stream = op == CollectiveOp::all_gather ? Stream::gather : Stream::reduce;
    if (op != CollectiveOp::all_gather && op != CollectiveOp::reduce_scatter) {
      graph_->data_parallel_rings_only = false;
    }
    return add(name, stream, CollectiveWork{op, size_bytes, group}, std::move(deps));
  }
  // Optimizer offload's host side: copies on the copy stream, CPU work on the cpu stream.
  TaskIndex host(const std::string& name, HostWork work, std::vector<TaskIndex> deps) {
    const TaskIndex task = host_task(name, work, std::move(deps));
    if (work.op == HostOp::copy_to_host) {
      copy_before_last_ = last_copy_to_host_;
      last_copy_to_host_ = task;
    }
    return task;
  }
  // Activation offload's copies of a layer's saved tensors, on the copy stream (in order: a
  // micro-batch's all go out in its forward and come back in its backward).
  TaskIndex activation_copy(const std::string& name, HostOp op, double bytes,
                            std::vector<TaskIndex> deps) {
    return host_task(name, HostWork{op, bytes, 0}, std::move(deps));
  }
  // The last gradient copy to the host so far: the copy stream runs in order, so whatever
  // waits for it waits for every copy before it.
  std::optional<TaskIndex> last_copy_to_host() const { return last_copy_to_host_; }
  // The copy before that: a reduction into a buffer of two waits for it.
  std::optional<TaskIndex> copy_before_last() const { return copy_before_last_; }
  // Runs a non-empty list of ops back to back; the first waits for `deps`. A tensor-parallel
  // collective in the list runs on its stream between the kernels around it, or, overlapped
  // (Megatron's --tp-comm-overlap), beside the GEMM next to it (overlapped_kernel): an
  // all-gather beside the GEMM that reads what it gathers, a reduce-scatter beside the GEMM
  // before it (the one that writes what it reduces, pipelined in chunks; in backward the
  // weight gradient after the data gradient it reduces); what follows waits for both. Returns
  // the last.
  TaskIndex ops(const std::string& prefix, const std::vector<Op>& list, std::vector<TaskIndex> deps,
                bool recomputed = false) {
    if (list.empty()) throw ModelError("no kernels for " + prefix);
    std::optional<TaskIndex> last;
    // An all-gather overlapped with the GEMM after it: what it waited for, which the GEMM waits
    // for too, and the gather itself, which the op after the GEMM waits for.
    std::optional<std::vector<TaskIndex>> gather_after;
    std::vector<TaskIndex> gather;         // empty, or that one gather
    std::vector<TaskIndex> last_after;     // what the last op waited for
    std::optional<TaskIndex> before_last;  // the chain's end before the last op
    for (std::size_t i = 0; i < list.size(); ++i) {
      const Op& op = list[i];
      // Kernels and tensor-parallel collectives form one chain in program order: a kernel after
      // a kernel needs no edge (the compute stream runs in order), anything else waits for the
      // op before it, across units too (a layer reads the embedding's reduce-scatter).
      std::vector<TaskIndex> after = last ? std::vector<TaskIndex>{} : deps;
      const bool crosses_streams =
          chain_end_ &&
          (op.collective || !std::holds_alternative<ComputeWork>((*program_)[*chain_end_].work));
      if (crosses_streams) after.push_back(*chain_end_);
      // What an overlapped gather leaves for the ops after it: its own dependencies for the
      // GEMM beside it, the gather itself for the op after that (added below, so that no
      // replacement of `after` drops it).
      std::vector<TaskIndex> pending;
      if (gather_after) {
        after.insert(after.end(), gather_after->begin(), gather_after->end());
        gather_after.reset();
      } else {
        pending = std::move(gather);
        gather.clear();
      }
      if (op.collective) {
        const std::optional<std::size_t> beside = kernel_beside(list, i, overlap_tp_);
        const bool gather_beside_next = beside == i + 1;
        if (i > 0 && beside == i - 1) {
          // Starts with the GEMM before it, once what that GEMM waited for is done; pipelined,
          // once its first chunk is.
          after = last_after;
          if (before_last) after.push_back(*before_last);
          if (first_chunk_) after.push_back(*first_chunk_);
        }
        after.insert(after.end(), pending.begin(), pending.end());
        // Beside its GEMM, a layer's tensor-parallel collective runs as Transformer Engine's
        // userbuffers do (its SMs; a pipelined reduce-scatter's last chunk after the GEMM).
        const std::optional<UserbuffersOverlap> userbuffers =
            overlap_tp_ ? userbuffers_collective(list, i) : std::nullopt;
        const double after_gemm_share = userbuffers ? userbuffers->after_gemm_share : 0.0;
        CollectiveWork work{op.collective->op, op.collective->size_bytes * (1 - after_gemm_share),
                            op.collective->group};
        if (userbuffers) work.sms_held = userbuffers->sms;
        const TaskIndex task = add(prefix + op.name, Stream::tensor, work, after);
        last = task;
        if (gather_beside_next) {
          gather_after = after;
          gather = {task};
          continue;  // the chain goes on from the op before it, into the GEMM
        }
        if (after_gemm_share > 0) {
          // The last chunk, reduced once the GEMM and the chunks before it are done; what
          // follows waits for it. Only a reduce-scatter beside the GEMM before it has a share
          // after it, and that GEMM ends the chain so far.
          const TaskIndex gemm = chain_end_.value();
          work.size_bytes = op.collective->size_bytes * after_gemm_share;
          after = {gemm, task};
          last = add(prefix + op.name + ".last", Stream::tensor, work, after);
        }
      } else {
        after.insert(after.end(), pending.begin(), pending.end());
        // Beside a userbuffers collective a GEMM runs as they launch it: in chunks of rows
        // beside a ring exchange or a pipelined reduce-scatter, leaving their SMs free.
        const GemmLaunch launch = overlap_tp_ ? userbuffers_gemm(list, i, tp_) : GemmLaunch{op, 1};
        first_chunk_.reset();
        if (launch.chunks == 1) {
          last = compute(prefix + op.name, launch.part, after, recomputed);
        } else {
          // The first chunk waits for what the GEMM waits for; the last, beside a ring
          // exchange, for the gather's last piece: the whole gather here.
          for (int c = 0; c < launch.chunks; ++c) {
            std::vector<TaskIndex> chunk_after;
            if (c == 0) chunk_after = after;
            if (c == launch.chunks - 1) {
              chunk_after.insert(chunk_after.end(), gather.begin(), gather.end());
            }
            last = compute(prefix + op.name + ".chunk" + std::to_string(c), launch.part,
                           std::move(chunk_after), recomputed);
            if (c == 0) first_chunk_ = last;
          }
        }
      }
      last_after = std::move(after);
      before_last = chain_end_;
      chain_end_ = last;
    }
    return *last;
  }

  // One side of a pipeline transfer: the send waits for `deps`, the receive for nothing (it is
  // posted ahead, as Megatron posts its irecv) and the compute that needs it depends on it.
  TaskIndex transfer(const std::string& name, int id, bool sends, double size_bytes,
                     std::vector<TaskIndex> deps) {
    CollectiveWork work{CollectiveOp::send_recv, size_bytes, GroupKind::pipeline, id, sends};
    return add(name, Stream::pipeline, work, std::move(deps));
  }
  void mark_saved_layers(TaskIndex task, int change) { program_->mark_saved_layers(task, change); }

 private:
  TaskIndex add(std::string_view name, Stream stream,
                std::variant<ComputeWork, CollectiveWork, HostWork> work,
                const std::vector<TaskIndex>& deps) {
    return program_->add(name, stream, std::move(work), deps);
  }
  // Host work: copies on the copy stream, CPU work on the cpu stream.
  TaskIndex host_task(const std::string& name, HostWork work, std::vector<TaskIndex> deps) {
    graph_->host_work = true;
    if (work.op == HostOp::cpu) graph_->cpu_work = true;
    const Stream stream = work.op == HostOp::cpu ? Stream::cpu : Stream::host_copy;
    return add(name, stream, work, std::move(deps));
  }
  TaskGraph* graph_;
  Program* program_;
  bool overlap_tp_;
  int tp_;
  // The first chunk of the last GEMM run, if it ran in chunks.
  std::optional<TaskIndex> first_chunk_;
  std::optional<TaskIndex> chain_end_;  // the last kernel or tensor-parallel collective
  std::optional<TaskIndex> last_copy_to_host_;
  std::optional<TaskIndex> copy_before_last_;
};

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

// One micro-batch's forward and backward, with the collectives the ZeRO stage needs.
class MicroBatchBuilder {
 public:
  MicroBatchBuilder(ProgramBuilder& build, const std::vector<Unit>& units,
                    const TrainingSpec& training, const ParallelPlan& plan)
      : build_(&build), units_(&units), training_(&training), plan_(&plan) {
    plan_offload_windows();
  }

  // Micro-batch mb's forward over the units, its first op after `entry`; returns its last task.
  TaskIndex forward(int mb, const std::vector<TaskIndex>& entry) {
    tag_ = "mb" + std::to_string(mb) + ".";
    forward_units(entry);
    return forward_end_.back();
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
    tag_ = "mb" + std::to_string(mb) + ".";
    return backward_units(reduce_gradients, first_reduction, entry, last_reduction);
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
    return build_->activation_copy(
        tag_ + offloaded.name + (op == HostOp::copy_to_host ? ".offload" : ".reload"), op,
        offloaded.offloaded_bytes, std::move(deps));
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
  TaskIndex gather(std::size_t u, const std::string& pass, std::optional<TaskIndex> after) {
    std::vector<TaskIndex> deps;
    if (after) deps.push_back(*after);
    return gather_unit_parameters(*build_, Sharding(*plan_),
                                  tag_ + unit(u).name + "." + pass + ".all_gather", unit(u),
                                  unit(u).parameters, deps);
  }

  // FSDP2 (PyTorch's fully_shard, _fsdp_collectives.py) on the compute stream: a gathered unit
  // is copied out of the all-gather's buffer into its parameters (split_with_sizes_copy: its
  // BF16 parameters read and written) before the unit computes, in forward and again in
  // backward.
  TaskIndex copy_out(std::size_t u, const std::string& pass, std::vector<TaskIndex> deps) {
    const double bytes = 2 * unit(u).gathered_bytes(unit(u).parameters);
    return build_->compute(tag_ + unit(u).name + "." + pass + ".copy_out",
                           memory_op("copy_out", bytes), std::move(deps));
  }
  // And a unit's BF16 gradients are copied, cast to the reduce dtype, into the reduce-scatter's
  // input (_chunk_cat) after its backward, once the compute stream has waited for the
  // reduce-scatter before (FSDP2's post_backward waits for the previous one's event first).
  TaskIndex copy_in(std::size_t u, TaskIndex after, std::optional<TaskIndex> previous) {
    std::vector<TaskIndex> deps{after};
    if (previous) deps.push_back(*previous);
    const double bytes = (kBf16Bytes + training_->grad_reduce_bytes) * unit(u).trainable;
    return build_->compute(tag_ + unit(u).name + ".reduce_scatter.copy_in",
                           memory_op("copy_in", bytes), std::move(deps));
  }

  // With sharded parameters each unit is all-gathered before its forward; the gather of unit u
  // waits until unit u - kFsdpUnitsGathered has finished, so at most that many are gathered.
  void forward_units(const std::vector<TaskIndex>& entry) {
    forward_end_.assign(count(), 0);
    copied_out_.assign(group_unit_.size(), 0);
    for (std::size_t u = 0; u < count(); ++u) {
      std::vector<TaskIndex> deps;
      if (u < parameter_gathers_.size() && parameter_gathers_[u]) {
        deps.push_back(*parameter_gathers_[u]);
        parameter_gathers_[u].reset();  // later micro-batches follow in compute-stream order
      }
      if (sharded()) {
        std::optional<TaskIndex> after;
        if (u >= kFsdpUnitsGathered) after = forward_end_[u - kFsdpUnitsGathered];
        deps.push_back(gather(u, "fwd", after));
      }
      if (u == 0) deps.insert(deps.end(), entry.begin(), entry.end());
      if (copies_fsdp2()) deps = {copy_out(u, "fwd", std::move(deps))};
      if (u > 0 && window_ending_at(u - 1) >= 0) {
        deps.push_back(copied_out_[window_ending_at(u - 1)]);
      }
      forward_end_[u] = build_->ops(tag_ + unit(u).name + ".", unit(u).ops.forward, deps);
      if (unit(u).layer >= 0) build_->mark_saved_layers(forward_end_[u], 1);
      if (unit(u).layer == 0 && !group_unit_.empty()) {
        copied_out_[0] = copy_activations(0, HostOp::copy_to_host, {forward_end_[u]});
      }
      const int ending = window_ending_at(u);
      if (ending >= 0 && ending + 1 < static_cast<int>(group_unit_.size())) {
        copied_out_[ending + 1] = copy_activations(ending + 1, HostOp::copy_to_host,
                                                   {forward_end_[u], copied_out_[ending]});
      }
    }
  }

  // Backward, last unit first. With sharded parameters each unit is gathered again (FSDP
  // reshards after the forward pass), the next one prefetched while the current one computes.
  TaskIndex backward_units(bool reduce_gradients, bool first_reduction,
                           const std::vector<TaskIndex>& entry,
                           std::optional<TaskIndex>& last_reduction) {
    const std::size_t n = count();
    backward_end_.assign(n, 0);
    std::vector<TaskIndex> regathered(n);
    auto regather = [&](std::size_t u) {
      std::optional<TaskIndex> after;
      if (u + kFsdpUnitsGathered < n) after = backward_end_[u + kFsdpUnitsGathered];
      regathered[u] = gather(u, "bwd", after);
    };
    const double grad_bytes = training_->grad_reduce_bytes;
    // Dense gradients over every replica; under expert parallelism the experts' over the
    // replicas that hold them, in buckets of their own.
    std::vector<Bucket> buckets, expert_buckets;
    if (reduce_gradients && !sharded()) {
      buckets = gradient_buckets(*units_, grad_bytes, plan_->bucket_bytes,
                                 [](const Unit& u) { return u.dense_trainable(); });
      // With one rank holding each expert (expert_gradient_ranks 1) there is nothing to reduce.
      if (Sharding(*plan_).expert_ranks() > 1) {
        expert_buckets = gradient_buckets(*units_, grad_bytes, plan_->bucket_bytes,
                                          [](const Unit& u) { return u.expert_trainable; });
      }
    }
    const CollectiveOp bucket_op = Sharding(*plan_).reduces_by_scatter()
                                       ? CollectiveOp::reduce_scatter
                                       : CollectiveOp::all_reduce;
    std::size_t next_bucket = 0;
    std::size_t next_expert_bucket = 0;
    std::vector<TaskIndex> copied_back(group_unit_.size());
    if (sharded()) regather(n - 1);
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t u = n - 1 - i;
      if (unit(u).ops.backward.empty()) {
        // A frozen embedding: nothing to gather or compute, the layer above ended the backward.
        backward_end_[u] = backward_end_[u + 1];
        continue;
      }
      if (sharded() && u >= 1 && !unit(u - 1).ops.backward.empty()) regather(u - 1);
      std::vector<TaskIndex> deps;
      if (sharded()) deps.push_back(regathered[u]);
      if (i == 0) deps.insert(deps.end(), entry.begin(), entry.end());
      if (copies_fsdp2()) deps = {copy_out(u, "bwd", std::move(deps))};
      if (unit(u).recomputed) {
        deps.push_back(build_->ops(tag_ + unit(u).name + ".recompute.", unit(u).ops.forward, deps,
                                   /*recomputed=*/true));
      }
      // As layer w(k)'s backward starts (its commit's backward), group k's copy back starts,
      // and the layer waits for group k + 1's.
      if (const int ending = window_ending_at(u); ending >= 0 && u + 1 < n) {
        copied_back[ending] = copy_activations(ending, HostOp::copy_to_gpu, {backward_end_[u + 1]});
        if (ending + 1 < static_cast<int>(group_unit_.size())) {
          deps.push_back(copied_back[ending + 1]);
        }
      }
      if (unit(u).offloaded_bytes > 0) deps.push_back(copied_back[unit(u).layer]);
      backward_end_[u] = build_->ops(tag_ + unit(u).name + ".", unit(u).ops.backward, deps);
      if (unit(u).layer >= 0) build_->mark_saved_layers(backward_end_[u], -1);
      if (!reduce_gradients || unit(u).trainable <= 0) continue;
      if (sharded()) {
        const TaskIndex ready =
            copies_fsdp2() ? copy_in(u, backward_end_[u], last_reduction) : backward_end_[u];
        last_reduction =
            reduce(tag_ + unit(u).name + ".reduce_scatter", CollectiveOp::reduce_scatter,
                   unit(u).dense_trainable(), ready, first_reduction);
        // Its experts' gradients over the replicas holding them, if any other does.
        if (unit(u).expert_trainable > 0 && Sharding(*plan_).expert_ranks() > 1) {
          last_reduction =
              reduce(tag_ + unit(u).name + ".reduce_scatter.experts", CollectiveOp::reduce_scatter,
                     unit(u).expert_trainable, ready, first_reduction, GroupKind::expert_data);
        }
        continue;
      }
      if (next_bucket < buckets.size() && buckets[next_bucket].ready_after_unit == u) {
        reduce_bucket(tag_ + "bucket" + std::to_string(next_bucket) + "." + to_string(bucket_op),
                      bucket_op, buckets[next_bucket].bytes / grad_bytes, backward_end_[u],
                      first_reduction, last_reduction);
        ++next_bucket;
      }
      if (next_expert_bucket < expert_buckets.size() &&
          expert_buckets[next_expert_bucket].ready_after_unit == u) {
        reduce_bucket(tag_ + "expert_bucket" + std::to_string(next_expert_bucket) + "." +
                          to_string(bucket_op),
                      bucket_op, expert_buckets[next_expert_bucket].bytes / grad_bytes,
                      backward_end_[u], first_reduction, last_reduction, GroupKind::expert_data);
        ++next_expert_bucket;
      }
    }
    // FSDP2's root post-backward makes the compute stream wait for the last reduce-scatter at
    // the end of every backward: what follows on it starts after that.
    if (copies_fsdp2() && reduce_gradients && last_reduction) return *last_reduction;
    return backward_end_[0];
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
  std::string tag_;
  std::vector<TaskIndex> forward_end_;
  // Activation offload: by decoder layer, the group whose window ends there (or -1); by group,
  // its unit and its copy out in the current forward.
  std::vector<int> window_group_;
  std::vector<std::size_t> group_unit_;
  std::vector<TaskIndex> copied_out_;
  std::vector<std::optional<TaskIndex>> parameter_gathers_;
  std::vector<TaskIndex> backward_end_;
};

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
  for (const auto& [forward, i, chunk] : pipeline_schedule(plan, stage, m)) {
    // A step of many micro-batches takes seconds to build: a stop (a limit, a signal) is
    // honoured here too, as the replay honours it.
    throw_if_stop_requested();
    const int v = chunk * pp + stage;
    const std::string tag = "mb" + std::to_string(i) + ".";
    std::vector<TaskIndex> entry;
    // Gradient accumulation alone: a forward follows the previous micro-batch's backward.
    if (pp == 1 && forward && previous_end) entry.push_back(*previous_end);
    if (forward) {
      if (v > 0) {
        entry.push_back(build.transfer(tag + "recv_activations", transfer_id(v - 1, i, true), false,
                                       activation_bytes, {}));
      }
      previous_end = micro_batch[chunk].forward(i, entry);
      if (v < virtual_stages - 1) {
        build.transfer(tag + "send_activations", transfer_id(v, i, true), true, activation_bytes,
                       {*previous_end});
      }
      continue;
    }
    if (v < virtual_stages - 1) {
      entry.push_back(build.transfer(tag + "recv_gradients", transfer_id(v, i, false), false,
                                     activation_bytes, {}));
    }
    const bool reduce = reduce_every_micro_batch || i == m - 1;
    previous_end = micro_batch[chunk].backward(i, reduce, !reduce_every_micro_batch || i == 0,
                                               entry, last_reduction);
    if (v > 0) {
      build.transfer(tag + "send_gradients", transfer_id(v - 1, i, false), true, activation_bytes,
                     {*previous_end});
    }
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
