#include "tools/fleetsim/fabric_overrides.hpp"

#include "sim/scenario/scenario.hpp"
#include "topology/topology.hpp"

namespace fleetsim {

void FabricOverrides::apply(FabricSpec& fabric) const {
  if (oversubscription > 0) fabric.oversubscription = oversubscription;
  if (leaf_ports > 0) fabric.leaf_ports = leaf_ports;
  if (const auto problem = fabric_bounds_problem(fabric)) {
    throw ScenarioError("(command line)", 0, 0,
                        problem->key == "leaf_ports" ? "--leaf-ports" : "--oversubscription",
                        problem->problem, problem->hint);
  }
  if (tiers > 0) fabric.tiers = tiers;
  if (placement == "spread") {
    fabric.placement = NodePlacement::spread;
  } else if (placement == "packed") {
    fabric.placement = NodePlacement::packed;
  } else if (!placement.empty()) {
    throw ScenarioError("(command line)", 0, 0, "--placement",
                        "unknown placement '" + placement + "'", "use packed or spread");
  }
  if (routing == "hash") {
    fabric.routing = FabricRouting::hash;
  } else if (routing == "adaptive") {
    fabric.routing = FabricRouting::adaptive;
  } else if (!routing.empty()) {
    throw ScenarioError("(command line)", 0, 0, "--routing", "unknown routing '" + routing + "'",
                        "use adaptive or hash");
  }
}

}  // namespace fleetsim
