#include "sim/step/folding.hpp"

#include <algorithm>
#include <array>
#include <iterator>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <tuple>

#include "sim/engine/errors.hpp"

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
  for (const auto& [from, to] : hops) collectives.append_hop_links(from, to, 0, links);
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

// The group of a kind holding the replayed rank that stands for group `group`'s first member.
int stand_in_group(const RankGrid& grid, Fold fold, GroupKind kind, int group) {
  return grid.group_of(stand_in(grid, fold, grid.members(kind, group).front()), kind);
}

// A rank's place in its stage (replica x tp + tp rank).
int place_of(const RankGrid& grid, int rank) {
  return rank - grid.first_rank_of_stage(grid.stage_of(rank));
}

// The GPUs of the pipeline pair at `place` (its rank in stage 0) between two stages: [0] in the
// first stage of `stages`, [1] in the second.
std::array<VertexId, 2> pair_gpus(const RankGrid& grid, const std::vector<VertexId>& gpus,
                                  const std::pair<int, int>& stages, int place) {
  return {gpus[grid.first_rank_of_stage(stages.first) + place],
          gpus[grid.first_rank_of_stage(stages.second) + place]};
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
std::vector<bool> traced_ranks(const RankGrid& grid, Fold fold, const std::vector<bool>& replayed,
                               int count, const std::vector<int>& listed) {
  std::vector<bool> traced(grid.ranks(), false);
  if (!listed.empty()) {
    for (const int rank : listed) {
      if (rank < 0 || rank >= grid.ranks()) {
        throw ModelError("rank " + std::to_string(rank) + " is not in the layout's " +
                         std::to_string(grid.ranks()) + " ranks: trace ranks 0 to " +
                         std::to_string(grid.ranks() - 1));
      }
      if (!replayed[rank]) {
        const std::string stand_in_rank = std::to_string(stand_in(grid, fold, rank));
        throw ModelError("rank " + std::to_string(rank) + " is not replayed: folded, rank " +
                         stand_in_rank + " stands for it (trace rank " + stand_in_rank +
                         ", or add --no-fold to replay every rank)");
      }
      traced[rank] = true;
    }
    return traced;
  }
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
      const int representative = stand_in_group(grid, fold, kind, g);
      joined.push_back(
          {kind, g, representative,
           sharing.join(group_links(collectives, group_gpus[static_cast<int>(kind)][g]),
                        group_owner(members, representative, g))});
    }
  }
  // Pipeline pairs: the same place (replica x tp + tp rank, its rank in stage 0) in two stages,
  // sending both ways; the replayed pair that stands for one is at its stand-in's place.
  std::map<std::pair<int, int>, std::vector<std::optional<std::size_t>>> pipeline_part;
  std::vector<LinkId> links;
  for (const std::pair<int, int>& stages : transfer_stages) {
    auto& parts = pipeline_part[stages];
    for (int place = 0; place < grid.stage_ranks(); ++place) {
      const auto [a, b] = pair_gpus(grid, gpus, stages, place);
      links.clear();
      collectives.append_hop_links(a, b, 0, links);
      collectives.append_hop_links(b, a, 0, links);
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

namespace {

// What a reduced replay runs of each piece of traffic: the piece itself (its image is itself),
// or nothing, the piece it mirrors (its image) standing for it. By kind, each group's image
// group (tensor and data groups; the others keep their copies); by place in a stage (replica x
// tp + tp rank), the image of the pipeline pairs and host work there, in every stage.
struct Images {
  std::array<std::vector<int>, kGroupKinds> groups;
  std::vector<int> places;
};

// Every copy mirroring the replayed traffic it stands for: the replayed ranks and the groups
// holding one run, nothing else.
Images stand_in_images(const RankGrid& grid, Fold fold) {
  Images images;
  for (const GroupKind kind : {GroupKind::tensor, GroupKind::data}) {
    for (int g = 0; g < grid.groups(kind); ++g) {
      images.groups[static_cast<int>(kind)].push_back(stand_in_group(grid, fold, kind, g));
    }
  }
  for (int place = 0; place < grid.stage_ranks(); ++place) {
    images.places.push_back(stand_in(grid, fold, place));
  }
  return images;
}

// Every copy mirroring the traffic as many whole units (nodes, or NVLink domains) back, in the
// first unit of its stage: the replicas sharing a unit with replica 0 run their tensor groups
// and pipeline pairs. With `tp_ranks_too`, every tp rank of those replicas runs its pipeline
// pairs and host work and every data-parallel group runs (each spans the units alike); else,
// folding tp ranks, only tp rank 0's do, standing for the others as stand_in_images has it.
// nullopt where the images are stand_in_images' (one replica a unit, and tp ranks folded or
// not to fold), where `tp_ranks_too` changes nothing (tp ranks not folded: the images are
// given without it), or where the units do not hold whole replicas.
std::optional<Images> unit_images(const RankGrid& grid, Fold fold, const Topology& topology,
                                  bool tp_ranks_too) {
  const int tp = grid.tp();
  const int unit = unit_gpus(topology);
  const int unit_replicas = unit % tp == 0 ? unit / tp : 1;
  const bool folds_tp_ranks = fold == Fold::tensor && !tp_ranks_too;
  const bool as_stand_in = unit_replicas == 1 && (fold == Fold::replicas || folds_tp_ranks);
  const bool repeated = fold == Fold::replicas && tp_ranks_too;
  if (grid.replicas() % unit_replicas != 0 || as_stand_in || repeated) return std::nullopt;
  Images images;
  for (int g = 0; g < grid.groups(GroupKind::tensor); ++g) {
    const int first = grid.members(GroupKind::tensor, g).front();
    const int image = grid.rank_at(grid.stage_of(first), grid.replica_of(first) % unit_replicas, 0);
    images.groups[static_cast<int>(GroupKind::tensor)].push_back(
        grid.group_of(image, GroupKind::tensor));
  }
  for (int g = 0; g < grid.groups(GroupKind::data); ++g) {
    images.groups[static_cast<int>(GroupKind::data)].push_back(
        folds_tp_ranks ? stand_in_group(grid, fold, GroupKind::data, g) : g);
  }
  for (int place = 0; place < grid.stage_ranks(); ++place) {
    const int in_unit = place % (unit_replicas * tp);
    images.places.push_back(folds_tp_ranks ? in_unit - in_unit % tp : in_unit);
  }
  return images;
}

// A flow's label: (kind, piece, sub-flow), kind 0 a pipeline pair (sub-flow: its direction), 1
// a tensor group and 2 a data-parallel ring (sub-flow: a channel of its ring), 3 a rank's host
// work (sub-flow: its copy to host memory, back, its CPU Adam there). A flow that runs is
// labelled as itself, a copy left out as its image.
using Label = std::tuple<int, std::size_t, std::size_t>;

// By link id (a dense index): the labels of the flows on it, and the links that carry any, in
// first use.
struct LabelsOnLinks {
  std::vector<std::vector<Label>> on;
  std::vector<LinkId> used;
  explicit LabelsOnLinks(std::size_t links) : on(links) {}
  void add(LinkId link, const Label& label) {
    if (on[link].empty()) used.push_back(link);
    on[link].push_back(label);
  }
  bool carries(LinkId link) const { return !on[link].empty(); }
  void sort() {
    for (const LinkId link : used) std::sort(on[link].begin(), on[link].end());
  }
};

// Every sub-flow's links that may bind, in route order, back to back (sub-flow k is
// binding[starts[k]] to binding[starts[k + 1]]), each labelled on the links as it runs or as a
// copy left out. A link that never binds sets no rate, so two routes that differ only there
// (one crossing a fabric's core, its image not) are alike.
class SubFlows {
 public:
  SubFlows(std::size_t links, const std::vector<bool>& never_binds)
      : runs(links), copies(links), never_binds_(&never_binds) {}
  // Adds the sub-flow over `route`: its number.
  std::size_t add(const std::vector<LinkId>& route, bool runs_itself, const Label& label) {
    for (const LinkId link : route) {
      if (!never_binds_->empty() && (*never_binds_)[link]) continue;
      binding_.push_back(link);
      (runs_itself ? runs : copies).add(link, label);
    }
    starts_.push_back(binding_.size());
    return starts_.size() - 2;
  }
  std::size_t count() const { return starts_.size() - 1; }
  std::span<const LinkId> links(std::size_t k) const {
    return {binding_.data() + starts_[k], starts_[k + 1] - starts_[k]};
  }
  LabelsOnLinks runs;
  LabelsOnLinks copies;

 private:
  const std::vector<bool>* never_binds_;
  std::vector<LinkId> binding_;
  std::vector<std::size_t> starts_{0};
};

// Max-min fair rates are unique. Leave out every copy, a piece of traffic whose image is
// another: the rates of what runs are unchanged if giving each copy its image's rate keeps
// every link within its capacity and every flow that runs still has a saturated link where no
// flow is faster (its bottleneck). The check makes that local, link by link, counting the
// links that may bind (links_that_never_bind: those set no rate, and the flow network leaves
// them out of the rates of every flow that crosses one that may bind). Each copy's links that
// may bind, in route order, are those of its image (the same sub-flow: direction, ring channel
// or host work) moved: at each place the same kind and rate, and the labels on the copy's link
// (all of them: the `mirrored` ones) are those on its twin, the image's link. Where the twin
// carries no copy, its labels are what runs on it (an anchor); where it does, the twin's own
// labels must be the same, and the chain of twins from every link a copy crosses must end at
// an anchor (a cycle anchors nothing). Then each link's load is its anchor's, within capacity;
// a link that runs some of its labels' flows without the others (copies left out) is below its
// anchor's load, so no flow that runs has its bottleneck there, and a bottleneck without copies
// is kept whole; a copy's twin at its image's bottleneck is saturated as that is, the copy the
// fastest there as its image is. CPU Adam's rate cap is its node's share of the cores: a copy's
// node must have the cores of its image's, shared by as many ranks.
class TwinCheck {
 public:
  TwinCheck(const Topology& topology, const SubFlows& flows)
      : topology_(&topology), flows_(&flows), anchored_(topology.link_count(), 0) {}

  // Whether copy sub-flow `copy` meets on each link what sub-flow `image` meets on its own.
  bool mirrors(std::size_t copy, std::size_t image) {
    const std::span<const LinkId> links = flows_->links(copy);
    const std::span<const LinkId> twins = flows_->links(image);
    if (links.size() != twins.size()) return false;
    for (std::size_t i = 0; i < links.size(); ++i) {
      const Link& link = topology_->link(links[i]);
      const Link& twin = topology_->link(twins[i]);
      if (link.kind != twin.kind || link.bytes_per_s != twin.bytes_per_s) return false;
      mirrored(links[i], mirrored_);
      if (!flows_->copies.carries(twins[i])) {
        if (mirrored_ != flows_->runs.on[twins[i]]) return false;
        anchored_[links[i]] = 1;
      } else {
        mirrored(twins[i], twin_mirrored_);
        if (mirrored_ != twin_mirrored_) return false;
        chained_.emplace_back(links[i], twins[i]);
      }
    }
    return true;
  }

  // After every copy's sub-flows: whether every link a copy crosses reaches an anchor.
  bool anchored() {
    for (bool grew = true; grew;) {
      grew = false;
      for (const auto& [link, twin] : chained_) {
        if (!anchored_[link] && anchored_[twin]) {
          anchored_[link] = 1;
          grew = true;
        }
      }
    }
    const std::vector<LinkId>& crossed = flows_->copies.used;
    return std::all_of(crossed.begin(), crossed.end(),
                       [&](LinkId link) { return anchored_[link] != 0; });
  }

 private:
  void mirrored(LinkId link, std::vector<Label>& out) const {
    out.clear();
    const auto& runs = flows_->runs.on[link];
    const auto& copies = flows_->copies.on[link];
    std::merge(runs.begin(), runs.end(), copies.begin(), copies.end(), std::back_inserter(out));
  }
  const Topology* topology_;
  const SubFlows* flows_;
  std::vector<char> anchored_;                      // by link
  std::vector<std::pair<LinkId, LinkId>> chained_;  // (link, twin): a twin carrying copies
  std::vector<Label> mirrored_, twin_mirrored_;
};

// Whether every copy left out under `images` mirrors its image (TwinCheck). Copies of a tensor
// group on an NVSwitch whose GPUs' links to it carry nothing else touch nothing that runs and
// are not looked at.
bool images_mirror(const Images& images, const Topology& topology, const Collectives& collectives,
                   const std::vector<VertexId>& gpus, const RankGrid& grid,
                   const GroupGpus& group_gpus,
                   const std::set<std::pair<int, int>>& transfer_stages,
                   const std::vector<bool>& never_binds, const HostWorkShape* host) {
  SubFlows flows(topology.link_count(), never_binds);
  std::vector<LinkId> links;  // one sub-flow's route, as it is looked at
  // By kind and group: its ring channels' first sub-flow, and how many (none where skipped).
  std::array<std::vector<std::pair<std::size_t, std::size_t>>, kGroupKinds> group_flows;
  // GPUs whose NVLink to their switch something crosses. The data-parallel rings first, then
  // the pipeline pairs and host work, then the tensor groups: a copy on an NVSwitch, whose hops
  // cross only its GPUs' links to the switch, needs no routes where nothing else crosses
  // those links.
  std::set<VertexId> on_switch_links;
  const auto note_nodes = [&](const LabelsOnLinks& labels) {
    for (const LinkId link : labels.used) {
      const Link& l = topology.link(link);
      for (const VertexId end : {l.from, l.to}) {
        const VertexId other = end == l.from ? l.to : l.from;
        if (topology.vertex(end).kind == VertexKind::gpu && topology.nvswitch_of(end) == other) {
          on_switch_links.insert(end);
        }
      }
    }
  };
  const auto add_groups = [&](GroupKind kind, int label_kind) {
    const int k = static_cast<int>(kind);
    const auto& groups = group_gpus[k];
    group_flows[k].assign(groups.size(), {0, 0});
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto image = static_cast<std::size_t>(images.groups[k][g]);
      const bool runs = image == g;
      const std::optional<VertexId> nvswitch = topology.nvswitch_of(groups[g].front());
      const bool on_quiet_switch =
          kind == GroupKind::tensor && !runs && nvswitch &&
          std::all_of(groups[g].begin(), groups[g].end(), [&](VertexId gpu) {
            return topology.nvswitch_of(gpu) == nvswitch && on_switch_links.count(gpu) == 0;
          });
      if (on_quiet_switch || groups[g].size() < 2) continue;
      const std::vector<std::vector<VertexId>> rings = collectives.channel_rings(groups[g]);
      group_flows[k][g] = {flows.count(), rings.size()};
      for (std::size_t c = 0; c < rings.size(); ++c) {
        const std::vector<VertexId>& ring = rings[c];
        links.clear();
        for (std::size_t i = 0; i < ring.size(); ++i) {
          collectives.append_hop_links(ring[i], ring[(i + 1) % ring.size()], 0, links);
        }
        flows.add(links, runs, {label_kind, image, c});
      }
    }
  };
  add_groups(GroupKind::data, 2);
  // Pipeline pairs, each direction a sub-flow: the pair at `place` of the s-th pair of stages
  // (in transfer_stages' order) is sub-flows pair_flows + 2 (s stage_ranks + place) + d.
  const std::size_t pair_flows = flows.count();
  std::map<std::pair<std::pair<int, int>, int>, std::size_t> pair_number;
  for (const std::pair<int, int>& stages : transfer_stages) {
    for (int place = 0; place < grid.stage_ranks(); ++place) {
      const int image = images.places[place];
      const auto [at, added] = pair_number.try_emplace({stages, image}, pair_number.size());
      const std::array<VertexId, 2> ends = pair_gpus(grid, gpus, stages, place);
      for (std::size_t d = 0; d < 2; ++d) {
        links.clear();
        collectives.append_hop_links(ends[d], ends[1 - d], 0, links);
        flows.add(links, image == place, {0, at->second, d});
      }
    }
  }
  // Host work, each rank's sub-flows host_flows + rank host_ops + op: its GPU's route to its
  // node's host and on to host memory, back, and CPU Adam there (where it runs).
  const std::size_t host_flows = flows.count();
  const std::size_t host_ops = host && host->cpu ? 3 : 2;
  const auto image_rank = [&](int rank) {
    return rank - place_of(grid, rank) + images.places[place_of(grid, rank)];
  };
  const auto node_of = [&](int rank) { return topology.vertex(gpus[rank]).node; };
  const auto host_flow = [&](int rank, std::size_t op) {
    return host_flows + static_cast<std::size_t>(rank) * host_ops + op;
  };
  for (int rank = 0; host && rank < grid.ranks(); ++rank) {
    const std::optional<Topology::HostMemory> memory = topology.host_memory_of(node_of(rank));
    if (!memory) return false;
    for (std::size_t op = 0; op < host_ops; ++op) {
      links.clear();
      if (op == 0) topology.append_route(gpus[rank], memory->host, links);
      if (op == 1) topology.append_route(memory->host, gpus[rank], links);
      links.push_back(memory->memory_link);
      const int image = image_rank(rank);
      flows.add(links, image == rank, {3, static_cast<std::size_t>(image), op});
    }
  }
  note_nodes(flows.runs);
  note_nodes(flows.copies);
  add_groups(GroupKind::tensor, 1);
  flows.runs.sort();
  flows.copies.sort();

  TwinCheck twins(topology, flows);
  for (const GroupKind kind : {GroupKind::data, GroupKind::tensor}) {
    const int k = static_cast<int>(kind);
    for (std::size_t g = 0; g < group_flows[k].size(); ++g) {
      const auto [first, channels] = group_flows[k][g];
      const auto image = static_cast<std::size_t>(images.groups[k][g]);
      if (image == g || channels == 0) continue;
      if (group_flows[k][image].second != channels) return false;
      for (std::size_t c = 0; c < channels; ++c) {
        if (!twins.mirrors(first + c, group_flows[k][image].first + c)) return false;
      }
    }
  }
  const auto places = static_cast<std::size_t>(grid.stage_ranks());
  for (std::size_t s = 0; s < transfer_stages.size(); ++s) {
    for (std::size_t place = 0; place < places; ++place) {
      const auto image = static_cast<std::size_t>(images.places[place]);
      for (std::size_t d = 0; image != place && d < 2; ++d) {
        const std::size_t copy = pair_flows + 2 * (s * places + place) + d;
        if (!twins.mirrors(copy, pair_flows + 2 * (s * places + image) + d)) return false;
      }
    }
  }
  for (int rank = 0; host && rank < grid.ranks(); ++rank) {
    const int image = image_rank(rank);
    if (image == rank) continue;
    const auto& sharing = host->ranks_on_node;
    const auto cores = [&](int r) { return topology.host_memory_of(node_of(r))->cpu_cycles_per_s; };
    if (sharing[node_of(rank)] != sharing[node_of(image)] || cores(rank) != cores(image)) {
      return false;
    }
    for (std::size_t op = 0; op < host_ops; ++op) {
      if (!twins.mirrors(host_flow(rank, op), host_flow(image, op))) return false;
    }
  }
  return twins.anchored();
}

// The copies that run under `images`: pieces that are their own image but not replayed, as
// plan_shadows and host_shadows give them (by the group, replayed place or rank that stands for
// them).
Shadows running_copies(const Images& images, const RankGrid& grid, Fold fold,
                       const GroupGpus& group_gpus,
                       const std::set<std::pair<int, int>>& transfer_stages, bool host_work) {
  Shadows out;
  for (int kind = 0; kind < kGroupKinds; ++kind) {
    out.groups[kind].assign(group_gpus[kind].size(), {});
  }
  for (const GroupKind kind : {GroupKind::tensor, GroupKind::data}) {
    const int k = static_cast<int>(kind);
    for (int g = 0; g < static_cast<int>(images.groups[k].size()); ++g) {
      const int representative = stand_in_group(grid, fold, kind, g);
      if (images.groups[k][g] == g && representative != g) {
        out.groups[k][representative].push_back(g);
      }
    }
  }
  for (const std::pair<int, int>& stages : transfer_stages) {
    auto& shadows = out.pipeline[stages];
    shadows.assign(grid.tp(), {});  // every replayed place is a tp rank of replica 0
    for (int place = 0; place < grid.stage_ranks(); ++place) {
      const int replayed = stand_in(grid, fold, place);
      if (images.places[place] == place && replayed != place) shadows[replayed].push_back(place);
    }
  }
  if (host_work) {
    out.host.assign(grid.ranks(), {});
    for (int rank = 0; rank < grid.ranks(); ++rank) {
      const int place = place_of(grid, rank);
      const int replayed = stand_in(grid, fold, rank);
      if (images.places[place] == place && replayed != rank) out.host[replayed].push_back(rank);
    }
  }
  return out;
}

}  // namespace

std::optional<Shadows> mirrored_shadows(const RankGrid& grid, Fold fold, const Topology& topology,
                                        const Collectives& collectives,
                                        const std::vector<VertexId>& gpus,
                                        const GroupGpus& group_gpus,
                                        const std::set<std::pair<int, int>>& transfer_stages,
                                        const std::vector<bool>& never_binds, bool rings_only,
                                        const HostWorkShape* host) {
  if (fold == Fold::none || !rings_only || grid.cp() > 1 || grid.ep() > 1 ||
      topology.hashes_routes()) {
    return std::nullopt;
  }
  // Under host work, images folding tp ranks never mirror: a tp rank's host work and its
  // image's cross their node's host memory link both, which a copy left out then crosses and
  // which is its own twin.
  const bool folds_host_work = host && fold == Fold::tensor;
  const std::optional<Images> tried[] = {
      folds_host_work ? std::nullopt : std::optional(stand_in_images(grid, fold)),
      folds_host_work ? std::nullopt : unit_images(grid, fold, topology, false),
      unit_images(grid, fold, topology, true)};
  for (const std::optional<Images>& images : tried) {
    if (images && images_mirror(*images, topology, collectives, gpus, grid, group_gpus,
                                transfer_stages, never_binds, host)) {
      return running_copies(*images, grid, fold, group_gpus, transfer_stages, host != nullptr);
    }
  }
  return std::nullopt;
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
