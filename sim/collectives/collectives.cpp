#include "sim/collectives/collectives.hpp"

#include <algorithm>
#include <memory>

#include "sim/engine/errors.hpp"

namespace fleetsim {

double ring_traffic_factor(CollectiveOp op, int ranks) {
  const double p = ranks;
  const double per_pass = (p - 1) / p;
  return op == CollectiveOp::all_reduce ? 2 * per_pass : per_pass;
}

int ring_steps(CollectiveOp op, int ranks) {
  return op == CollectiveOp::all_reduce ? 2 * (ranks - 1) : ranks - 1;
}

Collectives::Collectives(Engine& engine, FlowNetwork& network, const Topology& topology,
                         CollectiveLatency latency, int channels)
    : engine_(&engine),
      network_(&network),
      topology_(&topology),
      latency_(latency),
      channels_(channels) {
  if (channels_ < 1)
    throw ModelError("a collective needs at least one channel");
}

const Collectives::RingPaths& Collectives::ring_paths(const std::vector<VertexId>& ring) {
  const auto cached = ring_cache_.find(ring);
  if (cached != ring_cache_.end())
    return cached->second;
  RingPaths paths;
  for (std::size_t i = 0; i < ring.size(); ++i) {
    const VertexId next = ring[(i + 1) % ring.size()];
    SimTime hop_latency{};
    for (const LinkId link : topology_->route(ring[i], next)) {
      paths.links.push_back(LinkUse{link, 1.0});
      hop_latency += topology_->link(link).latency;
    }
    paths.slowest_hop_latency = std::max(paths.slowest_hop_latency, hop_latency);
  }
  return ring_cache_.emplace(ring, std::move(paths)).first->second;
}

void Collectives::run_ring(CollectiveOp op, const std::vector<VertexId>& ring, double size_bytes,
                           std::function<void()> done) {
  if (ring.empty())
    throw ModelError("a collective needs at least one rank");
  const int p = static_cast<int>(ring.size());
  if (p == 1) {  // nothing leaves the GPU
    engine_->schedule_after(SimTime{}, std::move(done));
    return;
  }
  const RingPaths& paths = ring_paths(ring);
  SimTime latency = latency_.base;
  for (int step = 0; step < ring_steps(op, p); ++step) {
    latency += latency_.per_step + paths.slowest_hop_latency;
  }
  const double channel_bytes = ring_traffic_factor(op, p) * size_bytes / channels_;
  // The collective ends when its last channel does; the latency is paid once, after that.
  auto remaining = std::make_shared<int>(channels_);
  auto finish = std::make_shared<std::function<void()>>(std::move(done));
  for (int c = 0; c < channels_; ++c) {
    network_->start_flow(paths.links, channel_bytes, latency, [remaining, finish] {
      if (--*remaining == 0)
        (*finish)();
    });
  }
}

}  // namespace fleetsim
