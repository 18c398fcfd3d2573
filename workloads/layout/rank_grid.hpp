// The ranks of a parallel layout and the groups they form.
//
// Ranks are numbered in Megatron-Core's order, the tensor-parallel rank innermost and the
// pipeline stage outermost:
//
//   rank = ((stage x dp + dp_rank) x cp + cp_rank) x tp + tp_rank
//
// so a stage's ranks are consecutive, and so are a replica's. A stage has dp x cp *replicas*
// (replica = dp_rank x cp + cp_rank): the cp ranks of one data-parallel rank hold the same
// parameters as every other replica of the stage. Expert parallelism (ep, with cp 1) lays its
// groups over the replicas. The groups a rank belongs to, one of each kind:
//
//   tensor       the tp consecutive ranks of its replica
//   context      cp consecutive replicas of its stage, the same tp rank (ring attention)
//   data         every replica of its stage, the same tp rank: the ranks that hold the same
//                parameters, over which gradients are reduced and ZeRO shards (Megatron's
//                dp x cp group)
//   expert       ep consecutive replicas of its stage, the same tp rank (a mixture of experts'
//                token all-to-alls)
//   expert_data  the replicas of its stage that hold the same experts (the same replica index
//                modulo ep), the same tp rank: where an expert's gradients are reduced and,
//                under ZeRO, its updated or sharded parameters gathered
//   pipeline     the same tp rank and replica in every stage (point-to-point transfers)
//
// Groups of one kind are numbered stage x groups_per_stage + their index inside the stage
// (pipeline groups, which span the stages, by the position they share). Folding (DESIGN.md)
// replays replica 0 of each stage: its ranks are the representatives, and the groups they
// belong to run whole (a context or expert group's other members, not replayed, take part).
// Every rank of a stage runs the same program, so a group without a representative does at
// the same times what the representative group of its kind does.
#pragma once

#include <vector>

#include "workloads/layout/parallel_plan.hpp"

namespace fleetsim {

enum class GroupKind { tensor, context, data, expert, expert_data, pipeline };
inline constexpr int kGroupKinds = 6;
const char* to_string(GroupKind kind);

class RankGrid {
 public:
  // Throws ModelError unless every size is positive and ep and cp divide the replicas.
  RankGrid(int tp, int cp, int dp, int pp, int ep = 1);
  explicit RankGrid(const ParallelPlan& plan);
  RankGrid() : RankGrid(1, 1, 1, 1) {}

  int ranks() const { return stage_ranks() * pp_; }
  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int ep() const { return ep_; }
  int replicas() const { return dp_ * cp_; }  // per stage
  int stage_ranks() const { return tp_ * replicas(); }

  int stage_of(int rank) const { return rank / stage_ranks(); }
  int replica_of(int rank) const { return (rank / tp_) % replicas(); }
  int tp_rank_of(int rank) const { return rank % tp_; }
  // The rank at the same stage and tp rank in replica `replica`.
  int in_replica(int rank, int replica) const { return rank + (replica - replica_of(rank)) * tp_; }
  // The rank at the same tp rank and replica in stage `stage`.
  int in_stage(int rank, int stage) const {
    return rank + (stage - stage_of(rank)) * stage_ranks();
  }
  int first_rank_of_stage(int stage) const { return stage * stage_ranks(); }
  int rank_at(int stage, int replica, int tp_rank) const {
    return first_rank_of_stage(stage) + replica * tp_ + tp_rank;
  }
  // Replica 0 of its stage: the rank that a folded replay runs for its replicas.
  bool representative(int rank) const { return replica_of(rank) == 0; }

  // Whether the layout has groups of the kind to run collectives in: tensor and data groups
  // always (of one rank, they run nothing), context groups with cp > 1, expert and
  // expert_data groups with ep > 1, pipeline groups with pp > 1.
  bool has_groups(GroupKind kind) const;
  // The groups of the kind in a stage that hold a representative: the one tensor group of
  // replica 0, or one group per tp rank (every data group; a context, expert or expert_data
  // group of replica 0). Each stands for groups_per_stage / representative_groups groups.
  int representative_groups(GroupKind kind) const { return kind == GroupKind::tensor ? 1 : tp_; }

  // Members of one group of the kind.
  int group_size(GroupKind kind) const;
  // Groups of the kind in one stage (pipeline: in the whole grid, which is one "stage" of them).
  int groups_per_stage(GroupKind kind) const;
  int groups(GroupKind kind) const;
  // Which of its stage's groups of the kind the rank belongs to, and that group's number.
  int local_group(int rank, GroupKind kind) const;
  int group_of(int rank, GroupKind kind) const;
  // The ranks of group `group` of the kind, in rank order.
  std::vector<int> members(GroupKind kind, int group) const;

  bool operator==(const RankGrid&) const = default;

 private:
  // An expert or context group's replicas: ep or cp consecutive ones.
  int consecutive_replicas(GroupKind kind) const { return kind == GroupKind::expert ? ep_ : cp_; }

  int tp_ = 1;
  int cp_ = 1;
  int dp_ = 1;
  int pp_ = 1;
  int ep_ = 1;
};

}  // namespace fleetsim
