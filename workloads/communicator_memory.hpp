// What the collective library holds in GPU memory for the communicators a layout uses, as NCCL's
// source sizes it (2.22 onward: each algorithm connected on its first use, NCCL_RUNTIME_CONNECT;
// memory mapped through cuMem in 2 MiB pieces, the default since 2.19). RCCL is taken to size
// its buffers as NCCL, from which it forked, does.
#pragma once

#include <string>
#include <vector>

#include "workloads/layout/parallel_plan.hpp"

namespace fleetsim {

// What the library sees of the GPU and its node.
struct CommunicatorDevice {
  // Collective channels of a communicator inside one NVLink domain (NCCL: 24 on 8x H100, the
  // profile's comm_sms); a communicator that crosses domains runs two a NIC its ranks use.
  int channels = 24;
  // GPUs that reach each other without a NIC (an HGX board's 8, a GB200 NVL72 rack's 72) and
  // the NICs each GPU has.
  int domain_gpus = 8;
  double nics_per_gpu = 1;
  double nic_bytes_per_s = 50e9;  // line rate a direction
  // Whether NCCL runs NVLink SHARP (the NVSwitch reduces and the job leaves NVLS on), and the
  // GPU's compute capability times ten, which sets NVLS's channels (90: Hopper, 100: Blackwell).
  bool nvls = false;
  int compute_capability = 90;
};

// A communicator as a rank uses it: its ranks and those of them in the rank's NVLink domain,
// whether it reduces (all-reduce, reduce-scatter, all-gather: ring and NVLS connected), the
// neighbours the rank sends to and receives from (pipeline stages, ring attention's cp ranks)
// and of those the ones in its domain, or whether it exchanges with every other rank (an
// all-to-all).
struct CommunicatorUse {
  std::string name;
  int ranks = 1;
  int local_ranks = 1;
  bool reduces = false;
  int neighbours = 0;
  int local_neighbours = 0;
  bool all_to_all = false;
};

// The bytes one rank of the communicator holds, and how they were counted.
struct CommunicatorMemory {
  double bytes = 0;
  std::string basis;
};
CommunicatorMemory communicator_memory(const CommunicatorUse& use,
                                       const CommunicatorDevice& device);

// The communicators the first rank of pipeline stage `stage` uses under `plan`, their members
// as RankGrid places them, on NVLink domains of `domain_gpus` consecutive ranks: data-parallel
// (over dp x cp), tensor-parallel, context-parallel, pipeline, expert-parallel and the
// experts' data-parallel. Each one a process group, so a communicator of its own (PyTorch does
// not share resources between them).
std::vector<CommunicatorUse> layout_communicators(const ParallelPlan& plan, int stage,
                                                  int domain_gpus);

}  // namespace fleetsim
