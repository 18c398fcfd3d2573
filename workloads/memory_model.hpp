// Per-GPU memory at the peak of a training step.
//
// Counted, not guessed: weights, gradients and optimizer states follow the precision recipe and
// the ZeRO stage; activations are the tensors each op of a layer saves for its backward pass
// (FlashAttention keeps only Q, K, V, the output and the log-sum-exp, not the s x s scores);
// the logits are copied to FP32 for the loss unless its kernel works in place. The peak is compared
// with the device's visible capacity.
#pragma once

#include <string>
#include <vector>

#include "workloads/communicator_memory.hpp"
#include "workloads/model_spec.hpp"

namespace fleetsim {

// When in the step an item is held. Most are held all along the peak of the activations (the
// end of the forward, or of the warm-up, and the backward that follows); the loss's tensors and
// what a recomputed layer holds again are held at moments that exclude each other on a stage
// (the loss's backward ends before the first layer's starts), so only the larger counts.
enum class MemoryMoment { all_along, loss_backward, layer_backward };
const char* to_string(MemoryMoment moment);

struct MemoryItem {
  std::string name;  // e.g. "optimizer states"
  double bytes = 0;
  std::string basis;  // how it was counted, for the report
  MemoryMoment moment = MemoryMoment::all_along;
  bool operator==(const MemoryItem&) const = default;
};

struct MemoryBreakdown {
  std::vector<MemoryItem> items;  // in a fixed order, see estimate_memory
  // The moment of the peak: all along where no item is held at one moment only, else the
  // moment whose items weigh more. The total counts the items held then.
  MemoryMoment peak = MemoryMoment::all_along;
  // Whether the item counts in the total: held all along or at the peak's moment (an empty one
  // counts either way).
  bool at_peak(const MemoryItem& item) const {
    return item.moment == MemoryMoment::all_along || item.moment == peak || item.bytes == 0;
  }
  // The peak as the caching allocator reserves it: what the framework allocates plus the
  // allocator's gap, the fragmentation it holds beyond that (its peak reserved and peak
  // allocated memory, as PyTorch's memory_stats name them).
  double total_bytes = 0;
  double allocator_gap_bytes = 0;
  double allocated_bytes() const { return total_bytes - allocator_gap_bytes; }
  // The decoder layers whose saved tensors the activations item holds: those of the passes in
  // flight at the peak (InFlight::layers).
  int activation_layers = 0;
  double capacity_bytes = 0;
  // Optimizer offload: the FP32 master weights, Adam moments and gradients of a rank's shard
  // in host memory (the fullest stage's) and all the node's ranks together (0 without
  // offload); the node's host memory (0 where its preset does not say).
  double host_bytes_per_rank = 0;
  double host_bytes_per_node = 0;
  double host_capacity_bytes = 0;
  double headroom_fraction() const { return 1.0 - total_bytes / capacity_bytes; }
  // What the GPU offers with `min_headroom` of it kept free (a plan's --min-headroom), and
  // whether the peak fits in it.
  double usable_bytes(double min_headroom = 0) const { return capacity_bytes * (1 - min_headroom); }
  bool gpu_fits(double min_headroom = 0) const { return total_bytes <= usable_bytes(min_headroom); }
  bool host_fits() const {
    return host_bytes_per_node <= 0 || host_bytes_per_node <= host_capacity_bytes;
  }
  bool fits(double min_headroom = 0) const { return gpu_fits(min_headroom) && host_fits(); }
  bool operator==(const MemoryBreakdown&) const = default;
};

// Practitioners keep 15-30% of HBM free for allocator spikes and fragmentation; below this a run
// is reported with a warning.
inline constexpr double kMinComfortableHeadroom = 0.15;

// The rank with the most memory: with a pipeline, the fullest stage's.
// The parameters pipeline stage `stage` holds (all tp ranks together): its layers, the
// embedding on the first stage and the head on the last (with its copy of a tied embedding).
// With virtual stages, each of its chunks: chunk c is virtual stage c x pp + stage.
double stage_parameters(const ModelSpec& model, const ParallelPlan& plan, int stage);

// What one rank of pipeline stage `stage` holds of the stage's parameters: split over tp, and
// under expert parallelism only experts / ep of each layer's experts (LoRA adapters aside).
struct RankParameters {
  double dense = 0;
  double experts = 0;  // the rank's experts, under expert parallelism (else counted dense)
  double total() const { return dense + experts; }
};
RankParameters rank_parameters(const ModelSpec& model, const ParallelPlan& plan, int stage);

// What pipeline stage `stage` holds at the peak of its schedule: passes (a micro-batch through
// one of its chunks) whose forward has saved activations that their backward has not freed
// yet, the layers those passes span (chunks of an uneven split differ), and of those the
// layers recomputed, which keep only their input. One pass without a pipeline, all m under
// GPipe, pp - stage under 1F1B, the warm-up plus one interleaved. The peak is that of the
// bytes held, a recomputed layer keeping `recomputed_share` of what a layer keeps otherwise.
struct InFlight {
  int passes = 0;
  int layers = 0;
  int recomputed_layers = 0;
  bool every_layer_recomputed = false;  // of each of the stage's chunks (full recomputation)
};
InFlight in_flight(const ModelSpec& model, const TrainingSpec& training, const ParallelPlan& plan,
                   int stage, double recomputed_share = 1);

// What one decoder layer saves for its backward on one rank, for one micro-batch (its share of
// the sequence under context parallelism), as the layout's recomputation keeps it.
double layer_saved_bytes(const ModelSpec& model, const TrainingSpec& training,
                         const ParallelPlan& plan);

// The whole model's weights at their leanest (BF16; under QLoRA the decoder layers in NF4,
// under fp8_params the projections in FP8), before any split: no layout holds less than this
// over all its GPUs together (an FP32 shard of PyTorch's FSDP holds more).
double model_weight_bytes(const ModelSpec& model, const TrainingSpec& training);

// What the memory model needs to know of the GPU.
struct MemoryDevice {
  double capacity_bytes = 0;  // what the device reports as usable
  // Whether its FP8 GEMMs read an operand in either layout (NVIDIA compute capability 10.x,
  // 11.x and from 13: Transformer Engine's is_non_tn_fp8_gemm_supported, utils.py since 2.2).
  // Transformer Engine then keeps no FP8 transpose beside a tensor-scaled FP8 cast
  // (quantizer.cpp's create_transpose); Hopper and compute capability 12 take TN only.
  bool fp8_gemm_any_layout = false;
  // What the collective library sees of the GPU and its node, which sizes its buffers.
  CommunicatorDevice communicators{};
};

// host_bytes_per_rank is set; the caller, which knows the node, sets the per-node figures.
MemoryBreakdown estimate_memory(const ModelSpec& model, const TrainingSpec& training,
                                const ParallelPlan& plan, const MemoryDevice& device);
// The same for a rank of pipeline stage `stage` (estimate_memory gives the fullest stage's).
MemoryBreakdown estimate_stage_memory(const ModelSpec& model, const TrainingSpec& training,
                                      const ParallelPlan& plan, const MemoryDevice& device,
                                      int stage);

// The name of the item that holds the saved tensors of the passes in flight at the peak.
inline constexpr const char* kActivationsItem = "activations";

}  // namespace fleetsim
