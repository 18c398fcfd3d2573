#include "workloads/communicator_memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

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
// NVLS: each NVLS channel's buffer is chunk 128 KiB x NCCL_STEPS 8, twice (reduce and
// broadcast), for each head (nvls.cc, ncclNvlsBufferSetup); heads at most NCCL_MAX_NVLS_ARITY.
constexpr double kNvlsStepBytes = 128.0 * 1024 * 8;
constexpr int kMaxNvlsHeads = 32;
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
  // The communicator's ranks that share this rank's NVLink domain.
  const int local =
      use.stride >= device.domain_gpus ? 1 : std::min(use.ranks, device.domain_gpus / use.stride);
  const bool crosses = local < use.ranks;
  // NCCL's search gives a communicator inside one domain the device's channels; across
  // domains, two a NIC its local ranks use (8 NICs: 16 channels, connect.cc).
  const int nics = std::max(1, static_cast<int>(std::lround(local * device.nics_per_gpu)));
  const int channels = crosses ? 2 * nics : device.channels;
  // Send/recv channels: the collective channels rounded up to a power of two (p2pnChannels),
  // each peer inside the domain using all of them (paths.cc).
  const int p2p_channels = power_of_two_at_least(channels);
  // Every peer gets the fewest channels any peer does (ncclTopoComputeP2pChannelsPerPeer):
  // across domains, the network peers' share.
  int per_peer = p2p_channels;
  if (crosses) {
    per_peer = power_of_two_at_least(
        std::max(1, static_cast<int>(std::ceil(device.nic_bytes_per_s / kNetBytesPerP2pChannel))));
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
      const int nvls_channels = crosses ? device.nvls_channels_across : device.nvls_channels;
      const int heads = std::min(local, kMaxNvlsHeads);
      out.bytes += nvls_channels * (kGranularity + 2 * kNvlsStepBytes * heads) + kGranularity;
      out.basis += crosses ? ", NVLS tree" : ", NVLS";
    }
  }
  const int peers = use.all_to_all ? use.ranks - 1 : use.neighbours;
  if (peers > 0) {
    // Peers inside the domain hold their own connections on every p2p channel; those across
    // share the network pool (one a direction). A neighbour exchange that crosses domains has
    // one neighbour outside (the ends of the domain's run) where it has one inside.
    const int local_peers = use.all_to_all ? local - 1
                            : !crosses     ? peers
                            : local > 1    ? peers - 1
                                           : 0;
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
                                                  int expert_data_ranks) {
  std::vector<CommunicatorUse> uses;
  const int gradient_stride = plan.tp;  // dp x cp: the cp ranks of a replica, then replicas
  if (plan.gradient_ranks() > 1) {
    uses.push_back({"data-parallel", plan.gradient_ranks(), gradient_stride, true});
  }
  if (plan.tp > 1) uses.push_back({"tensor-parallel", plan.tp, 1, true});
  if (plan.cp > 1) {
    // Ring attention: keys and values from the previous cp rank, to the next.
    uses.push_back({"context-parallel", plan.cp, plan.tp, false, plan.cp == 2 ? 1 : 2});
  }
  if (plan.pp > 1) {
    // The stages before and after; interleaving wraps the last stage round to the first.
    const bool wraps = plan.vpp > 1;
    const int peers = plan.pp == 2 ? 1 : (stage > 0 || wraps) + (stage < plan.pp - 1 || wraps);
    uses.push_back({"pipeline", plan.pp, plan.tp * plan.cp * plan.dp, false, peers});
  }
  if (plan.ep > 1) {
    uses.push_back({"expert-parallel", plan.ep, plan.tp * plan.cp, false, 0, true});
    if (expert_data_ranks > 1) {
      uses.push_back(
          {"expert data-parallel", expert_data_ranks, plan.tp * plan.cp * plan.ep, true});
    }
  }
  return uses;
}

}  // namespace fleetsim
