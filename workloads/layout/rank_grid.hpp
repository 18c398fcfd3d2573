// The ranks of a parallel layout and the groups they form.
//
// Ranks are numbered in Megatron-Core's order, the tensor-parallel rank innermost and the
// pipeline stage outermost:
//
//   rank = ((stage x dp + dp_rank) x cp + cp_rank) x tp + tp_rank
//
// so a stage's ranks are consecutive, and so are a replica's. A stage has dp x cp *replicas*
// (replica = dp_rank x cp + cp_rank): the cp ranks of one data-parallel rank hold the same
// parameters as every other replica of the stage. Expert parallelism lays its groups over the
// stage's ranks as Megatron-Core's expert rank generator does (parallel_state.py, order
// tp-cp-ep-dp, cp folded into dp): rank i of a stage is
//
//   i = etp_rank + etp x (ep_rank + ep x edp_rank)
//
// with etp the experts' own tensor parallelism: tp (the default), so that an expert group is
// ep consecutive replicas at one tp rank, or 1, so that it is ep consecutive ranks of the
// stage. The groups a rank belongs to, one of each kind:
//
//   tensor       the tp consecutive ranks of its replica
//   context      cp consecutive replicas of its stage, the same tp rank (ring attention)
//   data         every replica of its stage, the same tp rank: the ranks that hold the same
//                parameters, over which gradients are reduced and ZeRO shards (Megatron's
//                dp x cp group)
//   expert       the ranks of its stage with its etp_rank and edp_rank (a mixture of experts'
//                token all-to-alls): ep consecutive replicas at its tp rank, or ep consecutive
//                ranks
//   expert_data  the ranks of its stage with its etp_rank and ep_rank, which hold the same
//                experts: where an expert's gradients are reduced and, under ZeRO, its updated
//                or sharded parameters gathered
//   pipeline     the same tp rank and replica in every stage (point-to-point transfers)
//
// Groups of one kind are numbered stage x groups_per_stage + their index inside the stage
// (pipeline groups, which span the stages, by the position they share). Folding (DESIGN.md)
// replays replica 0 of each stage: its ranks are the representatives, and the groups they
// belong to run whole (a context or expert group's other members, not replayed, take part);
// sim/step/folding.hpp may fold its tp ranks as well.
// Every rank of a stage runs the same program, so a group without a representative does at
// the same times what the representative group of its kind does.
#pragma once

#include <algorithm>
#include <vector>

#include "workloads/layout/parallel_plan.hpp"

namespace fleetsim {

enum class GroupKind { tensor, context, data, expert, expert_data, pipeline };
inline constexpr int kGroupKinds = 6;
const char* to_string(GroupKind kind);

class RankGrid {
 public:
  // Throws ModelError unless every size is positive, etp is 0 (tp), tp or 1, and ep divides
  // the replicas (etp tp) or the stage's ranks (etp 1) in whole replicas or whole parts of one.
  RankGrid(int tp, int cp, int dp, int pp, int ep = 1, int etp = 0);
  explicit RankGrid(const ParallelPlan& plan);
  RankGrid() : RankGrid(1, 1, 1, 1) {}

  int ranks() const { return stage_ranks() * pp_; }
  int tp() const { return tp_; }
  int cp() const { return cp_; }
  int dp() const { return dp_; }
  int pp() const { return pp_; }
  int ep() const { return ep_; }
  int etp() const { return etp_; }
  // The consecutive replicas an expert group's ranks lie in: ep of them at one tp rank, or
  // with etp 1 ep / tp (one, when ep divides tp).
  int expert_replicas() const { return etp_ == tp_ ? ep_ : std::max(1, ep_ / tp_); }
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
  // replica 0, or one group per tp rank (every data group; a context group, or an expert or
  // expert_data group under etp tp, of replica 0); under etp 1 the expert groups and
  // expert_data groups replica 0's tp ranks fall in. Each stands for groups_per_stage /
  // representative_groups groups.
  int representative_groups(GroupKind kind) const;

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
  int tp_ = 1;
  int cp_ = 1;
  int dp_ = 1;
  int pp_ = 1;
  int ep_ = 1;
  int etp_ = 1;
};

}  // namespace fleetsim
