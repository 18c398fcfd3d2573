// The collective communication patterns that traffic on the graph follows. Shared by the
// workload layer (which says which collectives a step issues) and the collective layer (which
// turns them into flows), so both name them the same way.
#pragma once

namespace fleetsim {

enum class CollectiveOp { all_reduce, reduce_scatter, all_gather };

inline const char* to_string(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::all_reduce: return "all_reduce";
    case CollectiveOp::reduce_scatter: return "reduce_scatter";
    case CollectiveOp::all_gather: return "all_gather";
  }
  return "?";
}

}  // namespace fleetsim
