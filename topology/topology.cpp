#include "topology/topology.hpp"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/range/adaptor/transformed.hpp>
#include <string>
#include <unordered_map>

#include "sim/engine/errors.hpp"

namespace fleetsim {
namespace {

constexpr VertexId kNoVertex = UINT32_MAX;
constexpr int kUnreached = -1;

// Out-edges and in-edges are kept in insertion order (vecS), so a route search visits them in
// link creation order and the route chosen among equal-hop paths is always the same.
using Adjacency =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, boost::no_property,
                          boost::property<boost::edge_index_t, LinkId>>;

// Whether a route may take `link`: every link out of the source, and out of any vertex that is
// neither a GPU nor inside a node other than the source's and the destination's, into one that
// is not inside such a node either. A route never crosses a third node's PCIe tree, so the
// search need not enter one: through the fabric it would otherwise visit every node under
// every switch it reaches. (NVSwitches stay open: an NVLink domain spans nodes.) GPUs are
// endpoints: forwarding through a peer is the collective layer's explicit choice.
struct UsableForRoute {
  const std::vector<Vertex>* vertices = nullptr;
  VertexId source = 0;
  int source_node = -1;
  int destination_node = -1;
  bool in_third_node(const Vertex& vertex) const {
    const bool inside_a_node =
        vertex.kind == VertexKind::nic || vertex.kind == VertexKind::pcie_switch ||
        vertex.kind == VertexKind::host || vertex.kind == VertexKind::host_memory;
    return inside_a_node && vertex.node != source_node && vertex.node != destination_node;
  }
  bool operator()(const Link& link) const {
    const Vertex& from = (*vertices)[link.from];
    if (in_third_node((*vertices)[link.to]) || in_third_node(from)) return false;
    return link.from == source || from.kind != VertexKind::gpu;
  }
};

}  // namespace

// The graph, and the buffers of the route search: levels and marks by vertex stay allocated and
// are reset only where a search touched them, so a short route costs what it visits, not the
// size of the cluster. Routes found are kept, as a step asks for the same ones over and over;
// adding a vertex or link forgets them. (The search mutates them: one Topology serves one
// thread.)
struct Topology::Graph {
  Adjacency adjacency;
  std::vector<int> from_src;  // by vertex: forward level, kUnreached where the search has not been
  std::vector<int> to_dst;    // by vertex: backward level
  std::vector<char> on_path;  // by vertex: reached forward and on a shortest path
  std::vector<VertexId> ahead_reached;    // forward search's vertices, level by level
  std::vector<std::size_t> ahead_levels;  // where each forward level starts in ahead_reached
  std::vector<VertexId> behind_reached;   // backward search's vertices
  std::unordered_map<std::uint64_t, std::vector<LinkId>> routes;  // by src << 32 | dst

  // A vertex's links out of it and into it, as link ids in creation order.
  auto link_ids(auto edges) const {
    return boost::make_iterator_range(edges) |
           boost::adaptors::transformed([this](const Adjacency::edge_descriptor& edge) {
             return boost::get(boost::edge_index, adjacency, edge);
           });
  }
  auto out_links(VertexId v) const { return link_ids(boost::out_edges(v, adjacency)); }
  auto in_links(VertexId v) const { return link_ids(boost::in_edges(v, adjacency)); }

  // Where the searches from both ends met: after `ahead` levels from src and `behind` back
  // from dst, so every shortest route has ahead + behind links.
  struct Meeting {
    int ahead = 0;
    int behind = 0;
  };
  // Levels from both ends, a whole level at a time, the smaller frontier first, until the two
  // searches meet; nothing where dst is unreachable.
  std::optional<Meeting> meet(VertexId src, VertexId dst, const std::vector<Link>& links,
                              const UsableForRoute& usable);
  // The first shortest path, walked from src (after meet).
  std::vector<LinkId> walk(VertexId src, Meeting meeting, const std::vector<Link>& links,
                           const UsableForRoute& usable);
  // Clears the levels and marks a search set, for the next one.
  void forget_search() {
    for (const VertexId v : ahead_reached) {
      from_src[v] = kUnreached;
      on_path[v] = 0;
    }
    for (const VertexId v : behind_reached) to_dst[v] = kUnreached;
    ahead_reached.clear();
    behind_reached.clear();
  }
};

Topology::Topology() : graph_(std::make_unique<Graph>()) {}
Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

const char* to_string(VertexKind kind) {
  switch (kind) {
    case VertexKind::gpu: return "gpu";
    case VertexKind::nvswitch: return "nvswitch";
    case VertexKind::pcie_switch: return "pcie_switch";
    case VertexKind::host: return "host";
    case VertexKind::host_memory: return "host_memory";
    case VertexKind::nic: return "nic";
    case VertexKind::leaf_switch: return "leaf_switch";
    case VertexKind::spine_switch: return "spine_switch";
  }
  return "?";
}

const char* to_string(LinkKind kind) {
  switch (kind) {
    case LinkKind::nvlink: return "nvlink";
    case LinkKind::xgmi: return "xgmi";
    case LinkKind::pcie: return "pcie";
    case LinkKind::host_memory: return "host_memory";
    case LinkKind::infiniband: return "infiniband";
    case LinkKind::roce: return "roce";
    case LinkKind::efa: return "efa";
    case LinkKind::tcpxo: return "tcpxo";
  }
  return "?";
}

VertexId Topology::add_vertex(VertexKind kind, std::string name, int node, int index) {
  const auto id = static_cast<VertexId>(boost::add_vertex(graph_->adjacency));
  graph_->routes.clear();
  vertices_.push_back(Vertex{kind, std::move(name), node, index});
  nic_of_gpu_.push_back(kNoVertex);
  out_links_.emplace_back();
  in_links_.emplace_back();
  reduces_.push_back(0);
  equal_cost_group_of_.push_back(-1);
  if (kind == VertexKind::gpu) {
    gpus_.push_back(id);
    if (node >= 0 && index >= 0) {
      if (gpus_by_node_.size() <= static_cast<std::size_t>(node)) gpus_by_node_.resize(node + 1);
      auto& on_node = gpus_by_node_[node];
      if (on_node.size() <= static_cast<std::size_t>(index)) on_node.resize(index + 1, kNoVertex);
      on_node[index] = id;
    }
  }
  return id;
}

void Topology::set_in_switch_reduction(VertexId nvswitch) {
  reduces_.at(nvswitch) = 1;
}

std::optional<VertexId> Topology::nvswitch_of(VertexId gpu) const {
  for (const LinkId link : out_links_.at(gpu)) {
    const VertexId to = links_[link].to;
    if (vertices_[to].kind == VertexKind::nvswitch) return to;
  }
  return std::nullopt;
}

std::optional<VertexId> Topology::reducing_switch_of(VertexId gpu) const {
  const std::optional<VertexId> nvswitch = nvswitch_of(gpu);
  if (nvswitch && reduces_[*nvswitch]) return nvswitch;
  return std::nullopt;
}

std::optional<LinkId> Topology::link_between(VertexId a, VertexId b) const {
  for (const LinkId link : out_links_.at(a)) {
    if (links_[link].to == b) return link;
  }
  return std::nullopt;
}

std::optional<VertexId> Topology::gpu_at(int node, int index) const {
  if (node < 0 || index < 0 || static_cast<std::size_t>(node) >= gpus_by_node_.size()) {
    return std::nullopt;
  }
  const auto& on_node = gpus_by_node_[node];
  if (static_cast<std::size_t>(index) >= on_node.size() || on_node[index] == kNoVertex) {
    return std::nullopt;
  }
  return on_node[index];
}

void Topology::set_nic_of_gpu(VertexId gpu, VertexId nic) {
  nic_of_gpu_.at(gpu) = nic;
}

std::optional<VertexId> Topology::nic_of_gpu(VertexId gpu) const {
  const VertexId nic = nic_of_gpu_.at(gpu);
  if (nic == kNoVertex) return std::nullopt;
  return nic;
}

LinkId Topology::add_link(VertexId from, VertexId to, LinkKind kind, double bytes_per_s,
                          SimTime latency) {
  if (!(bytes_per_s > 0)) {
    throw ModelError("link " + vertices_.at(from).name + " -> " + vertices_.at(to).name +
                     " needs a positive bandwidth");
  }
  const auto id = static_cast<LinkId>(links_.size());
  links_.push_back(Link{from, to, kind, bytes_per_s, latency});
  boost::add_edge(from, to, id, graph_->adjacency);
  graph_->routes.clear();
  out_links_.at(from).push_back(id);
  in_links_.at(to).push_back(id);
  return id;
}

LinkId Topology::add_duplex_link(VertexId a, VertexId b, LinkKind kind, double bytes_per_s,
                                 SimTime latency) {
  const LinkId forward = add_link(a, b, kind, bytes_per_s, latency);
  add_link(b, a, kind, bytes_per_s, latency);
  return forward;
}

std::string Topology::link_name(LinkId id) const {
  const Link& l = links_.at(id);
  return vertices_[l.from].name + "->" + vertices_[l.to].name;
}

// See Topology::route for why the route is searched from both ends.
std::optional<Topology::Graph::Meeting> Topology::Graph::meet(VertexId src, VertexId dst,
                                                              const std::vector<Link>& links,
                                                              const UsableForRoute& usable) {
  ahead_reached.assign(1, src);
  behind_reached.assign(1, dst);
  ahead_levels.assign(1, 0);
  std::size_t behind_level_start = 0;
  from_src[src] = 0;
  to_dst[dst] = 0;
  // One level more on one side: the vertices one usable link on from (or back to) those of the
  // side's last level, from `start` in `reached`, marked with their level; whether the other
  // side had reached one.
  const auto grow = [&](std::vector<VertexId>& reached, std::size_t start,
                        std::vector<int>& level_of, const std::vector<int>& other_side, int level,
                        auto links_of, auto far_end) {
    bool met = false;
    const std::size_t end = reached.size();
    for (std::size_t i = start; i < end; ++i) {
      for (const LinkId id : links_of(reached[i])) {
        const Link& link = links[id];
        const VertexId next = far_end(link);
        if (level_of[next] != kUnreached || !usable(link)) continue;
        level_of[next] = level + 1;
        reached.push_back(next);
        met = met || other_side[next] != kUnreached;
      }
    }
    return met;
  };
  Meeting meeting;
  for (bool met = false; !met;) {
    const std::size_t ahead_frontier = ahead_reached.size() - ahead_levels.back();
    const std::size_t behind_frontier = behind_reached.size() - behind_level_start;
    if (ahead_frontier == 0 || behind_frontier == 0) return std::nullopt;
    if (ahead_frontier <= behind_frontier) {
      const std::size_t level_end = ahead_reached.size();
      met = grow(
          ahead_reached, ahead_levels.back(), from_src, to_dst, meeting.ahead++,
          [this](VertexId v) { return out_links(v); }, [](const Link& l) { return l.to; });
      ahead_levels.push_back(level_end);
    } else {
      const std::size_t level_end = behind_reached.size();
      met = grow(
          behind_reached, behind_level_start, to_dst, from_src, meeting.behind++,
          [this](VertexId v) { return in_links(v); }, [](const Link& l) { return l.from; });
      behind_level_start = level_end;
    }
  }
  return meeting;
}

std::vector<LinkId> Topology::Graph::walk(VertexId src, Meeting meeting,
                                          const std::vector<Link>& links,
                                          const UsableForRoute& usable) {
  const int ahead = meeting.ahead;
  const int behind = meeting.behind;
  const int length = ahead + behind;
  // On a shortest path at position p <= ahead: reached at forward level p, and either at the
  // meeting level and reached by the backward search, or before it with an out-link to one.
  for (std::size_t i = ahead_levels.back(); i < ahead_reached.size(); ++i) {
    const VertexId v = ahead_reached[i];
    on_path[v] = to_dst[v] == behind;
  }
  for (int level = ahead - 1; level >= 0; --level) {
    for (std::size_t i = ahead_levels[level]; i < ahead_levels[level + 1]; ++i) {
      const VertexId v = ahead_reached[i];
      for (const LinkId id : out_links(v)) {
        const Link& link = links[id];
        if (on_path[link.to] && from_src[link.to] == level + 1 && usable(link)) {
          on_path[v] = 1;
          break;
        }
      }
    }
  }
  // Past the meeting level, a vertex one link on from one on a shortest path is on one where
  // its backward level is what is left of the length.
  const auto on_shortest_path = [&](VertexId v, int position) {
    if (position <= ahead) return from_src[v] == position && on_path[v] != 0;
    return to_dst[v] == length - position;
  };
  std::vector<LinkId> path;
  VertexId at = src;
  for (int position = 1; position <= length; ++position) {
    for (const LinkId id : out_links(at)) {
      const Link& link = links[id];
      if (on_shortest_path(link.to, position) && usable(link)) {
        path.push_back(id);
        at = link.to;
        break;
      }
    }
    if (path.size() != static_cast<std::size_t>(position)) {
      throw ModelError("route search: no link on from position " + std::to_string(position - 1) +
                       " of a shortest path");
    }
  }
  return path;
}

// The route is the first shortest path a breadth-first search from src meets, visiting out-links
// in creation order: the shortest path whose sequence of out-link positions is least
// (lexicographically), since such a search discovers each level's vertices in the order of their
// own least sequences. Searching from src alone visits the whole cluster's fabric before the
// far node (every spine, every leaf, every leaf's ports), so the search runs from both ends,
// each side a whole level at a time, until they meet: at levels `ahead` from src and `behind`
// to dst, with no meeting before, every shortest path has length ahead + behind and crosses the
// forward level `ahead` at a vertex the backward search reached at level `behind`. Which
// forward vertices lie on a shortest path is then marked level by level back to src, and the
// least path is walked from src: at each vertex the first usable out-link to a vertex on a
// shortest path one position further on. The backward levels say which those are past the
// meeting level.
std::vector<LinkId> Topology::route(VertexId src, VertexId dst) const {
  std::vector<LinkId> path;
  append_route(src, dst, path);
  return path;
}

void Topology::append_route(VertexId src, VertexId dst, std::vector<LinkId>& path) const {
  if (src == dst) return;
  const UsableForRoute usable{&vertices_, src, vertices_.at(src).node, vertices_.at(dst).node};
  // Routes of one or two links are most of a step's (a GPU to its NVSwitch and on, to its PCIe
  // switch and NIC, a NIC to its leaf and on): the first shortest path is then the least pair
  // of out-link positions, found by trying them in order, without a search or a copy kept.
  // Links are listed by id, so of the links from a vertex into dst the first in dst's in-links
  // is the first in that vertex's out-links: the pairs are tried through dst's few in-links,
  // not a switch's hundreds of out-links.
  for (const LinkId first : out_links_[src]) {
    if (links_[first].to == dst && usable(links_[first])) {
      path.push_back(first);
      return;
    }
  }
  for (const LinkId first : out_links_[src]) {
    if (!usable(links_[first])) continue;
    for (const LinkId second : in_links_[dst]) {
      if (links_[second].from == links_[first].to && usable(links_[second])) {
        path.insert(path.end(), {first, second});
        return;
      }
    }
  }
  Graph& g = *graph_;
  const std::uint64_t key = std::uint64_t{src} << 32 | dst;
  if (const auto known = g.routes.find(key); known != g.routes.end()) {
    path.insert(path.end(), known->second.begin(), known->second.end());
    return;
  }
  g.from_src.resize(vertices_.size(), kUnreached);
  g.to_dst.resize(vertices_.size(), kUnreached);
  g.on_path.resize(vertices_.size(), 0);
  // The levels and marks are cleared however the search ends (a throw included), or the next
  // search would start from them.
  struct Forget {
    Graph& graph;
    ~Forget() { graph.forget_search(); }
  } forget{g};
  const std::optional<Graph::Meeting> meeting = g.meet(src, dst, links_, usable);
  if (!meeting) {
    throw ModelError("no path from " + vertices_.at(src).name + " to " + vertices_.at(dst).name);
  }
  const std::vector<LinkId>& found =
      g.routes.emplace(key, g.walk(src, *meeting, links_, usable)).first->second;
  path.insert(path.end(), found.begin(), found.end());
}

void Topology::set_host_memory(int node, HostMemory memory, bool stages_peer_traffic) {
  if (node < 0) throw ModelError("host memory needs a node index");
  if (host_memory_.size() <= static_cast<std::size_t>(node)) {
    host_memory_.resize(node + 1);
    stages_peer_traffic_.resize(node + 1, 0);
  }
  host_memory_[node] = memory;
  stages_peer_traffic_[node] = stages_peer_traffic;
}

std::optional<Topology::HostMemory> Topology::host_memory_of(int node) const {
  if (node < 0 || static_cast<std::size_t>(node) >= host_memory_.size()) return std::nullopt;
  return host_memory_[node];
}

std::optional<Topology::HostMemory> Topology::staging_of(int node) const {
  const std::optional<HostMemory> memory = host_memory_of(node);
  return memory && stages_peer_traffic_[node] ? memory : std::nullopt;
}

void Topology::add_equal_cost_group(std::vector<VertexId> members) {
  if (members.size() < 2) return;
  for (const VertexId member : members) {
    equal_cost_group_of_.at(member) = static_cast<int>(equal_cost_groups_.size());
  }
  equal_cost_groups_.push_back(std::move(members));
}

namespace {

// SplitMix64's finaliser: every input bit flips about half the output bits.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<LinkId> Topology::route(VertexId src, VertexId dst, std::uint64_t flow) const {
  std::vector<LinkId> path;
  append_route(src, dst, flow, path);
  return path;
}

void Topology::append_route(VertexId src, VertexId dst, std::uint64_t flow,
                            std::vector<LinkId>& path) const {
  const std::size_t start = path.size();
  append_route(src, dst, path);
  if (!hashes_routes()) return;
  for (std::size_t i = start; i + 1 < path.size(); ++i) {
    const VertexId through = links_[path[i]].to;
    const int group = equal_cost_group_of_[through];
    if (group < 0) continue;
    const std::vector<VertexId>& members = equal_cost_groups_[group];
    const std::uint64_t hash =
        mix(mix(mix(mix(hash_seed_) ^ flow) ^ (std::uint64_t{src} << 32 | dst)) ^ (i - start));
    const VertexId member = members[hash % members.size()];
    const auto up = link_between(links_[path[i]].from, member);
    const auto down = link_between(member, links_[path[i + 1]].to);
    if (!up || !down) {
      throw ModelError(vertices_[member].name + " is not interchangeable with " +
                       vertices_[through].name);
    }
    path[i] = *up;
    path[i + 1] = *down;
  }
}

namespace {

std::string node_prefix(int node) {
  return "n" + std::to_string(node) + ".";
}

struct NodeVertices {
  std::vector<VertexId> nics;
};

// One node: GPUs, the NVSwitch crossbar (if any), PCIe switches with GPUs and NICs spread evenly
// over them (GPU-NIC affinity), and the host.
// `domain_switch` is the NVSwitch of the node's NVLink domain, created by its first node
// (kNoVertex until then).
NodeVertices build_node(Topology& topo, const NodeSpec& spec, int node, VertexId& domain_switch) {
  const std::string prefix = node_prefix(node);
  NodeVertices built;
  const VertexId host = topo.add_vertex(VertexKind::host, prefix + "host", node);
  if (!spec.gpu_p2p && !(spec.host_memory_bytes_per_s > 0)) {
    throw ModelError("node preset " + spec.name +
                     ": GPUs without peer-to-peer access need the host memory bandwidth");
  }
  if (spec.host_memory_bytes_per_s > 0) {
    // One link, host -> memory, carries both the writes and the reads.
    const VertexId memory = topo.add_vertex(VertexKind::host_memory, prefix + "memory", node);
    const LinkId memory_link =
        topo.add_link(host, memory, LinkKind::host_memory,
                      spec.host_memory_bytes_per_s * spec.host_memory_efficiency, SimTime{});
    topo.set_host_memory(node, {host, memory_link, spec.cpu_cycles_per_s()}, !spec.gpu_p2p);
  }
  std::vector<VertexId> pcie_switches;
  for (int s = 0; s < spec.pcie_switches; ++s) {
    const VertexId sw =
        topo.add_vertex(VertexKind::pcie_switch, prefix + "pcie" + std::to_string(s), node, s);
    topo.add_duplex_link(sw, host, LinkKind::pcie, spec.host_bytes_per_s, spec.pcie_latency);
    pcie_switches.push_back(sw);
  }
  std::vector<VertexId> gpus;
  for (int g = 0; g < spec.gpus; ++g) {
    gpus.push_back(topo.add_vertex(VertexKind::gpu, prefix + "gpu" + std::to_string(g), node, g));
  }
  if (spec.gpu_fabric == GpuFabric::nvswitch) {
    if (domain_switch == kNoVertex) {
      const int domain = node / std::max(1, spec.nvlink_domain_nodes);
      const std::string name = spec.nvlink_domain_nodes > 1
                                   ? "domain" + std::to_string(domain) + ".nvswitch"
                                   : prefix + "nvswitch";
      domain_switch = topo.add_vertex(VertexKind::nvswitch, name, node);
      if (spec.nvls) topo.set_in_switch_reduction(domain_switch);
    }
    const VertexId nvswitch = domain_switch;
    for (const VertexId gpu : gpus) {
      topo.add_duplex_link(gpu, nvswitch, LinkKind::nvlink, spec.nvlink_bytes_per_s,
                           spec.nvlink_latency);
    }
  }
  if (spec.gpu_fabric == GpuFabric::nvlink_pairs) {
    if (spec.gpus % 2 != 0) {
      throw ModelError("node preset " + spec.name + ": NVLink bridges need GPUs in pairs");
    }
    for (std::size_t a = 0; a + 1 < gpus.size(); a += 2) {
      topo.add_duplex_link(gpus[a], gpus[a + 1], LinkKind::nvlink, spec.nvlink_bytes_per_s,
                           spec.nvlink_latency);
    }
  }
  if (spec.gpu_fabric == GpuFabric::xgmi_mesh) {
    for (std::size_t a = 0; a < gpus.size(); ++a) {
      for (std::size_t b = a + 1; b < gpus.size(); ++b) {
        topo.add_duplex_link(gpus[a], gpus[b], LinkKind::xgmi, spec.xgmi_link_bytes_per_s,
                             spec.xgmi_latency);
      }
    }
  }
  for (int g = 0; g < spec.gpus; ++g) {
    const VertexId sw = pcie_switches[g * spec.pcie_switches / spec.gpus];
    topo.add_duplex_link(gpus[g], sw, LinkKind::pcie, spec.pcie_bytes_per_s, spec.pcie_latency);
  }
  for (int n = 0; n < spec.nics; ++n) {
    const VertexId nic =
        topo.add_vertex(VertexKind::nic, prefix + "nic" + std::to_string(n), node, n);
    const VertexId sw = pcie_switches[n * spec.pcie_switches / spec.nics];
    topo.add_duplex_link(nic, sw, LinkKind::pcie, spec.pcie_bytes_per_s, spec.pcie_latency);
    built.nics.push_back(nic);
  }
  // GPU g sends through NIC g * nics / gpus: with both spread evenly over the PCIe switches,
  // that NIC sits on the GPU's own switch.
  for (int g = 0; g < spec.gpus && spec.nics > 0; ++g) {
    topo.set_nic_of_gpu(gpus[g], built.nics[g * spec.nics / spec.gpus]);
  }
  return built;
}

}  // namespace

LinkKind fabric_link_kind(NicKind kind) {
  switch (kind) {
    case NicKind::efa: return LinkKind::efa;
    case NicKind::tcpxo: return LinkKind::tcpxo;
    case NicKind::roce: return LinkKind::roce;
    case NicKind::infiniband: return LinkKind::infiniband;
  }
  return LinkKind::infiniband;
}

namespace {

// Rail-optimised fat tree. A leaf switch serves `down` nodes on one rail (their NIC r) and sends
// up down x port / oversubscription of bandwidth, with down = leaf_ports x o / (1 + o) rounded
// down: a full leaf is oversubscribed by exactly o, a leaf that is not full has spare uplink.
// A tier above the leaves is drawn as one vertex per spine plane: adaptive routing spreads a
// flow over all spines of the plane, so the plane acts as one non-blocking switch behind the
// leaves' uplinks (DESIGN.md, `adaptive`). Two tiers hold at most leaf_ports leaves (each spine
// port takes one leaf); beyond that, or with tiers: 3, nodes are grouped into pods of
// leaf_ports / 2 leaves over all rails, each pod with its own spine plane, joined by a core
// plane that carries what the pod's leaves can send up. tiers: 0 picks the smallest that fits.
void build_fat_tree(Topology& topo, const NodeSpec& node, const std::vector<NodeVertices>& built,
                    const FabricSpec& fabric) {
  if (fabric.oversubscription < 1.0) throw ModelError("fabric oversubscription must be >= 1");
  if (fabric.leaf_ports < 2) throw ModelError("a leaf switch needs at least two ports");
  if (fabric.tiers != 0 && fabric.tiers != 2 && fabric.tiers != 3) {
    throw ModelError("a fat tree has 2 or 3 tiers (0: as many as the cluster needs)");
  }
  const double port = fabric.link_bytes_per_s > 0 ? fabric.link_bytes_per_s : node.nic_bytes_per_s;
  const double nic_port = std::min(port, node.nic_bytes_per_s);  // the slower end sets the rate
  const LinkKind kind = fabric_link_kind(node.nic_kind);
  const int ports = fabric.leaf_ports;
  const double o = fabric.oversubscription;
  const int down = std::max(1, static_cast<int>(ports * o / (1 + o)));
  const double uplink = down * port / o;
  const int nodes = static_cast<int>(built.size());
  const int leaves_per_rail = (nodes + down - 1) / down;
  const int leaves = leaves_per_rail * node.nics;
  const int tiers = fabric.tiers != 0 ? fabric.tiers : (leaves <= ports ? 2 : 3);
  if (tiers == 2 && leaves > ports) {
    throw ModelError(std::to_string(leaves) + " leaf switches do not fit under " +
                     std::to_string(ports) + "-port spines in two tiers; use tiers: 3");
  }
  // A pod holds leaf_ports / 2 leaves: whole groups of `down` nodes with all their rails.
  const int groups_per_pod = std::max(1, ports / 2 / std::max(1, node.nics));
  auto pod_of = [&](int group) { return tiers == 3 ? group / groups_per_pod : 0; };

  std::vector<std::vector<int>> nodes_of_group(leaves_per_rail);
  for (int n = 0; n < nodes; ++n) {
    const int group = fabric.placement == NodePlacement::packed ? n / down : n % leaves_per_rail;
    nodes_of_group[group].push_back(n);
  }

  // Adaptive routing: one vertex per spine plane. Hash routing: one per spine switch, a leaf's
  // uplink bandwidth split evenly over its ports - down uplink ports, one to each spine.
  const bool hashed = fabric.routing == FabricRouting::hash;
  topo.set_hash_seed(fabric.hash_seed);
  const int spines_per_plane = hashed ? std::max(1, ports - down) : 1;
  std::vector<std::vector<VertexId>> pod_spines;
  std::vector<double> pod_uplink_bytes_per_s;
  for (int group = 0; group < leaves_per_rail; ++group) {
    const std::size_t pod = pod_of(group);
    if (pod_spines.size() <= pod) {
      const std::string plane =
          tiers == 3 ? "pod" + std::to_string(pod) + ".spine" : std::string("spine");
      std::vector<VertexId> spines;
      for (int s = 0; s < spines_per_plane; ++s) {
        const std::string name = hashed ? plane + std::to_string(s) : plane;
        spines.push_back(topo.add_vertex(VertexKind::spine_switch, name, -1, s));
      }
      topo.add_equal_cost_group(spines);
      pod_spines.push_back(std::move(spines));
      pod_uplink_bytes_per_s.push_back(0.0);
    }
    for (int rail = 0; rail < node.nics; ++rail) {
      const VertexId leaf =
          topo.add_vertex(VertexKind::leaf_switch,
                          "rail" + std::to_string(rail) + ".leaf" + std::to_string(group), -1);
      for (const int n : nodes_of_group[group]) {
        topo.add_duplex_link(built[n].nics[rail], leaf, kind, nic_port, node.nic_latency);
      }
      for (const VertexId spine : pod_spines[pod]) {
        topo.add_duplex_link(leaf, spine, kind, uplink / spines_per_plane, fabric.switch_latency);
      }
      pod_uplink_bytes_per_s[pod] += uplink;
    }
  }
  if (tiers == 3) {
    // The core stays one vertex: hash routing picks the spine inside each pod, not the core
    // switch.
    const VertexId core = topo.add_vertex(VertexKind::spine_switch, "core", -1);
    for (std::size_t pod = 0; pod < pod_spines.size(); ++pod) {
      for (const VertexId spine : pod_spines[pod]) {
        topo.add_duplex_link(spine, core, kind, pod_uplink_bytes_per_s[pod] / spines_per_plane,
                             fabric.switch_latency);
      }
    }
  }
}

}  // namespace

Topology build_cluster(const NodeSpec& node, int nodes, const FabricSpec& fabric) {
  if (nodes < 1) throw ModelError("a cluster needs at least one node");
  if (node.gpus < 1 || node.pcie_switches < 1) {
    throw ModelError("node preset " + node.name + " needs at least one GPU and one PCIe switch");
  }
  Topology topo;
  std::vector<NodeVertices> built;
  VertexId domain_switch = kNoVertex;
  const int domain_nodes = std::max(1, node.nvlink_domain_nodes);
  for (int n = 0; n < nodes; ++n) {
    if (n % domain_nodes == 0) domain_switch = kNoVertex;
    built.push_back(build_node(topo, node, n, domain_switch));
  }
  if (nodes > 1 && node.nics > 0) build_fat_tree(topo, node, built, fabric);
  return topo;
}

std::vector<bool> links_that_never_bind(const Topology& topology,
                                        const std::vector<double>& capacity) {
  if (capacity.size() != topology.link_count()) {
    throw ModelError("link capacities are not given one per link");
  }
  const auto fabric_switch = [&](VertexId v) {
    const VertexKind kind = topology.vertex(v).kind;
    return kind == VertexKind::leaf_switch || kind == VertexKind::spine_switch;
  };
  // A link is bounded by links marked before it or that stay enforced: one relied on unmarked is
  // never marked later, so no two links lean on each other (a spine's two leaves' links would,
  // and neither bind) and every bound rests, in the end, on enforced links. The tolerance
  // absorbs the rounding of sums equal on paper (a leaf's uplink and its ports).
  constexpr double kRelative = 1e-9;
  std::vector<bool> never(topology.link_count(), false);
  std::vector<bool> relied_on(topology.link_count(), false);
  std::vector<std::vector<LinkId>> in_links(topology.vertex_count()),
      out_links(topology.vertex_count());
  for (LinkId l = 0; l < topology.link_count(); ++l) {
    in_links[topology.link(l).to].push_back(l);
    out_links[topology.link(l).from].push_back(l);
  }
  // Whether the links of `others` but `except` carry at most `bound` together.
  const auto bounded_by = [&](const std::vector<LinkId>& others, LinkId except, double bound) {
    double total = 0;
    for (const LinkId o : others) {
      if (o != except) total += capacity[o];
    }
    return total <= bound;
  };
  for (LinkId l = 0; l < topology.link_count(); ++l) {
    if (relied_on[l]) continue;
    const Link& link = topology.link(l);
    const LinkId reverse = topology.link_between(link.to, link.from).value_or(l);
    const double bound = capacity[l] * (1 + kRelative);
    // Of the two bounds that hold, the one resting on fewer links between switches (on a
    // leaf's ports rather than on another uplink), which leaves those free to be marked too.
    const auto between_switches = [&](const std::vector<LinkId>& links) {
      return std::count_if(links.begin(), links.end(), [&](LinkId o) {
        return o != reverse && fabric_switch(topology.link(o).from) &&
               fabric_switch(topology.link(o).to);
      });
    };
    const std::vector<LinkId>* rests_on = nullptr;
    for (const std::vector<LinkId>* side :
         {fabric_switch(link.from) ? &in_links[link.from] : nullptr,
          fabric_switch(link.to) ? &out_links[link.to] : nullptr}) {
      if (side && bounded_by(*side, reverse, bound) &&
          (!rests_on || between_switches(*side) < between_switches(*rests_on))) {
        rests_on = side;
      }
    }
    if (!rests_on) continue;
    never[l] = true;
    for (const LinkId o : *rests_on) {
      if (o != reverse && !never[o]) relied_on[o] = true;
    }
  }
  return never;
}

}  // namespace fleetsim
