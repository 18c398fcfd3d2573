// `fleetsim calibrate LOG --node PRESET`: fits the collective model to a measured nccl-tests /
// rccl-tests log and prints the fit, point by point, and the profile entry it supports; with
// `write`, puts that entry into the GPU profile file in place of the old one, keeping everything
// else.
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
  int ranks = 0;           // 0: the log's rank count, else every GPU it takes
  int gpus_per_node = 0;   // GPUs of each node taking part (nccl-tests' -g); 0: all
  std::string algorithm;   // empty: the tuner's
  std::string min_bytes;   // rows below are left out (small messages use other protocols)
  FabricOverrides fabric;  // as for `fleetsim collective`
  bool write = false;      // replace the entry in the GPU profile file (atomically)
};

void run_calibrate_command(const CalibrateOptions& options);

// `fleetsim calibrate --kernels DIR --gpu PROFILE`: fits the profile's kernel model to the
// microbenchmark CSVs of DIR (calibration/kernel_fit.hpp), prints the fit row by row, the
// held-out rows and the profile entries; with `write`, puts the entries into the profile file.
struct KernelCalibrateOptions {
  std::string data_dir;
  std::string dir;
  std::string gpu;
  bool write = false;
};

void run_kernel_calibrate_command(const KernelCalibrateOptions& options);

}  // namespace fleetsim
