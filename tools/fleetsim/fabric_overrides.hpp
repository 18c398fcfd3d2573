// Fabric options shared by `fleetsim collective` and `fleetsim calibrate`.
#pragma once

#include <string>

#include "topology/node_spec.hpp"

namespace fleetsim {

// Fabric overrides from the command line; unset values keep the scenario defaults
// (non-blocking, 64-port leaves, as many tiers as fit, packed placement).
struct FabricOverrides {
  double oversubscription = 0;
  int leaf_ports = 0;
  int tiers = 0;
  std::string placement;  // packed, spread; empty: packed
  std::string routing;    // adaptive, hash; empty: adaptive

  void apply(FabricSpec& fabric) const;
};

}  // namespace fleetsim
