// The per-rank task graph of one training step: what runs, not how long it takes.
//
// A rank runs in-order streams, as a PyTorch rank does: kernels on the compute stream, parameter
// all-gathers on one communication stream and gradient reductions on another (FSDP issues them
// on separate CUDA streams, so a prefetch never waits behind a reduce-scatter). A task starts
// when it reaches the head of its stream and every task it depends on has finished; a
// collective also waits for all members of its group. The step executor (sim/step) replays the
// graph and decides the durations.
//
// Every rank of a pipeline stage runs the same program, so the graph holds one per stage; the
// graph's RankGrid says which ranks a collective of each GroupKind spans. Tensor-parallel
// collectives run on their own stream and the compute stream waits for each (Megatron's,
// without communication overlap: with it, each runs beside its GEMM); so do a mixture of
// experts' all-to-alls in its expert group, while ring attention's exchanges in a context
// group run beside the attention kernel. A pipeline transfer is a pair of tasks,
// the send in one stage's program and the receive in the next (or previous) stage's, between
// the ranks of one pipeline group; they run as soon as their dependencies allow (NCCL's
// isend/irecv), not in stream order. Under ep_comm_overlap the all-to-alls of merged forward
// and backward passes run on a stream of their own (Megatron-Core's communication stream),
// beside the other pass's compute.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "calibration/kernel_cost.hpp"
#include "topology/collective_op.hpp"
#include "workloads/layout/rank_grid.hpp"
#include "workloads/model_spec.hpp"
#include "workloads/pipeline_schedule.hpp"

namespace fleetsim {

// Under optimizer offload a rank also has a copy stream (its copy engine moving gradients to
// host memory and updated weights back) and its share of the host's CPU cores.
enum class Stream { compute, gather, reduce, tensor, pipeline, host_copy, cpu, expert };
inline constexpr int kStreamCount = 8;
inline const char* to_string(Stream stream) {
  switch (stream) {
    case Stream::compute: return "compute";
    case Stream::gather: return "gather";
    case Stream::reduce: return "reduce";
    case Stream::tensor: return "tensor";
    case Stream::pipeline: return "pipeline";
    case Stream::host_copy: return "host_copy";
    case Stream::cpu: return "cpu";
    case Stream::expert: return "expert";
  }
  return "?";
}

// FSDP keeps at most this many units' full parameters at once: the one computing and the one
// prefetched behind it (PyTorch FSDP's default backward prefetch and limit_all_gathers).
inline constexpr int kFsdpUnitsGathered = 2;

struct ComputeWork {
  // In its program's storage, once for each distinct kernel (Program::kernel): a program
  // repeats its layers' kernels over every micro-batch.
  const Kernel* kernel = nullptr;
  double model_flops = 0;  // FLOPs counted for MFU (0 for recomputation)
};

struct CollectiveWork {
  CollectiveOp op;
  double size_bytes = 0;  // nccl-tests message size S
  GroupKind group = GroupKind::data;
  // Pipeline transfers only: the transfer both sides name, and whether this side sends.
  int transfer = -1;
  bool sends = false;
  // The SMs its kernels hold beside compute, when the library says (Transformer Engine's
  // userbuffers); unset: NCCL's channels, the GPU profile's comm_sms.
  std::optional<int> sms_held = std::nullopt;
};

// Optimizer offload's work on the host side: a copy between the rank's GPU and its node's host
// memory over PCIe, or CPU work that moves `bytes` through host memory: accumulating offloaded
// gradients, or the Adam step over `parameters` parameters, which also costs the cores their
// cycles per parameter.
enum class HostOp { copy_to_host, copy_to_gpu, cpu };
struct HostWork {
  HostOp op = HostOp::cpu;
  double bytes = 0;
  double parameters = 0;  // cpu only: parameters the Adam step updates (0: memory-bound work)
};

using TaskIndex = std::uint32_t;

// Items copied back to back into blocks that never move, each copy a view: a step holds
// hundreds of thousands of tasks, and a heap block of its own for each one's name and
// dependencies would cost more to make and free than the rest of the task.
template <typename T>
class BlockArena {
 public:
  // A view of a copy of `items`, valid while the arena lives.
  std::span<const T> add(std::span<const T> items) {
    if (items.empty()) return {};
    if (items.size() > capacity_ - used_) {
      // A new block; a run longer than a block gets one of its own size.
      capacity_ = std::max(kBlockItems, items.size());
      blocks_.push_back(std::make_unique_for_overwrite<T[]>(capacity_));
      used_ = 0;
    }
    T* copy = blocks_.back().get() + used_;
    std::copy(items.begin(), items.end(), copy);
    used_ += items.size();
    return {copy, items.size()};
  }

 private:
  static constexpr std::size_t kBlockItems = (std::size_t{1} << 16) / sizeof(T);
  std::vector<std::unique_ptr<T[]>> blocks_;
  std::size_t capacity_ = 0;  // of the last block
  std::size_t used_ = 0;      // of the last block
};

struct Task {
  std::string_view name;            // these two in its program's storage
  std::span<const TaskIndex> deps;  // earlier tasks of the same program
  Stream stream;
  std::variant<ComputeWork, CollectiveWork, HostWork> work;
};

// A stage's tasks in program order, beside the storage their names, dependencies and kernels
// view: a copy shares it, so the tasks of a copy stay valid whatever becomes of the original.
// (Copies are for reading: two adding tasks would share one storage.)
class Program {
 public:
  // `kernel` kept in the storage, where an equal one is kept already, that one.
  const Kernel* kernel(const Kernel& kernel);
  // Adds a task (its name and dependencies copied into the storage); returns its index.
  TaskIndex add(std::string_view name, Stream stream,
                std::variant<ComputeWork, CollectiveWork, HostWork> work,
                std::span<const TaskIndex> deps);
  const Task& operator[](TaskIndex t) const { return tasks_[t]; }
  std::size_t size() const { return tasks_.size(); }
  bool empty() const { return tasks_.empty(); }
  std::vector<Task>::const_iterator begin() const { return tasks_.begin(); }
  std::vector<Task>::const_iterator end() const { return tasks_.end(); }
  const Task& front() const { return tasks_.front(); }
  const Task& back() const { return tasks_.back(); }
  void reserve(std::size_t tasks) { tasks_.reserve(tasks); }
  // Where decoder layers' saved tensors are taken (at the end of a layer's forward, +1) and
  // freed (at the end of its backward, -1), in program order: what a trace's memory follows.
  struct SavedLayers {
    TaskIndex task;
    int change;
  };
  // Marks come in program order, each at a later task than the last (ModelError otherwise).
  void mark_saved_layers(TaskIndex task, int change);
  std::span<const SavedLayers> saved_layers() const { return saved_layers_; }

 private:
  struct Storage {
    BlockArena<char> names;
    BlockArena<TaskIndex> deps;
    std::unordered_map<Kernel, std::unique_ptr<const Kernel>, KernelHash> kernels;
  };
  Storage& storage();
  std::vector<Task> tasks_;
  std::vector<SavedLayers> saved_layers_;
  std::shared_ptr<Storage> storage_;  // made when first needed
};

struct TaskGraph {
  RankGrid grid;                // the ranks and their groups (workloads/layout/rank_grid.hpp)
  std::vector<Program> stages;  // one program per pipeline stage, run by each of its ranks
  int transfers = 0;            // pipeline transfers, numbered 0..transfers-1
  double tokens_per_step = 0;
  double model_flops_per_rank = 0;     // model_flops summed over the programs, per rank
  double hardware_flops_per_rank = 0;  // executed kernel FLOPs, per rank
  int micro_batches = 0;               // micro-batches per replica per optimizer step
  bool host_work = false;  // some tasks are HostWork: copies to or from host memory, CPU work
  bool cpu_work = false;   // optimizer offload: some of them run CPU Adam
  // Every data-parallel (and expert data-parallel) collective is a reduce-scatter or an
  // all-gather, which the collective library runs as a ring (no all-reduce, which may be a tree).
  bool data_parallel_rings_only = true;
};

// Builds one optimizer step: data-parallel training (ZeRO stage 0-3, bucketed gradient
// reduction overlapped with the backward pass), each replica tensor-parallel over plan.tp
// ranks and pipelined over plan.pp stages (GPipe, 1F1B or interleaved 1F1B). Throws ModelError on
// an inconsistent plan.
TaskGraph build_data_parallel_step(const ModelSpec& model, const TrainingSpec& training,
                                   const ParallelPlan& plan);

}  // namespace fleetsim
