// cluster: the node (a preset, or one with fields overridden), how many, the GPU profile, the
// fabric; and node presets themselves (topology/presets/), every number with its source.
#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/scenario/loader.hpp"
#include "topology/topology.hpp"
#include "workloads/layout/rules.hpp"

namespace fleetsim {

using namespace fields;

namespace {

using NodeSetter = void (*)(NodeSpec&, const Field&);

struct NodeKey {
  std::string_view key;
  NodeSetter set;
  bool numeric;  // numbers are claims about hardware: a preset must cite a source for each
};

GpuFabric read_gpu_fabric(const Field& f) {
  const std::string fabric = read_choice(f, {"nvswitch", "xgmi_mesh", "nvlink_pairs", "pcie_only"});
  if (fabric == "nvswitch") return GpuFabric::nvswitch;
  if (fabric == "xgmi_mesh") return GpuFabric::xgmi_mesh;
  if (fabric == "nvlink_pairs") return GpuFabric::nvlink_pairs;
  return GpuFabric::pcie_only;
}

// A NIC kind by the name of the links it drives (to_string(fabric_link_kind)).
NicKind read_nic_kind(const Field& f) {
  Keys names;
  for (const NicKind kind : kNicKinds) names.push_back(to_string(fabric_link_kind(kind)));
  const std::string name = read_choice(f, names);
  for (const NicKind kind : kNicKinds) {
    if (name == to_string(fabric_link_kind(kind))) return kind;
  }
  return NicKind::infiniband;
}

const std::array<NodeKey, 26> kNodeKeys = {{
    {"name", [](NodeSpec& s, const Field& f) { s.name = read_string(f); }, false},
    {"description", [](NodeSpec& s, const Field& f) { s.description = read_string(f); }, false},
    {"gpu_profile", [](NodeSpec& s, const Field& f) { s.gpu_profile = read_string(f); }, false},
    {"gpus", [](NodeSpec& s, const Field& f) { s.gpus = read_int(f, 1); }, true},
    {"gpu_fabric", [](NodeSpec& s, const Field& f) { s.gpu_fabric = read_gpu_fabric(f); }, false},
    {"nvlink",
     [](NodeSpec& s, const Field& f) {
       s.nvlink_bytes_per_s = read_quantity(f, Quantity::bandwidth);
     },
     true},
    {"nvlink_latency", [](NodeSpec& s, const Field& f) { s.nvlink_latency = read_time(f); }, true},
    {"nvls", [](NodeSpec& s, const Field& f) { s.nvls = read_bool(f); }, false},
    {"nvlink_domain_nodes",
     [](NodeSpec& s, const Field& f) { s.nvlink_domain_nodes = read_int(f, 1); }, true},
    {"xgmi_link",
     [](NodeSpec& s, const Field& f) {
       s.xgmi_link_bytes_per_s = read_quantity(f, Quantity::bandwidth);
     },
     true},
    {"xgmi_latency", [](NodeSpec& s, const Field& f) { s.xgmi_latency = read_time(f); }, true},
    {"pcie_switches", [](NodeSpec& s, const Field& f) { s.pcie_switches = read_int(f, 1); }, true},
    {"pcie",
     [](NodeSpec& s, const Field& f) {
       s.pcie_bytes_per_s = read_quantity(f, Quantity::bandwidth);
     },
     true},
    {"pcie_latency", [](NodeSpec& s, const Field& f) { s.pcie_latency = read_time(f); }, true},
    {"host_link",
     [](NodeSpec& s, const Field& f) {
       s.host_bytes_per_s = read_quantity(f, Quantity::bandwidth);
     },
     true},
    {"gpu_p2p", [](NodeSpec& s, const Field& f) { s.gpu_p2p = read_bool(f); }, false},
    {"host_memory",
     [](NodeSpec& s, const Field& f) {
       s.host_memory_bytes_per_s = read_quantity(f, Quantity::bandwidth);
     },
     true},
    {"host_memory_efficiency",
     [](NodeSpec& s, const Field& f) { s.host_memory_efficiency = read_fraction(f); }, true},
    {"host_memory_capacity",
     [](NodeSpec& s, const Field& f) {
       s.host_memory_capacity_bytes = read_quantity(f, Quantity::size);
     },
     true},
    {"cpu_cores", [](NodeSpec& s, const Field& f) { s.cpu_cores = read_int(f, 1); }, true},
    {"cpu_clock",
     [](NodeSpec& s, const Field& f) { s.cpu_clock_hz = read_quantity(f, Quantity::frequency); },
     true},
    {"cpu_adam_cycles_per_parameter",
     [](NodeSpec& s, const Field& f) { s.cpu_adam_cycles_per_parameter = read_positive(f); }, true},
    {"nics", [](NodeSpec& s, const Field& f) { s.nics = read_int(f, 0); }, true},
    {"nic",
     [](NodeSpec& s, const Field& f) { s.nic_bytes_per_s = read_quantity(f, Quantity::bandwidth); },
     true},
    {"nic_latency", [](NodeSpec& s, const Field& f) { s.nic_latency = read_time(f); }, true},
    {"nic_kind", [](NodeSpec& s, const Field& f) { s.nic_kind = read_nic_kind(f); }, false},
}};

const NodeKey* find_node_key(std::string_view key) {
  for (const NodeKey& entry : kNodeKeys) {
    if (entry.key == key) {
      return &entry;
    }
  }
  return nullptr;
}

Keys node_keys_plus(std::string_view extra) {
  Keys keys;
  for (const NodeKey& entry : kNodeKeys) {
    keys.push_back(entry.key);
  }
  if (!extra.empty()) {
    keys.push_back(extra);
  }
  return keys;
}

void apply_node_keys(NodeBuild& b, const Field& map) {
  for (const Entry& e : entries(map)) {
    const NodeKey* key = find_node_key(e.key);
    if (key == nullptr) {
      continue;  // `preset` and `sources`, handled by the callers
    }
    key->set(b.spec, e.value);
    if (e.key == "gpu_profile") {
      b.gpu_profile = e.value;
    }
  }
}

// Every number in a preset cites where it comes from; see node_spec.hpp.
std::vector<std::pair<std::string, std::string>> read_sources(const Field& root) {
  const Field sources = require(root, "sources");
  expect_map(sources, node_keys_plus({}));
  std::vector<std::pair<std::string, std::string>> out;
  for (const Entry& e : entries(sources)) {
    out.emplace_back(e.key, read_string(e.value));
  }
  for (const NodeKey& key : kNodeKeys) {
    const auto value = find(root, key.key);
    if (!key.numeric || !value) {
      continue;
    }
    const bool cited = std::any_of(out.begin(), out.end(),
                                   [&](const auto& source) { return source.first == key.key; });
    if (!cited) {
      fail(*value, "no source for " + std::string(key.key),
           "add " + in_quotes(std::string(key.key) + ": <where the number comes from>") +
               " under sources");
    }
  }
  return out;
}

// Rules that a preset and its overrides must satisfy together.
void check_node(const NodeSpec& spec, const Field& f) {
  if (spec.gpu_fabric == GpuFabric::nvswitch && spec.nvlink_bytes_per_s <= 0) {
    fail(f, "gpu_fabric nvswitch needs an nvlink bandwidth", "add nvlink: 450GB/s (for example)");
  }
  if (spec.gpu_fabric == GpuFabric::nvlink_pairs && spec.nvlink_bytes_per_s <= 0) {
    fail(f, "gpu_fabric nvlink_pairs needs an nvlink bandwidth",
         "add nvlink: 300GB/s (for example: three NVLink 4 bridges)");
  }
  if (spec.gpu_fabric == GpuFabric::nvlink_pairs && spec.gpus % 2 != 0) {
    fail(f, "gpu_fabric nvlink_pairs needs an even number of GPUs",
         "set gpus to an even number: bridges join GPUs two by two");
  }
  if (spec.nvlink_domain_nodes > 1 && spec.gpu_fabric != GpuFabric::nvswitch) {
    fail(f, "nvlink_domain_nodes > 1 needs gpu_fabric nvswitch",
         "an NVLink domain spans nodes only through an NVSwitch");
  }
  if (spec.nvls && spec.gpu_fabric != GpuFabric::nvswitch) {
    fail(f, "nvls (in-switch reduction) needs gpu_fabric nvswitch",
         "remove nvls: true, or set gpu_fabric: nvswitch");
  }
  if (spec.gpu_fabric == GpuFabric::xgmi_mesh && spec.xgmi_link_bytes_per_s <= 0) {
    fail(f, "gpu_fabric xgmi_mesh needs an xgmi_link bandwidth",
         "add xgmi_link: 64GB/s (for example)");
  }
  if (spec.nics > 0 && spec.nic_bytes_per_s <= 0) {
    fail(f, "a node with NICs needs a nic bandwidth", "add nic: 400Gbps (for example)");
  }
  if (!spec.gpu_p2p && spec.gpu_fabric != GpuFabric::pcie_only) {
    fail(f, "gpu_p2p: false needs gpu_fabric pcie_only",
         "GPUs with NVLink or xGMI exchange data over it, not through host memory");
  }
  if (!spec.gpu_p2p && !(spec.host_memory_bytes_per_s > 0)) {
    fail(f, "gpu_p2p: false needs the host memory bandwidth",
         "add host_memory: 460.8GB/s (for example: 12 channels of DDR5-4800)");
  }
}

void cite_override(NodeBuild& b, const Entry& e) {
  const std::string text =
      "overridden in " + e.value.doc->file + ":" + std::to_string(e.value.node.Mark().line + 1);
  for (auto& source : b.sources) {
    if (source.first == e.key) {
      source.second = text;
      return;
    }
  }
  b.sources.emplace_back(e.key, text);
}

// An override can switch a node to NVSwitch or give it NICs without the matching bandwidth.

std::string join_sources(const std::vector<std::pair<std::string, std::string>>& sources) {
  std::string text;
  for (const auto& [key, source] : sources) {
    text += (text.empty() ? "" : "; ") + key + ": " + source;
  }
  return text;
}

const Keys kClusterKeys = {"node", "nodes", "gpu", "fabric", "storage"};
// A step's topology, flows and programs take about this much memory for each GPU
// (simulation_bytes_estimate says where it was measured), so kMaxGpus need about 17 GB.
constexpr double kBytesPerSimulatedGpu = 16e3;

const Keys kFabricKeys = {"kind",  "link",           "oversubscription", "leaf_ports",
                          "tiers", "switch_latency", "placement",        "routing"};

}  // namespace

FabricSpec parse_fabric(const std::optional<Field>& f) {
  FabricSpec fabric;
  fabric.switch_latency = SimTime::from_ns(600);  // a typical InfiniBand NDR switch hop
  if (!f) {
    return fabric;
  }
  expect_map(*f, kFabricKeys);
  if (auto kind = find(*f, "kind")) {
    read_choice(*kind, {"rail-fat-tree"});
  }
  if (auto link = find(*f, "link")) {
    fabric.link_bytes_per_s = read_quantity(*link, Quantity::bandwidth);
  }
  if (auto ratio = find(*f, "oversubscription")) {
    fabric.oversubscription = read_number(*ratio);
  }
  if (auto ports = find(*f, "leaf_ports")) {
    fabric.leaf_ports = read_int(*ports, 2);
  }
  if (const auto problem = fabric_bounds_problem(fabric)) {
    fail(find(*f, problem->key).value_or(*f), problem->problem, problem->hint);
  }
  if (auto tiers = find(*f, "tiers")) {
    fabric.tiers = std::stoi(read_choice(*tiers, {"2", "3"}));  // absent: the fewest that fit
  }
  if (auto latency = find(*f, "switch_latency")) {
    fabric.switch_latency = read_time(*latency);
  }
  if (auto routing = find(*f, "routing")) {
    fabric.routing = read_choice(*routing, {"adaptive", "hash"}) == "hash"
                         ? FabricRouting::hash
                         : FabricRouting::adaptive;
  }
  if (auto placement = find(*f, "placement")) {
    fabric.placement = read_choice(*placement, {"packed", "spread"}) == "spread"
                           ? NodePlacement::spread
                           : NodePlacement::packed;
  }
  return fabric;
}

NodeBuild Loader::node_preset(const Field& name) {
  const Preset& p = preset(name, data_.root / "topology" / "presets", "node preset");
  const Field root{p.root, &p.doc, ""};
  expect_map(root, node_keys_plus("sources"));
  require_keys(root, {"name", "gpu_profile", "gpus", "gpu_fabric", "pcie_switches", "pcie",
                      "host_link", "nics", "sources"});
  NodeBuild b;
  apply_node_keys(b, root);
  if (b.spec.gpu_fabric == GpuFabric::nvswitch || b.spec.gpu_fabric == GpuFabric::nvlink_pairs) {
    require_keys(root, {"nvlink"});
  }
  if (b.spec.gpu_fabric == GpuFabric::xgmi_mesh) {
    require_keys(root, {"xgmi_link"});
  }
  if (b.spec.nics > 0) {
    require_keys(root, {"nic"});
  }
  if (!b.spec.gpu_p2p) {
    require_keys(root, {"host_memory"});
  }
  check_node(b.spec, root);
  b.sources = read_sources(root);
  return b;
}

NodeBuild Loader::parse_node(const Field& f) {
  NodeBuild b;
  if (f.node.IsScalar()) {
    b = node_preset(f);
  } else {
    expect_map(f, node_keys_plus("preset"));
    b = node_preset(require(f, "preset"));
    apply_node_keys(b, f);
    for (const Entry& e : entries(f)) {
      const NodeKey* key = find_node_key(e.key);
      if (key != nullptr && key->numeric) {
        cite_override(b, e);
      }
    }
    check_node(b.spec, f);
  }
  b.spec.source = join_sources(b.sources);
  return b;
}

void Loader::parse_cluster(const Field& f, StepInputs& in) {
  expect_map(f, kClusterKeys);
  NodeBuild node = parse_node(require(f, "node"));
  in.node = node.spec;
  if (auto nodes = find(f, "nodes")) {
    in.nodes = read_int(*nodes, 1);
    const double gpus = static_cast<double>(in.nodes) * in.node.gpus;
    if (gpus > kMaxGpus) {
      fail(*nodes,
           rounded(gpus, 0) + " GPUs are more than fleetsim simulates (at most " +
               rounded(kMaxGpus, 0) + "): a step on them would need about " +
               rounded(gpus * kBytesPerSimulatedGpu / 1e9, 0) + " GB of memory",
           "simulate a slice of the cluster (a few thousand nodes) and scale with a sweep");
    }
    // Nodes reach each other through their NICs, or over NVLink inside one domain.
    if (in.nodes > in.node.nvlink_domain_nodes && in.node.nics < 1) {
      fail(*nodes,
           std::to_string(in.nodes) + " nodes, but node " + in.node.name +
               " has no NICs: nothing connects them",
           "give the node its NICs (node: {preset: ..., nics: 8}), or use one node");
    }
  }
  const auto gpu = find(f, "gpu");
  if (gpu) {
    in.gpu = gpu_profile(*gpu);
    in.node.gpu_profile = in.gpu.name;
  } else {
    in.gpu = gpu_profile(node.gpu_profile);
  }
  in.fabric = parse_fabric(find(f, "fabric"));
  // Every link the cluster is built of needs its usable fraction in the GPU profile. Two nodes
  // have every kind a cluster of this node has (its links, and the fabric's once there is one).
  std::optional<Topology> built;
  try {
    built.emplace(build_cluster(in.node, std::min(in.nodes, 2), in.fabric));
  } catch (const ModelError& e) {
    fail(find(f, "fabric") ? *find(f, "fabric") : require(f, "node"), e.what(),
         "change the fabric or the node so that the cluster can be built");
  }
  const Topology& sample = *built;
  for (LinkId l = 0; l < sample.link_count(); ++l) {
    const LinkKind kind = sample.link(l).kind;
    if (kind == LinkKind::host_memory || in.gpu.link_efficiency.count(to_string(kind))) continue;
    fail(gpu ? *gpu : require(f, "node"),
         "GPU profile " + in.gpu.name + " has no link efficiency for " + to_string(kind) +
             " links, which " +
             (in.nodes > 1 && kind == fabric_link_kind(in.node.nic_kind)
                  ? "the fabric between nodes " + in.node.name + " uses"
                  : "node " + in.node.name + " uses"),
         "add " + std::string(to_string(kind)) +
             " under the profile's link_efficiency (with its source), or use a node of the "
             "links the profile has");
  }
}

double simulation_bytes_estimate(const Variant& variant, bool folded) {
  const StepInputs& in = variant.inputs;
  const double gpus = static_cast<double>(in.nodes) * in.node.gpus;
  const double passes =
      static_cast<double>(step_layer_passes(job_subject(in.model, in.training), in.plan));
  // Unfolded, every rank replays its stage's passes: about 1 KB each (measured, GPT-3 175B at
  // tp 8 pp 8: 168 MB more than folded on 1,024 GPUs of 16 micro-batches, 132 MB on 256 of 64).
  constexpr double kUnfoldedBytesPerRankPass = 1e3;
  const double unfolded = folded ? 0 : gpus * passes / in.plan.pp * kUnfoldedBytesPerRankPass;
  return gpus * kBytesPerSimulatedGpu + passes * kReplayBytesPerLayerPass + unfolded;
}

}  // namespace fleetsim
