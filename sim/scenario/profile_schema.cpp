// GPU profiles (calibration/profiles/) and the collective libraries they name
// (calibration/collectives/): every calibrated number {value, sigma, provenance}.
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "sim/scenario/loader.hpp"
#include "topology/topology.hpp"

namespace fleetsim {

using namespace fields;

namespace {

// A profile entry's quantity (calibration/gpu_profile.hpp) as the loader reads it.
Quantity quantity_of(ProfileQuantity quantity) {
  switch (quantity) {
    case ProfileQuantity::flop_rate: return Quantity::flop_rate;
    case ProfileQuantity::size: return Quantity::size;
    case ProfileQuantity::bandwidth: return Quantity::bandwidth;
    case ProfileQuantity::fraction: return Quantity::fraction;
    case ProfileQuantity::count: return Quantity::count;
    case ProfileQuantity::duration: return Quantity::duration;
  }
  return Quantity::count;
}

// Under a profile's `fp8` map each FP8 entry is written without kFp8Entries' "fp8." prefix.
std::string fp8_key(std::size_t i) {
  return std::string(kFp8Entries[i].key).substr(std::string_view("fp8.").size());
}

Keys profile_keys() {
  Keys keys = {"name",       "description",     "sm_count",
               "gemm_tiles", "link_efficiency", "collective_library",
               "attention"};
  for (const ProfileEntryKey& entry : kProfileEntryKeys) {
    if (entry.required) keys.push_back(entry.key);
  }
  return keys;
}

const Keys kCalibratedFields = {"value", "sigma", "provenance"};
// The links a GPU drives, as topology names them: its GPU-to-GPU and host links, and those of
// every kind of NIC.
const Keys kLinkKinds = [] {
  Keys kinds = {to_string(LinkKind::nvlink), to_string(LinkKind::xgmi), to_string(LinkKind::pcie)};
  for (const NicKind kind : kNicKinds) kinds.push_back(to_string(fabric_link_kind(kind)));
  return kinds;
}();
double read_calibrated_value(const Field& f, Quantity q) {
  if (q == Quantity::fraction) {
    return read_fraction(f);
  }
  if (q == Quantity::count) {
    return read_non_negative(f);
  }
  return read_quantity(f, q, q == Quantity::duration ? Zero::allowed : Zero::rejected);
}

double read_sigma(const Field& f, Quantity q) {
  if (q == Quantity::fraction || q == Quantity::count) {
    return read_non_negative(f);
  }
  return read_quantity(f, q, Zero::allowed, Floor::none);
}

Calibrated read_calibrated(const Field& f, Quantity q) {
  expect_map(f, kCalibratedFields);
  Calibrated c;
  c.value = read_calibrated_value(require(f, "value"), q);
  c.sigma = read_sigma(require(f, "sigma"), q);
  c.provenance = read_provenance(require(f, "provenance"));
  return c;
}

// `[128x256, 64x64]`: the output tiles a GEMM library chooses among.
// attention: {default: <kernel>, <kernel>: {fwd: {efficiency, seq_overhead, causal_overhead},
// bwd: {...}}, ...}: every implementation calibrated for the GPU, and the one `flash` runs.
void read_attention(const Field& f, GpuProfile& g) {
  Keys allowed = {"default"};
  for (const auto& [kernel, name] : kAttentionKernels) allowed.push_back(name);
  expect_map(f, allowed);
  const Keys passes = {"fwd", "bwd"};
  const Keys fields = {"efficiency", "seq_overhead", "causal_overhead"};
  for (const auto& [kernel, name] : kAttentionKernels) {
    const auto rates = find(f, name);
    if (!rates) continue;
    expect_map(*rates, passes);
    require_keys(*rates, passes);
    AttentionRates& r = g.attention[kernel];
    for (const AttentionEntryKey& entry : kAttentionEntries) {
      const Field pass = require(*rates, entry.pass);
      expect_map(pass, fields);
      require_keys(pass, fields);
      r.*entry.pass_member.*entry.member =
          read_calibrated(require(pass, entry.field), quantity_of(entry.quantity));
    }
  }
  if (g.attention.empty()) {
    fail(f, "expected at least one attention implementation",
         "add fa2: {fwd: {...}, bwd: {...}} (FlashAttention-2)");
  }
  const Field chosen = require(f, "default");
  const std::string name = read_string(chosen);
  const std::optional<AttentionKernel> kernel = attention_kernel_named(name);
  if (!kernel || !g.attention.count(*kernel)) {
    fail(chosen, "the default attention " + in_quotes(name) + " is not calibrated here",
         "name one of the profile's: " + attention_kernels_of(g));
  }
  g.attention_default = *kernel;
}

std::vector<GemmTile> read_gemm_tiles(const Field& f) {
  std::vector<GemmTile> tiles;
  for (const Field& entry : read_list(f, 0, "tiles")) {
    const std::string& text = scalar(entry, "a tile like 128x256");
    const auto x = text.find('x');
    const auto m = x == std::string::npos ? std::nullopt : parse_whole<int>(text.substr(0, x));
    const auto n = x == std::string::npos ? std::nullopt : parse_whole<int>(text.substr(x + 1));
    if (!m || !n || *m < 1 || *n < 1) {
      fail(entry, "expected a tile like 128x256 (rows x columns of the output), got " +
                      describe(entry.node));
    }
    tiles.push_back({*m, *n});
  }
  return tiles;
}

int read_sm_count(const Field& f) {
  expect_map(f, kCalibratedFields);
  const int value = read_int(require(f, "value"), 1);
  read_non_negative(require(f, "sigma"));
  read_provenance(require(f, "provenance"));
  return value;
}

const Keys kLibraryKeys = {"name", "source", "ring", "tree", "tree_efficiency"};
const Keys kLibraryOptionalKeys = {"tree_model_source", "tree_channel_limits",
                                   "tree_size_correction"};
const Keys kTreeLimitKeys = {"from_compute_capability", "simple", "ll128"};
const Keys kProtocolNames = {"ll", "ll128", "simple"};
const Keys kProtocolCostKeys = {"base", "nvlink", "pcie", "network", "bandwidth"};

// {base, nvlink, pcie, network, bandwidth} for each of ll, ll128 and simple.
std::array<ProtocolCost, 3> read_protocol_costs(const Field& f) {
  expect_map(f, kProtocolNames);
  require_keys(f, kProtocolNames);
  std::array<ProtocolCost, 3> costs{};
  for (std::size_t p = 0; p < kProtocolNames.size(); ++p) {
    const Field entry = require(f, kProtocolNames[p]);
    expect_map(entry, kProtocolCostKeys);
    require_keys(entry, kProtocolCostKeys);
    costs[p].base = read_time(require(entry, "base"));
    costs[p].nvlink_step = read_time(require(entry, "nvlink"));
    costs[p].pcie_step = read_time(require(entry, "pcie"));
    costs[p].network_step = read_time(require(entry, "network"));
    const Field bandwidth = require(entry, "bandwidth");
    costs[p].bandwidth = read_non_negative(bandwidth);
    const bool simple = kProtocols[p] == Protocol::simple;
    if (simple && costs[p].bandwidth != 1) {
      fail(bandwidth, "expected 1, got " + describe(bandwidth.node),
           "Simple is the reference protocol: the others' bandwidths are fractions of its own");
    }
    if (!simple && costs[p].bandwidth > 1) {
      fail(bandwidth,
           "expected a fraction of Simple's bandwidth in [0, 1], got " + describe(bandwidth.node),
           "0 marks a protocol the library does not use");
    }
  }
  return costs;
}

// `9.0` as NVIDIA prints it (nvidia-smi --query-gpu=compute_cap) -> 90, as NCCL compares it.
int read_compute_capability(const Field& f) {
  const double value = read_number(f);
  const long tenths = std::lround(value * 10);
  if (value < 1 || std::abs(value * 10 - static_cast<double>(tenths)) > 1e-6) {
    fail(f, "expected a compute capability like 9.0 or 8.9, got " + describe(f.node),
         "nvidia-smi --query-gpu=compute_cap prints it");
  }
  return static_cast<int>(tenths);
}

// Per-channel ceilings of the tree, one entry per GPU generation, in ascending order.
std::vector<TreeChannelLimits> read_tree_channel_limits(const Field& f) {
  if (!f.node.IsMap() || f.node.size() == 0) {
    fail(f, "expected a map of GPU generations, got " + describe(f.node),
         "write `hopper: {from_compute_capability: 9.0, simple: [...], ll128: [...]}`");
  }
  std::vector<TreeChannelLimits> rows;
  for (const Entry& entry : entries(f)) {
    expect_map(entry.value, kTreeLimitKeys);
    require_keys(entry.value, kTreeLimitKeys);
    TreeChannelLimits row;
    const Field from = require(entry.value, "from_compute_capability");
    row.from_compute_capability = read_compute_capability(from);
    if (!rows.empty() && row.from_compute_capability <= rows.back().from_compute_capability) {
      fail(from, "expected generations in ascending compute capability",
           "list the oldest generation first");
    }
    const auto read_by_nodes = [](const Field& list, std::array<double, 3>& out) {
      const std::vector<Field> values = read_list(list, 3, "bandwidths (1, 2, 3+ nodes)");
      for (std::size_t i = 0; i < 3; ++i) out[i] = read_quantity(values[i], Quantity::bandwidth);
    };
    read_by_nodes(require(entry.value, "simple"), row.simple_bytes_per_s);
    read_by_nodes(require(entry.value, "ll128"), row.ll128_bytes_per_s);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

CollectiveCosts Loader::collective_library(const Field& name) {
  const Preset& p = preset(name, data_.root / "calibration" / "collectives", "collective library");
  const Field root{p.root, &p.doc, ""};
  Keys allowed = kLibraryKeys;
  allowed.insert(allowed.end(), kLibraryOptionalKeys.begin(), kLibraryOptionalKeys.end());
  expect_map(root, allowed);
  require_keys(root, kLibraryKeys);
  CollectiveCosts costs;
  costs.library = read_string(require(root, "name"));
  costs.source = read_string(require(root, "source"));
  costs.ring = read_protocol_costs(require(root, "ring"));
  costs.tree = read_protocol_costs(require(root, "tree"));
  costs.tree_efficiency = read_fraction(require(root, "tree_efficiency"));
  if (const auto limits = find(root, "tree_channel_limits")) {
    costs.tree_channel_limits = read_tree_channel_limits(*limits);
  }
  if (const auto correction = find(root, "tree_size_correction")) {
    expect_map(*correction, kProtocolNames);
    require_keys(*correction, kProtocolNames);
    for (std::size_t p = 0; p < kProtocolNames.size(); ++p) {
      for (const Field& factor : read_list(require(*correction, kProtocolNames[p]), 0, "factors")) {
        costs.tree_size_correction[p].push_back(read_fraction(factor));
      }
    }
  }
  // The tree's tables are the library's measurements: they name where they come from.
  if (find(root, "tree_channel_limits") || find(root, "tree_size_correction")) {
    costs.tree_model_source = read_string(require(root, "tree_model_source"));
  }
  return costs;
}

GpuProfile Loader::gpu_profile(const Field& name) {
  const Preset& p = preset(name, data_.root / "calibration" / "profiles", "GPU profile");
  const Field root{p.root, &p.doc, ""};
  Keys allowed = profile_keys();
  const Keys required = allowed;
  for (const ProfileEntryKey& entry : kProfileEntryKeys) {
    if (!entry.required) allowed.push_back(entry.key);
  }
  allowed.push_back("compute_capability");  // NVIDIA GPUs only
  allowed.push_back("fp8");                 // GPUs with FP8 tensor cores
  expect_map(root, allowed);
  require_keys(root, required);
  GpuProfile g;
  const Field name_field = require(root, "name");
  g.name = read_string(name_field);
  // The file is found by this name (scenarios, `fleetsim calibrate --write`): they must agree.
  if (g.name != name.node.Scalar()) {
    fail(name_field,
         "the profile is named " + in_quotes(g.name) + " in a file named " +
             in_quotes(name.node.Scalar() + ".yaml"),
         "make the name match the file name");
  }
  g.description = read_string(require(root, "description"));
  g.sm_count = read_sm_count(require(root, "sm_count"));
  g.gemm_tiles = read_gemm_tiles(require(root, "gemm_tiles"));
  for (const ProfileEntryKey& entry : kProfileEntryKeys) {
    if (!entry.required) continue;
    *find_profile_entry(g, entry.key) =
        read_calibrated(require(root, entry.key), quantity_of(entry.quantity));
  }
  const Field links = require(root, "link_efficiency");
  expect_map(links, kLinkKinds);
  for (const Entry& entry : entries(links)) {
    g.link_efficiency[entry.key] = read_calibrated(entry.value, Quantity::fraction);
  }
  if (const auto fp16 = find(root, "dense_fp16")) {
    g.dense_fp16_flops_per_s = read_calibrated(*fp16, Quantity::flop_rate);
  }
  if (const auto nvls = find(root, "nvls_efficiency")) {
    g.nvls_efficiency = read_calibrated(*nvls, Quantity::fraction);
  }
  if (const auto p2p = find(root, "p2p_efficiency")) {
    g.p2p_efficiency = read_calibrated(*p2p, Quantity::fraction);
    if (!g.link_efficiency.count("nvlink") && !g.link_efficiency.count("xgmi")) {
      fail(*p2p, "a p2p efficiency needs an nvlink or xgmi link efficiency",
           "point-to-point sends between GPUs run over NVLink or xGMI; remove p2p_efficiency");
    }
  }
  if (const auto fp8 = find(root, "fp8")) {
    std::vector<std::string> names;  // Keys views them: they must outlive it
    for (std::size_t i = 0; i < kFp8Entries.size(); ++i) names.push_back(fp8_key(i));
    const Keys keys(names.begin(), names.end());
    expect_map(*fp8, keys);
    require_keys(*fp8, keys);
    Fp8Gemm rates;
    for (std::size_t i = 0; i < kFp8Entries.size(); ++i) {
      rates.*kFp8Entries[i].member =
          read_calibrated(require(*fp8, names[i]), quantity_of(kFp8Entries[i].quantity));
    }
    g.fp8 = rates;
  }
  read_attention(require(root, "attention"), g);
  g.collectives = collective_library(require(root, "collective_library"));
  if (const auto capability = find(root, "compute_capability")) {
    g.compute_capability = read_compute_capability(*capability);
    // The library's row for this generation: the last one that starts at or below it.
    for (const TreeChannelLimits& row : g.collectives.tree_channel_limits) {
      if (row.from_compute_capability <= *g.compute_capability) {
        g.collectives.gpu_tree_limits = row;
      }
    }
  }
  return g;
}

}  // namespace fleetsim
