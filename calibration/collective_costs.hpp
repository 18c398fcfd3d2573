// The collective library's cost model: latency and bandwidth per algorithm and protocol, as
// NCCL's (and RCCL's) tuner models them (src/graph/tuning.cc). A collective's latency is a base
// cost plus, for each of its sequential steps, the step latency of the link class that step
// crosses: NVLink (also xGMI), PCIe (inside a node without GPU links), or the network. A
// protocol trades bandwidth for latency: LL sends each 4-byte word with a 4-byte flag, LL128
// a flag per 128-byte line, Simple uses the full bandwidth behind synchronisation. Data files
// under calibration/collectives/ carry the tables with their sources.
#pragma once

#include <array>
#include <string>

#include "sim/engine/time.hpp"

namespace fleetsim {

enum class Protocol { ll, ll128, simple };
inline constexpr std::array<Protocol, 3> kProtocols{Protocol::ll, Protocol::ll128,
                                                    Protocol::simple};
const char* to_string(Protocol protocol);

struct ProtocolCost {
  SimTime base{};          // once per collective
  SimTime nvlink_step{};   // per step across NVLink or xGMI
  SimTime pcie_step{};     // per step across PCIe and the host
  SimTime network_step{};  // per step across NICs and the fabric
  double bandwidth = 1;    // fraction of Simple's bandwidth; 0: the protocol is not used
};

struct CollectiveCosts {
  std::string library;  // "nccl", "rccl"
  std::string source;
  std::array<ProtocolCost, 3> ring{};  // indexed by Protocol
  std::array<ProtocolCost, 3> tree{};
  double tree_efficiency = 0.9;  // tree bus bandwidth relative to the ring's

  // Simple only, with one step latency for every link class: for tests and hand-made cases.
  static CollectiveCosts simple_only(SimTime base, SimTime step) {
    CollectiveCosts costs;
    const ProtocolCost simple{base, step, step, step, 1.0};
    const ProtocolCost off{base, step, step, step, 0.0};
    costs.ring = {off, off, simple};
    costs.tree = {off, off, simple};
    return costs;
  }
};

inline const char* to_string(Protocol protocol) {
  switch (protocol) {
    case Protocol::ll: return "LL";
    case Protocol::ll128: return "LL128";
    case Protocol::simple: return "Simple";
  }
  return "?";
}

}  // namespace fleetsim
