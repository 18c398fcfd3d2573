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
  // Whether the NVSwitch reduces (NVLink SHARP), and NCCL's NVLS channels on this GPU inside
  // one domain and across several (nvls.cc: 16 on Hopper; 24 and 32 on Blackwell).
  bool nvls = false;
  int nvls_channels = 16;
  int nvls_channels_across = 16;
};

// A communicator as a layout uses it: its ranks, spaced `stride` apart in global rank order
// (tp innermost, then cp, dp and pp: RankGrid), whether it reduces (all-reduce, reduce-scatter,
// all-gather: ring and NVLS connected) and the peers a rank sends to and receives from
// (pipeline and ring-attention neighbours), or every other rank (an all-to-all).
struct CommunicatorUse {
  std::string name;
  int ranks = 1;
  int stride = 1;
  bool reduces = false;
  int neighbours = 0;
  bool all_to_all = false;
};

// The bytes one rank of the communicator holds, and how they were counted.
struct CommunicatorMemory {
  double bytes = 0;
  std::string basis;
};
CommunicatorMemory communicator_memory(const CommunicatorUse& use,
                                       const CommunicatorDevice& device);

// The communicators a rank of pipeline stage `stage` uses under `plan`: data-parallel (over
// dp x cp), tensor-parallel, pipeline, context-parallel, expert-parallel and the experts'
// data-parallel (over `expert_data_ranks`). Each one a process group, so a communicator of
// its own (PyTorch does not share resources between them).
std::vector<CommunicatorUse> layout_communicators(const ParallelPlan& plan, int stage,
                                                  int expert_data_ranks);

}  // namespace fleetsim
