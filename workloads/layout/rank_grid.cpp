#include "workloads/layout/rank_grid.hpp"

#include <string>

#include "sim/engine/errors.hpp"

namespace fleetsim {

const char* to_string(GroupKind kind) {
  switch (kind) {
    case GroupKind::tensor: return "tensor";
    case GroupKind::context: return "context";
    case GroupKind::data: return "data";
    case GroupKind::expert: return "expert";
    case GroupKind::expert_data: return "expert_data";
    case GroupKind::pipeline: return "pipeline";
  }
  return "?";
}

RankGrid::RankGrid(int tp, int cp, int dp, int pp, int ep)
    : tp_(tp), cp_(cp), dp_(dp), pp_(pp), ep_(ep) {
  if (tp < 1 || cp < 1 || dp < 1 || pp < 1 || ep < 1) {
    throw ModelError("a rank grid needs positive tp, cp, dp, pp and ep");
  }
  if (replicas() % ep != 0) {
    throw ModelError("expert groups of ep " + std::to_string(ep) + " ranks must divide the " +
                     std::to_string(replicas()) + " replicas of a stage");
  }
}

RankGrid::RankGrid(const ParallelPlan& plan)
    : RankGrid(plan.tp, plan.cp, plan.dp, plan.pp, plan.ep) {}

bool RankGrid::has_groups(GroupKind kind) const {
  switch (kind) {
    case GroupKind::tensor:
    case GroupKind::data: return true;
    case GroupKind::context: return cp_ > 1;
    case GroupKind::expert:
    case GroupKind::expert_data: return ep_ > 1;
    case GroupKind::pipeline: return pp_ > 1;
  }
  return false;
}

int RankGrid::group_size(GroupKind kind) const {
  switch (kind) {
    case GroupKind::tensor: return tp_;
    case GroupKind::context: return cp_;
    case GroupKind::data: return replicas();
    case GroupKind::expert: return ep_;
    case GroupKind::expert_data: return replicas() / ep_;
    case GroupKind::pipeline: return pp_;
  }
  return 0;
}

int RankGrid::groups_per_stage(GroupKind kind) const {
  switch (kind) {
    case GroupKind::tensor: return replicas();
    case GroupKind::context:
    case GroupKind::expert: return tp_ * (replicas() / consecutive_replicas(kind));
    case GroupKind::expert_data: return tp_ * ep_;
    case GroupKind::data: return tp_;
    case GroupKind::pipeline: return stage_ranks();
  }
  return 0;
}

int RankGrid::groups(GroupKind kind) const {
  return kind == GroupKind::pipeline ? stage_ranks() : pp_ * groups_per_stage(kind);
}

int RankGrid::local_group(int rank, GroupKind kind) const {
  const int replica = replica_of(rank);
  const int tp_rank = tp_rank_of(rank);
  switch (kind) {
    case GroupKind::tensor: return replica;
    case GroupKind::context:
    case GroupKind::expert: return (replica / consecutive_replicas(kind)) * tp_ + tp_rank;
    case GroupKind::expert_data: return (replica % ep_) * tp_ + tp_rank;
    case GroupKind::data: return tp_rank;
    case GroupKind::pipeline: return rank % stage_ranks();
  }
  return 0;
}

int RankGrid::group_of(int rank, GroupKind kind) const {
  if (kind == GroupKind::pipeline) return local_group(rank, kind);
  return stage_of(rank) * groups_per_stage(kind) + local_group(rank, kind);
}

std::vector<int> RankGrid::members(GroupKind kind, int group) const {
  std::vector<int> ranks;
  if (kind == GroupKind::pipeline) {
    for (int stage = 0; stage < pp_; ++stage) ranks.push_back(first_rank_of_stage(stage) + group);
    return ranks;
  }
  const int stage = group / groups_per_stage(kind);
  const int local = group % groups_per_stage(kind);
  const auto rank_at = [&](int replica, int tp_rank) {
    return this->rank_at(stage, replica, tp_rank);
  };
  switch (kind) {
    case GroupKind::tensor:
      for (int t = 0; t < tp_; ++t) ranks.push_back(rank_at(local, t));
      break;
    case GroupKind::context:
    case GroupKind::expert: {
      const int size = consecutive_replicas(kind);
      const int first = (local / tp_) * size;
      for (int j = 0; j < size; ++j) ranks.push_back(rank_at(first + j, local % tp_));
      break;
    }
    case GroupKind::expert_data:
      for (int replica = local / tp_; replica < replicas(); replica += ep_) {
        ranks.push_back(rank_at(replica, local % tp_));
      }
      break;
    case GroupKind::data:
      for (int replica = 0; replica < replicas(); ++replica)
        ranks.push_back(rank_at(replica, local));
      break;
    case GroupKind::pipeline: break;
  }
  return ranks;
}

}  // namespace fleetsim
