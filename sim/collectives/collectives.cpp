#include "sim/collectives/collectives.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "sim/engine/errors.hpp"

namespace fleetsim {

int ring_steps(CollectiveOp op, int ranks) {
  return op == CollectiveOp::all_reduce ? 2 * (ranks - 1) : ranks - 1;
}

const char* to_string(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::ring: return "ring";
    case CollectiveAlgorithm::tree: return "tree";
    case CollectiveAlgorithm::nvls: return "nvls";
    case CollectiveAlgorithm::nvls_tree: return "nvls_tree";
    case CollectiveAlgorithm::hierarchical: return "hierarchical";
    case CollectiveAlgorithm::direct: return "direct";
    case CollectiveAlgorithm::chain: return "chain";
    case CollectiveAlgorithm::pairs: return "pairs";
  }
  return "?";
}

Collectives::Collectives(Engine& engine, FlowNetwork& network, const Topology& topology,
                         CollectiveCosts costs, GpuLinkModes gpu_links)
    : engine_(&engine),
      network_(&network),
      topology_(&topology),
      costs_(std::move(costs)),
      gpu_links_(gpu_links) {}

Collectives::Collectives(Engine& engine, FlowNetwork& network, const Topology& topology,
                         CollectiveLatency latency, GpuLinkModes gpu_links)
    : Collectives(engine, network, topology,
                  CollectiveCosts::simple_only(latency.base, latency.per_step), gpu_links) {}

// ---- choosing an algorithm -----------------------------------------------------------------

bool Collectives::nvls_possible(const std::vector<VertexId>& ranks) const {
  // NCCL turns NVLS off for two GPUs or fewer (ncclNvlsInit, src/transport/nvls.cc: gpuCount
  // <= 2), where a ring moves fewer bytes through each port anyway.
  if (!(gpu_links_.nvls_efficiency > 0) || ranks.size() <= 2) return false;
  const std::optional<VertexId> nvswitch = topology_->reducing_switch_of(ranks.front());
  if (!nvswitch) return false;
  return std::all_of(ranks.begin(), ranks.end(),
                     [&](VertexId gpu) { return topology_->reducing_switch_of(gpu) == nvswitch; });
}

bool Collectives::nvls_tree_possible(const std::vector<VertexId>& ranks) const {
  if (!(gpu_links_.nvls_efficiency > 0)) return false;
  const std::vector<std::vector<VertexId>> domains = group_by_node(ranks);
  if (domains.size() < 2) return false;
  return std::all_of(domains.begin(), domains.end(), [&](const std::vector<VertexId>& gpus) {
    return gpus.size() == domains.front().size() && nvls_possible(gpus);
  });
}

std::vector<CollectiveAlgorithm> Collectives::candidates(CollectiveOp op,
                                                         const std::vector<VertexId>& ranks) const {
  switch (op) {
    case CollectiveOp::all_to_all: return {CollectiveAlgorithm::direct};
    case CollectiveOp::broadcast: return {CollectiveAlgorithm::chain};
    case CollectiveOp::send_recv: return {CollectiveAlgorithm::pairs};
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_gather: return {CollectiveAlgorithm::ring};
    case CollectiveOp::all_reduce: break;
  }
  std::vector<CollectiveAlgorithm> algorithms{CollectiveAlgorithm::ring};
  const std::vector<std::vector<VertexId>> nodes = group_by_node(ranks);
  const bool equal_nodes = std::all_of(nodes.begin(), nodes.end(), [&](const auto& gpus) {
    return gpus.size() == nodes.front().size();
  });
  if (nodes.size() > 1 && equal_nodes) {
    algorithms.push_back(CollectiveAlgorithm::tree);
    algorithms.push_back(CollectiveAlgorithm::hierarchical);
  }
  if (nvls_possible(ranks)) algorithms.push_back(CollectiveAlgorithm::nvls);
  if (nvls_tree_possible(ranks)) algorithms.push_back(CollectiveAlgorithm::nvls_tree);
  return algorithms;
}

std::vector<Protocol> Collectives::protocols(CollectiveAlgorithm algorithm) const {
  if (algorithm == CollectiveAlgorithm::nvls || algorithm == CollectiveAlgorithm::nvls_tree) {
    return {Protocol::simple};  // as NCCL's NVLS
  }
  const auto& table = algorithm == CollectiveAlgorithm::tree ? costs_.tree : costs_.ring;
  std::vector<Protocol> usable;
  for (const Protocol protocol : kProtocols) {
    if (table[static_cast<int>(protocol)].bandwidth > 0) usable.push_back(protocol);
  }
  return usable;
}

CollectiveChoice Collectives::fastest(const std::vector<CollectiveAlgorithm>& algorithms,
                                      CollectiveOp op, const std::vector<VertexId>& ranks,
                                      double size_bytes) {
  struct Candidate {
    SimTime bound;      // what it cannot beat
    std::size_t order;  // its place in the list: ties go to the earlier one
    CollectiveChoice choice;
  };
  std::vector<Candidate> list;
  for (const CollectiveAlgorithm algorithm : algorithms) {
    for (const Protocol protocol : protocols(algorithm)) {
      const CollectiveChoice choice{algorithm, protocol};
      list.push_back({time_lower_bound(choice, op, ranks, size_bytes), list.size(), choice});
    }
  }
  if (list.empty()) throw ModelError(std::string("no protocol can run ") + to_string(op));
  if (list.size() == 1) return list.front().choice;
  // The most promising first, so that the others can mostly be ruled out by their bounds
  // instead of simulated: a candidate whose bound is above the best time, or equal to it but
  // later in the list, cannot win.
  std::sort(list.begin(), list.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.bound, a.order) < std::tie(b.bound, b.order);
  });
  const Candidate* best = nullptr;
  SimTime best_time = SimTime::max();
  for (const Candidate& candidate : list) {
    if (best && std::tie(candidate.bound, candidate.order) >= std::tie(best_time, best->order)) {
      continue;
    }
    const SimTime time = idle_time(plan(candidate.choice, op, ranks, size_bytes));
    if (!best || std::tie(time, candidate.order) < std::tie(best_time, best->order)) {
      best = &candidate;
      best_time = time;
    }
  }
  return best->choice;
}

CollectiveChoice Collectives::choose(CollectiveOp op, const std::vector<VertexId>& ranks,
                                     double size_bytes, std::optional<CollectiveAlgorithm> forced) {
  std::vector<CollectiveAlgorithm> algorithms = candidates(op, ranks);
  if (forced) {
    if (std::find(algorithms.begin(), algorithms.end(), *forced) == algorithms.end()) {
      throw ModelError(std::string(to_string(*forced)) + " cannot run " + to_string(op) +
                       " over these ranks");
    }
    algorithms = {*forced};
  } else {
    // The tree's flows carry what its traffic pattern needs, but its kernels reach less than
    // that per channel. Where the library's per-channel limits for these GPUs are known, the
    // tree runs held to them and competes; elsewhere it would look better than it runs, so it
    // runs only when forced.
    if (!costs_.gpu_tree_limits) std::erase(algorithms, CollectiveAlgorithm::tree);
    std::erase(algorithms, CollectiveAlgorithm::hierarchical);  // not NCCL's: only when asked
  }
  const ChoiceKey key{op, ranks, size_bytes, forced};
  const auto cached = choice_cache_.find(key);
  if (cached != choice_cache_.end()) return cached->second;
  const CollectiveChoice best = fastest(algorithms, op, ranks, size_bytes);
  choice_cache_.emplace(key, best);
  return best;
}

SimTime Collectives::time_lower_bound(CollectiveChoice choice, CollectiveOp op,
                                      const std::vector<VertexId>& ranks, double size_bytes) const {
  if (ranks.size() < 2) return SimTime{};
  SimTime bound = latency(choice, op, ranks);
  if (choice.algorithm == CollectiveAlgorithm::tree) {
    if (const auto cap = tree_bus_bandwidth_cap(choice.protocol, ranks)) {
      const double algorithm_bandwidth =
          costs_.tree_correction(choice.protocol, size_bytes) * *cap / 2.0;
      // Rounded down, so that the bound never exceeds what the simulation finds.
      const double ns = std::floor(size_bytes / algorithm_bandwidth * 1e9 * (1 - 1e-9));
      bound = bound + SimTime::from_ns(static_cast<std::int64_t>(ns));
    }
  }
  return bound;
}

SimTime Collectives::idle_time(const Plan& plan) const {
  // Phases follow one another on an otherwise idle network, so their times add up. Each runs
  // on a network of just the links its flows cross, renumbered, so that a choice costs what
  // the collective touches, not the size of the cluster.
  const auto phase_time = [&](const std::vector<PlannedFlow>& flows, SimTime latency) {
    std::vector<FlowLinkId> used;
    for (const PlannedFlow& flow : flows) {
      for (const LinkUse& use : flow.links) used.push_back(use.link);
    }
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    const auto local = [&](FlowLinkId link) {
      return static_cast<FlowLinkId>(std::lower_bound(used.begin(), used.end(), link) -
                                     used.begin());
    };
    std::vector<double> capacity;
    for (const FlowLinkId link : used) capacity.push_back(network_->capacities()[link]);
    Engine scratch_engine;
    FlowNetwork scratch(scratch_engine, std::move(capacity));
    SimTime finished = latency;
    std::vector<FlowNetwork::FlowRequest> requests;
    for (const PlannedFlow& flow : flows) {
      std::vector<LinkUse> links = flow.links;
      for (LinkUse& use : links) use.link = local(use.link);
      requests.push_back({std::move(links), flow.bytes, latency,
                          [&] { finished = std::max(finished, scratch_engine.now()); },
                          flow.max_rate});
    }
    scratch.start_flows(std::move(requests));
    scratch_engine.run();
    return finished;
  };
  SimTime total = phase_time(plan.flows, plan.latency);
  for (const Phase& phase : plan.later) total = total + phase_time(phase.flows, phase.latency);
  return total;
}

// ---- running -------------------------------------------------------------------------------

void Collectives::check_ranks(const std::vector<VertexId>& ranks) const {
  if (ranks.empty()) throw ModelError("a collective needs at least one rank");
  std::vector<VertexId> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw ModelError("a collective's ranks must be distinct GPUs");
  }
}

void Collectives::run(CollectiveOp op, const std::vector<VertexId>& ranks, double size_bytes,
                      std::function<void()> done) {
  run(plan_collective(op, ranks, size_bytes), std::move(done));
}

Collectives::CachedPlan Collectives::plan_collective(CollectiveOp op,
                                                     const std::vector<VertexId>& ranks,
                                                     double size_bytes) {
  const PlanKeyView key{op, ranks, size_bytes};
  auto cached = plan_cache_.find(key);
  if (cached == plan_cache_.end()) {
    check_ranks(ranks);
    const CollectiveChoice choice = choose(op, ranks, size_bytes);
    Plan planned = plan(choice, op, ranks, size_bytes);
    planned.choice = choice;
    cached = plan_cache_.emplace(PlanKey{op, ranks, size_bytes}, merged(std::move(planned))).first;
  }
  CachedPlan handle;
  handle.plan_ = &cached->second;  // map nodes stay put
  return handle;
}

std::optional<CollectiveChoice> Collectives::CachedPlan::choice() const {
  if (!plan_) return std::nullopt;
  return plan_->choice;
}

void Collectives::run(const CachedPlan& plan, std::function<void()> done) {
  if (!plan.plan_) throw ModelError("a collective or send started without its plan");
  start(*plan.plan_, std::move(done));
}

void Collectives::run_with(CollectiveAlgorithm algorithm, CollectiveOp op,
                           const std::vector<VertexId>& ranks, double size_bytes,
                           std::function<void()> done) {
  check_ranks(ranks);
  start(plan(choose(op, ranks, size_bytes, algorithm), op, ranks, size_bytes), std::move(done));
}

void Collectives::run_with(CollectiveChoice choice, CollectiveOp op,
                           const std::vector<VertexId>& ranks, double size_bytes,
                           std::function<void()> done) {
  check_ranks(ranks);
  const auto allowed = candidates(op, ranks);
  const auto usable = protocols(choice.algorithm);
  if (std::find(allowed.begin(), allowed.end(), choice.algorithm) == allowed.end() ||
      std::find(usable.begin(), usable.end(), choice.protocol) == usable.end()) {
    throw ModelError(std::string(to_string(choice.algorithm)) + "/" + to_string(choice.protocol) +
                     " cannot run " + to_string(op) + " over these ranks");
  }
  start(plan(choice, op, ranks, size_bytes), std::move(done));
}

void Collectives::send(VertexId from, VertexId to, double size_bytes, std::function<void()> done) {
  run(plan_send(from, to, size_bytes), std::move(done));
}

Collectives::CachedPlan Collectives::plan_send(VertexId from, VertexId to, double size_bytes) {
  const std::array<VertexId, 2> ends{from, to};
  auto cached = send_plan_cache_.find(PlanKeyView{CollectiveOp::send_recv, ends, size_bytes});
  if (cached == send_plan_cache_.end()) {
    const std::vector<VertexId> pair{from, to};
    check_ranks(pair);
    const CollectiveChoice choice = choose(CollectiveOp::send_recv, pair, size_bytes);
    Plan one_way = plan(choice, CollectiveOp::send_recv, pair, size_bytes);
    one_way.choice = choice;
    one_way.flows.resize(1);  // plan_pairs' first flow goes from -> to; the second comes back
    cached = send_plan_cache_
                 .emplace(PlanKey{CollectiveOp::send_recv, pair, size_bytes}, merged(one_way))
                 .first;
  }
  CachedPlan handle;
  handle.plan_ = &cached->second;  // map nodes stay put
  return handle;
}

void Collectives::start(const Plan& plan, std::function<void()> done) {
  if (plan.later.empty() && plan.flows.size() == 1) {
    // One flow (a send): it ends the collective itself.
    const PlannedFlow& flow = plan.flows.front();
    enter({{flow.links, flow.bytes, plan.latency, std::move(done), flow.max_rate}});
    return;
  }
  if (plan.later.empty() && !plan.flows.empty()) {
    // One phase (most plans): its flows count down to `done`, with no phase bookkeeping.
    auto remaining = std::make_shared<std::pair<std::size_t, std::function<void()>>>(
        plan.flows.size(), std::move(done));
    std::vector<FlowNetwork::FlowRequest> requests;
    requests.reserve(plan.flows.size());
    for (const PlannedFlow& flow : plan.flows) {
      requests.push_back({flow.links, flow.bytes, plan.latency,
                          [remaining] {
                            if (--remaining->first == 0) remaining->second();
                          },
                          flow.max_rate});
    }
    enter(std::move(requests));
    return;
  }
  auto phases = std::make_shared<std::vector<Phase>>();
  phases->push_back({plan.flows, plan.latency});
  for (const Phase& phase : plan.later) phases->push_back(phase);
  start_phases(std::move(phases), 0, std::move(done));
}

void Collectives::start_phases(std::shared_ptr<std::vector<Phase>> phases, std::size_t next,
                               std::function<void()> done) {
  if (next == phases->size()) {
    done();
    return;
  }
  Phase& phase = (*phases)[next];
  auto finish = std::make_shared<std::function<void()>>(
      [this, phases, next, done = std::move(done)]() mutable {
        start_phases(phases, next + 1, std::move(done));
      });
  if (phase.flows.empty()) {
    engine_->schedule_after(phase.latency, [finish] { (*finish)(); });
    return;
  }
  // A phase ends when its last flow does; its latency is paid once, after the bytes.
  auto remaining = std::make_shared<std::size_t>(phase.flows.size());
  std::vector<FlowNetwork::FlowRequest> requests;
  for (PlannedFlow& flow : phase.flows) {
    requests.push_back({std::move(flow.links), flow.bytes, phase.latency,
                        [remaining, finish] {
                          if (--*remaining == 0) (*finish)();
                        },
                        flow.max_rate});
  }
  enter(std::move(requests));
}

void Collectives::enter(std::vector<FlowNetwork::FlowRequest> requests) {
  if (batch_) {
    for (FlowNetwork::FlowRequest& request : requests) batch_->push_back(std::move(request));
  } else {
    network_->start_flows(std::move(requests));
  }
}

Collectives::Plan Collectives::merged(Plan plan) {
  // Cached plans start many times: their flows' links are merged once, here.
  for (PlannedFlow& flow : plan.flows) flow.links = merge_duplicates(std::move(flow.links));
  for (Phase& phase : plan.later) {
    for (PlannedFlow& flow : phase.flows) flow.links = merge_duplicates(std::move(flow.links));
  }
  return plan;
}

std::size_t Collectives::PlanKeyHash::operator()(PlanKeyView key) const {
  // FNV-1a over the op, the ranks and the size's bits.
  std::uint64_t hash = 1469598103934665603ull;
  const auto mix = [&hash](std::uint64_t value) {
    hash ^= value;
    hash *= 1099511628211ull;
  };
  mix(static_cast<std::uint64_t>(key.op));
  for (const VertexId rank : key.ranks) mix(rank);
  // Sizes equal as doubles hash alike: -0 as 0 (a NaN size never gets here: sizes are checked).
  mix(std::bit_cast<std::uint64_t>(key.size_bytes == 0 ? 0.0 : key.size_bytes));
  return static_cast<std::size_t>(hash);
}

bool Collectives::PlanKeyEqual::operator()(PlanKeyView a, PlanKeyView b) const {
  return a.op == b.op && a.size_bytes == b.size_bytes &&
         std::equal(a.ranks.begin(), a.ranks.end(), b.ranks.begin(), b.ranks.end());
}

void Collectives::begin_batch() {
  if (batch_) throw ModelError("collective batches do not nest");
  batch_.emplace();
}

void Collectives::end_batch() {
  if (!batch_) throw ModelError("end_batch() without begin_batch()");
  std::vector<FlowNetwork::FlowRequest> requests = std::move(*batch_);
  batch_.reset();
  if (!requests.empty()) network_->start_flows(std::move(requests));
}

// ---- plans ---------------------------------------------------------------------------------

Collectives::Plan Collectives::plan(CollectiveChoice choice, CollectiveOp op,
                                    const std::vector<VertexId>& ranks, double size_bytes) {
  if (ranks.size() < 2) return {};  // nothing leaves the GPU
  Plan plan;
  switch (choice.algorithm) {
    case CollectiveAlgorithm::ring: plan = plan_ring(op, ranks, size_bytes); break;
    case CollectiveAlgorithm::tree: plan = plan_tree(choice.protocol, ranks, size_bytes); break;
    case CollectiveAlgorithm::nvls: plan = plan_nvls(ranks, size_bytes); break;
    case CollectiveAlgorithm::nvls_tree: plan = plan_nvls_tree(ranks, size_bytes); break;
    case CollectiveAlgorithm::hierarchical: return plan_hierarchical(choice, ranks, size_bytes);
    case CollectiveAlgorithm::direct: plan = plan_direct(ranks, size_bytes); break;
    case CollectiveAlgorithm::chain: plan = plan_broadcast(ranks, size_bytes); break;
    case CollectiveAlgorithm::pairs: plan = plan_pairs(ranks, size_bytes); break;
  }
  // The protocol's share of Simple's bandwidth turns payload into wire load, and its latencies
  // give the collective's latency.
  const ProtocolCost& cost = protocol_cost(choice);
  const bool nvls_based = choice.algorithm == CollectiveAlgorithm::nvls ||
                          choice.algorithm == CollectiveAlgorithm::nvls_tree;
  if (!nvls_based) {
    for (PlannedFlow& flow : plan.flows) flow.bytes /= cost.bandwidth;
  }
  plan.latency = latency(choice, op, ranks);
  return plan;
}

const ProtocolCost& Collectives::protocol_cost(CollectiveChoice choice) const {
  const auto& table = choice.algorithm == CollectiveAlgorithm::tree ? costs_.tree : costs_.ring;
  return table[static_cast<int>(choice.protocol)];
}

SimTime Collectives::latency(CollectiveChoice choice, CollectiveOp op,
                             const std::vector<VertexId>& ranks) const {
  // NCCL's latency model (src/graph/tuning.cc): the base cost, plus each step's latency by the
  // link class it crosses, with the steps that cross between NVLink domains or nodes counted
  // apart from those inside one.
  const ProtocolCost& cost = protocol_cost(choice);
  const std::vector<std::vector<VertexId>> groups = group_by_node(ranks);
  const auto p = static_cast<std::int64_t>(ranks.size());
  const auto nodes = static_cast<std::int64_t>(groups.size());
  const std::vector<VertexId>& first = groups.front();
  // NVLink (or xGMI) steps only if every hop inside the group has a GPU link, as NCCL takes its
  // graph's worst intra-node link: on bridged pairs a ring also crosses PCIe between pairs.
  bool gpu_links = topology_->nvswitch_of(first.front()).has_value();
  if (!gpu_links && first.size() > 1) {
    gpu_links = true;
    for (std::size_t i = 0; i < first.size(); ++i) {
      gpu_links = gpu_links && topology_->link_between(first[i], first[(i + 1) % first.size()]);
    }
  }
  const SimTime intra = gpu_links ? cost.nvlink_step : cost.pcie_step;
  const SimTime inter = cost.network_step;
  // NCCL's tuner charges a tree over n domains log2i(n) = floor(log2 n) network steps each way
  // (tuning.cc), though its binary tree (trees.cc) is up to ceil(log2 n) edges deep.
  const auto depth = static_cast<std::int64_t>(std::bit_width(groups.size()) - 1);
  switch (choice.algorithm) {
    case CollectiveAlgorithm::ring: {
      const std::int64_t steps = ring_steps(op, static_cast<int>(p));
      const std::int64_t inter_steps = (op == CollectiveOp::all_reduce ? 2 : 1) * (nodes - 1);
      return cost.base + intra * (steps - inter_steps) + inter * inter_steps;
    }
    case CollectiveAlgorithm::tree: {
      const auto per_node = static_cast<std::int64_t>(first.size());
      return cost.base + intra * (2 * (per_node - 1)) + inter * (2 * depth);
    }
    case CollectiveAlgorithm::nvls:
      // Reduce and multicast through the switch. NCCL's NVLS latencies are not in the library
      // table yet, so this is an assumption: two NVLink steps of the ring's Simple protocol.
      return cost.base + cost.nvlink_step * 2;
    case CollectiveAlgorithm::nvls_tree: {
      // The same two switch steps, and NCCL's tree latency across the domains (tuning.cc:
      // 2 log2i(nodes) network steps).
      return cost.base + cost.nvlink_step * 2 + inter * (2 * depth);
    }
    case CollectiveAlgorithm::hierarchical:
      break;  // its phases are rings, each with its own latency (plan_hierarchical)
    case CollectiveAlgorithm::chain: return cost.base + intra * (p - nodes) + inter * (nodes - 1);
    case CollectiveAlgorithm::direct:
    case CollectiveAlgorithm::pairs: return cost.base + (nodes > 1 ? inter : intra);
  }
  return cost.base;
}

Collectives::Plan Collectives::plan_ring(CollectiveOp op, const std::vector<VertexId>& ranks,
                                         double size_bytes) {
  const int p = static_cast<int>(ranks.size());
  const std::vector<Channel>& ring_channels = channels(ranks);
  Plan plan;
  const double channel_bytes =
      bus_factor(op, p) * size_bytes / static_cast<double>(ring_channels.size());
  for (const Channel& channel : ring_channels) plan.flows.push_back({channel.links, channel_bytes});
  return plan;
}

std::optional<double> Collectives::tree_bus_bandwidth_cap(
    Protocol protocol, const std::vector<VertexId>& ranks) const {
  if (!costs_.gpu_tree_limits) return std::nullopt;
  // NCCL's column is by hosts (nNodes), even where an NVLink domain spans several trays.
  std::set<int> hosts;
  for (const VertexId gpu : ranks) hosts.insert(topology_->vertex(gpu).node);
  const std::size_t bucket = std::min<std::size_t>(hosts.size(), 3) - 1;  // 1, 2, 3+ hosts
  // The tuner multiplies the per-channel limit by the tree graph's channel count, which NCCL's
  // topology search finds; it is not modelled. Assumed here: a channel per NIC that the first
  // domain's ranks use, at least 2 (NCCL duplicates a single channel) and at most 16
  // (MAXCHANNELS / 2, where the search stops).
  const std::vector<std::vector<VertexId>> domains = group_by_node(ranks);
  std::set<VertexId> nics;
  for (const VertexId gpu : domains.front()) {
    if (const auto nic = topology_->nic_of_gpu(gpu)) nics.insert(*nic);
  }
  const auto channels = static_cast<double>(std::clamp<std::size_t>(nics.size(), 2, 16));
  const TreeChannelLimits& limits = *costs_.gpu_tree_limits;
  // Every protocol is held to the Simple tree's limit scaled by its bandwidth; LL128 also to its
  // own (tuning.cc applies them one after the other).
  double per_channel =
      limits.simple_bytes_per_s[bucket] * costs_.tree[static_cast<int>(protocol)].bandwidth;
  if (protocol == Protocol::ll128) {
    per_channel = std::min(per_channel, limits.ll128_bytes_per_s[bucket]);
  }
  return channels * per_channel;
}

Collectives::Plan Collectives::plan_tree(Protocol protocol, const std::vector<VertexId>& ranks,
                                         double size_bytes) {
  // NCCL's tree: per channel, a chain through each node's GPUs down to the node's head (the
  // channel's entry GPU, whose NIC is the channel's rail) and NCCL's double binary tree over the
  // nodes' heads, each of its two trees reducing and then broadcasting half the data. Each
  // (channel, tree) is one pipelined flow over every chain link and tree edge, both ways, carrying
  // S / (2 channels), inflated by the library's tree efficiency relative to a ring and by its
  // correction at medium sizes. Where the library's per-channel limits are known, the flows share a
  // ceiling that holds the tree's bus bandwidth (2 S / time, the tree's algorithm bandwidth being
  // half its bus bandwidth in NCCL's model) to that cap, scaled by the same size correction.
  const std::vector<std::vector<VertexId>> rings = channel_rings(ranks);
  const std::vector<std::vector<VertexId>> nodes = group_by_node(ranks);
  const std::size_t node_count = nodes.size();
  const std::size_t per_node = nodes.front().size();  // candidates() requires equal nodes
  Plan plan;
  std::uint64_t flow = 0;  // one connection per (channel, tree)
  auto add_both_ways = [&](std::vector<LinkUse>& links, VertexId a, VertexId b) {
    for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
      const std::vector<LinkUse> hop = hop_uses(from, to, flow);
      links.insert(links.end(), hop.begin(), hop.end());
    }
  };
  const double flows = 2.0 * static_cast<double>(rings.size());
  const double correction = costs_.tree_correction(protocol, size_bytes);
  const double bytes = size_bytes / flows / costs_.tree_efficiency / correction;
  // Wire rate per flow at which the payload reaches correction x cap / 2, with plan() dividing
  // the bytes by the protocol's bandwidth afterwards.
  double max_rate = FlowNetwork::kUncapped;
  if (const auto cap = tree_bus_bandwidth_cap(protocol, ranks)) {
    const double protocol_bandwidth = costs_.tree[static_cast<int>(protocol)].bandwidth;
    max_rate = *cap / (2.0 * flows * costs_.tree_efficiency * protocol_bandwidth);
  }
  const std::array<std::vector<int>, 2> trees = double_binary_tree(static_cast<int>(node_count));
  for (const std::vector<VertexId>& ring : rings) {
    std::vector<LinkUse> chains;
    std::vector<VertexId> heads;
    for (std::size_t k = 0; k < node_count; ++k) {
      const auto begin = ring.begin() + static_cast<std::ptrdiff_t>(k * per_node);
      const std::vector<VertexId> chain(begin, begin + static_cast<std::ptrdiff_t>(per_node));
      heads.push_back(chain.front());
      for (std::size_t i = 0; i + 1 < chain.size(); ++i) {
        add_both_ways(chains, chain[i], chain[i + 1]);
      }
    }
    for (const std::vector<int>& parents : trees) {
      ++flow;
      std::vector<LinkUse> links = chains;
      for (std::size_t node = 0; node < node_count; ++node) {
        const int parent = parents[node];
        if (parent >= 0) add_both_ways(links, heads[node], heads[static_cast<std::size_t>(parent)]);
      }
      plan.flows.push_back({std::move(links), bytes, max_rate});
    }
  }
  return plan;
}

Collectives::PlannedFlow Collectives::nvls_ports(const std::vector<VertexId>& gpus,
                                                 double size_bytes) const {
  // Every member's NVLink port, both ways, carrying S (1 + 1/p) at the port's usable rate, and
  // no faster than the switch reduces: NVLS's bus bandwidth stays at 2 x nvls_efficiency x the
  // port's line rate B whatever p is, as GB200 NVL72 racks measure it (811 GB/s on 8 GPUs, 835
  // on 72, docs/collective-accuracy.md), where the ports alone (and NCCL's tuning model, whose
  // NVLS graph charges each port p + 1 channel bandwidths) would give 25% more on 72. That bus
  // bandwidth, 2(p-1)/p S / t, takes t = (p-1)/p S / (nvls_efficiency B): the S (1 + 1/p)
  // flow's ceiling is (p+1)/(p-1) nvls_efficiency B. Few GPUs (p <= 4 on H100) fill their
  // ports first. The ceiling is the flow's own: two NVLS collectives on the same ports each
  // get it (docs/limitations.md).
  const VertexId nvswitch = *topology_->reducing_switch_of(gpus.front());
  PlannedFlow ports;
  for (const VertexId gpu : gpus) {
    ports.links.push_back({topology_->link_between(gpu, nvswitch).value(), 1.0});
    ports.links.push_back({topology_->link_between(nvswitch, gpu).value(), 1.0});
  }
  const double p = static_cast<double>(gpus.size());
  const double port_line_rate = topology_->link(ports.links.front().link).bytes_per_s;
  ports.bytes = size_bytes * (1 + 1 / p);
  ports.max_rate = (p + 1) / (p - 1) * gpu_links_.nvls_efficiency * port_line_rate;
  return ports;
}

Collectives::Plan Collectives::plan_nvls(const std::vector<VertexId>& ranks, double size_bytes) {
  if (!nvls_possible(ranks)) {
    throw ModelError("NVLS needs GPUs that support it, all on one reducing NVSwitch");
  }
  Plan plan;
  plan.flows.push_back(nvls_ports(ranks, size_bytes));
  return plan;
}

Collectives::Plan Collectives::plan_hierarchical(CollectiveChoice choice,
                                                 const std::vector<VertexId>& ranks,
                                                 double size_bytes) {
  // Three phases, each of rings with the chosen protocol and their own latency: a
  // reduce-scatter inside every node (all nodes at once), an all-reduce of each GPU's shard S/g
  // across the nodes among the GPUs of its local index (a ring per rail), and an all-gather
  // inside every node. Unlike NVLS-tree the phases do not overlap.
  const std::vector<std::vector<VertexId>> nodes = group_by_node(ranks);
  const std::size_t g = nodes.front().size();  // candidates() requires equal nodes
  std::vector<std::vector<VertexId>> rails(g);
  for (const std::vector<VertexId>& node : nodes) {
    for (std::size_t i = 0; i < g; ++i) rails[i].push_back(node[i]);
  }
  const CollectiveChoice ring{CollectiveAlgorithm::ring, choice.protocol};
  const auto phase_over = [&](CollectiveOp op, const std::vector<std::vector<VertexId>>& groups,
                              double size) {
    Phase phase;
    for (const std::vector<VertexId>& group : groups) {
      Plan part = plan(ring, op, group, size);
      for (PlannedFlow& flow : part.flows) phase.flows.push_back(std::move(flow));
      phase.latency = std::max(phase.latency, part.latency);
    }
    return phase;
  };
  Phase scatter = phase_over(CollectiveOp::reduce_scatter, nodes, size_bytes);
  Phase across = phase_over(CollectiveOp::all_reduce, rails, size_bytes / static_cast<double>(g));
  Phase gather = phase_over(CollectiveOp::all_gather, nodes, size_bytes);
  Plan result;
  result.flows = std::move(scatter.flows);
  result.latency = scatter.latency;
  result.later.push_back(std::move(across));
  result.later.push_back(std::move(gather));
  return result;
}

Collectives::Plan Collectives::plan_nvls_tree(const std::vector<VertexId>& ranks,
                                              double size_bytes) {
  // NCCL's NVLS-tree, pipelined: inside each domain NVLS reduce-scatters the buffer and later
  // all-gathers it back, S (1 + 1/p) each way per port as an NVLS all-reduce. Across domains
  // only the heads talk: GPUs with a NIC of their own, one a NIC, at most NCCL_MAX_NVLS_ARITY
  // (32, src/include/device.h; NCCL's NVLS search, src/graph/search.cc), head h carrying shard
  // h (S/H) over its NIC. The shards of the domains' head h reduce and broadcast over NCCL's
  // double binary tree of the domains (connect.cc: channels alternate between its two trees),
  // half the shard on each: a tree edge carries S/(2H) each way, so a head's NIC carries S/H
  // each way between two domains and 2 S/H where its domain is inside one tree (degree 3) and a
  // leaf of the other, as from four domains on. All run at once.
  if (!nvls_tree_possible(ranks)) {
    throw ModelError("NVLS-tree needs several reducing NVSwitch domains of equal size");
  }
  const std::vector<std::vector<VertexId>> domains = group_by_node(ranks);
  Plan plan;
  for (const std::vector<VertexId>& gpus : domains)
    plan.flows.push_back(nvls_ports(gpus, size_bytes));
  // Each domain's heads, in rank order; head h of every domain joins tree h. (Hops between
  // GPUs of the same index leave through the sender's own NIC, as NCCL's heads send.)
  const auto max_heads = static_cast<std::size_t>(kMaxNvlsHeads);
  std::vector<std::vector<VertexId>> heads;
  std::size_t head_count = max_heads;
  for (const std::vector<VertexId>& gpus : domains) {
    std::vector<VertexId>& own = heads.emplace_back();
    std::set<VertexId> nics;
    for (const VertexId gpu : gpus) {
      const std::optional<VertexId> nic = topology_->nic_of_gpu(gpu);
      if (own.size() < max_heads && nic && nics.insert(*nic).second) own.push_back(gpu);
    }
    if (own.empty()) {  // no NIC of their own: hops route as the topology does
      own.assign(gpus.begin(),
                 gpus.begin() + static_cast<std::ptrdiff_t>(std::min(gpus.size(), max_heads)));
    }
    head_count = std::min(head_count, own.size());
  }
  const double bytes = size_bytes / (2.0 * static_cast<double>(head_count));
  const std::array<std::vector<int>, 2> trees =
      double_binary_tree(static_cast<int>(domains.size()));
  std::uint64_t flow = 0;  // one connection per (head, tree)
  for (std::size_t head = 0; head < head_count; ++head) {
    for (const std::vector<int>& parents : trees) {
      PlannedFlow edges{{}, bytes};
      for (std::size_t k = 0; k < domains.size(); ++k) {
        if (parents[k] < 0) continue;
        const VertexId child = heads[k][head];
        const VertexId parent = heads[static_cast<std::size_t>(parents[k])][head];
        for (const auto& [from, to] : {std::pair{child, parent}, std::pair{parent, child}}) {
          const std::vector<LinkUse> hop = hop_uses(from, to, flow);
          edges.links.insert(edges.links.end(), hop.begin(), hop.end());
        }
      }
      plan.flows.push_back(std::move(edges));
      ++flow;
    }
  }
  return plan;
}

std::vector<LinkUse> Collectives::hop_uses(VertexId from, VertexId to, std::uint64_t flow) const {
  std::vector<LinkId> links;
  append_hop_links(from, to, flow, links);
  std::vector<LinkUse> uses;
  for (const LinkId link : links) uses.push_back({link, 1.0});
  return uses;
}

Collectives::Plan Collectives::plan_transfers(
    const std::vector<std::pair<VertexId, VertexId>>& pairs, double bytes_each) const {
  // A transfer over GPU-to-GPU links only (NVLink, xGMI) is a point-to-point send inside one
  // domain: at the profile's p2p efficiency where it has one. The links are sized at the ring's
  // efficiency, so the payload is scaled by their ratio.
  const auto gpu_link_only = [&](const std::vector<LinkUse>& uses) {
    return std::all_of(uses.begin(), uses.end(), [&](const LinkUse& use) {
      const LinkKind kind = topology_->link(use.link).kind;
      return kind == LinkKind::nvlink || kind == LinkKind::xgmi;
    });
  };
  const double p2p_scale =
      gpu_links_.p2p_efficiency > 0 ? gpu_links_.ring_efficiency / gpu_links_.p2p_efficiency : 1.0;
  Plan plan;
  std::uint64_t flow = 0;
  for (const auto& [from, to] : pairs) {
    std::vector<LinkUse> uses = hop_uses(from, to, flow++);
    const double bytes = gpu_link_only(uses) ? bytes_each * p2p_scale : bytes_each;
    plan.flows.push_back({std::move(uses), bytes});
  }
  return plan;
}

Collectives::Plan Collectives::plan_direct(const std::vector<VertexId>& ranks, double size_bytes) {
  // S/p from every rank to every other, a flow a send, except the sends of one node's GPUs to
  // one GPU of another NVLink domain where PXN carries them: each over its NVSwitch port to the
  // local GPU of the target's index, out through that GPU's NIC on one connection (NCCL's PXN
  // proxy), so one network path at one pace. One flow stands for them: their links merged into
  // weights (a link k of them cross carries k times the flow's bytes and counts as k flows in
  // the sharing), as k flows at one rate, which they are while the shared path, not their own
  // switch ports, paces them. An all-to-all over n one-node domains of g GPUs is then
  // n g (g - 1) + n (n - 1) g flows instead of n g (n g - 1). Where the way to the proxy is not
  // one switch port (PCIe boxes, xGMI meshes, NVLink pairs), or there is no proxy, each send
  // keeps its own flow.
  const double each = size_bytes / static_cast<double>(ranks.size());
  std::vector<std::pair<VertexId, VertexId>> alone;
  std::map<std::pair<VertexId, VertexId>, std::vector<VertexId>> through;  // (proxy, target)
  for (const VertexId from : ranks) {
    const std::optional<VertexId> nvswitch = topology_->nvswitch_of(from);
    for (const VertexId to : ranks) {
      if (from == to) continue;
      // The proxy is a GPU of the sender's node, so on an NVSwitch node one port away.
      const std::optional<NetworkHop> hop = network_hop(from, to);
      if (hop && nvswitch) {
        through[{hop->proxy, to}].push_back(from);
      } else {
        alone.emplace_back(from, to);
      }
    }
  }
  Plan plan = plan_transfers(alone, each);
  std::uint64_t flow = alone.size();  // a connection a flow, as in plan_transfers
  for (const auto& [ends, sources] : through) {
    PlannedFlow together{{}, each};
    for (const VertexId from : sources) {
      const std::vector<LinkUse> hop = hop_uses(from, ends.second, flow);
      together.links.insert(together.links.end(), hop.begin(), hop.end());
    }
    plan.flows.push_back(std::move(together));
    ++flow;
  }
  return plan;
}

Collectives::Plan Collectives::plan_pairs(const std::vector<VertexId>& ranks, double size_bytes) {
  std::vector<std::pair<VertexId, VertexId>> pairs;
  for (std::size_t a = 0; a < ranks.size(); ++a) {
    pairs.emplace_back(ranks[a], ranks[(a + 1) % ranks.size()]);
  }
  return plan_transfers(pairs, size_bytes);
}

Collectives::Plan Collectives::plan_broadcast(const std::vector<VertexId>& ranks,
                                              double size_bytes) {
  // Each channel pipelines S / channels down its ring from the root: every hop of the ring but
  // the one back into the root, so a mesh or a multi-node cluster uses all its links and NICs.
  const std::vector<Channel>& ring_channels = channels(ranks);
  Plan plan;
  for (const Channel& channel : ring_channels) {
    PlannedFlow flow{{}, size_bytes / static_cast<double>(ring_channels.size())};
    for (std::size_t h = 0; h < channel.hops.size(); ++h) {
      if (channel.order[(h + 1) % channel.order.size()] == ranks.front()) continue;
      flow.links.insert(flow.links.end(), channel.hops[h].begin(), channel.hops[h].end());
    }
    plan.flows.push_back(std::move(flow));
  }
  return plan;
}

// ---- the chunked ring, for checks ----------------------------------------------------------

struct Collectives::ChunkedChannel {
  const Channel* channel;
  int steps_left;
  double chunk_bytes;
  SimTime step_latency;
  std::size_t hops_in_flight = 0;
  std::shared_ptr<std::size_t> channels_left;
  std::shared_ptr<std::function<void()>> done;
};

void Collectives::run_chunked_step(const std::shared_ptr<ChunkedChannel>& state) {
  if (state->steps_left == 0) {
    if (--*state->channels_left == 0) (*state->done)();
    return;
  }
  --state->steps_left;
  state->hops_in_flight = state->channel->hops.size();
  for (const std::vector<LinkUse>& hop : state->channel->hops) {
    network_->start_flow(hop, state->chunk_bytes, state->step_latency, [this, state] {
      if (--state->hops_in_flight == 0) run_chunked_step(state);
    });
  }
}

void Collectives::run_ring_chunked(CollectiveOp op, const std::vector<VertexId>& ranks,
                                   double size_bytes, std::function<void()> done) {
  check_ranks(ranks);
  const int p = static_cast<int>(ranks.size());
  if (p == 1) {
    engine_->schedule_after(SimTime{}, std::move(done));
    return;
  }
  // Simple's latency, as the channel form pays it: the base up front, and the rest spread evenly
  // over the steps (rounded down to the nanosecond per step).
  const CollectiveChoice simple{CollectiveAlgorithm::ring, Protocol::simple};
  const SimTime base = protocol_cost(simple).base;
  const SimTime each_step =
      SimTime::from_ns((latency(simple, op, ranks) - base).ns() / ring_steps(op, p));
  const std::vector<Channel>& ring_channels = channels(ranks);
  auto channels_left = std::make_shared<std::size_t>(ring_channels.size());
  auto finish = std::make_shared<std::function<void()>>(std::move(done));
  const double chunk = size_bytes / p / static_cast<double>(ring_channels.size());
  for (const Channel& channel : ring_channels) {
    auto state = std::make_shared<ChunkedChannel>(
        ChunkedChannel{&channel, ring_steps(op, p), chunk, each_step, 0, channels_left, finish});
    engine_->schedule_after(base, [this, state] { run_chunked_step(state); });
  }
}

}  // namespace fleetsim
