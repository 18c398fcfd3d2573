// The layout planner: searches tensor x pipeline x data parallelism, ZeRO stage, micro-batch,
// recomputation and virtual stages for a model, training recipe and cluster, replays the
// layouts that fit, and ranks them by throughput.
//
// Every layout uses all GPUs of the cluster. What is tried for each dimension of the layout is
// that dimension's candidates (workloads/layout/dimensions.cpp, listed in
// docs/layout-reference.md), searched in the planner's order; the micro-batch, a power of two up to
// 8, only where it divides each replica's share of the global batch. Layouts the job rules refuse
// (tp not dividing the heads, interleaving without micro-batches in groups of pp) are counted and
// skipped. Of each layout, only the least recomputation that fits is kept, in the order none,
// selective, full (under full recomputation, the fewest layers of each chunk rerun): each
// adds kernels to the one before (under eager attention, full recomputation of a few layers
// may rerun less than selective's of every layer; the search takes selective first).
//
// The search is exhaustive over what fits, less what a bound rules out (step_lower_bound_s):
// once `top` layouts have been replayed, one whose bound is above the slowest of them cannot
// enter the ranking. Layouts are replayed likeliest fastest first (by a rough estimate that
// prunes nothing), in batches of fixed sizes, in parallel (TBB) within a batch, so the ranking
// and what was replayed do not depend on the thread count.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "sim/step/step_inputs.hpp"

namespace fleetsim {

struct PlanOptions {
  std::size_t top = 10;  // layouts ranked and reported
  StepOptions step;      // how each layout is replayed (folded or not)
  // Layouts replayed between two updates of the bound, after a first batch of `top`.
  std::size_t batch_size = 4;
  // The share of a GPU's memory a layout must leave free to count as fitting (practitioners
  // keep 15-30% for allocator spikes); 0: fitting at all.
  double min_headroom = 0;
};

struct PlannedLayout {
  StepInputs inputs;  // the base inputs with this layout and micro-batch
  StepOutcome outcome;
  double lower_bound_s = 0;  // the bound the search pruned by
};

struct PlanResult {
  std::vector<PlannedLayout> ranked;  // fastest first (ties: enumeration order), at most top
  std::size_t layouts = 0;            // layouts enumerated (before recomputation is chosen)
  std::size_t refused = 0;            // refused by the job rules
  std::size_t not_fitting = 0;        // no recomputation mode fits (with min_headroom free)
  std::size_t replayed = 0;
  std::size_t bounded_out = 0;  // fit, not replayed: their bound could not enter the ranking
  // Layouts tried twice, with activations offloaded beside recomputed, each try replayed or
  // bounded out: layouts + offload_alternatives = refused + not_fitting + replayed +
  // bounded_out.
  std::size_t offload_alternatives = 0;
  // Of the layouts that do not fit, the one needing the least memory per GPU (its memory check
  // only), so that a search where nothing fits says how far off it is.
  std::optional<PlannedLayout> leanest;
};

// A lower bound on the step time, in seconds, the largest of four. The last pipeline stage's
// compute stream, which runs each chunk of layers of every micro-batch back to back (kernels at
// full speed, and the tensor-, expert- and context-parallel collectives it waits for, each at
// its time alone on the fewest nodes that hold its group: whole when it blocks, by how much it
// outlasts the kernel beside it when overlapped), after the first micro-batch's forward has crossed
// the pp - 1 stages before it and before the last gradient has crossed them back: (m vpp + pp - 1)
// chunk times, the bubble formula's ideal (under full recomputation each layer's forward rerun
// in its backward; with recompute_layers, the last stage's rerun layers once a micro-batch),
// plus the output head of each micro-batch; then the first
// stage's optimizer step (offloaded: CPU Adam through the first node's host memory or on its rank's
// share of the cores, then the copy back over PCIe) and, under ZeRO-1 and 2 without
// overlap_param_gather, the parameter all-gather that must enter each of its nodes through the
// NICs; the embedding, pipeline transfers
// and the rest of the data-parallel traffic only add to it. And the first node's NICs: the
// parameter all-gathers in the step (under ZeRO-3 those of every micro-batch's forward and
// backward, the embedding's backward and LoRA adapters left out, QLoRA's counted at its 4-bit
// bytes; under ZeRO 1 and 2 with overlap_param_gather, and FSDP under a pipeline, the gather of
// the updated parameters) and under ZeRO 2 and 3 the
// reduce-scatters of every micro-batch's gradients, added: rings (as the collective library
// runs every all-gather and reduce-scatter) send out of a node as much as they take in, so
// both load each direction. Nor can the reductions start before the first micro-batch's
// forward has run through every layer and the head's forward and backward. And under activation
// offload, each micro-batch's offloaded layers' copies over PCIe and through host memory.
double step_lower_bound_s(const StepInputs& inputs);

// Searches the layouts of `base` (its model, training recipe, cluster and GPU; its layout and
// micro-batch are replaced, its bucket size and optimizer kept). Nothing ranked when nothing
// fits.
PlanResult search_layouts(const StepInputs& base, const PlanOptions& options = {});

}  // namespace fleetsim
