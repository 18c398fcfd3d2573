// How a pipeline's virtual stages share a model's layers: an even share, or where the stages do
// not divide the layers, one layer fewer on as many stages as it takes, from the ends inwards
// (first, last, second, second to last...), as the ends also hold the embedding and the head.
// The Llama 3 405B run split its 126 layers so over 16 stages: 7 on the first and the last, 8
// on the others.
#pragma once

#include <algorithm>

namespace fleetsim {

// Slots [first, end) of a sequence of them.
struct LayerRange {
  int first = 0;
  int end = 0;
  int count() const { return end - first; }
};

// The slots of virtual stage v of `virtual_stages` (at most the slots) out of `slots`.
inline LayerRange split_stage_slots(int slots, int virtual_stages, int v) {
  const int per_stage = (slots + virtual_stages - 1) / virtual_stages;
  const int short_stages = per_stage * virtual_stages - slots;
  // Stage u's place in the order that takes slots away: 0, V - 1, 1, V - 2, ...
  const auto slots_of = [&](int u) {
    const int place = std::min(2 * u, 2 * (virtual_stages - 1 - u) + 1);
    return place < short_stages ? per_stage - 1 : per_stage;
  };
  LayerRange range;
  for (int u = 0; u < v; ++u) range.first += slots_of(u);
  range.end = range.first + slots_of(v);
  return range;
}

// The most slots any of `virtual_stages` stages holds: the even share, rounded up.
inline long long longest_stage_slots(long long slots, long long virtual_stages) {
  return virtual_stages > 0 ? (slots + virtual_stages - 1) / virtual_stages : 0;
}

}  // namespace fleetsim
