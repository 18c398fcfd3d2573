// The collective library's buffers, communicator by communicator, as NCCL's source sizes them.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "workloads/communicator_memory.hpp"

using namespace fleetsim;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// An HGX H100 board: 24 channels, 8 GPUs on NVSwitch with NVLink SHARP, a 400 Gb/s NIC each.
CommunicatorDevice hgx_h100() {
  return {.channels = 24,
          .domain_gpus = 8,
          .nics_per_gpu = 1,
          .nic_bytes_per_s = 50e9,
          .nvls = true,
          .nvls_channels = 16,
          .nvls_channels_across = 16};
}

double bytes(const CommunicatorUse& use, const CommunicatorDevice& device = hgx_h100()) {
  return communicator_memory(use, device).bytes;
}

}  // namespace

TEST_CASE("communicator memory: NCCL's pieces, derived by hand") {
  CommunicatorDevice device = hgx_h100();
  device.nvls = false;
  // Set up, before any connection: the communicator's two 2 MiB pieces and three a channel
  // for the 32 p2p channels (24 rounded up to a power of two): 4 + 192 MiB.
  const CommunicatorUse idle{"idle", 8, 1, false};
  CHECK(bytes(idle, device) == Approx(196 * kMiB));
  // A ring inside the board: each channel receives into 10 MiB (a 4 KiB header, LL 512 KiB,
  // LL128 4.6875 MiB and Simple 4 MiB, in 2 MiB pieces) and sends from a 2 MiB header: 24 x 12.
  const CommunicatorUse ring{"ring", 8, 1, true};
  CHECK(bytes(ring, device) - bytes(idle, device) == Approx(24 * 12 * kMiB));
  // With NVLink SHARP: 16 NVLS channels of 2 MiB each and 8 heads x 2 x 128 KiB x 8 steps,
  // and 2 MiB of credits: 16 x (2 + 16) + 2 = 290 MiB more.
  CHECK(bytes(ring) - bytes(ring, device) == Approx(290 * kMiB));
  // Linear in the channels (sjeaugey, NVIDIA/nccl issue 986): 12 channels (16 p2p) hold 12
  // rings' and 16 channels' worth less.
  CommunicatorDevice fewer = device;
  fewer.channels = 12;
  CHECK(bytes(ring, device) - bytes(ring, fewer) == Approx(12 * 12 * kMiB + 16 * 6 * kMiB));
  // One GPU a node: two channels (one NIC), each sending 10 MiB (LL128 and Simple) and
  // receiving into 10 MiB (all three protocols) over the network: 4 + 2 x 6 + 2 x 20 MiB.
  const CommunicatorUse across{"data-parallel", 16, 8, true};
  CHECK(bytes(across) == Approx(56 * kMiB));
  // Send/recv across nodes shares one pool a direction: 2 p2p channels x 16 steps x 128 KiB.
  const CommunicatorUse pipeline{"pipeline", 4, 8, false, 2};
  CHECK(bytes(pipeline) == Approx((4 + 12 + 2 * 2 * 2) * kMiB));
}

TEST_CASE("communicator memory: an all-to-all on 8 H100 takes what NCCL issue 1685 measured") {
  // NVIDIA/nccl issue 1685: on 8 x H100, the first all_to_all_single raised a GPU's memory
  // from 1.06 to 4.34 GB, in 10 MiB and 2 MiB allocations, 32 channels a peer. The model:
  // 7 peers x 32 channels x 12 MiB = 2,688 MiB (2.82 GB), 14% under; what else the first call
  // maps is not known, hence 20%.
  const CommunicatorUse set_up{"expert-parallel", 8, 1, false};
  const CommunicatorUse all_to_all{"expert-parallel", 8, 1, false, 0, true};
  const double connected = bytes(all_to_all) - bytes(set_up);
  CHECK(connected == Approx(7 * 32 * 12 * kMiB));
  CHECK(connected == Approx(4.34e9 - 1.06e9).epsilon(0.20));
  // Across nodes each peer gets the network's share, 4 channels for a 400 Gb/s NIC (one per
  // 14 GB/s), so the local peers hold fewer: 16 ranks, 8 a node, 7 local peers x 4 channels.
  const CommunicatorUse wide{"expert-parallel", 16, 1, false, 0, true};
  const CommunicatorUse wide_set_up{"expert-parallel", 16, 1, false};
  CHECK(bytes(wide) - bytes(wide_set_up) == Approx(7 * 4 * 12 * kMiB + 2 * 16 * 2 * kMiB));
}

TEST_CASE("communicator memory: each layout's communicators, with their peers") {
  ParallelPlan plan;
  plan.tp = 8;
  plan.pp = 4;
  plan.dp = 2;
  const auto names = [](const std::vector<CommunicatorUse>& uses) {
    std::string text;
    for (const CommunicatorUse& use : uses) {
      text += use.name + " " + std::to_string(use.ranks) + "/" + std::to_string(use.stride) + " " +
              std::to_string(use.neighbours) + "; ";
    }
    return text;
  };
  // Ranks tp innermost, then dp, then the stage: dp 2 ranks 8 apart, stages 16 apart. The
  // first stage sends to one neighbour, a middle one to two.
  CHECK(names(layout_communicators(plan, 0, 1)) ==
        "data-parallel 2/8 0; tensor-parallel 8/1 0; pipeline 4/16 1; ");
  CHECK(names(layout_communicators(plan, 1, 1)) ==
        "data-parallel 2/8 0; tensor-parallel 8/1 0; pipeline 4/16 2; ");
  // Interleaving sends from the last stage round to the first.
  plan.vpp = 2;
  CHECK(layout_communicators(plan, 0, 1).back().neighbours == 2);
  // Experts: an all-to-all over ep replicas, the experts reduced over the replicas that
  // hold them.
  ParallelPlan moe;
  moe.dp = 16;
  moe.ep = 8;
  CHECK(names(layout_communicators(moe, 0, 2)) ==
        "data-parallel 16/1 0; expert-parallel 8/1 0; expert data-parallel 2/8 0; ");
  CHECK(layout_communicators(moe, 0, 2)[1].all_to_all);
}
