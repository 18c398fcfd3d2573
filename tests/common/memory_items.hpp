// The bytes of a memory breakdown's item by name, for tests.
#pragma once

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

}  // namespace fleetsim::testing
