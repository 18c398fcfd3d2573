// Folding (DESIGN.md): data-parallel replicas run the same program at the same time, so a
// replay runs replica 0 of each stage, the groups it belongs to whole (a context or expert
// group's other members take part in its collectives without being replayed), and of the
// other groups only the copies of their traffic that load links some other replica's or
// block's traffic crosses, so that contention stays simulated. This file decides which ranks are
// replayed and traced, whether the replicas sit on the cluster alike (else every rank is replayed),
// and which copies run.
#pragma once

#include <array>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "sim/collectives/collectives.hpp"
#include "topology/topology.hpp"
#include "workloads/task_graph.hpp"

namespace fleetsim::step_detail {

// Every rank, or folded the representatives (replica 0 of each stage).
std::vector<bool> replayed_ranks(const RankGrid& grid, bool fold);
// The ranks a trace records, `count` of them: the first replayed ones, or with a pipeline the
// first rank of stages spread from the first to the last, so the trace shows the schedule.
std::vector<bool> traced_ranks(const RankGrid& grid, const std::vector<bool>& replayed, int count);
// Whether every data-parallel replica sits on the cluster as replica 0 does (see folding.cpp).
bool replicas_placed_alike(const TaskGraph& graph, const Topology& topology);

// The copies a folded replay runs for the groups without a representative: by kind and
// representative group, the groups of that kind standing in the same place of their stage
// (the same tp rank; the tensor group of any replica); by (sending, receiving) stage and tp
// rank, the other replicas of a pipeline transfer.
struct Shadows {
  std::array<std::vector<std::vector<int>>, kGroupKinds> groups;
  std::map<std::pair<int, int>, std::vector<std::vector<int>>> pipeline;
};
// Every group's GPUs by kind and group number (none for a kind the layout does not have).
using GroupGpus = std::array<std::vector<std::vector<VertexId>>, kGroupKinds>;
// `gpus` by rank, `transfer_stages` the (sending, receiving) stage of each pipeline transfer,
// `never_binds` by link (or empty) the links that never limit a rate (links_that_never_bind).
Shadows plan_shadows(const RankGrid& grid, const Topology& topology, const Collectives& collectives,
                     const std::vector<VertexId>& gpus, const GroupGpus& group_gpus,
                     const std::set<std::pair<int, int>>& transfer_stages,
                     const std::vector<bool>& never_binds);
// Under optimizer offload the replicas on a node share its host memory, cores and PCIe
// uplinks: by replayed rank, the same rank of its stage in the other replicas on its node,
// whose host work runs too. Replicas on other nodes have hosts of their own.
std::vector<std::vector<int>> host_shadows(const RankGrid& grid, const Topology& topology,
                                           const std::vector<VertexId>& gpus,
                                           const std::vector<bool>& replayed);

}  // namespace fleetsim::step_detail
