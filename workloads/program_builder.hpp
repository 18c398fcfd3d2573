// Builds a stage's program task by task: kernels on the compute stream, the layers'
// tensor-parallel collectives beside or between them (ops), data-parallel collectives,
// pipeline transfers, expert all-to-alls of merged passes and host work, each on its stream
// (workloads/task_graph.hpp says which). The task graph's builders use it.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "workloads/task_graph.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {

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
                bool recomputed = false);

  // An all-to-all of a merged pass (ep_comm_overlap), on the expert stream, Megatron-Core's
  // communication stream, after `deps`: the compute stream goes on with the other pass, and
  // only the ops that read what it moves wait for it.
  TaskIndex exchange(const std::string& name, const LayerCollective& collective,
                     const std::vector<TaskIndex>& deps) {
    return add(name, Stream::expert,
               CollectiveWork{collective.op, collective.size_bytes, collective.group}, deps);
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

}  // namespace fleetsim
