#include "sim/step/folding.hpp"

#include <algorithm>
#include <array>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

namespace fleetsim::step_detail {
namespace {

// Which links the traffic of more than one owner may cross: a union-find over links, in which
// the links of one group or one pipeline pair are joined, with the owner of each: a replica, a
// block of them (see plan_shadows), or several. Under hash routing every link into or out of
// a switch with equal-cost peers stands for all of them (one extra element), as the hash may
// pick any.
class ReplicaSharing {
 public:
  static constexpr int kMany = -2;  // an owner standing for several

  ReplicaSharing(const Topology& topology, const std::vector<bool>& never_binds)
      : topology_(&topology),
        never_binds_(&never_binds),
        parent_(topology.link_count() + 1),
        owner_(topology.link_count() + 1, kNone) {
    std::iota(parent_.begin(), parent_.end(), std::size_t{0});
  }
  // Joins the links of one piece of traffic of `owner` and returns their part.
  std::optional<std::size_t> join(const std::vector<LinkId>& links, int owner) {
    std::optional<std::size_t> part;
    const auto add = [&](std::size_t element) {
      owner_[element] = owner_[element] == kNone || owner_[element] == owner ? owner : kMany;
      if (part) parent_[find(element)] = find(*part);
      part = element;
    };
    for (const LinkId link : links) {
      if (!never_binds_->empty() && (*never_binds_)[link]) continue;
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
  std::size_t any_equal_cost_link() const { return parent_.size() - 1; }
  std::size_t find(std::size_t x) {
    while (parent_[x] != x) x = parent_[x] = parent_[parent_[x]];
    return x;
  }
  const Topology* topology_;
  const std::vector<bool>* never_binds_;  // by link, or empty
  std::vector<std::size_t> parent_;
  std::vector<int> owner_;  // the one owner whose traffic crosses the link, or none, or many
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

// The GPUs under one leaf switch, where context or expert groups make every layer wait for
// their slowest member: replica 0 stands for the others only if they meet the fabric as it
// does. The nodes under each leaf must be consecutive runs of one size, and no route may pick
// among equal-cost switches by a hash (each replica's flows would collide as they do only
// there): nullopt otherwise. 0 where the nodes share one switch or have no fabric.
std::optional<int> leaf_unit(const Topology& topology) {
  const std::vector<VertexId>& gpus = topology.gpus();
  const int nodes = topology.vertex(gpus.back()).node + 1;
  if (nodes == 1) return 0;
  // Each node's leaf, on the way from its first GPU's NIC to another node's (NIC to NIC, so
  // that an NVLink domain spanning nodes does not hide the fabric).
  const auto nic_of_node = [&](int node) -> std::optional<VertexId> {
    const std::optional<VertexId> gpu = topology.gpu_at(node, 0);
    return gpu ? topology.nic_of_gpu(*gpu) : std::nullopt;
  };
  std::vector<std::optional<VertexId>> leaf(nodes);
  for (int n = 0; n < nodes; ++n) {
    const std::optional<VertexId> from = nic_of_node(n);
    const std::optional<VertexId> to = nic_of_node(n == 0 ? 1 : 0);
    if (!from || !to) return 0;  // no fabric
    for (const LinkId id : topology.route(*from, *to)) {
      const VertexId vertex = topology.link(id).to;
      if (topology.has_equal_cost_peers(vertex)) return std::nullopt;
      if (!leaf[n] && topology.vertex(vertex).kind == VertexKind::leaf_switch) leaf[n] = vertex;
    }
  }
  if (!leaf[0]) return 0;
  int run = 1;
  while (run < nodes && leaf[run] == leaf[0]) ++run;
  if (run == nodes) return 0;
  for (int n = 1; n < nodes; ++n) {
    const bool starts_run = n % run == 0;
    if ((leaf[n] == leaf[n - 1]) == starts_run) return std::nullopt;
  }
  const auto per_node = std::count_if(gpus.begin(), gpus.end(),
                                      [&](VertexId gpu) { return topology.vertex(gpu).node == 0; });
  return run * static_cast<int>(per_node);
}

// The links of the pipeline pair at `place` (its rank in stage 0) between two stages, each
// way: [0] from the first stage of `stages` to the second, [1] back.
std::array<std::vector<LinkId>, 2> pair_links(const RankGrid& grid, const Collectives& collectives,
                                              const std::vector<VertexId>& gpus,
                                              const std::pair<int, int>& stages, int place) {
  const VertexId a = gpus[grid.first_rank_of_stage(stages.first) + place];
  const VertexId b = gpus[grid.first_rank_of_stage(stages.second) + place];
  return {collectives.hop_links(a, b), collectives.hop_links(b, a)};
}

// The GPUs of a unit: a node, or the NVLink domain of several nodes the first GPU is in.
int unit_gpus(const Topology& topology) {
  const VertexId first = topology.gpus().front();
  const int first_node = topology.vertex(first).node;
  const std::optional<VertexId> domain = topology.nvswitch_of(first);
  return static_cast<int>(
      std::count_if(topology.gpus().begin(), topology.gpus().end(), [&](VertexId gpu) {
        return domain ? topology.nvswitch_of(gpu) == domain
                      : topology.vertex(gpu).node == first_node;
      }));
}

// The kinds and line rates of the links on the route from one vertex to another, in order.
std::vector<std::pair<LinkKind, double>> route_signature(const Topology& topology, VertexId from,
                                                         VertexId to) {
  std::vector<std::pair<LinkKind, double>> signature;
  for (const LinkId id : topology.route(from, to)) {
    signature.emplace_back(topology.link(id).kind, topology.link(id).bytes_per_s);
  }
  return signature;
}

}  // namespace

Fold fold_of(const TaskGraph& graph, const Topology& topology, bool allowed) {
  const RankGrid& grid = graph.grid;
  if (!allowed || grid.ranks() == 1 || !replicas_placed_alike(graph, topology)) return Fold::none;
  if (grid.tp() > 1 && tensor_ranks_alike(grid, topology)) return Fold::tensor;
  return grid.replicas() > 1 ? Fold::replicas : Fold::none;
}

int stand_in(const RankGrid& grid, Fold fold, int rank) {
  switch (fold) {
    case Fold::none: return rank;
    case Fold::replicas: return grid.in_replica(rank, 0);
    case Fold::tensor: return grid.first_rank_of_stage(grid.stage_of(rank));
  }
  return rank;
}

int held_groups(const RankGrid& grid, Fold fold, GroupKind kind) {
  switch (fold) {
    case Fold::none: return grid.groups_per_stage(kind);
    case Fold::replicas: return grid.representative_groups(kind);
    case Fold::tensor: return 1;  // the groups of its stage's one replayed rank
  }
  return 1;
}

int ranks_stood_for(const RankGrid& grid, Fold fold) {
  switch (fold) {
    case Fold::none: return 1;
    case Fold::replicas: return grid.replicas();
    case Fold::tensor: return grid.stage_ranks();
  }
  return 1;
}

std::vector<bool> replayed_ranks(const RankGrid& grid, Fold fold) {
  std::vector<bool> replayed(grid.ranks(), true);
  for (int r = 0; r < grid.ranks(); ++r) replayed[r] = stand_in(grid, fold, r) == r;
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
// whole units, or that divide a unit when each stage fills whole units or lies inside one (or
// there is one stage). Otherwise a pipeline transfer may stay inside a unit in one replica and
// cross the fabric in another, and replica 0 would not stand for the others. The blocks of replicas
// that context and expert groups join (see plan_shadows) must sit alike in the same way, and
// on the fabric's leaf switches too (leaf_unit).
bool replicas_placed_alike(const TaskGraph& graph, const Topology& topology) {
  const int unit = unit_gpus(topology);
  const RankGrid& grid = graph.grid;
  const auto shifted_alike = [&](int ranks, int unit_ranks) {
    if (ranks % unit_ranks == 0) return true;
    const int stage = grid.stage_ranks();
    return unit_ranks % ranks == 0 &&
           (grid.pp() == 1 || stage % unit_ranks == 0 || unit_ranks % stage == 0);
  };
  const int block = grid.tp() * std::lcm(grid.cp(), grid.expert_replicas());
  if (!shifted_alike(grid.tp(), unit) || !shifted_alike(block, unit)) return false;
  if (block == grid.tp()) return true;
  const std::optional<int> leaves = leaf_unit(topology);
  return leaves && (*leaves == 0 || shifted_alike(block, *leaves));
}

// Whether every tp rank of a tensor group meets the cluster as the group's tp rank 0 does, so
// that tp rank 0's timeline is each one's: the groups lie inside a unit (a node or an NVLink
// domain), no route picks among equal-cost switches by a hash (each rank's flows would collide
// in their own way), and from each GPU of the first unit the route to each GPU a whole number
// of tensor groups on (where its pipeline peers and data-parallel neighbours sit), to its NIC
// and from its NIC to the NIC of the same GPU in the next unit crosses links of the kinds and
// rates that its group's first GPU's crosses, its NIC shared by as many of the unit's GPUs.
// Replica folding's own conditions (replicas_placed_alike) hold as well.
bool tensor_ranks_alike(const RankGrid& grid, const Topology& topology) {
  const int tp = grid.tp();
  const int unit = unit_gpus(topology);
  if (tp == 1 || unit % tp != 0 || topology.hashes_routes()) return false;
  const std::vector<VertexId>& gpus = topology.gpus();
  std::map<VertexId, int> sharing_nic;
  for (int i = 0; i < unit; ++i) {
    if (const std::optional<VertexId> nic = topology.nic_of_gpu(gpus[i])) ++sharing_nic[*nic];
  }
  // How the i-th GPU reaches the fabric: the GPUs sharing its NIC, the route there, and on to
  // the NIC of the same GPU in the next unit.
  struct NicRoutes {
    int sharing = 0;
    std::vector<std::pair<LinkKind, double>> to_nic, to_next_unit;
    bool operator==(const NicRoutes&) const = default;
  };
  const auto nic_routes = [&](int i) {
    NicRoutes routes;
    const std::optional<VertexId> nic = topology.nic_of_gpu(gpus[i]);
    if (!nic) return routes;
    routes.sharing = sharing_nic[*nic];
    routes.to_nic = route_signature(topology, gpus[i], *nic);
    if (gpus.size() > static_cast<std::size_t>(i + unit)) {
      if (const std::optional<VertexId> next = topology.nic_of_gpu(gpus[i + unit])) {
        routes.to_next_unit = route_signature(topology, *nic, *next);
      }
    }
    return routes;
  };
  for (int i = 0; i < unit; ++i) {
    const int first = i - i % tp;
    if (first == i) continue;
    for (int shift = tp; shift < unit; shift += tp) {
      if (route_signature(topology, gpus[i], gpus[(i + shift) % unit]) !=
          route_signature(topology, gpus[first], gpus[(first + shift) % unit])) {
        return false;
      }
    }
    if (nic_routes(i) != nic_routes(first)) return false;
  }
  return true;
}

// Which copies of the replayed traffic in other replicas must run too. Traffic is owned by
// the block of lcm(cp, expert_replicas) consecutive replicas it stays in (one without cp, ep),
// which the context and expert groups of its replicas stay in too, or by several blocks (a
// data or expert_data group). Block 0 is replayed (replica 0, or its tp rank 0) or runs whole
// (the groups the replayed ranks belong to); each of its other pieces (another replica's
// tensor group or pipeline pair, a context or expert group without a replayed rank, another
// tp rank's pipeline pair) owns itself, so that whatever it shares
// with the replayed traffic runs. A copy whose links, and the links of whatever else it is
// joined to, carry no other owner's traffic loads them as its counterpart in block 0 loads its
// own, and slows nothing that runs: it is left out (a tensor group on its node's NVLink). A
// copy joined to a link that several owners cross (a NIC that a data-parallel ring, run whole,
// or a context ring crosses too; an oversubscribed leaf's uplink; a PCIe switch two replicas
// share) runs. Links that never bind (`never_binds`, a non-blocking fabric's) join nothing:
// no load there slows anyone.
Shadows plan_shadows(const RankGrid& grid, Fold fold, const Topology& topology,
                     const Collectives& collectives, const std::vector<VertexId>& gpus,
                     const GroupGpus& group_gpus,
                     const std::set<std::pair<int, int>>& transfer_stages,
                     const std::vector<bool>& never_binds) {
  Shadows out;
  const int tp = grid.tp();
  const int replicas = grid.replicas();
  const int block = std::lcm(grid.cp(), grid.expert_replicas());
  ReplicaSharing sharing(topology, never_binds);
  // The owner of a piece of traffic over replicas `first` to `last` (the replayed run of block
  // 0, or not): its block, itself (numbered after the blocks), or several.
  int own_owners = replicas / block;
  const auto owner_of = [&](int first, int last, bool replayed) {
    if (first / block != last / block) return ReplicaSharing::kMany;
    return first / block == 0 && !replayed ? own_owners++ : first / block;
  };
  const auto group_owner = [&](const std::vector<int>& members, int representative, int group) {
    return owner_of(grid.replica_of(members.front()), grid.replica_of(members.back()),
                    representative == group);
  };
  // Each group's part and representative (the group of its kind holding the replayed rank that
  // stands for its first member). Folding replicas, every data group holds a representative and
  // runs whole.
  struct Joined {
    GroupKind kind;
    int group;
    int representative;
    std::optional<std::size_t> part;
  };
  std::vector<Joined> joined;
  for (const GroupKind kind : {GroupKind::tensor, GroupKind::data, GroupKind::context,
                               GroupKind::expert, GroupKind::expert_data}) {
    if (!grid.has_groups(kind)) continue;
    for (int g = 0; g < grid.groups(kind); ++g) {
      const std::vector<int> members = grid.members(kind, g);
      const int representative = grid.group_of(stand_in(grid, fold, members.front()), kind);
      joined.push_back(
          {kind, g, representative,
           sharing.join(group_links(collectives, group_gpus[static_cast<int>(kind)][g]),
                        group_owner(members, representative, g))});
    }
  }
  // Pipeline pairs: the same place (replica x tp + tp rank, its rank in stage 0) in two stages,
  // sending both ways; the replayed pair that stands for one is at its stand-in's place.
  std::map<std::pair<int, int>, std::vector<std::optional<std::size_t>>> pipeline_part;
  for (const std::pair<int, int>& stages : transfer_stages) {
    auto& parts = pipeline_part[stages];
    for (int place = 0; place < grid.stage_ranks(); ++place) {
      auto [links, back] = pair_links(grid, collectives, gpus, stages, place);
      links.insert(links.end(), back.begin(), back.end());
      const int replica = place / tp;
      parts.push_back(
          sharing.join(links, owner_of(replica, replica, stand_in(grid, fold, place) == place)));
    }
  }
  for (int kind = 0; kind < kGroupKinds; ++kind)
    out.groups[kind].assign(group_gpus[kind].size(), {});
  for (const Joined& group : joined) {
    if (group.representative == group.group || !sharing.crossed_by_several(group.part)) continue;
    out.groups[static_cast<int>(group.kind)][group.representative].push_back(group.group);
  }
  for (const auto& [stages, parts] : pipeline_part) {
    auto& shadows = out.pipeline[stages];
    shadows.assign(tp, {});  // every replayed place is a tp rank of replica 0
    for (int place = 0; place < grid.stage_ranks(); ++place) {
      const int replayed = stand_in(grid, fold, place);
      if (replayed != place && sharing.crossed_by_several(parts[place])) {
        shadows[replayed].push_back(place);
      }
    }
  }
  return out;
}

// Max-min fair rates are unique. Leave every copy out: a kept flow keeps its rate if the rates
// the copies had are their counterparts' (the folding assumption, which the check below makes
// local: each copy meets on each of its links what its counterpart meets on the link at the
// same place of its route, counting the links that may bind) and each kept flow still has a
// saturated link where no flow is faster (its bottleneck). Every link a pipeline copy crosses that
// may bind is the image of the link at the same place among its counterpart's links that may bind:
// the same kind and rate, and the flows on it, each copy counted as its counterpart, are those on
// the counterpart's link, which no copy crosses. Links that never bind (links_that_never_bind) set
// no rate: the flow network leaves them out of the rates of every flow that crosses a link that
// may bind, as every pipeline transfer does (its GPU's PCIe or NVLink). A kept ring
// bottlenecked on a copy's link is then bottlenecked on that twin too, which the reduced
// replay keeps whole. Copies of tensor groups and of data-parallel rings (tp rank k's, folding
// tp ranks) cross no link of kept traffic, and meet pipeline copies only where those meet
// their images. Anything else (a shared leaf uplink, a tree, all-to-alls, hashed routes)
// keeps the copies.
bool copies_mirror_replayed(const RankGrid& grid, Fold fold, const Topology& topology,
                            const Collectives& collectives, const std::vector<VertexId>& gpus,
                            const GroupGpus& group_gpus,
                            const std::set<std::pair<int, int>>& transfer_stages,
                            const std::vector<bool>& never_binds, bool rings_only) {
  if (fold == Fold::none || !rings_only || grid.cp() > 1 || grid.ep() > 1 ||
      topology.hashes_routes()) {
    return false;
  }
  const auto binds = [&](LinkId link) { return never_binds.empty() || !never_binds[link]; };
  // A flow, as the kept flow it is or stands for: (kind, piece, sub-flow), kind 0 a pipeline
  // pair (sub-flow: its direction), 1 a tensor group and 2 a data-parallel ring (sub-flow: a
  // channel of its ring). The flows crossing each link: kept ones, and copies as their
  // counterparts.
  using Flow = std::tuple<int, std::size_t, std::size_t>;
  // By link id (a dense index): the flows on it, and the links that carry any, in first use.
  struct FlowsOnLinks {
    std::vector<std::vector<Flow>> on;
    std::vector<LinkId> used;
    void add(LinkId link, Flow flow) {
      if (on[link].empty()) used.push_back(link);
      on[link].push_back(flow);
    }
    bool carries(LinkId link) const { return !on[link].empty(); }
  };
  FlowsOnLinks kept_on{std::vector<std::vector<Flow>>(topology.link_count()), {}};
  FlowsOnLinks copies_on{std::vector<std::vector<Flow>>(topology.link_count()), {}};
  // A group's links, by channel of its ring and hop: the links of hop h of channel c.
  const auto ring_links = [&](const std::vector<VertexId>& group) {
    std::vector<std::vector<LinkId>> channels;
    if (group.size() < 2) return channels;
    for (const std::vector<VertexId>& ring : collectives.channel_rings(group)) {
      std::vector<LinkId>& links = channels.emplace_back();
      for (std::size_t i = 0; i < ring.size(); ++i) {
        const std::vector<LinkId> hop = collectives.hop_links(ring[i], ring[(i + 1) % ring.size()]);
        links.insert(links.end(), hop.begin(), hop.end());
      }
    }
    return channels;
  };
  // Groups of a kind: each kept one's channels, and each copy's channels as its counterpart's.
  // The data-parallel rings first, then the tensor groups: a copy on an NVSwitch, whose hops
  // cross only its GPUs' links to the switch, needs no routes where no ring or pipeline pair
  // crosses those links.
  std::set<VertexId> on_switch_links;  // GPUs whose NVLink to their switch something crosses
  const auto note_nodes = [&](const FlowsOnLinks& flows) {
    for (const LinkId link : flows.used) {
      const Link& l = topology.link(link);
      for (const VertexId end : {l.from, l.to}) {
        const VertexId other = end == l.from ? l.to : l.from;
        if (topology.vertex(end).kind == VertexKind::gpu && topology.nvswitch_of(end) == other) {
          on_switch_links.insert(end);
        }
      }
    }
  };
  const auto add_groups = [&](GroupKind kind, int flow_kind) {
    const auto& groups = group_gpus[static_cast<int>(kind)];
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const std::vector<int> members = grid.members(kind, static_cast<int>(g));
      const auto counterpart =
          static_cast<std::size_t>(grid.group_of(stand_in(grid, fold, members.front()), kind));
      const bool kept = std::any_of(members.begin(), members.end(),
                                    [&](int r) { return stand_in(grid, fold, r) == r; });
      const std::optional<VertexId> nvswitch = topology.nvswitch_of(groups[g].front());
      const bool on_quiet_switch =
          kind == GroupKind::tensor && !kept && nvswitch &&
          std::all_of(groups[g].begin(), groups[g].end(), [&](VertexId gpu) {
            return topology.nvswitch_of(gpu) == nvswitch && on_switch_links.count(gpu) == 0;
          });
      if (on_quiet_switch) continue;
      const std::vector<std::vector<LinkId>> channels = ring_links(groups[g]);
      for (std::size_t c = 0; c < channels.size(); ++c) {
        for (const LinkId link : channels[c]) {
          if (!binds(link)) continue;
          (kept ? kept_on : copies_on).add(link, {flow_kind, kept ? g : counterpart, c});
        }
      }
    }
  };
  add_groups(GroupKind::data, 2);
  // Pipeline pairs, each direction apart.
  // Each pair's links that may bind, each direction in route order, by pair of stages and
  // place: a link that never binds sets no rate, so two routes that differ only there (one
  // crossing a fabric's core, its counterpart not) are alike.
  std::map<std::pair<int, int>, std::vector<std::array<std::vector<LinkId>, 2>>> binding_links;
  std::map<std::pair<std::pair<int, int>, int>, std::size_t> pair_number;
  for (const std::pair<int, int>& stages : transfer_stages) {
    auto& of_place = binding_links[stages];
    for (int place = 0; place < grid.stage_ranks(); ++place) {
      const int replayed = stand_in(grid, fold, place);
      const auto [at, added] = pair_number.try_emplace({stages, replayed}, pair_number.size());
      std::array<std::vector<LinkId>, 2>& directions =
          of_place.emplace_back(pair_links(grid, collectives, gpus, stages, place));
      for (std::size_t d = 0; d < 2; ++d) {
        std::erase_if(directions[d], [&](LinkId l) { return !binds(l); });
        for (const LinkId link : directions[d]) {
          (replayed == place ? kept_on : copies_on).add(link, {0, at->second, d});
        }
      }
    }
  }
  note_nodes(kept_on);
  note_nodes(copies_on);
  add_groups(GroupKind::tensor, 1);
  // No kept flow shares a link with a copy, but where a pipeline copy meets it on the image of
  // its counterpart's link (checked below with everything else on that link).
  for (FlowsOnLinks* flows : {&kept_on, &copies_on}) {
    for (const LinkId link : flows->used) std::sort(flows->on[link].begin(), flows->on[link].end());
  }
  // Links of pipeline copies, each checked against its twin.
  std::vector<char> twinned(topology.link_count(), 0);
  std::vector<Flow> mirrored;  // the flows on a copy's link, copies as their counterparts
  for (const std::pair<int, int>& stages : transfer_stages) {
    for (int place = 0; place < grid.stage_ranks(); ++place) {
      const int replayed = stand_in(grid, fold, place);
      if (replayed == place) continue;
      const std::array<std::vector<LinkId>, 2>& copy = binding_links.at(stages)[place];
      const std::array<std::vector<LinkId>, 2>& counterpart = binding_links.at(stages)[replayed];
      for (std::size_t d = 0; d < 2; ++d) {
        if (copy[d].size() != counterpart[d].size()) return false;
        for (std::size_t i = 0; i < copy[d].size(); ++i) {
          const LinkId link = copy[d][i];
          const LinkId twin = counterpart[d][i];
          if (copies_on.carries(twin)) return false;
          const Link& l = topology.link(link);
          const Link& l0 = topology.link(twin);
          if (l.kind != l0.kind || l.bytes_per_s != l0.bytes_per_s) return false;
          mirrored.clear();
          std::merge(kept_on.on[link].begin(), kept_on.on[link].end(), copies_on.on[link].begin(),
                     copies_on.on[link].end(), std::back_inserter(mirrored));
          if (mirrored != kept_on.on[twin]) return false;
          twinned[link] = 1;
        }
      }
    }
  }
  // Every other link a copy crosses carries no kept flow.
  for (const LinkId link : copies_on.used) {
    if (!twinned[link] && kept_on.carries(link)) return false;
  }
  return true;
}

std::vector<std::vector<int>> host_shadows(const RankGrid& grid, Fold fold,
                                           const Topology& topology,
                                           const std::vector<VertexId>& gpus) {
  std::vector<std::vector<int>> shadows(grid.ranks());
  for (int r = 0; r < grid.ranks(); ++r) {
    const int replayed = stand_in(grid, fold, r);
    if (replayed != r && topology.vertex(gpus[r]).node == topology.vertex(gpus[replayed]).node) {
      shadows[replayed].push_back(r);
    }
  }
  return shadows;
}

}  // namespace fleetsim::step_detail
