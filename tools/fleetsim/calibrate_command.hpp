// `fleetsim calibrate LOG`: fits the collective model to a measured nccl-tests / rccl-tests log
// and prints the fit, point by point, and the profile entry it supports; with `write`, puts
// that entry into the GPU profile file in place of the old one, keeping everything else.
#pragma once

#include <string>

#include "tools/fleetsim/fabric_overrides.hpp"

namespace fleetsim {

struct CalibrateOptions {
  std::string data_dir;
  std::string log;
  std::string node;
  int nodes = 1;
  std::string gpu;
  int ranks = 0;           // 0: the log's rank count, else every GPU of the cluster
  std::string algorithm;   // empty: the tuner's
  std::string min_bytes;   // rows below are left out (small messages use other protocols)
  FabricOverrides fabric;  // as for `fleetsim collective`
  bool write = false;      // replace the entry in the GPU profile file (atomically)
};

void run_calibrate_command(const CalibrateOptions& options);

}  // namespace fleetsim
