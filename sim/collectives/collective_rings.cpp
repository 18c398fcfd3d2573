// The ring orders of a collective's channels and the links one hop of a ring crosses: how its
// ranks group by node or NVLink domain, the edge-disjoint cycles inside one, and the route of
// each hop (Collectives' rings and routes; see collectives.hpp).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "sim/collectives/collectives.hpp"

namespace fleetsim {

namespace {

// Edge-disjoint directed Hamiltonian cycles of the complete directed graph on n vertices, found
// by depth-first search with backtracking across cycles. Such a set of n - 1 cycles exists for
// every n except 4 and 6 (Tillson 1980); for those, or if the step budget runs out, the largest
// set found is used. Each cycle is a ring order; together they use every directed link once.
class HamiltonianCycles {
 public:
  explicit HamiltonianCycles(int n) : n_(n), used_(n, std::vector<char>(n, 0)) {}

  std::vector<std::vector<int>> find() {
    budget_ = kStepBudget;
    if (find_from(0, n_ - 1)) return cycles_;
    // No decomposition (n = 4, 6): every Hamiltonian cycle, which loads each directed link
    // alike ((n - 2)! cycles through each), when there are few enough of them.
    if (n_ <= kMaxEnumerated) return every_cycle();
    for (int target = n_ - 2; target >= 1; --target) {
      budget_ = kStepBudget;
      cycles_.clear();
      for (auto& row : used_) std::fill(row.begin(), row.end(), 0);
      if (find_from(0, target)) return cycles_;
    }
    return {};
  }

 private:
  static constexpr long kStepBudget = 2'000'000;
  static constexpr int kMaxEnumerated = 7;  // 6! = 720 cycles at most

  std::vector<std::vector<int>> every_cycle() const {
    std::vector<int> order(n_);
    for (int i = 0; i < n_; ++i) order[i] = i;
    std::vector<std::vector<int>> cycles;
    do {
      cycles.push_back(order);
    } while (std::next_permutation(order.begin() + 1, order.end()));
    return cycles;
  }

  bool find_from(int k, int target) {
    if (k == target) return true;
    std::vector<int> path{0};
    std::vector<char> on_path(n_, 0);
    on_path[0] = 1;
    return extend(k, target, path, on_path);
  }

  bool extend(int k, int target, std::vector<int>& path, std::vector<char>& on_path) {
    if (--budget_ < 0) return false;
    const int last = path.back();
    if (static_cast<int>(path.size()) == n_) {
      if (used_[last][0]) return false;
      used_[last][0] = 1;
      cycles_.push_back(path);
      if (find_from(k + 1, target)) return true;
      cycles_.pop_back();
      used_[last][0] = 0;
      return false;
    }
    for (int i = 1; i < n_; ++i) {
      const int next = 1 + (i - 1 + k) % (n_ - 1);  // a different first choice per cycle
      if (on_path[next] || used_[last][next]) continue;
      used_[last][next] = 1;
      on_path[next] = 1;
      path.push_back(next);
      if (extend(k, target, path, on_path)) return true;
      path.pop_back();
      on_path[next] = 0;
      used_[last][next] = 0;
      if (budget_ < 0) return false;
    }
    return false;
  }

  int n_;
  long budget_ = 0;
  std::vector<std::vector<char>> used_;
  std::vector<std::vector<int>> cycles_;
};

// The parent of `rank` in NCCL's binary tree rooted at 0 (ncclGetBtree): with b its lowest set
// bit, (rank ^ b) | 2b, or rank ^ b where that is out of range.
int btree_parent(int n, int rank) {
  if (rank == 0) return -1;
  const int bit = rank & -rank;
  const int up = (rank ^ bit) | (bit << 1);
  return up < n ? up : rank ^ bit;
}

}  // namespace

std::array<std::vector<int>, 2> double_binary_tree(int n) {
  std::array<std::vector<int>, 2> parents{std::vector<int>(n), std::vector<int>(n)};
  for (int rank = 0; rank < n; ++rank) {
    parents[0][rank] = btree_parent(n, rank);
    if (n % 2 == 0) {
      const int up = btree_parent(n, n - 1 - rank);
      parents[1][rank] = up < 0 ? -1 : n - 1 - up;
    } else {
      const int up = btree_parent(n, (rank - 1 + n) % n);
      parents[1][rank] = up < 0 ? -1 : (up + 1) % n;
    }
  }
  return parents;
}

std::vector<std::vector<VertexId>> Collectives::group_by_node(
    const std::vector<VertexId>& ranks) const {
  // A group is what talks without a NIC: an NVLink domain (one NVSwitch, maybe many trays), or
  // a node. Groups in the order their first rank appears.
  using Key = std::pair<int, long>;  // (0, NVSwitch vertex) or (1, node)
  std::vector<Key> order;
  std::map<Key, std::vector<VertexId>> groups;
  for (const VertexId gpu : ranks) {
    const std::optional<VertexId> nvswitch = topology_->nvswitch_of(gpu);
    const Key key = nvswitch ? Key{0, *nvswitch} : Key{1, topology_->vertex(gpu).node};
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(gpu);
  }
  std::vector<std::vector<VertexId>> ordered;
  for (const Key& key : order) ordered.push_back(std::move(groups[key]));
  return ordered;
}

std::vector<std::vector<VertexId>> Collectives::node_cycles(
    const std::vector<VertexId>& gpus) const {
  // On a switch every order loads each GPU port alike, so one cycle is enough. When every pair
  // of GPUs has its own link (an xGMI mesh), one cycle would use 1 of the p - 1 links of each
  // GPU: the channels follow edge-disjoint Hamiltonian cycles instead, which together use every
  // link, as RCCL's rings on MI300X do.
  const std::size_t p = gpus.size();
  for (std::size_t a = 0; a < p; ++a) {
    for (std::size_t b = 0; b < p; ++b) {
      if (a != b && !topology_->link_between(gpus[a], gpus[b])) return {gpus};
    }
  }
  std::vector<std::vector<VertexId>> cycles;
  for (const std::vector<int>& cycle : HamiltonianCycles(static_cast<int>(p)).find()) {
    std::vector<VertexId> order;
    for (const int i : cycle) order.push_back(gpus[i]);
    cycles.push_back(std::move(order));
  }
  return cycles.empty() ? std::vector<std::vector<VertexId>>{gpus} : cycles;
}

std::vector<std::vector<VertexId>> Collectives::channel_rings(
    const std::vector<VertexId>& ranks) const {
  const std::vector<std::vector<VertexId>> nodes = group_by_node(ranks);
  if (nodes.empty()) return {};
  if (nodes.size() == 1) return node_cycles(ranks);
  // Across nodes, channel c visits each node along one of its cycles, entered at the node's
  // c-th GPU: the hop into the next node then leaves through (PXN) and arrives at NIC c, and the
  // closing edge of the cycle is that PXN hop, so each channel uses each link of its cycle once.
  // A switch node has one cycle and one channel per GPU (per rail). A mesh node of p GPUs has
  // its node_cycles (p - 1 of them, or every Hamiltonian cycle for p = 4, 6) and p NICs: a
  // channel for every pairing of cycle and entry GPU, lcm(cycles, p) of them (56 on 8 GPUs),
  // loads every xGMI link and every NIC alike where the nodes are alike. Fewer would leave a NIC
  // idle, which the measured 2-node MI355X ring rules out: its 369 GB/s of busbw is beyond what
  // 7 of its 8 400 Gb/s NICs carry
  // (calibration/logs/mi355x16-2node-allreduce-rccl-hisohara-aac14-partial.log).
  std::vector<std::vector<std::vector<VertexId>>> cycles;
  std::size_t channels = std::numeric_limits<std::size_t>::max();
  for (const std::vector<VertexId>& gpus : nodes) {
    cycles.push_back(node_cycles(gpus));
    channels = std::min(channels, std::lcm(cycles.back().size(), gpus.size()));
  }
  std::vector<std::vector<VertexId>> rings(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    for (std::size_t k = 0; k < nodes.size(); ++k) {
      std::vector<VertexId> order = cycles[k][c % cycles[k].size()];
      const VertexId entry = nodes[k][c % nodes[k].size()];
      std::rotate(order.begin(), std::find(order.begin(), order.end(), entry), order.end());
      rings[c].insert(rings[c].end(), order.begin(), order.end());
    }
  }
  return rings;
}

void Collectives::append_hop_links(VertexId from, VertexId to, std::uint64_t flow,
                                   std::vector<LinkId>& links) const {
  const Vertex& source = topology_->vertex(from);
  const Vertex& target = topology_->vertex(to);
  const std::optional<VertexId> shared_switch = topology_->nvswitch_of(from);
  const bool same_domain = shared_switch && shared_switch == topology_->nvswitch_of(to);
  if (source.node == target.node) {
    const std::optional<Topology::HostMemory> staging = topology_->staging_of(source.node);
    if (!staging) {
      topology_->append_route(from, to, links);
      return;
    }
    // No peer-to-peer: up to host memory, written and read back there, and down again.
    topology_->append_route(from, staging->host, links);
    links.push_back(staging->memory_link);
    links.push_back(staging->memory_link);
    topology_->append_route(staging->host, to, links);
    return;
  }
  if (same_domain) {
    topology_->append_route(from, to, links);
    return;
  }
  const std::optional<NetworkHop> hop = network_hop(from, to);
  if (!hop) {
    topology_->append_route(from, to, flow, links);
    return;
  }
  for (const auto& [a, b] : {std::pair{from, hop->proxy}, std::pair{hop->proxy, hop->out_nic},
                             std::pair{hop->out_nic, hop->in_nic}, std::pair{hop->in_nic, to}}) {
    topology_->append_route(a, b, flow, links);
  }
}

std::optional<Collectives::NetworkHop> Collectives::network_hop(VertexId from, VertexId to) const {
  const int node = topology_->vertex(from).node;
  const std::optional<VertexId> nvswitch = topology_->nvswitch_of(from);
  if (node == topology_->vertex(to).node || (nvswitch && nvswitch == topology_->nvswitch_of(to))) {
    return std::nullopt;  // one node or one NVLink domain: no NIC between them
  }
  // Rail-matched: leave through the NIC of the local GPU that has the target's index (PXN),
  // or through the source's own NIC when the node has no such GPU.
  // PXN needs peer-to-peer access: without it the GPU sends through its own NIC.
  const VertexId proxy = topology_->staging_of(node)
                             ? from
                             : topology_->gpu_at(node, topology_->vertex(to).index).value_or(from);
  const std::optional<VertexId> out_nic = topology_->nic_of_gpu(proxy);
  const std::optional<VertexId> in_nic = topology_->nic_of_gpu(to);
  if (!out_nic || !in_nic) return std::nullopt;
  return NetworkHop{proxy, *out_nic, *in_nic};
}

const std::vector<Collectives::Channel>& Collectives::channels(const std::vector<VertexId>& ranks) {
  const auto cached = channel_cache_.find(ranks);
  if (cached != channel_cache_.end()) return cached->second;
  std::vector<Channel> built;
  for (const std::vector<VertexId>& ring : channel_rings(ranks)) {
    const std::uint64_t flow = built.size();
    Channel channel;
    channel.order = ring;
    for (std::size_t i = 0; i < ring.size(); ++i) {
      std::vector<LinkUse> hop = hop_uses(ring[i], ring[(i + 1) % ring.size()], flow);
      channel.links.insert(channel.links.end(), hop.begin(), hop.end());
      channel.hops.push_back(std::move(hop));
    }
    built.push_back(std::move(channel));
  }
  return channel_cache_.emplace(ranks, std::move(built)).first->second;
}

}  // namespace fleetsim
