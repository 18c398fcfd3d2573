// The collective communication patterns that traffic on the graph follows. Shared by the
// workload layer (which says which collectives a step issues) and the collective layer (which
// turns them into flows), so both name them the same way.
#pragma once

namespace fleetsim {

enum class CollectiveOp {
  all_reduce,
  reduce_scatter,
  all_gather,
  all_to_all,  // every rank sends S / p to every rank
  broadcast,   // S from the first rank to all
  send_recv    // every rank sends S to the next rank (nccl-tests sendrecv_perf)
};

inline const char* to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "all_reduce";
    case CollectiveOp::reduce_scatter: return "reduce_scatter";
    case CollectiveOp::all_gather: return "all_gather";
    case CollectiveOp::all_to_all: return "all_to_all";
    case CollectiveOp::broadcast: return "broadcast";
    case CollectiveOp::send_recv: return "send_recv";
  }
  return "?";
}

// busbw / algbw as nccl-tests defines it (doc/PERFORMANCE.md): the bytes each rank must send
// per byte of S on an optimal algorithm, so that busbw compares with link bandwidth.
inline double bus_factor(CollectiveOp op, int ranks) {
  const double p = ranks;
  switch (op) {
    case CollectiveOp::all_reduce: return 2 * (p - 1) / p;
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_gather:
    case CollectiveOp::all_to_all: return (p - 1) / p;
    case CollectiveOp::broadcast:
    case CollectiveOp::send_recv: return 1;
  }
  return 1;
}

// The most heads an NVLS graph has (NCCL_MAX_NVLS_ARITY, src/include/device.h; NCCL's NVLS
// search, src/graph/search.cc): inside a domain the GPUs NVLS pulls from, across domains the
// GPUs whose NICs carry its traffic.
inline constexpr int kMaxNvlsHeads = 32;

}  // namespace fleetsim
