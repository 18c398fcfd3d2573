#include "sim/step/folding.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

namespace fleetsim::step_detail {
namespace {

// Which links the traffic of more than one data-parallel replica may cross: a union-find over
// links, in which the links of one tensor-parallel group or one pipeline pair are joined, with
// the replica that owns each. Under hash routing every link into or out of a switch with
// equal-cost peers stands for all of them (one extra element), as the hash may pick any.
class ReplicaSharing {
 public:
  explicit ReplicaSharing(const Topology& topology)
      : topology_(&topology),
        parent_(topology.link_count() + 1),
        owner_(topology.link_count() + 1, kNone) {
    std::iota(parent_.begin(), parent_.end(), std::size_t{0});
  }
  // Joins the links of one piece of traffic of `replica` and returns their part.
  std::optional<std::size_t> join(const std::vector<LinkId>& links, int replica) {
    std::optional<std::size_t> part;
    const auto add = [&](std::size_t element) {
      owner_[element] = owner_[element] == kNone || owner_[element] == replica ? replica : kMany;
      if (part) parent_[find(element)] = find(*part);
      part = element;
    };
    for (const LinkId link : links) {
      add(link);
      const Link& l = topology_->link(link);
      if (topology_->has_equal_cost_peers(l.from) || topology_->has_equal_cost_peers(l.to)) {
        add(any_equal_cost_link());
      }
    }
    return part;
  }
  // Once everything is joined: whether the part holds a link that two replicas cross.
  bool crossed_by_several(std::optional<std::size_t> part) {
    if (!part) return false;
    if (shared_root_.empty()) {
      shared_root_.assign(parent_.size(), false);
      for (std::size_t x = 0; x < parent_.size(); ++x) {
        if (owner_[x] == kMany) shared_root_[find(x)] = true;
      }
    }
    return shared_root_[find(*part)];
  }

 private:
  static constexpr int kNone = -1;
  static constexpr int kMany = -2;
  std::size_t any_equal_cost_link() const { return parent_.size() - 1; }
  std::size_t find(std::size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  const Topology* topology_;
  std::vector<std::size_t> parent_;
  std::vector<int> owner_;  // the one replica whose traffic crosses the link, or none, or many
  std::vector<bool> shared_root_;
};

// The links a collective over `gpus` may cross: every hop of every channel's ring (the
// tree's chains inside a node are ring hops too, and every link between nodes is one part).
std::vector<LinkId> group_links(const Collectives& collectives, const std::vector<VertexId>& gpus) {
  if (gpus.size() < 2) return {};
  std::vector<std::pair<VertexId, VertexId>> hops;
  for (const std::vector<VertexId>& ring : collectives.channel_rings(gpus)) {
    for (std::size_t i = 0; i < ring.size(); ++i) {
      hops.emplace_back(ring[i], ring[(i + 1) % ring.size()]);
    }
  }
  std::sort(hops.begin(), hops.end());
  hops.erase(std::unique(hops.begin(), hops.end()), hops.end());
  std::vector<LinkId> links;
  for (const auto& [from, to] : hops) {
    const std::vector<LinkId> hop = collectives.hop_links(from, to);
    links.insert(links.end(), hop.begin(), hop.end());
  }
  return links;
}

}  // namespace

std::vector<bool> replayed_ranks(const RankGrid& grid, bool fold) {
  std::vector<bool> replayed(grid.ranks(), true);
  if (!fold) return replayed;
  for (int r = 0; r < grid.ranks(); ++r) replayed[r] = grid.representative(r);
  return replayed;
}

// The ranks a trace records, `count` of them: the first replayed ones, or with a pipeline the
// first rank of stages spread from the first to the last, so the trace shows the schedule.
std::vector<bool> traced_ranks(const RankGrid& grid, const std::vector<bool>& replayed, int count) {
  std::vector<bool> traced(grid.ranks(), false);
  const int pp = grid.pp();
  if (pp == 1) {
    for (int r = 0; r < grid.ranks() && count > 0; ++r) {
      if (replayed[r]) {
        traced[r] = true;
        --count;
      }
    }
    return traced;
  }
  const int stages = std::min(count, pp);
  for (int i = 0; i < stages; ++i) {
    const int stage = stages == 1 ? 0 : i * (pp - 1) / (stages - 1);
    traced[grid.first_rank_of_stage(stage)] = true;
  }
  return traced;
}

// Whether every data-parallel replica sits on the cluster as replica 0 does, shifted by whole
// units or by whole tensor-parallel groups inside units that its stages fill alike, a unit
// being a node, or an NVLink domain of several nodes (GB200 NVL72): tensor groups that span
// whole units, or that divide a unit when each stage fills whole units (or there is one
// stage). Otherwise a pipeline transfer may stay inside a unit in one replica and cross the
// fabric in another, and replica 0 would not stand for the others.
bool replicas_placed_alike(const TaskGraph& graph, const Topology& topology) {
  const VertexId first = topology.gpus().front();
  const int first_node = topology.vertex(first).node;
  const std::optional<VertexId> domain = topology.nvswitch_of(first);
  const auto unit = static_cast<int>(
      std::count_if(topology.gpus().begin(), topology.gpus().end(), [&](VertexId gpu) {
        return domain ? topology.nvswitch_of(gpu) == domain
                      : topology.vertex(gpu).node == first_node;
      }));
  const RankGrid& grid = graph.grid;
  if (grid.tp() % unit == 0) return true;
  return unit % grid.tp() == 0 && (grid.pp() == 1 || grid.stage_ranks() % unit == 0);
}

// Which copies of the replayed traffic in other replicas must run too. A copy whose links,
// and the links of whatever else of its replica they are joined to, carry no other replica's
// traffic loads them as its representative loads replica 0's: the data-parallel groups,
// replayed whole, cross every replica's links alike and are slowed where replica 0's are, so
// such a copy changes nothing and is left out. A copy joined to a link that several replicas
// cross (a fabric uplink, a PCIe switch two replicas share) runs.
Shadows plan_shadows(const RankGrid& grid, const Topology& topology, const Collectives& collectives,
                     const std::vector<VertexId>& gpus,
                     const std::vector<std::vector<VertexId>>& tensor_groups,
                     const std::set<std::pair<int, int>>& transfer_stages) {
  Shadows out;
  const int tp = grid.tp();
  const int replicas = grid.replicas();
  ReplicaSharing sharing(topology);
  // A tensor group's replica and its representative (the group of replica 0 of its stage).
  const auto replica_of = [&](int group) {
    return grid.replica_of(grid.members(GroupKind::tensor, group).front());
  };
  const auto representative_of = [&](int group) {
    const int first = grid.members(GroupKind::tensor, group).front();
    return grid.group_of(grid.in_replica(first, 0), GroupKind::tensor);
  };
  std::vector<std::optional<std::size_t>> tensor_part;
  for (std::size_t g = 0; g < tensor_groups.size(); ++g) {
    tensor_part.push_back(
        sharing.join(group_links(collectives, tensor_groups[g]), replica_of(static_cast<int>(g))));
  }
  // Pipeline pairs: the same tp rank and replica in two stages, sending both ways.
  std::map<std::pair<int, int>, std::vector<std::optional<std::size_t>>> pipeline_part;
  for (const std::pair<int, int>& stages : transfer_stages) {
    auto& parts = pipeline_part[stages];
    for (int replica = 0; replica < replicas; ++replica) {
      for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
        const VertexId a = gpus[grid.rank_at(stages.first, replica, tp_rank)];
        const VertexId b = gpus[grid.rank_at(stages.second, replica, tp_rank)];
        std::vector<LinkId> links = collectives.hop_links(a, b);
        const std::vector<LinkId> back = collectives.hop_links(b, a);
        links.insert(links.end(), back.begin(), back.end());
        parts.push_back(sharing.join(links, replica));
      }
    }
  }
  out.tensor.assign(tensor_groups.size(), {});
  for (std::size_t g = 0; g < tensor_part.size(); ++g) {
    const int group = static_cast<int>(g);
    if (replica_of(group) == 0 || !sharing.crossed_by_several(tensor_part[g])) continue;
    out.tensor[representative_of(group)].push_back(group);
  }
  for (const auto& [stages, parts] : pipeline_part) {
    auto& shadows = out.pipeline[stages];
    shadows.assign(tp, {});
    for (int replica = 1; replica < replicas; ++replica) {
      for (int tp_rank = 0; tp_rank < tp; ++tp_rank) {
        // parts lists the pairs replica by replica, tp rank innermost.
        if (sharing.crossed_by_several(parts[replica * tp + tp_rank])) {
          shadows[tp_rank].push_back(replica);
        }
      }
    }
  }
  return out;
}

std::vector<std::vector<int>> host_shadows(const RankGrid& grid, const Topology& topology,
                                           const std::vector<VertexId>& gpus,
                                           const std::vector<bool>& replayed) {
  std::vector<std::vector<int>> shadows(grid.ranks());
  for (int r = 0; r < grid.ranks(); ++r) {
    if (!replayed[r]) continue;
    const int node = topology.vertex(gpus[r]).node;
    for (int replica = 1; replica < grid.replicas(); ++replica) {
      const int copy = grid.in_replica(r, replica);
      if (topology.vertex(gpus[copy]).node == node) shadows[r].push_back(copy);
    }
  }
  return shadows;
}

}  // namespace fleetsim::step_detail
