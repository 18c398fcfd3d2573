#include "workloads/communicator_memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>

#include "topology/collective_op.hpp"
#include "workloads/layout/rank_grid.hpp"

namespace fleetsim {
namespace {

// NCCL's sizes (NVIDIA/nccl at 5067397, v2.30.7; the same at v2.23.4).
constexpr double kMiB = 1024.0 * 1024.0;
// cuMem maps device memory in pieces of its granularity, 2 MiB on these GPUs (alloc.h).
constexpr double kGranularity = 2 * kMiB;
// Each connection's buffers for one channel and one peer, by protocol (device.h, set in
// init.cc): LL 8 lines x 512 threads x NCCL_STEPS 8 x 16 B, LL128 120 elements x 640 threads x
// 8 steps x 8 B, Simple NCCL_BUFFSIZE 4 MiB; a 4 KiB header for the connection's state.
constexpr double kLlBytes = 8.0 * 512 * 8 * 16;
constexpr double kLl128Bytes = 120.0 * 640 * 8 * 8;
constexpr double kSimpleBytes = 4 * kMiB;
constexpr double kHeaderBytes = 4096;
// A channel's own device state: three allocations (channel.cc); a communicator's: two
// (init.cc).
constexpr double kChannelPieces = 3;
constexpr double kCommunicatorPieces = 2;
// NVLS: each NVLS channel's buffer is its chunk x NCCL_STEPS 8, twice (reduce and broadcast),
// for each head (nvls.cc, ncclNvlsBufferSetup), heads at most NCCL_MAX_NVLS_ARITY 32 (the NVLS
// graph's channels, search.cc); beside it a 2 MiB piece of each NVLS channel's device peers
// (initNvlsChannel, channel.cc) and one of the credits (ncclNvlsSetup).
constexpr double kNcclSteps = 8;
// Send/recv over the network shares one pool a direction: p2p channels x NCCL_SHARED_STEPS 16
// x NCCL_P2P_NET_CHUNKSIZE 128 KiB (net.cc).
constexpr double kNetPoolBytesPerChannel = 16 * 128.0 * 1024;
// Send/recv channels a network peer gets: one per 14 GB/s of its NIC (NCCL_P2P_PER_CHANNEL_NET_BW,
// paths.cc), halved while a batch of NCCL_MAX_DEV_WORK_P2P_PER_BATCH 8 peers would need more
// than the p2p channels.
constexpr double kNetBytesPerP2pChannel = 14e9;
constexpr int kPeersPerBatch = 8;

double pieces(double bytes) {
  return std::ceil(bytes / kGranularity) * kGranularity;
}

// Over NVLink or PCIe (p2p.cc, write mode): the receiver holds the header and every
// protocol's buffer, the sender only its header. A100's read mode moves Simple to the sender:
// 6 + 6 MiB, the same 12 MiB a pair.
double p2p_connection_pair_bytes() {
  return pieces(kHeaderBytes + kLlBytes + kLl128Bytes + kSimpleBytes) + pieces(kHeaderBytes);
}

// Over the network with GPUDirect RDMA (net.cc): the sender holds LL128 and Simple (LL stays
// in host memory), the receiver all three.
double net_connection_pair_bytes() {
  return pieces(kLl128Bytes + kSimpleBytes) + pieces(kLlBytes + kLl128Bytes + kSimpleBytes);
}

// NCCL's NVLS channels and chunk (ncclNvlsTuning, nvls.cc): 16 of 128 KiB on Hopper; on
// Blackwell 24 inside one domain, and across domains ncclNvlsTreeSm100Tuning's by the domains,
// the ranks a domain and the NIC's rate.
struct NvlsShape {
  int channels;
  double chunk_bytes;
};
NvlsShape nvls_shape(const CommunicatorDevice& device, int domains, int local) {
  constexpr double kChunk = 128.0 * 1024;
  if (device.compute_capability < 100) return {16, kChunk};
  if (domains == 1) return {24, kChunk};
  const double nic_gb_per_s = device.nic_bytes_per_s / 1e9;
  if (domains == 2 && nic_gb_per_s >= 48) return {32, local <= 4 ? 2 * kChunk : kChunk};
  if (nic_gb_per_s >= 96) return local <= 8 ? NvlsShape{24, 2 * kChunk} : NvlsShape{32, kChunk};
  if (nic_gb_per_s >= 48) return {24, kChunk};
  return {32, kChunk};
}

int power_of_two_at_least(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f MiB", bytes / kMiB);
  return text;
}

}  // namespace

CommunicatorMemory communicator_memory(const CommunicatorUse& use,
                                       const CommunicatorDevice& device) {
  const int local = std::max(1, std::min(use.local_ranks, use.ranks));
  const bool crosses = local < use.ranks;
  const int domains = (use.ranks + local - 1) / local;
  // NCCL's search gives a communicator inside one domain the device's channels; across
  // domains, two a NIC its local ranks use (8 NICs: 16 channels, connect.cc).
  const int nics = std::max(1, static_cast<int>(std::lround(local * device.nics_per_gpu)));
  const int channels = crosses ? 2 * nics : device.channels;
  // Send/recv channels: the collective channels rounded up to a power of two (p2pnChannels),
  // each peer inside the domain using all of them (paths.cc).
  const int p2p_channels = power_of_two_at_least(channels);
  // Every peer gets the fewest channels any peer does (ncclTopoComputeP2pChannelsPerPeer):
  // across domains, the network peers' share, at least one a NIC the GPU has and one per 14
  // GB/s of them, halved while a batch of peers would need more than the p2p channels.
  int per_peer = p2p_channels;
  if (crosses) {
    const int gpu_nics = std::max(1, static_cast<int>(std::lround(device.nics_per_gpu)));
    const double gpu_nic_bytes_per_s = gpu_nics * device.nic_bytes_per_s;
    per_peer = power_of_two_at_least(std::max(
        gpu_nics, static_cast<int>(std::ceil(gpu_nic_bytes_per_s / kNetBytesPerP2pChannel))));
    const int batches = (use.ranks + kPeersPerBatch - 1) / kPeersPerBatch;
    while (per_peer * batches > p2p_channels && per_peer > 1) per_peer /= 2;
  }

  CommunicatorMemory out;
  out.bytes = kCommunicatorPieces * kGranularity + kChannelPieces * kGranularity * p2p_channels;
  out.basis = use.name + " " + std::to_string(use.ranks) + " ranks: " + std::to_string(channels) +
              " channels";
  if (use.reduces && use.ranks > 1) {
    // The ring: one connection in, one out, a channel. Across domains, one rank of the
    // domain's ranks sends each channel over the network and one receives.
    const double per_channel =
        !crosses ? p2p_connection_pair_bytes()
                 : p2p_connection_pair_bytes() +
                       (net_connection_pair_bytes() - p2p_connection_pair_bytes()) / local;
    out.bytes += channels * per_channel;
    out.basis += ", ring";
    if (device.nvls && local >= 2) {
      const NvlsShape nvls = nvls_shape(device, domains, local);
      const int heads = std::min(local, kMaxNvlsHeads);
      out.bytes +=
          nvls.channels * (kGranularity + 2 * kNcclSteps * nvls.chunk_bytes * heads) + kGranularity;
      out.basis += crosses ? ", NVLS tree" : ", NVLS";
    }
  }
  const int peers = use.all_to_all ? use.ranks - 1 : use.neighbours;
  if (peers > 0) {
    // Peers inside the domain hold their own connections on each of their channels; those
    // across share the network pool (one a direction).
    const int local_peers = use.all_to_all ? local - 1 : std::min(use.local_neighbours, peers);
    out.bytes += local_peers * per_peer * p2p_connection_pair_bytes();
    if (local_peers < peers) out.bytes += 2 * p2p_channels * kNetPoolBytesPerChannel;
    out.basis += use.all_to_all ? ", all-to-all"
                                : ", send/recv with " + std::to_string(peers) +
                                      (peers == 1 ? " peer" : " peers");
  }
  out.basis += ": " + mib(out.bytes);
  return out;
}

std::vector<CommunicatorUse> layout_communicators(const ParallelPlan& plan, int stage,
                                                  int domain_gpus) {
  const RankGrid grid(plan);
  const int rank = grid.first_rank_of_stage(stage);
  const auto domain = [domain_gpus](int r) { return r / std::max(1, domain_gpus); };
  const auto local_count = [&](const std::vector<int>& ranks) {
    return static_cast<int>(std::count_if(ranks.begin(), ranks.end(),
                                          [&](int r) { return domain(r) == domain(rank); }));
  };
  // A group of the kind, whole; with `neighbour_ranks`, the ranks this one exchanges with.
  std::vector<CommunicatorUse> uses;
  const auto add = [&](const char* name, GroupKind kind, bool reduces,
                       const std::vector<int>& neighbour_ranks, bool all_to_all) {
    if (!grid.has_groups(kind) || grid.group_size(kind) < 2) return;
    const std::vector<int> members = grid.members(kind, grid.group_of(rank, kind));
    uses.push_back({name, static_cast<int>(members.size()), local_count(members), reduces,
                    static_cast<int>(neighbour_ranks.size()), local_count(neighbour_ranks),
                    all_to_all});
  };
  // The ranks before and after this one in a group's order, once each (a ring of two is one
  // neighbour), the order wrapping round where `wraps`.
  const auto around = [&](GroupKind kind, bool wraps) {
    const std::vector<int> members = grid.members(kind, grid.group_of(rank, kind));
    const auto at = std::find(members.begin(), members.end(), rank) - members.begin();
    const auto n = static_cast<std::ptrdiff_t>(members.size());
    std::vector<int> out;
    for (const std::ptrdiff_t step : {std::ptrdiff_t{-1}, std::ptrdiff_t{1}}) {
      const std::ptrdiff_t other = at + step;
      if (!wraps && (other < 0 || other >= n)) continue;
      const int peer = members[static_cast<std::size_t>((other + n) % n)];
      if (peer != rank && std::find(out.begin(), out.end(), peer) == out.end()) {
        out.push_back(peer);
      }
    }
    return out;
  };
  add("data-parallel", GroupKind::data, true, {}, false);
  add("tensor-parallel", GroupKind::tensor, true, {}, false);
  // Ring attention: keys and values from the previous cp rank, to the next. Ulysses' all-to-alls
  // connect every pair of the group, as the experts' do.
  if (plan.ulysses()) {
    add("context-parallel", GroupKind::context, false, {}, true);
  } else if (grid.has_groups(GroupKind::context)) {
    add("context-parallel", GroupKind::context, false, around(GroupKind::context, true), false);
  }
  // The stages before and after; interleaving wraps the last stage round to the first.
  if (grid.has_groups(GroupKind::pipeline)) {
    add("pipeline", GroupKind::pipeline, false, around(GroupKind::pipeline, plan.vpp > 1), false);
  }
  add("expert-parallel", GroupKind::expert, false, {}, true);
  add("expert data-parallel", GroupKind::expert_data, true, {}, false);
  return uses;
}

}  // namespace fleetsim
