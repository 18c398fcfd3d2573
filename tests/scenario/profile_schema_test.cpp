// GPU profiles and collective libraries as the loader reads them: provenance, ranges, names,
// RCCL's and NCCL's tables.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "sim/scenario/scenario.hpp"
#include "workloads/transformer_ops.hpp"

namespace fleetsim {
namespace {

using testing::kBase;
using testing::load_error;
using testing::load_text;
using testing::shipped_file;
using testing::TempDir;
using testing::with;

TEST_CASE("a GPU profile provenance must say what kind of number it is") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string profile =
      with(shipped_file("calibration/profiles/b200.yaml"), "name: b200", "name: guess");
  dir.write("calibration/profiles/guess.yaml",
            with(profile, "provenance: 'published: dense BF16", "provenance: 'rumour: dense BF16"));
  const auto e = load_error(kBase + "  gpu: guess\n", data);
  REQUIRE(e);
  CHECK(e->key() == "dense_bf16.provenance");
  CHECK(e->file() == (dir.path() / "calibration/profiles/guess.yaml").string());
  CHECK_THAT(e->what(),
             Catch::Contains("(hint: start with one of measured:, published:, extrapolated:, "
                             "assumed:"));
}

TEST_CASE("a GPU profile efficiency must lie above 0 and at most 1") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string profile =
      with(shipped_file("calibration/profiles/h100-sxm.yaml"), "name: h100-sxm", "name: fast");
  dir.write("calibration/profiles/fast.yaml", with(profile, "value: 0.891", "value: 1.2"));
  const auto e = load_error(kBase + "  gpu: fast\n", data);
  REQUIRE(e);
  CHECK(e->key() == "gemm_efficiency.value");
  CHECK_THAT(e->what(), Catch::Contains("expected a fraction in (0, 1], got \"1.2\""));
}

TEST_CASE("a GPU profile's name must be its file name") {
  // A copy under another file name that keeps the old name would send `calibrate --write`
  // to the original's file.
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  dir.write("calibration/profiles/my-h100.yaml",
            shipped_file("calibration/profiles/h100-sxm.yaml"));
  const auto e = load_error(kBase + "  gpu: my-h100\n", data);
  REQUIRE(e);
  CHECK(e->key() == "name");
  CHECK_THAT(e->what(), Catch::Contains("make the name match the file name"));
}

TEST_CASE("an MI300X node takes RCCL's tuning tables, not NCCL's") {
  const Scenario s = load_text(with(kBase, "node: dgx-h100", "node: mi300x-platform"));
  const CollectiveCosts& rccl = s.variants[0].inputs.gpu.collectives;
  CHECK(rccl.library == "rccl");
  CHECK(rccl.tree_efficiency == Approx(0.27));
  CHECK(rccl.ring[static_cast<int>(Protocol::ll)].bandwidth == Approx(0.2));
  CHECK(rccl.ring[static_cast<int>(Protocol::simple)].base.ns() == 27900);
  const CollectiveCosts nccl = load_text(kBase).variants[0].inputs.gpu.collectives;
  CHECK(nccl.library == "nccl");
  CHECK(nccl.tree_efficiency == Approx(0.92));
  // NCCL's per-channel tree limits for the H100 (compute capability 9.0: Hopper's row); RCCL's
  // are not in its table, so the tree stays out of its tuner.
  REQUIRE(nccl.gpu_tree_limits);
  CHECK(nccl.gpu_tree_limits->from_compute_capability == 90);
  CHECK(nccl.gpu_tree_limits->simple_bytes_per_s[1] == Approx(41.4e9));
  CHECK(nccl.tree_correction(Protocol::simple, 64.0 * 4096) == Approx(0.5));
  CHECK(nccl.tree_correction(Protocol::simple, 1e12) == 1.0);
  CHECK_FALSE(rccl.gpu_tree_limits);
  const CollectiveCosts rtx4090 = load_text(with(kBase, "node: dgx-h100", "node: rtx4090-server"))
                                      .variants[0]
                                      .inputs.gpu.collectives;
  REQUIRE(rtx4090.gpu_tree_limits);  // sm_89: Ampere's row, as NCCL picks it
  CHECK(rtx4090.gpu_tree_limits->from_compute_capability == 80);
}

TEST_CASE("a compute capability is written as NVIDIA prints it") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string profile = shipped_file("calibration/profiles/h100-sxm.yaml");
  dir.write("calibration/profiles/h100-sxm.yaml",
            with(profile, "compute_capability: 9.0", "compute_capability: 9.05"));
  const auto e = load_error(kBase, data);
  REQUIRE(e);
  CHECK(e->key() == "compute_capability");
  CHECK_THAT(e->what(), Catch::Contains("expected a compute capability like 9.0"));
}

TEST_CASE("a collective library's tables are checked: protocols, tree limits, sources") {
  TempDir dir;
  const DataPaths data = testing::copy_of_source_data(dir);
  const std::string library = shipped_file("calibration/collectives/nccl.yaml");
  const auto load_with = [&](const std::string& from, const std::string& to) {
    dir.write("calibration/collectives/nccl.yaml", with(library, from, to));
    return load_error(kBase, data);
  };
  SECTION("Simple at other than 1 is an error") {
    const auto e = load_with("network: 9.6us, bandwidth: 1.0", "network: 9.6us, bandwidth: 0.9");
    REQUIRE(e);
    CHECK(e->key() == "ring.simple.bandwidth");
    CHECK_THAT(e->what(), Catch::Contains("expected 1, got \"0.9\""));
    CHECK_THAT(e->what(), Catch::Contains("(hint: Simple is the reference protocol"));
  }
  SECTION("LL above Simple is an error") {
    const auto e = load_with("bandwidth: 0.25}", "bandwidth: 1.5}");
    REQUIRE(e);
    CHECK(e->key() == "ring.ll.bandwidth");
    CHECK_THAT(e->what(), Catch::Contains("got \"1.5\""));
  }
  SECTION("a protocol at 0 is one the library does not use") {
    CHECK_FALSE(load_with("bandwidth: 0.25}", "bandwidth: 0}"));
  }
  SECTION("generations in ascending order") {
    const auto e = load_with("from_compute_capability: 9.0,", "from_compute_capability: 7.5,");
    REQUIRE(e);
    CHECK(e->key() == "tree_channel_limits.hopper.from_compute_capability");
    CHECK_THAT(e->what(), Catch::Contains("ascending"));
  }
  SECTION("one bandwidth per node count") {
    const auto e = load_with("simple: [38.7GB/s, 41.4GB/s, 36.0GB/s]", "simple: [38.7GB/s]");
    REQUIRE(e);
    CHECK(e->key() == "tree_channel_limits.hopper.simple");
    CHECK_THAT(e->what(), Catch::Contains("expected a list of 3 bandwidths"));
  }
  SECTION("the tables name their source") {
    const auto e = load_with("tree_model_source:", "# tree_model_source:");
    REQUIRE(e);
    CHECK(e->key() == "tree_model_source");
    CHECK_THAT(e->what(), Catch::Contains("missing required key"));
  }
}

TEST_CASE("a cluster whose links its GPU profile cannot rate is refused where it is chosen") {
  // The B200 profile rates InfiniBand, RoCE and EFA, not GPUDirect-TCPXO: one node uses no
  // NIC, so it loads; two nodes join by their TCPXO NICs and are refused at the node (or at the
  // GPU that replaced the node's) before anything is simulated, as `run` would refuse them.
  const std::string two_nodes = with(kBase, "  dp: 8\n", "  dp: 16\n");
  const std::string tcpxo =
      with(kBase, "  node: dgx-h100\n", "  node: {preset: dgx-b200, nic_kind: tcpxo}\n");
  CHECK_FALSE(load_error(tcpxo));
  const auto e = load_error(with(tcpxo, "  dp: 8\n", "  dp: 16\n") + "  nodes: 2\n");
  REQUIRE(e);
  CHECK(e->key() == "cluster.node");
  CHECK(e->line() == 11);
  CHECK_THAT(e->what(), Catch::Contains("GPU profile b200 has no link efficiency for tcpxo"));
  const auto replaced = load_error(two_nodes + "  nodes: 2\n  gpu: b200\n");
  CHECK_FALSE(replaced);  // DGX H100's InfiniBand: rated
  const auto h100_tcpxo = load_error(
      with(two_nodes, "  node: dgx-h100\n", "  node: {preset: dgx-h100, nic_kind: tcpxo}\n") +
      "  nodes: 2\n  gpu: b200\n");
  REQUIRE(h100_tcpxo);
  CHECK(h100_tcpxo->key() == "cluster.gpu");
}

TEST_CASE("RoCE is rated as InfiniBand: the same RDMA bus bandwidth, NCCL's same verbs transport") {
  // GTC24 S62129 gives one all-reduce bus bandwidth for InfiniBand and RoCE at each line rate
  // (24 GB/s at 200 Gb/s, 48 at 400): every profile that rates one rates the other the same.
  const DataPaths data = testing::source_data();
  int both = 0;
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(FLEETSIM_SOURCE_DIR) / "calibration/profiles")) {
    const GpuProfile gpu = load_gpu_profile(data, entry.path().stem().string());
    CAPTURE(gpu.name);
    const auto ib = gpu.link_efficiency.find("infiniband");
    const auto roce = gpu.link_efficiency.find("roce");
    REQUIRE((ib == gpu.link_efficiency.end()) == (roce == gpu.link_efficiency.end()));
    if (ib == gpu.link_efficiency.end()) continue;
    CHECK(roce->second.value == ib->second.value);
    ++both;
  }
  CHECK(both >= 10);
}

}  // namespace
}  // namespace fleetsim
