#include "sim/network/flow_network.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "sim/engine/errors.hpp"

namespace fleetsim {
namespace {

// A link counts as saturated when its residual capacity is below this fraction of capacity:
// progressive filling in floating point leaves residues of a few ulps.
constexpr double kSaturationTolerance = 1e-9;

}  // namespace

// Marks links in a flag array and unmarks them all when it goes out of scope, so the array is
// all zero between calls whatever happens in between.
class FlowNetwork::LinkMarks {
 public:
  LinkMarks(std::vector<char>& flags, std::vector<FlowLinkId>& marked)
      : flags_(&flags), marked_(&marked) {
    marked_->clear();
  }
  ~LinkMarks() {
    for (const FlowLinkId l : *marked_) (*flags_)[l] = 0;
  }
  LinkMarks(const LinkMarks&) = delete;
  LinkMarks& operator=(const LinkMarks&) = delete;
  // True if the link was not marked yet.
  bool mark(FlowLinkId l) {
    if ((*flags_)[l]) return false;
    marked_->push_back(l);  // recorded first: a throw here leaves no flag behind
    (*flags_)[l] = 1;
    return true;
  }

 private:
  std::vector<char>* flags_;
  std::vector<FlowLinkId>* marked_;
};

std::vector<LinkUse> merge_duplicates(std::vector<LinkUse> links) {
  const auto strictly_increasing = [](const LinkUse& a, const LinkUse& b) {
    return a.link >= b.link;  // adjacent_find's predicate: true where the order breaks
  };
  if (std::adjacent_find(links.begin(), links.end(), strictly_increasing) == links.end()) {
    return links;  // already sorted, no repeats
  }
  std::stable_sort(links.begin(), links.end(),
                   [](const LinkUse& a, const LinkUse& b) { return a.link < b.link; });
  std::vector<LinkUse> merged;
  for (const LinkUse& use : links) {
    if (!merged.empty() && merged.back().link == use.link) {
      merged.back().weight += use.weight;
    } else {
      merged.push_back(use);
    }
  }
  return merged;
}

FlowNetwork::FlowNetwork(Engine& engine, std::vector<double> capacity_bytes_per_s,
                         std::vector<bool> never_binds)
    : engine_(&engine),
      capacity_(std::move(capacity_bytes_per_s)),
      never_binds_(std::move(never_binds)),
      link_bytes_(capacity_.size(), 0.0),
      flows_on_link_(capacity_.size()),
      bottlenecked_on_(capacity_.size(), 0),
      filling_(capacity_.size()),
      in_component_(capacity_.size(), 0) {
  for (std::size_t l = 0; l < capacity_.size(); ++l) {
    if (!(capacity_[l] > 0)) {
      throw ModelError("flow network link " + std::to_string(l) + " has no capacity");
    }
  }
  if (!never_binds_.empty() && never_binds_.size() != capacity_.size()) {
    throw ModelError("the links that never bind are not given one per link");
  }
  if (capacity_.size() >= kAtCeiling) {
    throw ModelError("a flow network of more than " + std::to_string(kAtCeiling - 1) + " links");
  }
}

FlowNetwork::FlowId FlowNetwork::start_flow(std::vector<LinkUse> links, double size_bytes,
                                            SimTime latency, Callback on_complete,
                                            double max_rate) {
  std::vector<FlowRequest> request;
  request.push_back({std::move(links), size_bytes, latency, std::move(on_complete), max_rate});
  return start_flows(std::move(request)).front();
}

FlowNetwork::Slot FlowNetwork::acquire_slot() {
  if (!free_slots_.empty()) {
    const Slot slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  if (flows_.size() > 0xffffffffu) throw ModelError("more than 2^32 flows at once");
  flows_.emplace_back();
  visited_.push_back(0);
  bottleneck_.push_back(kNoBottleneck);
  return static_cast<Slot>(flows_.size() - 1);
}

std::vector<FlowNetwork::FlowId> FlowNetwork::start_flows(std::vector<FlowRequest> requests) {
  for (const FlowRequest& request : requests) {
    for (const LinkUse& use : request.links) {
      if (use.link >= capacity_.size() || !(use.weight > 0)) {
        throw ModelError("flow uses an unknown link or a non-positive weight");
      }
    }
    if (!(request.max_rate > 0)) throw ModelError("a flow's rate ceiling must be positive");
  }
  std::vector<FlowLinkId> touched;
  std::vector<FlowId> ids;
  ids.reserve(requests.size());
  std::vector<Slot> started;
  for (FlowRequest& request : requests) {
    // Ids keep the start order in their upper 32 bits.
    if (next_sequence_ >= (FlowId{1} << 32)) throw ModelError("more than 2^32 flows started");
    bytes_started_ += request.size_bytes;
    std::vector<LinkUse> links = merge_duplicates(std::move(request.links));
    if (links.empty() || !(request.size_bytes > 0)) {
      // Nothing crosses the network (a local copy, or an empty message): only latency remains.
      ids.push_back(next_sequence_++ << 32);  // names no slot: its rate reads 0
      bytes_delivered_ += std::max(request.size_bytes, 0.0);
      engine_->schedule_after(request.latency, std::move(request.on_complete));
      continue;
    }
    // Links that never bind are set apart, unless the flow crosses nothing else.
    std::vector<LinkUse> carried;
    if (!never_binds_.empty()) {
      const auto binding = std::stable_partition(
          links.begin(), links.end(), [&](const LinkUse& use) { return !never_binds_[use.link]; });
      if (binding != links.begin()) {
        carried.assign(binding, links.end());
        links.erase(binding, links.end());
      }
    }
    for (const LinkUse& use : links) touched.push_back(use.link);
    const Slot slot = acquire_slot();
    Flow& flow = flows_[slot];
    flow.id = (next_sequence_++ << 32) | slot;
    flow.links = std::move(links);
    flow.carried = std::move(carried);
    flow.size = request.size_bytes;
    flow.remaining = request.size_bytes;
    flow.rate = 0;
    flow.max_rate = request.max_rate;
    flow.last_update = engine_->now();
    flow.completion = SimTime::max();
    flow.latency = request.latency;
    flow.on_complete = std::move(request.on_complete);
    ids.push_back(flow.id);
    started.push_back(slot);
  }
  if (started.empty()) return ids;
  for (const Slot slot : started) {
    for (const LinkUse& use : flows_[slot].links) {
      flows_on_link_[use.link].push_back({slot, use.weight});
    }
  }
  if (!watched_.empty()) {
    watched_by_slot_.resize(flows_.size());
    for (const Slot slot : started) {
      for (const auto* uses : {&flows_[slot].links, &flows_[slot].carried}) {
        for (const LinkUse& use : *uses) {
          if (const int at = watch_position_[use.link]; at >= 0) {
            watched_[at].crossings.push_back({slot, use.weight});
            watched_by_slot_[slot].push_back(at);
          }
        }
      }
      mark_watched(slot);
    }
  }
  active_flows_ += started.size();
  ++changes_;
  // (The new flows, at rate 0 so far, have moved nothing.)
  if (!start_without_resolving(started)) resolve(touched);
  reschedule();
  if (!watched_.empty()) sample_watched();
  return ids;
}

void FlowNetwork::watch(const std::vector<FlowLinkId>& links) {
  if (next_sequence_ != 1) throw ModelError("links can be watched only before any flow starts");
  for (const FlowLinkId link : links) {
    if (link >= capacity_.size()) throw ModelError("a watched link is not in the network");
  }
  watch_position_.assign(capacity_.size(), -1);
  watched_.clear();
  for (const FlowLinkId link : links) {
    if (watch_position_[link] >= 0) continue;
    watch_position_[link] = static_cast<int>(watched_.size());
    watched_.push_back({.link = link, .crossings = {}, .latest = -1, .marked = false});
  }
}

void FlowNetwork::mark_watched(Slot slot) {
  for (const int at : watched_by_slot_[slot]) {
    if (watched_[at].marked) continue;
    watched_[at].marked = true;
    marked_.push_back(at);
  }
}

void FlowNetwork::sample_watched() {
  const SimTime now = engine_->now();
  for (const int at : marked_) {
    Watched& watched = watched_[at];
    watched.marked = false;
    double load = 0;
    for (const Crossing& crossing : watched.crossings) {
      load += crossing.weight * flows_[crossing.slot].rate;
    }
    const std::ptrdiff_t latest = watched.latest;
    if (latest >= 0 && load_samples_[latest].at == now) {
      load_samples_[latest].bytes_per_s = load;  // the last change of an instant holds
    } else if (latest >= 0 ? load_samples_[latest].bytes_per_s != load : load > 0) {
      watched.latest = static_cast<std::ptrdiff_t>(load_samples_.size());
      load_samples_.push_back({watched.link, now, load});
    }
  }
  marked_.clear();
}

double FlowNetwork::rate(FlowId flow) const {
  const Slot slot = slot_of(flow);
  return slot < flows_.size() && flows_[slot].id == flow ? flows_[slot].rate : 0.0;
}

std::vector<FlowNetwork::Slot> FlowNetwork::connected_flows(
    const std::vector<FlowLinkId>& seed_links) {
  // Links are marked in a reusable array and unmarked when the search ends (by the guard, even
  // on an exception), flows by the search's number: the search costs what the component
  // touches, not the network's size.
  LinkMarks marks(in_component_, seen_links_);
  const std::uint64_t search = ++searches_;
  std::vector<FlowId> found;  // ids sort as the flows started and name their slots
  std::vector<FlowLinkId> frontier;
  auto visit = [&](FlowLinkId l) {
    if (marks.mark(l)) frontier.push_back(l);
  };
  for (const FlowLinkId l : seed_links) visit(l);
  while (!frontier.empty()) {
    const FlowLinkId l = frontier.back();
    frontier.pop_back();
    for (const OnLink& on : flows_on_link_[l]) {
      const Slot f = on.slot;
      if (visited_[f] == search) continue;
      visited_[f] = search;
      const Flow& flow = flows_[f];
      found.push_back(flow.id);
      for (const LinkUse& use : flow.links) visit(use.link);
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<Slot> slots(found.size());
  std::transform(found.begin(), found.end(), slots.begin(), slot_of);
  return slots;
}

void FlowNetwork::resolve(const std::vector<FlowLinkId>& changed) {
  ++resolves_;
  const std::vector<Slot> component = connected_flows(changed);
  for (const Slot slot : component) advance(flows_[slot]);
  reallocate(component);
}

double FlowNetwork::residual(FlowLinkId l) const {
  double used = 0;
  for (const OnLink& on : flows_on_link_[l]) used += on.weight * flows_[on.slot].rate;
  return capacity_[l] - used;
}

void FlowNetwork::set_bottleneck(Slot slot, FlowLinkId bottleneck) {
  FlowLinkId& kept = bottleneck_[slot];
  if (kept < kAtCeiling) --bottlenecked_on_[kept];
  kept = bottleneck;
  if (kept < kAtCeiling) ++bottlenecked_on_[kept];
}

bool FlowNetwork::start_without_resolving(const std::vector<Slot>& started) {
  // Each new flow in turn, against the rates of those before it: the least capacity left on
  // its links (per unit of its weight there), or its ceiling. That keeps every link within its
  // capacity; the flows already running keep their bottlenecks if the new flow crosses none
  // (every link it crosses has capacity left) and the link it saturates carries no faster
  // flow, which makes it the new flow's bottleneck.
  // The flow's bottleneck once placed so, or kNoBottleneck where it cannot be.
  const auto place_alone = [&](Flow& flow) -> FlowLinkId {
    // A link that is some flow's bottleneck is saturated: found without summing rates.
    for (const LinkUse& use : flow.links) {
      if (bottlenecked_on_[use.link] > 0) return kNoBottleneck;
    }
    double rate = flow.max_rate;
    FlowLinkId least = kAtCeiling;
    for (const LinkUse& use : flow.links) {
      const double left = residual(use.link);
      if (!(left > kSaturationTolerance * capacity_[use.link])) return kNoBottleneck;
      if (left / use.weight < rate) {
        rate = left / use.weight;
        least = use.link;
      }
    }
    if (least != kAtCeiling) {
      for (const OnLink& other : flows_on_link_[least]) {
        if (flows_[other.slot].rate > rate * (1 + kSaturationTolerance)) return kNoBottleneck;
      }
    }
    flow.rate = rate;
    return least;
  };
  for (const Slot slot : started) {
    const FlowLinkId bottleneck = place_alone(flows_[slot]);
    // The re-solve that follows sets every rate and bottleneck of the component, which holds
    // all the new flows, those placed already included.
    if (bottleneck == kNoBottleneck) return false;
    set_bottleneck(slot, bottleneck);
  }
  for (const Slot slot : started) set_completion(flows_[slot]);
  return true;
}

bool FlowNetwork::bottlenecks_survive(const std::vector<FlowLinkId>& freed) {
  LinkMarks marks(in_component_, seen_links_);
  for (const FlowLinkId l : freed) marks.mark(l);
  for (const FlowLinkId l : freed) {
    for (const OnLink& on : flows_on_link_[l]) {
      const FlowLinkId bottleneck = bottleneck_[on.slot];
      if (bottleneck < kAtCeiling && in_component_[bottleneck]) return false;
    }
  }
  return true;
}

void FlowNetwork::advance(Flow& flow) {
  const double elapsed = (engine_->now() - flow.last_update).seconds();
  const double moved = std::min(flow.remaining, flow.rate * elapsed);
  flow.remaining -= moved;
  for (const LinkUse& use : flow.links) link_bytes_[use.link] += use.weight * moved;
  for (const LinkUse& use : flow.carried) link_bytes_[use.link] += use.weight * moved;
  flow.last_update = engine_->now();
}

void FlowNetwork::reallocate(const std::vector<Slot>& component) {
  // Progressive filling over the links the component uses. Per-link values live in arrays
  // indexed by link; each is written before it is read, and the link flags are cleared when
  // this returns (or throws), so a change costs what its component touches.
  LinkMarks marks(in_component_, component_links_);
  // The flows, looked up once (slots do not move while this runs).
  std::vector<Flow*> unfixed;
  unfixed.reserve(component.size());
  std::vector<double>& old_rates = old_rates_;
  old_rates.clear();
  for (const Slot slot : component) {
    Flow& flow = flows_[slot];
    old_rates.push_back(flow.rate);
    flow.rate = 0;
    for (const LinkUse& use : flow.links) {
      if (marks.mark(use.link)) filling_[use.link].residual = capacity_[use.link];
    }
    unfixed.push_back(&flow);
  }
  const std::vector<FlowLinkId>& links = component_links_;
  std::vector<Flow*> still_unfixed;
  while (!unfixed.empty()) {
    for (const FlowLinkId l : links) filling_[l].weight_sum = 0;
    // No flow may rise past its own ceiling either.
    double increment = INFINITY;
    for (const Flow* flow : unfixed) {
      for (const LinkUse& use : flow->links) filling_[use.link].weight_sum += use.weight;
      increment = std::min(increment, flow->max_rate - flow->rate);
    }
    for (const FlowLinkId l : links) {
      const Filling& link = filling_[l];
      if (link.weight_sum > 0) increment = std::min(increment, link.residual / link.weight_sum);
    }
    for (const FlowLinkId l : links) {
      Filling& link = filling_[l];
      link.saturated = false;
      if (!(link.weight_sum > 0)) continue;
      link.residual -= increment * link.weight_sum;
      link.saturated = link.residual <= kSaturationTolerance * capacity_[l];
    }
    still_unfixed.clear();
    for (Flow* flow : unfixed) {
      flow->rate += increment;
      FlowLinkId bottleneck = kAtCeiling;
      if (flow->rate < flow->max_rate * (1 - kSaturationTolerance)) {
        const auto saturated =
            std::find_if(flow->links.begin(), flow->links.end(),
                         [&](const LinkUse& u) { return filling_[u.link].saturated; });
        if (saturated == flow->links.end()) {
          still_unfixed.push_back(flow);
          continue;
        }
        bottleneck = saturated->link;
      }
      set_bottleneck(slot_of(flow->id), bottleneck);
    }
    std::swap(unfixed, still_unfixed);
  }
  // A flow whose rate is unchanged ends when it was due to: its completion stands.
  for (std::size_t i = 0; i < component.size(); ++i) {
    Flow& flow = flows_[component[i]];
    if (flow.rate != old_rates[i] || flow.completion == SimTime::max()) set_completion(flow);
    if (!watched_.empty() && flow.rate != old_rates[i]) mark_watched(component[i]);
  }
}

void FlowNetwork::set_completion(Flow& flow) {
  completions_.erase({flow.completion, flow.id});
  // Rounded up once, here: the flow is done at the first nanosecond its bytes are all through.
  flow.completion = engine_->now() + from_seconds(flow.remaining / flow.rate);
  completions_.insert({flow.completion, flow.id});
}

void FlowNetwork::reschedule() {
  const SimTime next = completions_.empty() ? SimTime::max() : completions_.begin()->first;
  if (next == pending_at_) return;
  engine_->cancel(pending_);
  pending_at_ = next;
  if (next != SimTime::max()) {
    pending_ = engine_->schedule_at(next, [this] { on_completion_event(); });
  }
}

void FlowNetwork::on_completion_event() {
  pending_at_ = SimTime::max();
  const SimTime now = engine_->now();
  std::vector<FlowLinkId> freed;
  std::vector<std::pair<SimTime, Callback>> finished;
  while (!completions_.empty() && completions_.begin()->first <= now) {
    const Slot slot = slot_of(completions_.begin()->second);
    completions_.erase(completions_.begin());
    Flow& flow = flows_[slot];
    advance(flow);
    // Whatever rounding left is carried now, so each link is charged the flow's exact size.
    for (const LinkUse& use : flow.links) link_bytes_[use.link] += use.weight * flow.remaining;
    for (const LinkUse& use : flow.carried) {
      link_bytes_[use.link] += use.weight * flow.remaining;
    }
    flow.remaining = 0;
    bytes_delivered_ += flow.size;
    for (const LinkUse& use : flow.links) {
      auto& on_link = flows_on_link_[use.link];
      on_link.erase(std::find_if(on_link.begin(), on_link.end(),
                                 [slot](const OnLink& on) { return on.slot == slot; }));
      freed.push_back(use.link);
    }
    if (!watched_.empty()) {
      mark_watched(slot);
      for (const int at : watched_by_slot_[slot]) {
        auto& crossings = watched_[at].crossings;
        crossings.erase(std::find_if(crossings.begin(), crossings.end(),
                                     [slot](const Crossing& c) { return c.slot == slot; }));
      }
      watched_by_slot_[slot].clear();
    }
    set_bottleneck(slot, kNoBottleneck);
    finished.emplace_back(flow.latency, std::move(flow.on_complete));
    flow.on_complete = nullptr;
    flow.rate = 0;
    flow.id = 0;
    free_slots_.push_back(slot);
    --active_flows_;
  }
  ++changes_;
  if (!bottlenecks_survive(freed)) resolve(freed);
  reschedule();
  if (!watched_.empty()) sample_watched();
  // Flows that finish together with the same latency hand over in one event: the callbacks run
  // back to back in finishing order, as events scheduled one after another at one instant do.
  for (std::size_t first = 0; first < finished.size();) {
    std::size_t end = first + 1;
    while (end < finished.size() && finished[end].first == finished[first].first) ++end;
    if (end - first == 1) {
      engine_->schedule_after(finished[first].first, std::move(finished[first].second));
    } else {
      std::vector<Callback> callbacks;
      callbacks.reserve(end - first);
      for (std::size_t i = first; i < end; ++i) callbacks.push_back(std::move(finished[i].second));
      engine_->schedule_after(finished[first].first, [callbacks = std::move(callbacks)] {
        for (const Callback& callback : callbacks) callback();
      });
    }
    first = end;
  }
}

}  // namespace fleetsim
