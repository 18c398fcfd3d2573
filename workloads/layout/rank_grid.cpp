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

RankGrid::RankGrid(int tp, int cp, int dp, int pp, int ep, int etp)
    : tp_(tp), cp_(cp), dp_(dp), pp_(pp), ep_(ep), etp_(etp == 0 ? tp : etp) {
  if (tp < 1 || cp < 1 || dp < 1 || pp < 1 || ep < 1) {
    throw ModelError("a rank grid needs positive tp, cp, dp, pp and ep");
  }
  if (etp_ != tp && etp_ != 1) {
    throw ModelError("the experts' tensor parallelism is tp or 1, not " + std::to_string(etp));
  }
  // Expert groups fill whole replicas, or (etp 1) whole parts of one.
  const bool aligned = etp_ == tp || ep % tp == 0 || tp % ep == 0;
  const long long expert_ranks = static_cast<long long>(ep) * etp_;
  if (stage_ranks() % expert_ranks != 0 || !aligned) {
    throw ModelError("expert groups of ep " + std::to_string(ep) +
                     (etp_ == tp ? " replicas" : " ranks") + " must divide the " +
                     std::to_string(etp_ == tp ? replicas() : stage_ranks()) +
                     (etp_ == tp ? " replicas" : " ranks") + " of a stage" +
                     (aligned ? "" : ", and ep divide tp or tp divide ep"));
  }
}

RankGrid::RankGrid(const ParallelPlan& plan)
    : RankGrid(plan.tp, plan.cp, plan.dp, plan.pp, plan.ep, plan.expert_tp) {}

int RankGrid::representative_groups(GroupKind kind) const {
  switch (kind) {
    case GroupKind::tensor: return 1;
    // Replica 0's ranks, 0 to tp - 1 of the stage: with etp 1 in tp / ep expert groups (one
    // where ep covers them) and min(tp, ep) expert_data groups.
    case GroupKind::expert: return etp_ == tp_ ? tp_ : std::max(1, tp_ / ep_);
    case GroupKind::expert_data: return etp_ == tp_ ? tp_ : std::min(tp_, ep_);
    default: return tp_;
  }
}

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
    case GroupKind::expert_data: return stage_ranks() / (ep_ * etp_);
    case GroupKind::pipeline: return pp_;
  }
  return 0;
}

int RankGrid::groups_per_stage(GroupKind kind) const {
  switch (kind) {
    case GroupKind::tensor: return replicas();
    case GroupKind::context: return tp_ * (replicas() / cp_);
    case GroupKind::expert: return stage_ranks() / ep_;
    case GroupKind::expert_data: return etp_ * ep_;
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
  // The rank's place in the experts' order: i = etp_rank + etp (ep_rank + ep edp_rank).
  const int i = rank % stage_ranks();
  const int etp_rank = i % etp_;
  const int ep_rank = (i / etp_) % ep_;
  const int edp_rank = i / (etp_ * ep_);
  switch (kind) {
    case GroupKind::tensor: return replica;
    case GroupKind::context: return (replica / cp_) * tp_ + tp_rank;
    case GroupKind::expert: return edp_rank * etp_ + etp_rank;
    case GroupKind::expert_data: return ep_rank * etp_ + etp_rank;
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
    case GroupKind::context: {
      const int first = (local / tp_) * cp_;
      for (int j = 0; j < cp_; ++j) ranks.push_back(rank_at(first + j, local % tp_));
      break;
    }
    case GroupKind::expert: {
      const int etp_rank = local % etp_;
      const int edp_rank = local / etp_;
      for (int j = 0; j < ep_; ++j) {
        ranks.push_back(first_rank_of_stage(stage) + etp_rank + etp_ * (j + ep_ * edp_rank));
      }
      break;
    }
    case GroupKind::expert_data: {
      const int etp_rank = local % etp_;
      const int ep_rank = local / etp_;
      for (int e = 0; e < group_size(kind); ++e) {
        ranks.push_back(first_rank_of_stage(stage) + etp_rank + etp_ * (ep_rank + ep_ * e));
      }
      break;
    }
    case GroupKind::data:
      for (int replica = 0; replica < replicas(); ++replica)
        ranks.push_back(rank_at(replica, local));
      break;
    case GroupKind::pipeline: break;
  }
  return ranks;
}

}  // namespace fleetsim
