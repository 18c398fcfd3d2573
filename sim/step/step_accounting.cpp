#include "sim/step/step_accounting.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "sim/engine/errors.hpp"

namespace fleetsim::step_detail {
namespace {

// Total length of the overlap of two lists of disjoint intervals sorted by start.
SimTime overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  SimTime total{};
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const SimTime begin = std::max(a[i].begin, b[j].begin);
    const SimTime end = std::min(a[i].end, b[j].end);
    if (begin < end) total += end - begin;
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

// The union of possibly overlapping intervals, as disjoint intervals sorted by start.
std::vector<Interval> merged(std::vector<Interval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> disjoint;
  for (const Interval& interval : intervals) {
    if (!disjoint.empty() && interval.begin <= disjoint.back().end) {
      disjoint.back().end = std::max(disjoint.back().end, interval.end);
    } else {
      disjoint.push_back(interval);
    }
  }
  return disjoint;
}

SimTime total(const std::vector<Interval>& intervals) {
  SimTime sum{};
  for (const Interval& interval : intervals) sum += interval.end - interval.begin;
  return sum;
}

// Adds to `by_kind` the rank's exposed communication (its compute stream idle) by kind: a
// stretch where several kinds run is shared among them evenly (the nanoseconds left over to
// the first), so the kinds add up exactly to the exposed time.
void add_exposed_by_kind(const RankActivity& rank, std::array<SimTime, kCommKinds>& by_kind) {
  struct Edge {
    SimTime at;
    int kind;  // kCommKinds: the compute stream
    int step;  // +1 starts, -1 ends
  };
  std::vector<Edge> edges;
  for (const Interval& busy : rank.compute_busy) {
    edges.push_back({busy.begin, kCommKinds, +1});
    edges.push_back({busy.end, kCommKinds, -1});
  }
  for (int kind = 0; kind < kCommKinds; ++kind) {
    for (const Interval& busy : merged(rank.comm_busy[kind])) {
      edges.push_back({busy.begin, kind, +1});
      edges.push_back({busy.end, kind, -1});
    }
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) { return a.at < b.at; });
  std::array<int, kCommKinds + 1> active{};
  for (std::size_t e = 0; e < edges.size(); ++e) {
    active[edges[e].kind] += edges[e].step;
    if (e + 1 == edges.size() || edges[e + 1].at == edges[e].at) continue;
    if (active[kCommKinds] > 0) continue;  // computing: nothing exposed
    const std::int64_t length = (edges[e + 1].at - edges[e].at).ns();
    int running = 0;
    for (int kind = 0; kind < kCommKinds; ++kind) running += active[kind] > 0;
    if (running == 0) continue;
    bool first = true;
    for (int kind = 0; kind < kCommKinds; ++kind) {
      if (active[kind] == 0) continue;
      by_kind[kind] += SimTime::from_ns(length / running + (first ? length % running : 0));
      first = false;
    }
  }
}

}  // namespace

CommKind comm_kind(GroupKind group) {
  switch (group) {
    case GroupKind::data:
    case GroupKind::expert_data: return kDataParallelComm;
    case GroupKind::tensor: return kTensorComm;
    case GroupKind::context: return kContextComm;
    case GroupKind::expert: return kExpertComm;
    case GroupKind::pipeline: return kPipelineComm;
  }
  throw ModelError(std::string("no communication kind for group ") + to_string(group));
}

StepBreakdown step_breakdown(const std::vector<const RankActivity*>& replayed, SimTime step) {
  SimTime compute{}, exposed{};
  std::array<SimTime, kCommKinds> exposed_by_kind{};
  for (const RankActivity* rank : replayed) {
    std::vector<Interval> all;
    for (const auto& kind : rank->comm_busy) all.insert(all.end(), kind.begin(), kind.end());
    const std::vector<Interval> comm = merged(std::move(all));
    compute += total(rank->compute_busy);
    exposed += total(comm) - overlap(rank->compute_busy, comm);
    add_exposed_by_kind(*rank, exposed_by_kind);
  }
  const auto count = static_cast<std::int64_t>(replayed.size());
  const double ranks = static_cast<double>(count);
  StepBreakdown breakdown;
  breakdown.compute_s = compute.seconds() / ranks;
  breakdown.exposed_comm_s = exposed.seconds() / ranks;
  breakdown.idle_s = (SimTime::from_ns(step.ns() * count) - compute - exposed).seconds() / ranks;
  for (int kind = 0; kind < kCommKinds; ++kind) {
    breakdown.*kExposedParts[kind].seconds = exposed_by_kind[kind].seconds() / ranks;
  }
  return breakdown;
}

}  // namespace fleetsim::step_detail
