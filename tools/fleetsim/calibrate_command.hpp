// `fleetsim calibrate LOG`: fits the collective model to a measured nccl-tests / rccl-tests log
// and prints the fit, point by point, and the profile entry it supports.
#pragma once

#include <string>

namespace fleetsim {

struct CalibrateOptions {
  std::string data_dir;
  std::string log;
  std::string node;
  int nodes = 1;
  std::string gpu;
  int ranks = 0;          // 0: the log's rank count, else every GPU of the cluster
  std::string algorithm;  // empty: the tuner's
  std::string min_bytes;  // rows below are left out (small messages use other protocols)
  // Fabric overrides, as for `fleetsim collective`; 0: the scenario defaults.
  double oversubscription = 0;
  int leaf_ports = 0;
  int tiers = 0;
};

void run_calibrate_command(const CalibrateOptions& options);

}  // namespace fleetsim
