// Hand-made nodes and the line rates of a topology's links, shared by the network and collective
// tests.
#pragma once

#include <vector>

#include "topology/node_spec.hpp"
#include "topology/topology.hpp"

namespace fleetsim::test {

inline std::vector<double> line_rates(const Topology& topo) {
  std::vector<double> rates;
  for (LinkId l = 0; l < topo.link_count(); ++l) rates.push_back(topo.link(l).bytes_per_s);
  return rates;
}

// 8 GPUs on an NVSwitch (450 GB/s ports), four PCIe switches, a 50 GB/s NIC a GPU.
inline NodeSpec eight_gpu_node() {
  NodeSpec node;
  node.name = "test";
  node.gpus = 8;
  node.nvlink_bytes_per_s = 450e9;
  node.pcie_switches = 4;
  node.pcie_bytes_per_s = 64e9;
  node.host_bytes_per_s = 64e9;
  node.nics = 8;
  node.nic_bytes_per_s = 50e9;
  return node;
}

// A GB200 NVL72-like tray: 4 GPUs with a NIC each, 900 GB/s NVLink ports, 18 trays a domain.
inline NodeSpec nvl72_tray() {
  NodeSpec tray = eight_gpu_node();
  tray.gpus = 4;
  tray.pcie_switches = 2;
  tray.nics = 4;
  tray.nvlink_bytes_per_s = 900e9;
  tray.nvlink_domain_nodes = 18;
  return tray;
}

}  // namespace fleetsim::test
