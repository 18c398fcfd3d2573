// Folding (DESIGN.md): data-parallel replicas run the same program at the same time, so a
// replay runs replica 0 of each stage, the groups it belongs to whole (a context or expert
// group's other members take part in its collectives without being replayed), and of the
// other groups only the copies of their traffic that load links some other replica's or
// block's traffic crosses, so that contention stays simulated. The tensor-parallel ranks of a
// group run the same program too, in step (each of their collectives waits for all of them):
// where each meets the cluster as tp rank 0 does, replica 0's tp rank 0 alone is replayed, its
// tensor group runs whole and the other tp ranks' traffic runs as copies. Copies that mirror
// traffic that runs (the replayed ranks', or the first node's of a stage) are left out. This
// file decides which ranks are replayed and traced, whether the replicas and tp ranks sit on
// the cluster alike (else every rank is replayed), and which copies run.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "sim/collectives/collectives.hpp"
#include "topology/topology.hpp"
#include "workloads/task_graph.hpp"

namespace fleetsim::step_detail {

// What a replay runs: every rank; replica 0 of each stage; or replica 0's tp rank 0 of each.
enum class Fold { none, replicas, tensor };
// The fold a step takes: none when not `allowed` or nothing is alike, else the deepest whose
// ranks sit alike (replicas_placed_alike, tensor_ranks_alike).
Fold fold_of(const TaskGraph& graph, const Topology& topology, bool allowed);
// The replayed rank that stands for `rank` (itself when it is replayed).
int stand_in(const RankGrid& grid, Fold fold, int rank);
// The groups of a kind in one stage that hold a replayed rank: each stands for
// groups_per_stage / held_groups of them.
int held_groups(const RankGrid& grid, Fold fold, GroupKind kind);
// The ranks each replayed rank stands for, itself included.
int ranks_stood_for(const RankGrid& grid, Fold fold);
// Every rank, or folded the ranks that stand for themselves.
std::vector<bool> replayed_ranks(const RankGrid& grid, Fold fold);
// The ranks a trace records: those `listed`, each of which must be replayed (ModelError naming
// the rank that stands for one that is not); or, none listed, `count` of them: the first
// replayed ones, or with a pipeline the first rank of stages spread from the first to the
// last, so the trace shows the schedule.
std::vector<bool> traced_ranks(const RankGrid& grid, Fold fold, const std::vector<bool>& replayed,
                               int count, const std::vector<int>& listed);
// Whether every data-parallel replica sits on the cluster as replica 0 does (see folding.cpp).
bool replicas_placed_alike(const TaskGraph& graph, const Topology& topology);
// Whether every tp rank of a tensor group meets the cluster as the group's tp rank 0 does (see
// folding.cpp): then tp rank 0 stands for the others.
bool tensor_ranks_alike(const RankGrid& grid, const Topology& topology);

// The copies a folded replay runs for the groups without a replayed rank: by kind and
// replayed group, the groups of that kind it stands for (folding replicas: those at the same
// tp rank; the tensor group of any replica); by (sending, receiving) stage and the replayed
// sender's place in its stage (replica x tp + tp rank), the places of the other pairs of a
// pipeline transfer that it stands for.
// Under offload, by replayed rank, the ranks whose host work runs beside its own.
struct Shadows {
  std::array<std::vector<std::vector<int>>, kGroupKinds> groups;
  std::map<std::pair<int, int>, std::vector<std::vector<int>>> pipeline;
  std::vector<std::vector<int>> host;
};
// Offload's work on each node's host: the ranks sharing each node's (their CPU Adam splits its
// cores), and whether CPU Adam runs there beside the copies to and from host memory.
struct HostWorkShape {
  std::span<const int> ranks_on_node;
  bool cpu = false;
};
// Every group's GPUs by kind and group number (none for a kind the layout does not have).
using GroupGpus = std::array<std::vector<std::vector<VertexId>>, kGroupKinds>;
// `gpus` by rank, `transfer_stages` the (sending, receiving) stage of each pipeline transfer,
// `never_binds` by link (or empty) the links that never limit a rate (links_that_never_bind).
Shadows plan_shadows(const RankGrid& grid, Fold fold, const Topology& topology,
                     const Collectives& collectives, const std::vector<VertexId>& gpus,
                     const GroupGpus& group_gpus,
                     const std::set<std::pair<int, int>>& transfer_stages,
                     const std::vector<bool>& never_binds);
// The copies a replay must run where the others mirror what runs, so that leaving those out
// changes no rate the replay sees (see folding.cpp): none, where every copy mirrors the
// replayed traffic it stands for; else, where a unit (a node, an NVLink domain) holds several
// replicas or the replayed rank stands for other tp ranks, the copies in the first unit of
// each stage (its replicas' tp rank 0, or failing that every tp rank of it, and then every
// data-parallel group), where each other unit's copies mirror those.
// Under offload (`host`), the host work of ranks mirrors as their other traffic does, and
// the ranks whose host work runs are given too. Only where the data-parallel collectives,
// which run whole, are rings (`rings_only`: reduce-scatters and all-gathers); never with
// context or expert groups or hash routing (nullopt, as where nothing mirrors: plan_shadows'
// and host_shadows' copies run).
std::optional<Shadows> mirrored_shadows(const RankGrid& grid, Fold fold, const Topology& topology,
                                        const Collectives& collectives,
                                        const std::vector<VertexId>& gpus,
                                        const GroupGpus& group_gpus,
                                        const std::set<std::pair<int, int>>& transfer_stages,
                                        const std::vector<bool>& never_binds, bool rings_only,
                                        const HostWorkShape* host);
// Under optimizer offload the ranks on a node share its host memory, cores and PCIe uplinks:
// by replayed rank, the ranks it stands for on its node, whose host work runs too. Ranks on
// other nodes have hosts of their own.
std::vector<std::vector<int>> host_shadows(const RankGrid& grid, Fold fold,
                                           const Topology& topology,
                                           const std::vector<VertexId>& gpus);

}  // namespace fleetsim::step_detail
