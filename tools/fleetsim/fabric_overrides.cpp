#include "tools/fleetsim/fabric_overrides.hpp"

#include "sim/scenario/scenario.hpp"

namespace fleetsim {

void FabricOverrides::apply(FabricSpec& fabric) const {
  if (oversubscription > 0) fabric.oversubscription = oversubscription;
  if (leaf_ports > kMostLeafPorts) {
    throw ScenarioError(
        "(command line)", 0, 0, "--leaf-ports",
        "at most " + std::to_string(kMostLeafPorts) + " ports, got " + std::to_string(leaf_ports),
        "a switch's radix: 64 for NDR Quantum-2, 512 at the most (Tomahawk 5)");
  }
  if (leaf_ports > 0) fabric.leaf_ports = leaf_ports;
  if (fabric.oversubscription > fabric.leaf_ports - 1) {
    throw ScenarioError(
        "(command line)", 0, 0, "--oversubscription",
        "at most leaf ports - 1 = " + std::to_string(fabric.leaf_ports - 1) + " (one port up)",
        "a full leaf's downlink : uplink bandwidth, e.g. 2 or 3");
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
