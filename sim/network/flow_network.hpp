// Flow-level network: transfers are fluid flows that share link bandwidth max-min fairly.
//
// Model. Each flow f has one rate r_f and uses a set of links, link l with weight w_fl (how many
// times the flow crosses it: a ring channel that passes one PCIe uplink twice has weight 2; a
// folded flow standing for k identical replicas has weight k). Rates satisfy, for every link,
//     sum_f w_fl * r_f <= C_l,
// and are max-min fair: no rate can grow without shrinking a rate that is already smaller or
// equal. They are found by progressive filling: raise all unfixed rates together until some link
// saturates, fix the flows on it, repeat (Bertsekas & Gallager, Data Networks, sec. 6.5.2).
//
// Rates change only when a flow starts or finishes, and then only for the flows connected to it
// through shared links (transitively); the others keep their rates. Changes that leave even
// those rates as they are are recognised without re-solving (the allocation is unique, so one
// that meets the max-min conditions is it). Each flow records its bottleneck: a saturated link
// on which no flow is faster, or its own ceiling. A flow that starts where every link it
// crosses has capacity left takes the least of it; if no flow is faster on the link that it
// saturates, every flow still has a bottleneck. A flow that finishes frees links on which no
// other flow recorded its bottleneck, so each keeps its own; otherwise the component re-solves.
// Like SimGrid's models, the network keeps one pending engine event, at its next completion,
// instead of one per flow. A finished flow's callback runs after the flow's latency, paid once
// per flow.
//
// A flow may also have a rate ceiling of its own (an NCCL channel is one thread block, whose copy
// throughput is bounded whatever the links offer): progressive filling then fixes the flow when it
// reaches its ceiling, as if it crossed a private link of that capacity.
//
// Links the caller knows can never bind (a non-blocking fabric's uplinks: see
// links_that_never_bind) carry their flows' bytes but take no part in sharing: a flow crossing
// one is not thereby connected to the others there, which keeps the sets re-solved small. Their
// load stays within capacity whatever the rates, so the rates are those found with them.
//
// Invariants checked by tests: bytes delivered = bytes sent; on every link the sum of weighted
// rates never exceeds capacity; more capacity never makes a flow slower.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory_resource>
#include <set>
#include <utility>
#include <vector>

#include "sim/engine/engine.hpp"

namespace fleetsim {

using FlowLinkId = std::uint32_t;

struct LinkUse {
  FlowLinkId link;
  double weight = 1.0;
};

// The uses sorted by link, repeats of a link merged into one use of their summed weight: the
// form a flow keeps (start_flow takes any and merges them; merged ones it takes as they are).
std::vector<LinkUse> merge_duplicates(std::vector<LinkUse> links);

class FlowNetwork {
 public:
  using FlowId = std::uint64_t;
  using Callback = std::function<void()>;
  static constexpr double kUncapped = std::numeric_limits<double>::infinity();

  struct FlowRequest {
    std::vector<LinkUse> links;
    double size_bytes = 0;
    SimTime latency{};
    Callback on_complete;
    double max_rate = kUncapped;
  };

  // capacity_bytes_per_s[l] is link l's usable capacity (line rate x efficiency), > 0;
  // never_binds[l] (none, or one per link) that link l can never limit a rate.
  FlowNetwork(Engine& engine, std::vector<double> capacity_bytes_per_s,
              std::vector<bool> never_binds = {});
  // The pending completion event points back at this network: it is cancelled on destruction,
  // and the network cannot be copied or moved.
  ~FlowNetwork() { engine_->cancel(pending_); }
  FlowNetwork(const FlowNetwork&) = delete;
  FlowNetwork& operator=(const FlowNetwork&) = delete;

  // Starts a transfer of size_bytes over the links (duplicates are merged into weights), at no
  // more than max_rate bytes/s. on_complete runs `latency` after the last byte has been
  // transferred. A transfer over no links (a local copy) takes only its latency, ceiling or not.
  FlowId start_flow(std::vector<LinkUse> links, double size_bytes, SimTime latency,
                    Callback on_complete, double max_rate = kUncapped);
  // Starts several transfers at this instant, as start_flow does each, sharing out bandwidth
  // once for all of them (a collective's flows start together). Returns their ids, in order.
  std::vector<FlowId> start_flows(std::vector<FlowRequest> requests);

  // Current rate in bytes/s of an active flow; 0 once it finished.
  double rate(FlowId flow) const;
  std::size_t active_flows() const { return active_flows_; }
  // Changes to the flows in flight (a start of one or more flows, or the flows finishing at one
  // instant), and how many of them re-solved rates (the rest left every rate as it was).
  std::size_t changes() const { return changes_; }
  std::size_t resolves() const { return resolves_; }
  std::size_t link_count() const { return capacity_.size(); }
  double capacity(FlowLinkId link) const { return capacity_[link]; }
  const std::vector<double>& capacities() const { return capacity_; }
  const std::vector<bool>& never_binding() const { return never_binds_; }
  // Weighted bytes carried by each link so far (flows are accounted up to their last update).
  const std::vector<double>& link_bytes() const { return link_bytes_; }
  double bytes_started() const { return bytes_started_; }
  double bytes_delivered() const { return bytes_delivered_; }

  // Links whose load (the weighted rates of the flows crossing them, those that never bind
  // included) is recorded at every instant it changes (a trace's counters); a change that
  // touches none of them costs nothing more. Only before the first flow starts.
  void watch(const std::vector<FlowLinkId>& links);
  struct LoadSample {
    FlowLinkId link;
    SimTime at;
    double bytes_per_s;
  };
  // In time order, one a link an instant; a link's load holds from one of its samples to its
  // next (none before its first: no load). Taken, they are the network's no more.
  std::vector<LoadSample> take_load_samples() { return std::move(load_samples_); }

 private:
  // Flows live in reusable slots; a flow's id is its start sequence number times 2^32 plus its
  // slot, so ids order flows by start (what keeps rates deterministic) and name their slot.
  using Slot = std::uint32_t;
  static Slot slot_of(FlowId id) { return static_cast<Slot>(id & 0xffffffffu); }
  struct Flow {
    FlowId id = 0;                 // 0: the slot is free
    std::vector<LinkUse> links;    // those that share bandwidth
    std::vector<LinkUse> carried;  // links that never bind: charged, not shared
    double size = 0;
    double remaining = 0;  // as of last_update
    double rate = 0;
    double max_rate = kUncapped;
    SimTime last_update{};
    SimTime completion = SimTime::max();
    SimTime latency{};
    Callback on_complete;
  };

  // The slots of the flows connected to the seed links through shared links, in id order.
  std::vector<Slot> connected_flows(const std::vector<FlowLinkId>& seed_links);
  void advance(Flow& flow);
  void reallocate(const std::vector<Slot>& component);
  // Re-solves the flows connected to the links `changed`, after what each moved at its old rate
  // is accounted.
  void resolve(const std::vector<FlowLinkId>& changed);
  // Rates for the flows `started` (already on their links) that leave every other rate as it is,
  // set if they exist; false if the component needs a re-solve.
  bool start_without_resolving(const std::vector<Slot>& started);
  // Whether, once flows have left the links `freed`, every flow left on them keeps its
  // bottleneck (so no rate changes).
  bool bottlenecks_survive(const std::vector<FlowLinkId>& freed);
  // Capacity of link l the flows on it leave.
  double residual(FlowLinkId l) const;
  void set_bottleneck(Slot slot, FlowLinkId bottleneck);
  void set_completion(Flow& flow);
  Slot acquire_slot();
  void reschedule();
  void on_completion_event();
  // The watched links a flow crosses may see their load change (it starts, ends, or its rate
  // changes).
  void mark_watched(Slot slot);
  // Records the loads of the watched links marked, where they changed.
  void sample_watched();

  // A watched link: the flows crossing it (slot and weight), its latest sample (-1: none yet),
  // and whether it is marked.
  struct Crossing {
    Slot slot;
    double weight;
  };
  struct Watched {
    FlowLinkId link;
    std::vector<Crossing> crossings;
    std::ptrdiff_t latest = -1;
    bool marked = false;
  };
  std::vector<int> watch_position_;  // by link: in watched_, or -1
  std::vector<Watched> watched_;
  std::vector<std::vector<int>> watched_by_slot_;  // the positions each slot's flow crosses
  std::vector<int> marked_;                        // positions marked, in marking order
  std::vector<LoadSample> load_samples_;

  Engine* engine_;
  std::vector<double> capacity_;
  std::vector<bool> never_binds_;  // by link, or empty
  std::vector<double> link_bytes_;
  // A flow on a link, with its weight there (what it takes of the link is weight x rate).
  struct OnLink {
    Slot slot;
    double weight;
  };
  std::vector<std::vector<OnLink>> flows_on_link_;  // active flows per link, in start order
  std::vector<Flow> flows_;                         // by slot
  // By slot, beside flows_ rather than in it: the last connected_flows() search that reached
  // the flow. A search meets a flow once for each of its links and reads this each time; kept
  // dense, those reads share cache lines.
  std::vector<std::uint64_t> visited_;
  // By slot: the flow's bottleneck (kAtCeiling: its own ceiling), as the last allocation that
  // set its rate found it; kNoBottleneck while it has no rate. By link: how many flows have
  // their bottleneck there (a link some flow has is saturated).
  static constexpr FlowLinkId kNoBottleneck = std::numeric_limits<FlowLinkId>::max();
  static constexpr FlowLinkId kAtCeiling = kNoBottleneck - 1;
  std::vector<FlowLinkId> bottleneck_;
  std::vector<std::uint32_t> bottlenecked_on_;
  std::vector<Slot> free_slots_;
  std::size_t active_flows_ = 0;
  std::size_t changes_ = 0;
  std::size_t resolves_ = 0;
  std::uint64_t searches_ = 0;  // connected_flows() calls, to mark visited flows
  // Completion order; its nodes come from a pool, as flows start and end by the million.
  std::pmr::unsynchronized_pool_resource completion_nodes_;
  std::pmr::set<std::pair<SimTime, FlowId>> completions_{&completion_nodes_};
  // Scratch indexed by link for connected_flows(), reallocate() and bottlenecks_survive(): the
  // flags (links in the component searched or solved, or freed) are zero between calls
  // (LinkMarks clears them); the values are written before they are read.
  class LinkMarks;
  // A link's values during one reallocate(), side by side: a filling round reads them together.
  struct Filling {
    double residual = 0;    // capacity not yet given out
    double weight_sum = 0;  // of the unfixed flows crossing it
    bool saturated = false;
  };
  std::vector<Filling> filling_;
  std::vector<char> in_component_;
  std::vector<FlowLinkId> seen_links_;       // connected_flows(), bottlenecks_survive()
  std::vector<FlowLinkId> component_links_;  // reallocate()
  std::vector<double> old_rates_;            // reallocate(): by component position
  EventHandle pending_;
  SimTime pending_at_ = SimTime::max();
  FlowId next_sequence_ = 1;
  double bytes_started_ = 0;
  double bytes_delivered_ = 0;
};

}  // namespace fleetsim
