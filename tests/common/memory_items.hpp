// The bytes of a memory breakdown's item by name, for tests.
#pragma once

#include <algorithm>
#include <string>

#include "workloads/memory_model.hpp"

namespace fleetsim::testing {

// The bytes of the named item (-1 when the breakdown has none).
inline double memory_item(const MemoryBreakdown& memory, const std::string& name) {
  for (const MemoryItem& item : memory.items) {
    if (item.name == name) return item.bytes;
  }
  return -1.0;
}

// What a layer's backward holds of activations: those in flight and, where the layer is
// recomputed, what it saves again.
inline double layer_backward_activations(const MemoryBreakdown& memory) {
  return memory_item(memory, "activations") +
         std::max(0.0, memory_item(memory, "recomputed layer"));
}

}  // namespace fleetsim::testing
