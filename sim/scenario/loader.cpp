// Reads a scenario file and the presets it names into typed StepInputs.
//
// Parsing is table-driven: each section has a list of allowed keys, and each value kind (integer,
// enum, bandwidth, ...) has one reader that reports mistakes against the YAML node it read, so
// every error carries the file, line and column of the offending text.
//
// Presets are parsed into typed structs first and overrides are applied on the typed struct, so a
// mistake in a preset names the preset file and a mistake in an override names the scenario.
// `compare:` entries instead merge on the YAML tree, before typed parsing, so a variant is checked
// exactly like the base scenario.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/scenario/scenario.hpp"
#include "sim/scenario/units.hpp"
#include "sim/step/step_executor.hpp"
#include "workloads/layout/dimensions.hpp"
#include "workloads/layout/rules.hpp"

namespace fleetsim {
namespace fs = std::filesystem;

namespace {

std::string format_error(const std::string& file, int line, int column, const std::string& key,
                         const std::string& problem, const std::string& hint) {
  std::string text = file;
  if (line > 0) {
    text += ":" + std::to_string(line) + ":" + std::to_string(column);
  }
  text += ": ";
  if (!key.empty()) {
    text += key + ": ";
  }
  text += problem;
  if (!hint.empty()) {
    text += " (hint: " + hint + ")";
  }
  return text;
}

}  // namespace

ScenarioError::ScenarioError(std::string file, int line, int column, std::string key,
                             std::string problem, std::string hint)
    : std::runtime_error(format_error(file, line, column, key, problem, hint)),
      file_(std::move(file)),
      line_(line),
      column_(column),
      key_(std::move(key)) {}

namespace {

using Keys = std::vector<std::string_view>;

// A parsed YAML document and how to name its keys in messages.
struct Doc {
  std::string file;
  // For a compare variant: its index and name, and the key paths its entry replaced. Those are
  // reported as compare[i].<path>; everything else came from the base scenario.
  int entry = -1;
  std::string variant;
  std::set<std::string> overridden;
};

// One value in a document: the node (for its mark), the document, and its dotted key path.
struct Field {
  YAML::Node node;
  const Doc* doc = nullptr;
  std::string path;
};

std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string join_list(const Keys& names) {
  std::string text;
  for (std::string_view name : names) {
    text += (text.empty() ? "" : ", ") + std::string(name);
  }
  return text;
}

std::string in_quotes(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

bool replaced_by_entry(const Doc& doc, std::string path) {
  while (true) {
    if (doc.overridden.contains(path)) {
      return true;
    }
    const auto cut = path.find_last_of('.');
    if (cut == std::string::npos) {
      return false;
    }
    path.resize(cut);
  }
}

// `value` with `decimals` decimals, whatever the locale.
std::string rounded(double value, int decimals) {
  char text[64];
  const auto end =
      std::to_chars(text, text + sizeof text, value, std::chars_format::fixed, decimals);
  return std::string(text, end.ptr);
}

[[noreturn]] void fail(const Field& f, const std::string& problem, const std::string& hint = {}) {
  const YAML::Mark mark = f.node.Mark();
  const Doc& doc = *f.doc;
  std::string key = f.path;
  std::string text = problem;
  if (doc.entry >= 0) {
    if (replaced_by_entry(doc, f.path)) {
      key = "compare[" + std::to_string(doc.entry) + "]." + f.path;
    } else {
      text = "in variant " + in_quotes(doc.variant) + ": " + problem;
    }
  } else if (!doc.variant.empty()) {  // a sweep point: its swept values keep their own marks
    text = "at sweep point " + in_quotes(doc.variant) + ": " + problem;
  }
  // A node with no place in the file (an empty document) is reported at its start.
  const bool placed = mark.line >= 0 && mark.column >= 0;
  throw ScenarioError(doc.file, placed ? mark.line + 1 : 1, placed ? mark.column + 1 : 1, key, text,
                      hint);
}

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return in_quotes(node.Scalar());
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "nothing";
  }
}

// Optimal string alignment distance: Levenshtein plus swapping two neighbours (`modle`), the
// typos people make in key names.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) {
    d[i][0] = i;
  }
  for (std::size_t j = 0; j <= b.size(); ++j) {
    d[0][j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitute = d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// `did you mean "nodes"? ` when candidates are plausible typos of `word` (all the closest ones,
// since `nods` is as near to `node` as to `nodes`), else empty.
std::string did_you_mean(std::string_view word, const Keys& candidates) {
  const std::size_t close_enough = std::max<std::size_t>(1, word.size() / 3);
  std::size_t best = close_enough + 1;
  for (std::string_view candidate : candidates) {
    best = std::min(best, edit_distance(word, candidate));
  }
  if (best > close_enough) {
    return {};
  }
  std::string names;
  for (std::string_view candidate : candidates) {
    if (edit_distance(word, candidate) == best) {
      names += (names.empty() ? "" : " or ") + in_quotes(candidate);
    }
  }
  return "did you mean " + names + "? ";
}

// ---- maps ----------------------------------------------------------------------------------

struct Entry {
  std::string key;
  Field value;
};

std::vector<Entry> entries(const Field& map) {
  std::vector<Entry> out;
  for (const auto& kv : map.node) {
    const std::string key = kv.first.Scalar();
    out.push_back({key, Field{kv.second, map.doc, join(map.path, key)}});
  }
  return out;
}

// Checks that `f` is a map whose keys are all in `allowed`, each once.
void expect_map(const Field& f, const Keys& allowed) {
  if (!f.node.IsMap()) {
    fail(f, "expected a map with keys " + join_list(allowed) + ", got " + describe(f.node));
  }
  std::set<std::string> seen;
  for (const auto& kv : f.node) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : describe(kv.first);
    const Field key_field{kv.first, f.doc, join(f.path, key)};
    if (!kv.first.IsScalar()) {
      fail(key_field, "expected a key name, got " + key);
    }
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      fail(key_field, "unknown key " + in_quotes(key),
           did_you_mean(key, allowed) + "allowed keys: " + join_list(allowed));
    }
    if (!seen.insert(key).second) {
      fail(key_field, "duplicate key " + in_quotes(key));
    }
  }
}

std::optional<Field> find(const Field& map, std::string_view key) {
  for (const auto& kv : map.node) {
    if (kv.first.IsScalar() && kv.first.Scalar() == key) {
      return Field{kv.second, map.doc, join(map.path, key)};
    }
  }
  return std::nullopt;
}

Field require(const Field& map, std::string_view key) {
  if (auto found = find(map, key)) {
    return *found;
  }
  const std::string where = map.path.empty() ? "at the top level" : "under " + map.path;
  fail(Field{map.node, map.doc, join(map.path, key)}, "missing required key",
       "add " + in_quotes(std::string(key) + ": ...") + " " + where);
}

void require_keys(const Field& map, const Keys& keys) {
  for (std::string_view key : keys) {
    require(map, key);
  }
}

// ---- scalar values -------------------------------------------------------------------------

const std::string& scalar(const Field& f, std::string_view expected) {
  if (!f.node.IsScalar()) {
    fail(f, "expected " + std::string(expected) + ", got " + describe(f.node));
  }
  return f.node.Scalar();
}

std::string read_string(const Field& f) {
  return scalar(f, "a string");
}

template <typename T>
std::optional<T> parse_whole(const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) {
    return std::nullopt;
  }
  return value;
}

int read_int(const Field& f, int min) {
  const std::string expected =
      min == 1 ? "a positive integer" : "an integer >= " + std::to_string(min);
  const auto value = parse_whole<int>(scalar(f, expected));
  if (!value || *value < min) {
    fail(f, "expected " + expected + ", got " + describe(f.node));
  }
  return *value;
}

std::uint64_t read_uint64(const Field& f) {
  const auto value = parse_whole<std::uint64_t>(scalar(f, "an unsigned integer"));
  if (!value) {
    fail(f, "expected an unsigned integer, got " + describe(f.node));
  }
  return *value;
}

double read_number(const Field& f) {
  const auto value = parse_whole<double>(scalar(f, "a number"));
  if (!value || !std::isfinite(*value)) {
    fail(f, "expected a number, got " + describe(f.node));
  }
  return *value;
}

bool read_bool(const Field& f) {
  const std::string& text = scalar(f, "true or false");
  if (text == "true") {
    return true;
  }
  if (text == "false") {
    return false;
  }
  fail(f, "expected true or false, got " + describe(f.node));
}

// One of `allowed`; values in `later` are known but not supported yet and get `later_hint`.
std::string read_choice(const Field& f, const Keys& allowed, const Keys& later = {},
                        std::string_view later_hint = {}) {
  const std::string expected = "one of " + join_list(allowed);
  const std::string& text = scalar(f, expected);
  if (std::find(allowed.begin(), allowed.end(), text) != allowed.end()) {
    return text;
  }
  if (std::find(later.begin(), later.end(), text) != later.end()) {
    fail(f, in_quotes(text) + " is not supported yet, expected " + expected,
         std::string(later_hint));
  }
  fail(f, "expected " + expected + ", got " + describe(f.node),
       did_you_mean(text, allowed) + "allowed values: " + join_list(allowed));
}

// The elements of a list of exactly `count` entries (count 0: any length but empty).
std::vector<Field> read_list(const Field& f, std::size_t count, std::string_view what) {
  const std::string expected = count == 0
                                   ? "a list of " + std::string(what)
                                   : "a list of " + std::to_string(count) + " " + std::string(what);
  if (!f.node.IsSequence() || f.node.size() == 0 || (count != 0 && f.node.size() != count)) {
    fail(f, "expected " + expected + ", got " + describe(f.node),
         "write it as [a, b, ...] in that order");
  }
  std::vector<Field> elements;
  for (std::size_t i = 0; i < f.node.size(); ++i) {
    elements.push_back({f.node[i], f.doc, f.path + "[" + std::to_string(i) + "]"});
  }
  return elements;
}

// Physical quantities carry their unit; see units.hpp.
enum class Quantity {
  bandwidth,
  size,
  duration,
  flop_rate,
  frequency,
  hourly_price,
  fraction,
  count
};

std::string_view quantity_name(Quantity q) {
  switch (q) {
    case Quantity::bandwidth: return "a bandwidth like 400Gbps or 450GB/s";
    case Quantity::size: return "a size like 80GB or 81559MiB";
    case Quantity::duration: return "a duration like 0.6us or 90s";
    case Quantity::flop_rate: return "a FLOP rate like 989TFLOPS";
    case Quantity::frequency: return "a frequency like 2.0GHz";
    case Quantity::hourly_price: return "a price per hour like 2.50USD/h";
    case Quantity::fraction: return "a fraction in (0, 1]";
    case Quantity::count: return "a number >= 0";
  }
  return "a value";
}

double parse_unit(Quantity q, const std::string& text, Zero zero) {
  switch (q) {
    case Quantity::bandwidth: return parse_bandwidth(text, zero);
    case Quantity::size: return parse_size(text, zero);
    case Quantity::duration: return parse_duration(text);
    case Quantity::flop_rate: return parse_flop_rate(text, zero);
    case Quantity::frequency: return parse_frequency(text);
    case Quantity::hourly_price: return parse_hourly_price(text);
    case Quantity::fraction:
    case Quantity::count: break;
  }
  return 0;
}

double read_quantity(const Field& f, Quantity q, Zero zero = Zero::rejected) {
  const std::string& text = scalar(f, quantity_name(q));
  try {
    return parse_unit(q, text, zero);
  } catch (const UnitError& e) {
    fail(f, e.what(), e.hint());
  }
}

double read_fraction(const Field& f) {
  const double value = read_number(f);
  if (!(value > 0 && value <= 1)) {
    fail(f, "expected a fraction in (0, 1], got " + describe(f.node));
  }
  return value;
}

double read_positive(const Field& f) {
  const double value = read_number(f);
  if (!(value > 0)) {
    fail(f, "expected a number > 0, got " + describe(f.node));
  }
  return value;
}

double read_non_negative(const Field& f) {
  const double value = read_number(f);
  if (value < 0) {
    fail(f, "expected a number >= 0, got " + describe(f.node));
  }
  return value;
}

SimTime read_time(const Field& f) {
  return from_seconds(read_quantity(f, Quantity::duration));
}

// ---- presets -------------------------------------------------------------------------------

YAML::Node parse_yaml_file(const fs::path& path, const std::string& shown, std::string_view what) {
  // Not a device, a pipe or a directory: /dev/zero would never end, a FIFO never open.
  std::error_code error;
  if (fs::exists(path, error) && !fs::is_regular_file(path, error)) {
    throw ScenarioError(shown, 0, 0, "", std::string(what) + " is not a regular file",
                        "give the path of a file");
  }
  std::ifstream in(path);
  if (!in) {
    const bool exists = fs::exists(path, error);
    throw ScenarioError(shown, 0, 0, "", "cannot open " + std::string(what),
                        exists ? "check that it is a readable file" : "no such file");
  }
  try {
    return YAML::Load(in);
  } catch (const YAML::ParserException& e) {
    throw ScenarioError(shown, e.mark.line + 1, e.mark.column + 1, "",
                        "YAML syntax error: " + e.msg);
  }
}

bool is_preset_name(const std::string& name) {
  if (name.empty() || name.front() == '.' || name.front() == '-') {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

std::vector<std::string> available_presets(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& file : fs::directory_iterator(dir, ec)) {
    if (file.is_regular_file() && file.path().extension() == ".yaml") {
      names.push_back(file.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct Preset {
  Doc doc;
  YAML::Node root;
};

// A node preset as a typed spec, plus what only the loader needs: the sources by key, and the
// field that named the GPU profile (to report an unknown profile where it was written).
struct NodeBuild {
  NodeSpec spec;
  std::vector<std::pair<std::string, std::string>> sources;
  Field gpu_profile;
};

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

NicKind read_nic_kind(const Field& f) {
  const std::string kind = read_choice(f, {"infiniband", "roce", "efa"});
  if (kind == "roce") return NicKind::roce;
  if (kind == "efa") return NicKind::efa;
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

const Keys kModelKeys = {
    "name",    "source",           "layers", "hidden", "ffn",         "heads",     "kv_heads",
    "vocab",   "tied_embeddings",  "mlp",    "norm",   "linear_bias", "positions", "max_positions",
    "experts", "experts_per_token"};
const Keys kModelDims = {"layers", "hidden", "ffn", "heads", "kv_heads", "vocab"};

void set_model_key(ModelSpec& m, const std::string& key, const Field& f) {
  if (key == "name") {
    m.name = read_string(f);
  } else if (key == "source") {
    m.source = read_string(f);
  } else if (key == "tied_embeddings") {
    m.tied_embeddings = read_bool(f);
  } else if (key == "mlp") {
    m.mlp = read_choice(f, {"swiglu", "gelu"}) == "gelu" ? Mlp::gelu : Mlp::swiglu;
  } else if (key == "norm") {
    m.norm =
        read_choice(f, {"rmsnorm", "layernorm"}) == "layernorm" ? Norm::layernorm : Norm::rmsnorm;
  } else if (key == "linear_bias") {
    m.linear_bias = read_bool(f);
  } else if (key == "positions") {
    const std::string positions = read_choice(f, {"rope", "learned", "alibi"});
    m.positions = positions == "learned" ? Positions::learned
                  : positions == "alibi" ? Positions::alibi
                                         : Positions::rope;
  } else if (key == "max_positions") {
    m.max_positions = read_int(f, 1);
  } else if (key == "experts") {
    m.experts = read_int(f, 1);
  } else if (key == "experts_per_token") {
    m.experts_per_token = read_int(f, 1);
  } else {
    static const std::map<std::string, int ModelSpec::*> dims = {
        {"layers", &ModelSpec::layers},     {"hidden", &ModelSpec::hidden},
        {"ffn", &ModelSpec::ffn},           {"heads", &ModelSpec::heads},
        {"kv_heads", &ModelSpec::kv_heads}, {"vocab", &ModelSpec::vocab}};
    m.*dims.at(key) = read_int(f, 1);
  }
}

void apply_model_keys(ModelSpec& m, const Field& map) {
  for (const Entry& e : entries(map)) {
    if (e.key != "preset" && e.key != "hf_config") {
      set_model_key(m, e.key, e.value);
    }
  }
}

// A problem reported at the first of its fields that `map` writes (each a path below it), or at
// the deepest map on the way to the first that it does.
[[noreturn]] void fail_at(const Field& map, const JobProblem& problem) {
  std::optional<Field> deepest;
  for (const std::string& path : problem.fields) {
    Field at = map;
    bool whole = true;
    for (std::size_t begin = 0; begin <= path.size();) {
      const std::size_t end = std::min(path.find('.', begin), path.size());
      const auto next = find(at, std::string_view(path).substr(begin, end - begin));
      if (!next || !at.node.IsMap()) {
        whole = false;
        break;
      }
      at = *next;
      begin = end + 1;
    }
    if (whole) fail(at, problem.problem, problem.hint);
    if (!deepest) deepest = at;
  }
  fail(deepest.value_or(map), problem.problem, problem.hint);
}

// The model's rules (workloads/model_spec.hpp), its keys looked up in `map`.
void check_model(const ModelSpec& m, const Field& map) {
  const std::vector<JobProblem> problems = model_problems(m);
  if (!problems.empty()) fail_at(map, problems.front());
}

// Calibrated GPU profile keys: {value, sigma, provenance}, value and sigma in the field's unit.
struct CalibratedKey {
  std::string_view key;
  Quantity quantity;
  Calibrated GpuProfile::*member;
};

const std::array<CalibratedKey, 10> kCalibratedKeys = {{
    {"dense_bf16", Quantity::flop_rate, &GpuProfile::dense_bf16_flops_per_s},
    {"hbm_capacity", Quantity::size, &GpuProfile::hbm_capacity_bytes},
    {"hbm_bandwidth", Quantity::bandwidth, &GpuProfile::hbm_bytes_per_s},
    {"gemm_efficiency", Quantity::fraction, &GpuProfile::gemm_efficiency},
    {"gemm_sustained", Quantity::flop_rate, &GpuProfile::gemm_sustained_flops_per_s},
    {"gemm_k_overhead", Quantity::count, &GpuProfile::gemm_k_overhead},
    {"attention_efficiency", Quantity::fraction, &GpuProfile::attention_efficiency},
    {"memory_efficiency", Quantity::fraction, &GpuProfile::memory_efficiency},
    {"kernel_launch", Quantity::duration, &GpuProfile::kernel_launch_s},
    {"comm_sms", Quantity::count, &GpuProfile::comm_sms},
}};

// The quantity of each FP8 GEMM entry, in kFp8Entries' order; under a profile's `fp8` map each
// is written without kFp8Entries' "fp8." prefix.
const std::array<Quantity, 5> kFp8Quantities = {Quantity::flop_rate, Quantity::fraction,
                                                Quantity::flop_rate, Quantity::count,
                                                Quantity::duration};
static_assert(kFp8Quantities.size() == kFp8Entries.size());
std::string fp8_key(std::size_t i) {
  return std::string(kFp8Entries[i].first).substr(std::string_view("fp8.").size());
}

Keys profile_keys() {
  Keys keys = {"name",       "description",     "sm_count",
               "gemm_tiles", "link_efficiency", "collective_library"};
  for (const CalibratedKey& entry : kCalibratedKeys) {
    keys.push_back(entry.key);
  }
  return keys;
}

const Keys kCalibratedFields = {"value", "sigma", "provenance"};
// Link kinds as topology names them (topology/topology.cpp, to_string(LinkKind)).
const Keys kLinkKinds = {"nvlink", "xgmi", "pcie", "infiniband", "roce", "efa"};
const Keys kProvenanceKinds = {"measured:", "published:", "extrapolated:", "assumed:"};

std::string read_provenance(const Field& f) {
  std::string text = read_string(f);
  for (std::string_view kind : kProvenanceKinds) {
    if (text.starts_with(kind)) {
      return text;
    }
  }
  fail(
      f, "expected a provenance starting with its kind, got " + describe(f.node),
      "start with one of " + join_list(kProvenanceKinds) + " then say where the number comes from");
}

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
  return read_quantity(f, q, Zero::allowed);
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

// ---- training and layout -------------------------------------------------------------------

const Keys kTrainingKeys = {
    "method",      "precision",         "optimizer", "seq_len",   "global_batch",
    "micro_batch", "grad_reduce_dtype", "tokens",    "attention", "dropout",
    "lora",        "cross_entropy"};

TrainingSpec parse_training(const Field& f) {
  expect_map(f, kTrainingKeys);
  const std::string method =
      find(f, "method") ? read_choice(*find(f, "method"), {"full", "lora", "qlora"}) : "full";
  const bool lora = method != "full";
  TrainingSpec t;
  if (auto precision = find(f, "precision")) {
    if (read_choice(*precision, {"bf16", "fp8"}) == "fp8") t.precision = Precision::fp8;
  }
  if (auto optimizer = find(f, "optimizer")) {
    t.optimizer = read_choice(*optimizer, {"adam", "adam8bit"}) == "adam8bit" ? Optimizer::adam8bit
                                                                              : Optimizer::adam;
  }
  if (lora) {
    t.lora = LoraSpec{};
    t.lora->quantized_base = method == "qlora";
    if (auto spec = find(f, "lora")) {
      expect_map(*spec, {"rank", "targets"});
      if (auto rank = find(*spec, "rank")) t.lora->rank = read_int(*rank, 1);
      if (auto targets = find(*spec, "targets")) {
        t.lora->targets.clear();
        for (const Field& target : read_list(*targets, 0, "module names")) {
          const std::string name = read_choice(target, {"q", "k", "v", "o", "gate", "up", "down"});
          if (std::find(t.lora->targets.begin(), t.lora->targets.end(), name) ==
              t.lora->targets.end()) {
            t.lora->targets.push_back(name);
          }
        }
      }
    }
  } else if (auto spec = find(f, "lora")) {
    fail(*spec, "lora settings without method: lora or qlora",
         "set method: lora (or qlora), or remove lora");
  }
  t.seq_len = read_int(require(f, "seq_len"), 1);
  t.global_batch = read_int(require(f, "global_batch"), 1);
  t.micro_batch = read_int(require(f, "micro_batch"), 1);
  if (auto dtype = find(f, "grad_reduce_dtype")) {
    t.grad_reduce_bytes = read_choice(*dtype, {"bf16", "fp32"}) == "fp32" ? 4 : 2;
  }
  if (auto attention = find(f, "attention")) {
    t.attention = read_choice(*attention, {"flash", "eager"}) == "eager" ? Attention::eager
                                                                         : Attention::flash;
  }
  if (auto cross_entropy = find(f, "cross_entropy")) {
    const std::string choice = read_choice(*cross_entropy, {"unfused", "fused", "in_place"});
    t.cross_entropy = choice == "fused"      ? CrossEntropy::fused
                      : choice == "in_place" ? CrossEntropy::in_place
                                             : CrossEntropy::unfused;
  }
  if (auto dropout = find(f, "dropout")) {
    t.dropout = read_number(*dropout);
    if (t.dropout < 0 || t.dropout >= 1) {
      fail(*dropout, "expected a probability in [0, 1), got " + describe(dropout->node),
           "dropout is the probability of zeroing an activation; 0 turns it off");
    }
  }
  // Only a run needs the token budget; a step simulation checks it and moves on.
  if (auto tokens = find(f, "tokens")) {
    if (read_number(*tokens) <= 0) {
      fail(*tokens, "expected a positive number of tokens");
    }
  }
  return t;
}

// A value of one layout dimension, read as its kind says.
DimensionValue read_dimension(const Field& f, const LayoutDimension& dimension) {
  switch (dimension.kind) {
    case DimensionKind::count:
      if (dimension.automatic && f.node.IsScalar() && f.node.Scalar() == "auto") return 0;
      return read_int(f, 1);
    case DimensionKind::choice:
      for (const LayoutDimension::Misnamed& misnamed : dimension.misnamed) {
        if (f.node.IsScalar() && f.node.Scalar() == misnamed.value) {
          fail(f, std::string(misnamed.problem), std::string(misnamed.hint));
        }
      }
      return read_choice(f, dimension.choices);
    case DimensionKind::flag: return read_bool(f);
    case DimensionKind::size: return read_quantity(f, Quantity::size);
  }
  return 0;
}

// `layout:`, every key a dimension of workloads/layout/dimensions.hpp. dp: auto is left 0, for
// parse_variant to resolve once the cluster is known.
ParallelPlan parse_layout(const Field& f) {
  Keys keys;
  for (const LayoutDimension& dimension : layout_dimensions()) keys.push_back(dimension.key);
  expect_map(f, keys);
  ParallelPlan plan;
  for (const LayoutDimension& dimension : layout_dimensions()) {
    const std::optional<Field> value =
        dimension.required ? require(f, dimension.key) : find(f, dimension.key);
    if (value) dimension.set(plan, read_dimension(*value, dimension));
  }
  return plan;
}

const Keys kFabricKeys = {"kind",  "link",           "oversubscription", "leaf_ports",
                          "tiers", "switch_latency", "placement",        "routing"};

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
    if (fabric.oversubscription < 1) {
      fail(*ratio, "expected a ratio >= 1, got " + describe(ratio->node),
           "oversubscription is leaf downlink : uplink bandwidth; 1 is non-blocking");
    }
  }
  if (auto ports = find(*f, "leaf_ports")) {
    fabric.leaf_ports = read_int(*ports, 2);
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

// ---- merging compare entries ---------------------------------------------------------------

std::optional<YAML::Node> child_node(const YAML::Node& map, const std::string& key) {
  for (const auto& kv : map) {
    if (kv.first.IsScalar() && kv.first.Scalar() == key) {
      return kv.second;
    }
  }
  return std::nullopt;
}

// Deep-merges `over` into `base` in place: maps merge key by key, anything else replaces. The
// nodes of `over` are shared, not copied, so they keep their marks; every replaced path is
// recorded so that errors can name the compare entry.
void merge_into(YAML::Node base, const YAML::Node& over, const std::string& path,
                std::set<std::string>& replaced, std::string_view skip = {}) {
  for (const auto& kv : over) {
    const std::string key = kv.first.Scalar();
    if (key == skip) {
      continue;
    }
    const std::string child_path = join(path, key);
    std::optional<YAML::Node> existing = child_node(base, key);
    if (existing && existing->IsMap() && kv.second.IsMap()) {
      merge_into(*existing, kv.second, child_path, replaced);
      continue;
    }
    replaced.insert(child_path);
    if (existing) {
      *existing = kv.second;  // rebinds the value inside `base`
    } else {
      base.force_insert(kv.first, kv.second);
    }
  }
}

// ---- the loader ----------------------------------------------------------------------------

const Keys kTopKeys = {"name",   "description", "seed", "label",   "model",   "training",
                       "layout", "cluster",     "run",  "pricing", "compare", "sweep"};
const Keys kSweepKeys = {"grid", "zip", "batch", "layout"};
// A sweep of more points than this is a mistake, not a study: refused before anything runs.
constexpr std::size_t kMaxSweepPoints = 10000;
// Clusters above this many GPUs are refused: a step's topology, flows and programs take about
// kBytesPerSimulatedGpu of memory for each GPU (measured: 507 MB peak for six variants of a
// 16,384-GPU run, two replayed at a time), so 2^20 GPUs need about 17 GB.
constexpr double kMaxGpus = 1048576;
constexpr double kBytesPerSimulatedGpu = 16e3;
const Keys kCompareKeys = {"name", "model", "training", "layout", "cluster", "run", "pricing"};
const Keys kClusterKeys = {"node", "nodes", "gpu", "fabric", "storage"};
const Keys kRunKeys = {"interruptions", "checkpoint",     "checkpoint_write", "detection",
                       "restart",       "node_repair",    "hot_spares",       "when_short",
                       "degraded",      "evict_degraded", "step_jitter",      "replications",
                       "spot",          "persist"};
const Keys kDegradationKeys = {"cause", "slows", "fraction", "per_gpu_day", "source"};
const Keys kSpotKeys = {"preemptions_per_node_hour", "trace", "source", "notice",
                        "capacity_return"};
const Keys kSpotTraceKeys = {"source", "hours"};
const Keys kInterruptionPresetKeys = {"name", "description", "source", "gpus", "days", "causes"};
// A cause takes one node out of service unless it says otherwise (nodes_out: 0, or a switch's).
const Keys kCauseCountKeys = {"cause", "count", "nodes_out"};
const Keys kCauseCountRequired = {"cause", "count"};
// A listed cause's rate: per GPU-day, or a component's mean time between failures and the GPUs
// one component serves (1 for a GPU, 8 for a DGX node, 256 for a leaf switch of 32 of them).
const Keys kCauseRateKeys = {"cause",  "per_gpu_day", "mtbf", "gpus_per_component",
                             "source", "nodes_out"};
const Keys kCauseRateRequired = {"cause", "source"};
const Keys kStorageKeys = {"write", "read"};
const Keys kPricingKeys = {"gpu_hour", "spot_gpu_hour"};
// More replications than this is a mistake, not a study: refused before anything runs.
constexpr int kMaxReplications = 1000000;

// Owns the presets read so far: fields point into their documents, so a mistake found late (an
// unknown GPU profile named in a node preset) can still name the preset file and line.
class Loader {
 public:
  explicit Loader(DataPaths data) : data_(std::move(data)) {}

  Scenario load(const fs::path& file);
  PresetCatalog catalog();
  StepInputs cluster(const std::string& node, int nodes, const std::string& gpu_profile);
  GpuProfile profile(const std::string& name);

 private:
  const Preset& preset(const Field& name, const fs::path& dir, std::string_view what);
  StepInputs parse_variant(const Field& root);
  ModelSpec parse_model(const Field& f);
  ModelSpec model_preset(const Field& name);
  ModelSpec hf_model(const Field& path);
  const Preset& file_named_by(const Field& path_field, const std::string& what,
                              const std::string& hint);
  void parse_cluster(const Field& f, StepInputs& in);
  NodeBuild parse_node(const Field& f);
  NodeBuild node_preset(const Field& name);
  GpuProfile gpu_profile(const Field& name);
  CollectiveCosts collective_library(const Field& name);
  void parse_compare(const Field& list, const fs::path& file, Scenario& scenario);
  // The sweep's points of one variant: the base (entry -1) or compare entry `entry`, named
  // after it when the scenario compares (`copies` variants, each swept alike).
  void parse_sweep(const Field& sweep, const fs::path& file, const Variant& base, int entry,
                   std::size_t copies, Scenario& scenario);
  Variant parse_full_variant(std::string name, const Field& root);
  std::optional<RunSpec> parse_run(const Field& root);
  std::vector<InterruptionCause> interruption_preset(const Field& name);
  std::vector<double> preemption_trace(const Field& path, std::string& source);
  std::string interruption_preset_description(const Field& name);

  DataPaths data_;
  std::map<fs::path, std::unique_ptr<Preset>> presets_;
};

const Preset& Loader::preset(const Field& name_field, const fs::path& dir, std::string_view what) {
  const std::string name = read_string(name_field);
  const fs::path path = dir / (name + ".yaml");
  if (!is_preset_name(name) || !fs::is_regular_file(path)) {
    const std::vector<std::string> names = available_presets(dir);
    const Keys candidates(names.begin(), names.end());
    const std::string hint =
        names.empty() ? "no presets found in " + dir.string()
                      : did_you_mean(name, candidates) + "available: " + join_list(candidates);
    fail(name_field, "unknown " + std::string(what) + " " + in_quotes(name), hint);
  }
  auto& slot = presets_[path];
  if (!slot) {
    slot = std::make_unique<Preset>();
    slot->doc.file = path.string();
    slot->root = parse_yaml_file(path, slot->doc.file, std::string(what) + " file");
  }
  return *slot;
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

ModelSpec Loader::model_preset(const Field& name) {
  const Preset& p = preset(name, data_.root / "workloads" / "models", "model");
  const Field root{p.root, &p.doc, ""};
  expect_map(root, kModelKeys);
  require_keys(root, {"name", "source"});
  require_keys(root, kModelDims);
  ModelSpec m;
  apply_model_keys(m, root);
  check_model(m, root);
  return m;
}

// The YAML (or JSON) file a scenario names at `path_field`, relative to the scenario file,
// parsed once: `what` it is for the errors, `hint` where it is missing.
const Preset& Loader::file_named_by(const Field& path_field, const std::string& what,
                                    const std::string& hint) {
  fs::path path = read_string(path_field);
  if (path.is_relative()) path = fs::path(path_field.doc->file).parent_path() / path;
  if (!fs::is_regular_file(path))
    fail(path_field, "no " + what + " at " + in_quotes(path.string()), hint);
  auto& slot = presets_[path];
  if (!slot) {
    slot = std::make_unique<Preset>();
    slot->doc.file = path.string();
    slot->root = parse_yaml_file(path, slot->doc.file, what);
  }
  return *slot;
}

// A Hugging Face config.json as users have it (JSON is YAML, so its errors have lines and
// columns too), for the decoder families the op graph models: Llama, Mistral and Mixtral.
ModelSpec Loader::hf_model(const Field& path_field) {
  const Preset& config = file_named_by(path_field, "Hugging Face config",
                                       "give the path of the model's config.json, relative to "
                                       "the scenario file");
  const Field root{config.root, &config.doc, ""};
  if (!root.node.IsMap()) fail(root, "expected a JSON object, got " + describe(root.node));
  const Field type = require(root, "model_type");
  const std::string model_type = read_string(type);
  if (model_type != "llama" && model_type != "mistral" && model_type != "mixtral") {
    fail(type, "model_type " + in_quotes(model_type) + " is not modelled yet",
         "fleetsim models Llama-style decoders (model_type llama, mistral or mixtral)");
  }
  ModelSpec m;
  m.layers = read_int(require(root, "num_hidden_layers"), 1);
  m.hidden = read_int(require(root, "hidden_size"), 1);
  m.ffn = read_int(require(root, "intermediate_size"), 1);
  m.heads = read_int(require(root, "num_attention_heads"), 1);
  const auto kv_heads = find(root, "num_key_value_heads");
  m.kv_heads = kv_heads ? read_int(*kv_heads, 1) : m.heads;
  m.vocab = read_int(require(root, "vocab_size"), 1);
  if (const auto tied = find(root, "tie_word_embeddings")) m.tied_embeddings = read_bool(*tied);
  if (model_type == "mixtral") {
    m.experts = read_int(require(root, "num_local_experts"), 1);
    const Field per_token = require(root, "num_experts_per_tok");
    m.experts_per_token = read_int(per_token, 1);
    if (m.experts_per_token > m.experts) {
      fail(per_token, "num_experts_per_tok is more than num_local_experts",
           "each token goes to at most every expert");
    }
    if (const auto jitter = find(root, "router_jitter_noise"); jitter && jitter->node.IsScalar() &&
                                                               jitter->node.Scalar() != "null" &&
                                                               read_number(*jitter) != 0) {
      fail(*jitter, "router jitter noise is not modelled",
           "fleetsim routes each token by its scores alone; set it to 0.0");
    }
  }
  // What the op graph does not model is refused, not ignored.
  const auto is_set = [](const Field& f) {
    return !(f.node.IsNull() ||
             (f.node.IsScalar() && (f.node.Scalar() == "null" || f.node.Scalar() == "false")));
  };
  if (const auto window = find(root, "sliding_window"); window && is_set(*window)) {
    fail(*window, "sliding-window attention is not modelled",
         "fleetsim models full causal attention; set it to null if the model attends fully");
  }
  // Biases are modelled on every projection or on none.
  const auto attention_bias = find(root, "attention_bias");
  const auto mlp_bias = find(root, "mlp_bias");
  const bool attention_biased = attention_bias && is_set(*attention_bias);
  if (attention_biased != (mlp_bias && is_set(*mlp_bias))) {
    fail(attention_biased ? *attention_bias : *mlp_bias,
         "biases on only the attention or only the MLP projections are not modelled",
         "fleetsim's layers have biases on all projections (linear_bias) or on none");
  }
  m.linear_bias = attention_biased;
  if (const auto act = find(root, "hidden_act"); act && read_string(*act) != "silu") {
    fail(*act, "hidden_act " + in_quotes(read_string(*act)) + " is not modelled",
         "the MLP is SwiGLU (silu)");
  }
  if (const auto head_dim = find(root, "head_dim");
      head_dim && head_dim->node.IsScalar() && head_dim->node.Scalar() != "null") {
    if (m.hidden % m.heads != 0 || read_int(*head_dim, 1) != m.hidden / m.heads) {
      fail(*head_dim, "a head_dim other than hidden_size / num_attention_heads is not modelled",
           "the op graph derives the head size from hidden_size and num_attention_heads");
    }
  }
  const fs::path path = config.doc.file;
  m.name = path.parent_path().filename().string();
  if (m.name.empty()) m.name = "hf-model";
  m.source = "Hugging Face config " + path.string();
  check_model(m, root);
  return m;
}

ModelSpec Loader::parse_model(const Field& f) {
  if (f.node.IsScalar()) {
    return model_preset(f);
  }
  Keys allowed = kModelKeys;
  allowed.push_back("preset");
  allowed.push_back("hf_config");
  expect_map(f, allowed);
  const auto preset = find(f, "preset");
  const auto hf_config = find(f, "hf_config");
  if (preset && hf_config) {
    fail(*hf_config,
         "a model takes its dimensions from a preset or a Hugging Face config, not both",
         "remove one of preset and hf_config");
  }
  ModelSpec m;
  if (preset) {
    m = model_preset(*preset);
  } else if (hf_config) {
    m = hf_model(*hf_config);
  } else {
    require_keys(f, kModelDims);
    m.name = "custom";
  }
  apply_model_keys(m, f);
  check_model(m, f);
  return m;
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

GpuProfile Loader::gpu_profile(const Field& name) {
  const Preset& p = preset(name, data_.root / "calibration" / "profiles", "GPU profile");
  const Field root{p.root, &p.doc, ""};
  Keys allowed = profile_keys();
  const Keys required = allowed;
  allowed.push_back("nvls_efficiency");     // only GPUs behind an NVLS-capable NVSwitch have it
  allowed.push_back("compute_capability");  // NVIDIA GPUs only
  allowed.push_back("p2p_efficiency");      // where a send/recv benchmark calibrates it
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
  for (const CalibratedKey& key : kCalibratedKeys) {
    g.*key.member = read_calibrated(require(root, key.key), key.quantity);
  }
  const Field links = require(root, "link_efficiency");
  expect_map(links, kLinkKinds);
  for (const Entry& entry : entries(links)) {
    g.link_efficiency[entry.key] = read_calibrated(entry.value, Quantity::fraction);
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
      rates.*kFp8Entries[i].second = read_calibrated(require(*fp8, names[i]), kFp8Quantities[i]);
    }
    g.fp8 = rates;
  }
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
  if (auto gpu = find(f, "gpu")) {
    in.gpu = gpu_profile(*gpu);
    in.node.gpu_profile = in.gpu.name;
  } else {
    in.gpu = gpu_profile(node.gpu_profile);
  }
  in.fabric = parse_fabric(find(f, "fabric"));
}

// A GELU MLP has no gate projection: LoRA's default targets leave it out, and a gate a scenario
// lists is reported where it is listed.
void fit_lora_targets(const Field& training, StepInputs& in) {
  auto& targets = in.training.lora->targets;
  const auto gate = std::find(targets.begin(), targets.end(), "gate");
  if (in.model.mlp != Mlp::gelu || gate == targets.end()) return;
  const auto spec = find(training, "lora");
  if (const auto listed = spec ? find(*spec, "targets") : std::nullopt) {
    for (const Field& target : read_list(*listed, 0, "module names")) {
      if (read_string(target) == "gate") {
        fail(target, "a GELU MLP has no gate projection to adapt",
             "target q, k, v, o, up and down");
      }
    }
  }
  targets.erase(gate);
}

StepInputs Loader::parse_variant(const Field& root) {
  StepInputs in;
  in.model = parse_model(require(root, "model"));
  in.training = parse_training(require(root, "training"));
  if (in.training.lora) fit_lora_targets(require(root, "training"), in);
  if (const auto problems = recipe_problems(in.model, in.training); !problems.empty()) {
    fail_at(root, problems.front());
  }
  parse_cluster(require(root, "cluster"), in);
  in.plan = parse_layout(require(root, "layout"));
  // dp: auto is what the GPUs leave (0 where they leave no whole number: a rule says so).
  in.plan.dp = data_parallel_size_for(in.plan, in.nodes * in.node.gpus);
  // The job rules (workloads/layout/rules.hpp), each problem where the scenario can change it.
  if (const auto problem = first_job_problem(job_subject_on_cluster(in), in.plan)) {
    fail_at(root, *problem);
  }
  return in;
}

// Whether a variant could fit in some layout: its weights alone, sharded over every GPU, must
// fit a GPU. Throws at the base's model when no variant could.
void check_some_variant_can_fit(const Field& model, const Scenario& scenario) {
  const auto weights_per_gpu = [](const StepInputs& in) {
    return model_weight_bytes(in.model, in.training) /
           (static_cast<double>(in.nodes) * in.node.gpus);
  };
  for (const Variant& variant : scenario.variants) {
    if (weights_per_gpu(variant.inputs) <= variant.inputs.gpu.hbm_capacity_bytes.value) return;
  }
  const StepInputs& in = scenario.variants.front().inputs;
  const double gpus = static_cast<double>(in.nodes) * in.node.gpus;
  fail(model,
       "model " + in.model.name + " cannot fit on " + rounded(gpus, 0) +
           " GPUs in any layout: its weights alone, " +
           rounded(model_weight_bytes(in.model, in.training) / 1e9, 0) + " GB, need " +
           rounded(weights_per_gpu(in) / 1e9, 1) + " GB a GPU sharded over all of them; a " +
           in.gpu.name + " has " + rounded(in.gpu.hbm_capacity_bytes.value / 1e9, 1) + " GB" +
           (scenario.variants.size() > 1 ? ", and no compare entry fits either" : ""),
       "use more GPUs (cluster.nodes), GPUs with more memory, or a smaller model");
}

void Loader::parse_compare(const Field& list, const fs::path& file, Scenario& scenario) {
  if (!list.node.IsSequence()) {
    fail(list, "expected a list of variants, got " + describe(list.node),
         "write each variant as `- name: ...` followed by the keys it changes");
  }
  for (std::size_t i = 0; i < list.node.size(); ++i) {
    const Field entry{list.node[i], list.doc, list.path + "[" + std::to_string(i) + "]"};
    expect_map(entry, kCompareKeys);
    const Field name_field = require(entry, "name");
    const std::string name = read_string(name_field);
    for (const Variant& v : scenario.variants) {
      if (v.name == name) {
        fail(name_field, "variant name " + in_quotes(name) + " is already taken",
             "the base variant is named by label (default: its node preset); give every "
             "compare entry its own name");
      }
    }
    // YAML::Clone drops marks, so each variant merges into a fresh parse of the file instead.
    Doc doc{list.doc->file, static_cast<int>(i), name, {}};
    const YAML::Node fresh = parse_yaml_file(file, doc.file, "scenario file");
    const YAML::Node fresh_entry = (*child_node(fresh, "compare"))[i];
    merge_into(fresh, fresh_entry, "", doc.overridden, "name");
    scenario.variants.push_back(parse_full_variant(name, Field{fresh, &doc, ""}));
  }
}

// The sweep: every combination of the grid's lists (in the order written, the last varying
// fastest) times every row of the zip's lists (of one length, varied together). Each point is
// the variant (the base scenario, or it with a compare entry merged in) with those values in
// place of the ones it sets, which keep their marks: a value that does not fit its key is
// reported at its place in the sweep. A compare entry may not set a swept field.
void Loader::parse_sweep(const Field& sweep, const fs::path& file, const Variant& variant,
                         int entry, std::size_t copies, Scenario& scenario) {
  const StepInputs& base = variant.inputs;
  const bool compared = copies > 1;
  expect_map(sweep, kSweepKeys);
  const auto batch = find(sweep, "batch");
  const bool per_gpu = batch && read_choice(*batch, {"fixed", "per_gpu"}) == "per_gpu";
  if (const auto layout = find(sweep, "layout")) {
    scenario.replanned = read_choice(*layout, {"fixed", "plan"}) == "plan";
  }
  struct Axis {
    std::string path;
    std::string group;         // "grid" or "zip"
    std::size_t position = 0;  // in its group's map (a repeated key would shadow by name)
    std::size_t values = 0;
  };
  // The sections a point is made of; the rest (name, seed, ...) is the scenario's alone.
  const Keys sections = {"model", "training", "layout", "cluster", "run", "pricing"};
  std::vector<Axis> axes;
  std::size_t zip_rows = 0;
  for (const std::string& group : {std::string("grid"), std::string("zip")}) {
    const auto lists = find(sweep, group);
    if (!lists) continue;
    if (!lists->node.IsMap() || lists->node.size() == 0) {
      fail(*lists, "expected a map of field paths to lists of values, got " + describe(lists->node),
           "e.g. " + group + ": {cluster.nodes: [1, 2, 4]}");
    }
    std::size_t position = 0;
    for (const auto& kv : lists->node) {
      const Field key{kv.first, sweep.doc, lists->path};
      const std::string path = scalar(key, "a field path such as cluster.nodes");
      const std::string section = path.substr(0, path.find('.'));
      if (std::find(sections.begin(), sections.end(), section) == sections.end()) {
        fail(key, in_quotes(path) + " is not a field a sweep can vary",
             "sweep fields of " + join_list(sections) + ", e.g. cluster.nodes");
      }
      for (const Axis& other : axes) {
        const auto covers = [](const std::string& outer, const std::string& inner) {
          return inner == outer || inner.starts_with(outer + ".");
        };
        if (covers(other.path, path) || covers(path, other.path)) {
          fail(key, in_quotes(path) + " overlaps " + in_quotes(other.path) + ", swept already",
               "sweep each field once");
        }
      }
      const Field values{kv.second, sweep.doc, join(lists->path, path)};
      const std::vector<Field> elements = read_list(values, 0, "values");
      for (const Field& element : elements) {
        if (!element.node.IsScalar()) {
          fail(element,
               "a swept value is one value (a number, a name, a size), got " +
                   describe(element.node),
               "sweep the fields inside it one by one, e.g. cluster.fabric.link");
        }
      }
      const std::size_t count = elements.size();
      if (group == "zip") {
        if (zip_rows != 0 && count != zip_rows) {
          fail(values,
               "zipped lists vary together and need one length: this has " + std::to_string(count) +
                   " values, the one before " + std::to_string(zip_rows),
               "give every list under zip the same number of values");
        }
        zip_rows = count;
      }
      axes.push_back({path, group, position++, count});
    }
  }
  if (axes.empty())
    fail(sweep, "a sweep needs a grid or a zip", "grid: {cluster.nodes: [1, 2, 4]}");
  std::size_t points = zip_rows == 0 ? 1 : zip_rows;
  for (const Axis& axis : axes) {
    if (axis.group == "grid") points *= axis.values;
    if (points * copies > kMaxSweepPoints) {
      fail(sweep,
           "the sweep has more than " + std::to_string(kMaxSweepPoints) + " points" +
               (compared ? " over its " + std::to_string(copies) + " compared variants" : ""),
           "sweep fewer values, or split the study into several scenarios");
    }
  }
  if (per_gpu) {
    for (const Axis& axis : axes) {
      if (axis.path == "training" || axis.path == "training.global_batch") {
        fail(*batch, "batch: per_gpu sets training.global_batch, which the sweep also varies",
             "use batch: fixed with the swept batch, or stop sweeping it");
      }
    }
  }
  // Each point: which value of each axis (grid axes odometer-style, zip axes on one row).
  for (std::size_t point = 0; point < points; ++point) {
    Doc doc{file.string(), entry, entry >= 0 ? variant.name : std::string(), {}};
    const YAML::Node fresh = parse_yaml_file(file, doc.file, "scenario file");
    const YAML::Node fresh_sweep = *child_node(fresh, "sweep");
    if (entry >= 0) {
      const YAML::Node fresh_entry =
          (*child_node(fresh, "compare"))[static_cast<std::size_t>(entry)];
      merge_into(fresh, fresh_entry, "", doc.overridden, "name");
      for (const Axis& axis : axes) {
        const bool inside =
            std::any_of(doc.overridden.begin(), doc.overridden.end(),
                        [&](const std::string& path) { return path.starts_with(axis.path + "."); });
        if (replaced_by_entry(doc, axis.path) || inside) {
          const YAML::Node group_map = *child_node(fresh_sweep, axis.group);
          std::size_t position = 0;
          for (const auto& kv : group_map) {
            if (position++ != axis.position) continue;
            fail(Field{kv.first, sweep.doc, "sweep." + axis.group},
                 "compare entry " + in_quotes(variant.name) + " sets " + in_quotes(axis.path) +
                     ", which the sweep varies",
                 "vary a field in the sweep or in the compare entries, not both");
          }
        }
      }
    }
    std::size_t rest = zip_rows == 0 ? point : point / zip_rows;
    const std::size_t zip_row = zip_rows == 0 ? 0 : point % zip_rows;
    std::vector<std::size_t> index(axes.size());
    for (std::size_t a = axes.size(); a-- > 0;) {
      if (axes[a].group == "grid") {
        index[a] = rest % axes[a].values;
        rest /= axes[a].values;
      } else {
        index[a] = zip_row;
      }
    }
    std::string name;
    std::vector<std::pair<std::string, std::string>> swept;
    for (std::size_t a = 0; a < axes.size(); ++a) {
      // The axis's list by its position in its group (a repeated key would shadow by name).
      YAML::Node list;
      std::size_t position = 0;
      const YAML::Node group_map = *child_node(fresh_sweep, axes[a].group);
      for (const auto& kv : group_map) {
        if (position++ == axes[a].position) list.reset(kv.second);
      }
      const YAML::Node value = list[index[a]];
      // The path must be a field the scenario sets: its value is the one replaced. (Handles are
      // rebound with reset(): assigning to one that refers into a tree writes into the tree.)
      YAML::Node parent;
      parent.reset(fresh);
      std::string walked;
      std::string rest_path = axes[a].path;
      while (true) {
        const auto dot = rest_path.find('.');
        const std::string key = rest_path.substr(0, dot);
        walked = join(walked, key);
        std::optional<YAML::Node> found =
            parent.IsMap() ? child_node(parent, key) : std::optional<YAML::Node>();
        if (!found) {
          fail(Field{value, &doc, "sweep." + axes[a].group + "." + axes[a].path},
               walked + " is not a field the scenario sets",
               "a sweep varies fields the scenario sets: write " + walked +
                   " in the scenario (the scenario must be valid as written; the sweep replaces "
                   "the value)");
        }
        if (dot == std::string::npos) {
          *found = value;  // rebinds the value inside `fresh`, keeping the sweep value's mark
          break;
        }
        parent.reset(*found);
        rest_path = rest_path.substr(dot + 1);
      }
      const std::string shown = value.IsScalar() ? value.Scalar() : std::string("...");
      name += (name.empty() ? "" : ", ") + axes[a].path + "=" + shown;
      swept.emplace_back(axes[a].path, shown);
    }
    if (compared) {
      name = variant.name + ": " + name;
      swept.insert(swept.begin(), {"compare", variant.name});
    }
    doc.variant = name;
    // Per GPU: each replica keeps the base's share of the batch, so the batch grows with the
    // data-parallel replicas the point's GPUs make. A point whose replicas do not come out
    // whole keeps the batch, and its layout's own error names the problem.
    if (per_gpu) {
      const Field root{fresh, &doc, ""};
      StepInputs point;
      parse_cluster(require(root, "cluster"), point);
      const ParallelPlan plan = parse_layout(require(root, "layout"));
      const int dp = data_parallel_size_for(plan, point.nodes * point.node.gpus);
      const long long global_batch =
          static_cast<long long>(base.training.global_batch) / base.plan.dp * dp;
      const Field training = require(root, "training");
      const int micro_batch = read_int(require(training, "micro_batch"), 1);
      if (dp > 0 && global_batch % (static_cast<long long>(micro_batch) * dp) != 0) {
        fail(*batch,
             "at sweep point " + in_quotes(name) + ": per GPU the batch would be " +
                 std::to_string(global_batch) +
                 " sequences, not a multiple of micro_batch x dp = " +
                 std::to_string(micro_batch * dp),
             "keep the base's share of the batch a multiple of every point's micro_batch");
      }
      if (dp > 0) {
        YAML::Node slot = require(training, "global_batch").node;
        slot = YAML::Node(global_batch);  // rebinds the value inside `fresh`
      }
    }
    scenario.variants.push_back(parse_full_variant(name, Field{fresh, &doc, ""}));
    scenario.variants.back().swept = std::move(swept);
  }
}

Variant Loader::parse_full_variant(std::string name, const Field& root) {
  Variant variant{std::move(name), parse_variant(root), std::nullopt};
  variant.run = parse_run(root);
  // In-memory checkpoints need a peer node, and capacity that is not taken back.
  if (variant.run && variant.run->write == CheckpointWrite::in_memory &&
      (variant.inputs.nodes < 2 || variant.run->spot)) {
    fail(require(require(root, "run"), "checkpoint_write"),
         variant.run->spot ? "in-memory checkpoints do not survive spot capacity taken back"
                           : "in-memory checkpoints go to a peer node, and the job has one node",
         "use checkpoint_write: async");
  }
  return variant;
}

// Interruptions per GPU-day of a listed cause: given, or one component's failures per day
// (24 h over its MTBF) over the GPUs it serves.
double cause_rate(const Field& cause) {
  const auto rate = find(cause, "per_gpu_day");
  const auto mtbf = find(cause, "mtbf");
  if (rate.has_value() == mtbf.has_value()) {
    fail(cause, "a cause needs per_gpu_day or mtbf, one of them",
         "per_gpu_day: 0.0005, or mtbf: 50000h with gpus_per_component: 8 (a node's)");
  }
  const auto gpus = find(cause, "gpus_per_component");
  if (rate) {
    if (gpus) fail(*gpus, "gpus_per_component goes with an mtbf", "remove it, or give mtbf");
    return read_non_negative(*rate);
  }
  const double mtbf_s = read_quantity(*mtbf, Quantity::duration);
  if (!gpus) {
    fail(cause, "an MTBF needs gpus_per_component: the GPUs one component serves",
         "1 for a GPU, 8 for an 8-GPU node, 256 for a switch under 32 such nodes");
  }
  return 86400 / mtbf_s / read_positive(*gpus);
}

int nodes_out(const Field& cause) {
  const auto field = find(cause, "nodes_out");
  return field ? read_int(*field, 0) : 1;
}

// Interruption rates from a published run's counts by cause: count / (GPUs x days) per GPU-day.
std::vector<InterruptionCause> Loader::interruption_preset(const Field& name) {
  const Preset& p =
      preset(name, data_.root / "calibration" / "interruptions", "interruption preset");
  const Field root{p.root, &p.doc, ""};
  expect_map(root, kInterruptionPresetKeys);
  require_keys(root, kInterruptionPresetKeys);
  const Field name_field = require(root, "name");
  if (read_string(name_field) != read_string(name)) {
    fail(name_field,
         "the preset is named " + in_quotes(read_string(name_field)) + " in a file named " +
             in_quotes(read_string(name) + ".yaml"),
         "make the name match the file name");
  }
  const std::string source = read_provenance(require(root, "source"));
  const double gpus = read_positive(require(root, "gpus"));
  const double days = read_positive(require(root, "days"));
  std::vector<InterruptionCause> causes;
  for (const Field& entry : read_list(require(root, "causes"), 0, "causes")) {
    expect_map(entry, kCauseCountKeys);
    require_keys(entry, kCauseCountRequired);
    const double count = read_non_negative(require(entry, "count"));
    causes.push_back({read_string(require(entry, "cause")), count / (gpus * days), source,
                      nodes_out(entry), std::sqrt(count) / (gpus * days)});
  }
  return causes;
}

// A trace of spot preemptions: the hours from the job's start at which one of its nodes was
// preempted, ascending, with the trace's source. Relative to the scenario file.
std::vector<double> Loader::preemption_trace(const Field& path_field, std::string& source) {
  const Preset& trace = file_named_by(path_field, "preemption trace",
                                      "give the path of a YAML file {source, hours: [...]}, "
                                      "relative to the scenario file");
  const Field root{trace.root, &trace.doc, ""};
  expect_map(root, kSpotTraceKeys);
  require_keys(root, kSpotTraceKeys);
  source = read_provenance(require(root, "source"));
  std::vector<double> seconds;
  for (const Field& entry : read_list(require(root, "hours"), 0, "preemption hours")) {
    const double hours = read_non_negative(entry);
    if (!seconds.empty() && hours * 3600 < seconds.back()) {
      fail(entry,
           "preemption times must not go back: " + describe(entry.node) + " after " +
               std::to_string(seconds.back() / 3600) + " h",
           "list the hours of each preemption from the job's start, ascending");
    }
    seconds.push_back(hours * 3600);
  }
  return seconds;
}

// The preset's description, once its causes have been read and checked.
std::string Loader::interruption_preset_description(const Field& name) {
  interruption_preset(name);
  const Preset& p =
      preset(name, data_.root / "calibration" / "interruptions", "interruption preset");
  return read_string(require(Field{p.root, &p.doc, ""}, "description"));
}

// The run: block with what it needs from the rest of the file: the tokens to train, the
// checkpoint storage and, if given, the price.
std::optional<RunSpec> Loader::parse_run(const Field& root) {
  RunSpec run;
  // Storage and pricing are checked wherever they appear; only a run uses them.
  const auto storage = find(require(root, "cluster"), "storage");
  if (storage) {
    expect_map(*storage, kStorageKeys);
    require_keys(*storage, kStorageKeys);
    run.storage_write_bytes_per_s = read_quantity(require(*storage, "write"), Quantity::bandwidth);
    run.storage_read_bytes_per_s = read_quantity(require(*storage, "read"), Quantity::bandwidth);
  }
  if (const auto pricing = find(root, "pricing")) {
    expect_map(*pricing, kPricingKeys);
    run.usd_per_gpu_hour =
        read_quantity(require(*pricing, "gpu_hour"), Quantity::hourly_price, Zero::allowed);
    run.priced = true;
    if (const auto spot_price = find(*pricing, "spot_gpu_hour")) {
      run.spot_usd_per_gpu_hour = read_quantity(*spot_price, Quantity::hourly_price, Zero::allowed);
      run.spot_priced = true;
    }
  }
  const auto block = find(root, "run");
  if (!block) return std::nullopt;
  expect_map(*block, kRunKeys);
  const Field training = require(root, "training");
  const auto tokens = find(training, "tokens");
  if (!tokens) {
    fail(training, "a run needs training.tokens, the tokens it trains",
         "add tokens: under training, e.g. tokens: 15e12");
  }
  run.tokens = read_positive(*tokens);
  if (!storage) {
    fail(require(root, "cluster"), "a run writes checkpoints: it needs cluster.storage",
         "add storage: {write: 200GB/s, read: 400GB/s} under cluster (the storage's aggregate "
         "rates)");
  }
  const auto listed = find(*block, "interruptions");
  if (!listed) {
    fail(*block, "a run needs its interruptions",
         "interruptions: llama3-405b (a preset under calibration/interruptions/), or a list of "
         "{cause, per_gpu_day, source}");
  }
  const Field interruptions = *listed;
  if (interruptions.node.IsScalar()) {
    run.interruptions = read_string(interruptions);
    run.causes = interruption_preset(interruptions);
  } else {
    run.interruptions = "listed";
    for (const Field& entry : read_list(interruptions, 0, "causes")) {
      expect_map(entry, kCauseRateKeys);
      require_keys(entry, kCauseRateRequired);
      run.causes.push_back({read_string(require(entry, "cause")), cause_rate(entry),
                            read_provenance(require(entry, "source")), nodes_out(entry)});
    }
  }
  // One scalar, so that a compare entry replaces it whole: young_daly, "500 steps" or a
  // duration of training between checkpoints.
  if (const auto checkpoint = find(*block, "checkpoint")) {
    const std::string text = scalar(*checkpoint, "young_daly, a step count or a duration");
    const std::string hint = "checkpoint: young_daly, 500 steps (of training) or 30min";
    if (text == "young_daly") {
      run.policy = {CheckpointPolicy::Kind::young_daly, 0};
    } else if (text.ends_with("steps")) {
      std::string count = text.substr(0, text.size() - 5);
      while (!count.empty() && count.back() == ' ') count.pop_back();
      const auto steps = parse_whole<int>(count);
      if (!steps || *steps < 1) {
        fail(*checkpoint, "expected a positive number of steps, got " + describe(checkpoint->node),
             hint);
      }
      run.policy = {CheckpointPolicy::Kind::every_steps, static_cast<double>(*steps)};
    } else {
      double seconds = 0;
      try {
        seconds = parse_duration(text);
      } catch (const UnitError&) {
        fail(*checkpoint,
             "expected young_daly, a step count or a duration, got " + describe(checkpoint->node),
             hint);
      }
      if (!(seconds > 0)) fail(*checkpoint, "a checkpoint interval must be positive", hint);
      run.policy = {CheckpointPolicy::Kind::every_seconds, seconds};
    }
  }
  if (const auto spot = find(*block, "spot")) {
    expect_map(*spot, kSpotKeys);
    require_keys(*spot, {"notice", "capacity_return"});
    // A rate, or a trace of preemption times with its own source.
    const auto rate = find(*spot, "preemptions_per_node_hour");
    const auto trace = find(*spot, "trace");
    if (rate.has_value() == trace.has_value()) {
      fail(*spot, "spot capacity needs preemptions_per_node_hour or a trace, one of them",
           "preemptions_per_node_hour: 0.0001, or trace: preemptions.yaml (hours of each "
           "preemption from the job's start)");
    }
    SpotCapacity capacity;
    if (rate) {
      capacity.preemptions_per_node_hour = read_non_negative(*rate);
      capacity.source = read_provenance(require(*spot, "source"));
    } else {
      if (const auto source = find(*spot, "source")) {
        fail(*source, "a trace names its own source", "move source: into the trace file");
      }
      capacity.trace_s = preemption_trace(*trace, capacity.source);
    }
    capacity.notice_s = read_quantity(require(*spot, "notice"), Quantity::duration);
    capacity.capacity_return_s =
        read_quantity(require(*spot, "capacity_return"), Quantity::duration);
    run.spot = std::move(capacity);
    if (run.priced && !run.spot_priced) {
      fail(*spot, "a priced run on spot capacity needs pricing.spot_gpu_hour",
           "add spot_gpu_hour: to pricing, e.g. {gpu_hour: 2.95USD/h, spot_gpu_hour: 1.50USD/h}");
    }
  }
  if (const auto write = find(*block, "checkpoint_write")) {
    const std::string mode = read_choice(*write, {"blocking", "async", "in_memory"});
    run.write = mode == "async"       ? CheckpointWrite::async
                : mode == "in_memory" ? CheckpointWrite::in_memory
                                      : CheckpointWrite::blocking;
    if (run.write == CheckpointWrite::in_memory && !find(*block, "persist")) {
      fail(*write, "in-memory checkpoints also go to storage now and then: the run needs persist",
           "add persist: 1h (training between writes to storage)");
    }
  }
  // Read wherever it is (a compare entry may turn in-memory checkpoints off); only they use it.
  if (const auto persist = find(*block, "persist")) {
    run.persist_every_s = read_quantity(*persist, Quantity::duration);
  }
  run.detection_s = read_quantity(require(*block, "detection"), Quantity::duration);
  run.restart_s = read_quantity(require(*block, "restart"), Quantity::duration);
  if (const auto repair = find(*block, "node_repair")) {
    run.node_repair_s = read_quantity(*repair, Quantity::duration, Zero::allowed);
  }
  if (const auto policy = find(*block, "when_short")) {
    run.when_short = read_choice(*policy, {"wait", "shrink"}) == "shrink" ? ShortagePolicy::shrink
                                                                          : ShortagePolicy::wait;
    if (!(run.node_repair_s > 0)) {
      fail(*policy, "a run short of nodes needs node_repair: how long a node stays out",
           "add node_repair: 8h");
    }
  }
  if (const auto spares = find(*block, "hot_spares")) {
    run.hot_spares = read_int(*spares, 0);
    if (run.hot_spares > 0 && !(run.node_repair_s > 0)) {
      fail(*spares, "hot spares replace nodes under repair: the run needs node_repair",
           "add node_repair: 8h (how long a node a hardware fault takes out stays out)");
    }
  }
  if (const auto degraded = find(*block, "degraded")) {
    for (const Field& entry : read_list(*degraded, 0, "degradations")) {
      expect_map(entry, kDegradationKeys);
      require_keys(entry, kDegradationKeys);
      Degradation degradation;
      degradation.name = read_string(require(entry, "cause"));
      degradation.kind = read_choice(require(entry, "slows"), {"compute", "network"}) == "network"
                             ? Degradation::Kind::network
                             : Degradation::Kind::compute;
      const Field fraction = require(entry, "fraction");
      degradation.fraction = read_positive(fraction);
      if (degradation.kind == Degradation::Kind::network && !(degradation.fraction < 1)) {
        fail(fraction, "a degraded link keeps part of its bandwidth: the fraction lost is < 1",
             "fraction: 0.5 for a 400 Gb/s link running at 200");
      }
      degradation.per_gpu_day = read_non_negative(require(entry, "per_gpu_day"));
      degradation.source = read_provenance(require(entry, "source"));
      run.degradations.push_back(std::move(degradation));
    }
  }
  if (const auto jitter = find(*block, "step_jitter")) {
    run.step_jitter = read_non_negative(*jitter);
  }
  if (const auto evict = find(*block, "evict_degraded")) {
    run.evict_degraded_after_s = read_quantity(*evict, Quantity::duration, Zero::allowed);
  }
  if (const auto replications = find(*block, "replications")) {
    run.replications = read_int(*replications, 1);
    if (run.replications > kMaxReplications) {
      fail(*replications,
           "more than " + std::to_string(kMaxReplications) + " replications is refused",
           "a thousand give a P99 to a few percent");
    }
  }
  return run;
}

Scenario Loader::load(const fs::path& file) {
  Doc base{file.string(), -1, {}, {}};
  const YAML::Node root_node = parse_yaml_file(file, base.file, "scenario file");
  const Field root{root_node, &base, ""};
  expect_map(root, kTopKeys);
  Scenario scenario;
  scenario.file = base.file;
  scenario.name = read_string(require(root, "name"));
  if (auto description = find(root, "description")) {
    scenario.description = read_string(*description);
  }
  if (auto seed = find(root, "seed")) {
    scenario.seed = read_uint64(*seed);
  }
  Variant first = parse_full_variant("", root);
  const auto label = find(root, "label");
  first.name = label ? read_string(*label) : first.inputs.node.name;
  scenario.variants.push_back(std::move(first));
  if (auto compare = find(root, "compare")) {
    parse_compare(*compare, file, scenario);
  }
  // A variant that does not fit is a result (a compare shows which GPUs can run a model, a
  // sweep where it starts to fit); a scenario where no variant can, in any layout, is a mistake.
  if (!find(root, "sweep")) check_some_variant_can_fit(require(root, "model"), scenario);
  if (auto sweep = find(root, "sweep")) {
    // The points replace the variants: each variant (the base, each compare entry) swept alike.
    const std::vector<Variant> variants = std::move(scenario.variants);
    scenario.variants.clear();
    scenario.swept = true;
    for (std::size_t v = 0; v < variants.size(); ++v) {
      parse_sweep(*sweep, file, variants[v], static_cast<int>(v) - 1, variants.size(), scenario);
    }
  }
  for (Variant& variant : scenario.variants) {
    variant.inputs.fabric.hash_seed = scenario.seed;  // the one seed of the scenario
  }
  return scenario;
}

}  // namespace

PresetCatalog Loader::catalog() {
  Doc listing;
  listing.file = "(preset list)";
  auto named = [&](const std::string& name) { return Field{YAML::Node(name), &listing, ""}; };
  PresetCatalog catalog;
  for (const auto& name : available_presets(data_.root / "topology" / "presets")) {
    catalog.nodes.push_back({name, node_preset(named(name)).spec.description});
  }
  for (const auto& name : available_presets(data_.root / "calibration" / "profiles")) {
    catalog.gpus.push_back({name, gpu_profile(named(name)).description});
  }
  for (const auto& name : available_presets(data_.root / "workloads" / "models")) {
    catalog.models.push_back({name, model_preset(named(name)).source});
  }
  for (const auto& name : available_presets(data_.root / "calibration" / "interruptions")) {
    catalog.interruptions.push_back({name, interruption_preset_description(named(name))});
  }
  return catalog;
}

Scenario load_scenario(const std::filesystem::path& file, const DataPaths& data) {
  return Loader(data).load(file);
}

PresetCatalog list_presets(const DataPaths& data) {
  return Loader(data).catalog();
}

StepInputs Loader::cluster(const std::string& node, int nodes, const std::string& gpu_profile) {
  Doc command_line;
  command_line.file = "(command line)";
  YAML::Node spec;
  spec["node"] = node;
  spec["nodes"] = nodes;
  if (!gpu_profile.empty()) spec["gpu"] = gpu_profile;
  StepInputs in;
  parse_cluster(Field{spec, &command_line, "cluster"}, in);
  return in;
}

StepInputs load_cluster(const DataPaths& data, const std::string& node, int nodes,
                        const std::string& gpu_profile) {
  return Loader(data).cluster(node, nodes, gpu_profile);
}

GpuProfile Loader::profile(const std::string& name) {
  Doc command_line;
  command_line.file = "(command line)";
  const YAML::Node spec(name);
  return gpu_profile(Field{spec, &command_line, "gpu"});
}

std::string profile_entry_unit(const std::string& key) {
  std::optional<Quantity> quantity;
  for (const CalibratedKey& k : kCalibratedKeys) {
    if (k.key == key) quantity = k.quantity;
  }
  for (std::size_t i = 0; i < kFp8Entries.size(); ++i) {
    if (kFp8Entries[i].first == key) quantity = kFp8Quantities[i];
  }
  if (quantity == Quantity::duration) return "us";
  if (quantity == Quantity::flop_rate) return "TFLOPS";
  return "";
}

GpuProfile load_gpu_profile(const DataPaths& data, const std::string& name) {
  return Loader(data).profile(name);
}

}  // namespace fleetsim

namespace fleetsim {

std::filesystem::path gpu_profile_file(const DataPaths& data, const std::string& name) {
  return data.root / "calibration" / "profiles" / (name + ".yaml");
}

namespace {

std::string yaml_single_quoted(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) quoted += c == '\'' ? std::string("''") : std::string(1, c);
  return quoted + "'";
}

// Three decimals, or three significant digits for what three decimals would round to zero.
std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, std::abs(value) >= 0.0095 ? "%.3f" : "%.3g", value);
  return text;
}

}  // namespace

std::string with_profile_entry(const std::string& text, const std::string& file,
                               const std::string& parameter, const Calibrated& entry) {
  Doc doc;
  doc.file = file;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ScenarioError(file, e.mark.line + 1, e.mark.column + 1, "", e.msg);
  }
  const Field profile{root, &doc, ""};
  if (!root.IsMap()) fail(profile, "expected a GPU profile (a map), got " + describe(root));
  // Find the key node of the entry: its line and column bound the block to replace.
  std::optional<YAML::Mark> key_mark;
  const auto find_key = [](const YAML::Node& map, const std::string& name) {
    for (const auto& kv : map) {
      if (kv.first.IsScalar() && kv.first.Scalar() == name) {
        return std::optional<std::pair<YAML::Node, YAML::Node>>{{kv.first, kv.second}};
      }
    }
    return std::optional<std::pair<YAML::Node, YAML::Node>>{};
  };
  const std::string::size_type dot = parameter.find('.');
  const std::string parent = dot == std::string::npos ? "" : parameter.substr(0, dot);
  const std::string key = dot == std::string::npos ? parameter : parameter.substr(dot + 1);
  YAML::Node map = root;
  if (!parent.empty()) {
    const auto found = find_key(root, parent);
    if (!found || !found->second.IsMap()) {
      fail(profile, "no " + parent + " map to hold the fitted " + key,
           "add " + parent + ": with a " + key + " entry first");
    }
    map = found->second;
  }
  if (map.Style() == YAML::EmitterStyle::Flow) {
    fail(profile, parent + " is written in flow style ({...}), which a fit cannot edit in place",
         "write " + parent + " as a block map, one key per line");
  }
  std::optional<YAML::Mark> next_key_mark;  // the sibling after the entry, if any
  bool found_entry = false;
  for (const auto& kv : map) {
    if (found_entry) {
      next_key_mark = kv.first.Mark();
      break;
    }
    if (kv.first.IsScalar() && kv.first.Scalar() == key) {
      key_mark = kv.first.Mark();
      found_entry = true;
    }
  }
  if (!key_mark) {
    fail(profile, "no " + parameter + " entry to replace",
         "a fit replaces a value the profile already has; add the entry by hand first");
  }
  // Lines without their ends; the file's line ending is kept for the result.
  const bool crlf = text.find("\r\n") != std::string::npos;
  std::vector<std::string> lines;
  {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      lines.push_back(line);
    }
  }
  const auto first = static_cast<std::size_t>(key_mark->line);
  const auto indent = static_cast<std::size_t>(key_mark->column);
  if (lines[first].find_first_not_of(' ') != indent) {
    fail(profile, parameter + " does not start its own line", "put the entry on a line of its own");
  }
  const auto blank_or_comment = [](const std::string& line) {
    const std::size_t start = line.find_first_not_of(" \t");
    return start == std::string::npos || line[start] == '#';
  };
  // The entry runs up to the next sibling key or, for the last entry, to the first line of
  // content indented no deeper than its key; comments and blank lines just before that belong
  // to what follows and stay. The entry's own lines, comments included, are replaced.
  std::size_t stop = lines.size();
  if (next_key_mark) {
    stop = static_cast<std::size_t>(next_key_mark->line);
  } else {
    for (std::size_t i = first + 1; i < lines.size(); ++i) {
      if (!blank_or_comment(lines[i]) && lines[i].find_first_not_of(' ') <= indent) {
        stop = i;
        break;
      }
    }
  }
  std::size_t last = stop - 1;  // inclusive
  while (last > first && blank_or_comment(lines[last])) --last;
  const std::string pad(indent, ' ');
  // Durations and rates carry their unit (microseconds, TFLOPS); the other fitted entries are
  // plain numbers.
  const std::string unit = profile_entry_unit(parameter);
  const auto written = [&](double value) {
    if (unit == "us") return format_number(value * 1e6) + unit;
    if (unit == "TFLOPS") return format_number(value / 1e12) + unit;
    return format_number(value);
  };
  const std::vector<std::string> block = {
      pad + key + ":", pad + "  value: " + written(entry.value),
      pad + "  sigma: " + written(entry.sigma),
      pad + "  provenance: " + yaml_single_quoted(entry.provenance)};
  lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(first),
              lines.begin() + static_cast<std::ptrdiff_t>(last) + 1);
  lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(first), block.begin(), block.end());
  std::string out;
  for (const std::string& line : lines) out += line + (crlf ? "\r\n" : "\n");
  return out;
}

}  // namespace fleetsim
