#include "workloads/program_builder.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/errors.hpp"

namespace fleetsim {

TaskIndex ProgramBuilder::ops(const std::string& prefix, const std::vector<Op>& list,
                              std::vector<TaskIndex> deps, bool recomputed) {
  if (list.empty()) throw ModelError("no kernels for " + prefix);
  std::optional<TaskIndex> last;
  // An all-gather overlapped with the GEMM after it: what it waited for, which the GEMM waits
  // for too, and the gather itself, which the op after the GEMM waits for.
  std::optional<std::vector<TaskIndex>> gather_after;
  std::vector<TaskIndex> gather;         // empty, or that one gather
  std::vector<TaskIndex> last_after;     // what the last op waited for
  std::optional<TaskIndex> before_last;  // the chain's end before the last op
  for (std::size_t i = 0; i < list.size(); ++i) {
    const Op& op = list[i];
    // Kernels and tensor-parallel collectives form one chain in program order: a kernel after
    // a kernel needs no edge (the compute stream runs in order), anything else waits for the
    // op before it, across units too (a layer reads the embedding's reduce-scatter).
    std::vector<TaskIndex> after = last ? std::vector<TaskIndex>{} : deps;
    const bool crosses_streams =
        chain_end_ &&
        (op.collective || !std::holds_alternative<ComputeWork>((*program_)[*chain_end_].work));
    if (crosses_streams) after.push_back(*chain_end_);
    // What an overlapped gather leaves for the ops after it: its own dependencies for the
    // GEMM beside it, the gather itself for the op after that (added below, so that no
    // replacement of `after` drops it).
    std::vector<TaskIndex> pending;
    if (gather_after) {
      after.insert(after.end(), gather_after->begin(), gather_after->end());
      gather_after.reset();
    } else {
      pending = std::move(gather);
      gather.clear();
    }
    if (op.collective) {
      const std::optional<std::size_t> beside = kernel_beside(list, i, overlap_tp_);
      const bool gather_beside_next = beside == i + 1;
      if (i > 0 && beside == i - 1) {
        // Starts with the GEMM before it, once what that GEMM waited for is done; pipelined,
        // once its first chunk is.
        after = last_after;
        if (before_last) after.push_back(*before_last);
        if (first_chunk_) after.push_back(*first_chunk_);
      }
      after.insert(after.end(), pending.begin(), pending.end());
      // Beside its GEMM, a layer's tensor-parallel collective runs as Transformer Engine's
      // userbuffers do (its SMs; a pipelined reduce-scatter's last chunk after the GEMM).
      const std::optional<UserbuffersOverlap> userbuffers =
          overlap_tp_ ? userbuffers_collective(list, i) : std::nullopt;
      const double after_gemm_share = userbuffers ? userbuffers->after_gemm_share : 0.0;
      CollectiveWork work{op.collective->op, op.collective->size_bytes * (1 - after_gemm_share),
                          op.collective->group};
      if (userbuffers) work.sms_held = userbuffers->sms;
      const TaskIndex task = add(prefix + op.name, Stream::tensor, work, after);
      last = task;
      if (gather_beside_next) {
        gather_after = after;
        gather = {task};
        continue;  // the chain goes on from the op before it, into the GEMM
      }
      if (after_gemm_share > 0) {
        // The last chunk, reduced once the GEMM and the chunks before it are done; what
        // follows waits for it. Only a reduce-scatter beside the GEMM before it has a share
        // after it, and that GEMM ends the chain so far.
        const TaskIndex gemm = chain_end_.value();
        work.size_bytes = op.collective->size_bytes * after_gemm_share;
        after = {gemm, task};
        last = add(prefix + op.name + ".last", Stream::tensor, work, after);
      }
    } else {
      after.insert(after.end(), pending.begin(), pending.end());
      // Beside a userbuffers collective a GEMM runs as they launch it: in chunks of rows
      // beside a ring exchange or a pipelined reduce-scatter, leaving their SMs free.
      const GemmLaunch launch = overlap_tp_ ? userbuffers_gemm(list, i, tp_) : GemmLaunch{op, 1};
      first_chunk_.reset();
      if (launch.chunks == 1) {
        last = compute(prefix + op.name, launch.part, after, recomputed);
      } else {
        // The first chunk waits for what the GEMM waits for; the last, beside a ring
        // exchange, for the gather's last piece: the whole gather here.
        for (int c = 0; c < launch.chunks; ++c) {
          std::vector<TaskIndex> chunk_after;
          if (c == 0) chunk_after = after;
          if (c == launch.chunks - 1) {
            chunk_after.insert(chunk_after.end(), gather.begin(), gather.end());
          }
          last = compute(prefix + op.name + ".chunk" + std::to_string(c), launch.part,
                         std::move(chunk_after), recomputed);
          if (c == 0) first_chunk_ = last;
        }
      }
    }
    last_after = std::move(after);
    before_last = chain_end_;
    chain_end_ = last;
  }
  return *last;
}

}  // namespace fleetsim
