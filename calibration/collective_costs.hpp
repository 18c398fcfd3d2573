// The collective library's cost model: latency and bandwidth per algorithm and protocol, as
// NCCL's (and RCCL's) tuner models them (src/graph/tuning.cc). A collective's latency is a base
// cost plus, for each of its sequential steps, the step latency of the link class that step
// crosses: NVLink (also xGMI), PCIe (inside a node without GPU links), or the network. A
// protocol trades bandwidth for latency: LL sends each 4-byte word with a 4-byte flag, LL128
// a flag per 128-byte line, Simple uses the full bandwidth behind synchronisation. Data files
// under calibration/collectives/ carry the tables with their sources.
#pragma once

#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

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
  bool operator==(const ProtocolCost&) const = default;
};

// What one channel of the tree reaches, as the library's tuner models it (NCCL's
// perChMaxTreeBws and perChMaxTreeLL128Bws): a ceiling on the tree's bus bandwidth per channel,
// measured by NVIDIA per GPU generation, for 1, 2, and 3 or more nodes. A channel is one thread
// block: these ceilings, not the links, bound the tree wherever the links are fast.
struct TreeChannelLimits {
  int from_compute_capability = 0;             // the generation's first (70, 80, 90, 100)
  std::array<double, 3> simple_bytes_per_s{};  // by node count: 1, 2, 3+
  std::array<double, 3> ll128_bytes_per_s{};
  bool operator==(const TreeChannelLimits&) const = default;
};

struct CollectiveCosts {
  std::string library;  // "nccl", "rccl"
  std::string source;
  std::array<ProtocolCost, 3> ring{};  // indexed by Protocol
  std::array<ProtocolCost, 3> tree{};
  double tree_efficiency = 0.92;  // tree bus bandwidth relative to the ring's
  // Per GPU generation, ascending; empty where the library's tables are not known (the tree then
  // runs only when forced: without them it would look faster than it runs).
  std::vector<TreeChannelLimits> tree_channel_limits;
  std::string tree_model_source;  // where the limits and the size correction come from
  // The row of tree_channel_limits for the GPUs that run the collectives, chosen by compute
  // capability when the GPU profile is read; absent: the tree is left out of the tuner.
  std::optional<TreeChannelLimits> gpu_tree_limits;
  // The tuner's correction of the tree's bandwidth at medium sizes (NCCL's
  // treeCorrectionFactor), per protocol, for message sizes 64 B x 2^i; 1 beyond the table.
  std::array<std::vector<double>, 3> tree_size_correction{};

  // The correction for a message of `size_bytes` with `protocol`.
  double tree_correction(Protocol protocol, double size_bytes) const {
    const auto& table = tree_size_correction[static_cast<int>(protocol)];
    const double units = size_bytes / 64.0;  // NCCL: log2i(nBytes >> 6), none below 64 B
    if (units < 1) return 1.0;
    const auto index = static_cast<std::size_t>(std::floor(std::log2(units)));
    return index < table.size() ? table[index] : 1.0;
  }

  // Simple only, with one step latency for every link class: for tests and hand-made cases.
  static CollectiveCosts simple_only(SimTime base, SimTime step) {
    CollectiveCosts costs;
    const ProtocolCost simple{base, step, step, step, 1.0};
    const ProtocolCost off{base, step, step, step, 0.0};
    costs.ring = {off, off, simple};
    costs.tree = {off, off, simple};
    return costs;
  }
  bool operator==(const CollectiveCosts&) const = default;
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
