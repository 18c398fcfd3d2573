// The YAML field toolkit of the scenario loader (this folder's own header): a value with its
// place in a file, and readers that report a mistake at that place as a ScenarioError naming
// file:line:column, the key, what was expected and a hint. Every section's schema reads through
// it, so no reader prints a message of its own making.
//
// A variant of a scenario (a compare entry, a sweep point) is the base file with values laid
// over it, not a copy: a Field may stand for a map of several layers (the base's map, the
// entry's, the point's values), read as their deep merge: maps merged key by key, anything else
// replaced by the layer above. Every value keeps the place where it was written, no node is
// made (yaml-cpp merges a document's whole memory into every node inserted into a new one),
// and loading stays linear in the number of variants.
#pragma once

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/engine/errors.hpp"
#include "sim/engine/time.hpp"
#include "sim/scenario/units.hpp"

namespace fleetsim::fields {

using Keys = std::vector<std::string_view>;

// A parsed YAML document and how to name its keys in messages.
struct Doc {
  std::string file;
  // For a compare variant: its index and name, and the key paths its entry replaced. Those are
  // reported as compare[i].<path>; everything else came from the base scenario. For a sweep
  // point of the base: its name, and no entry.
  int entry = -1;
  std::string variant;
  std::set<std::string> overridden;
};

// A value laid over a map: `node` stands at the dotted path `at` below it ("" for a map laid
// over the map itself, "nodes" for a sweep's value of cluster.nodes laid over cluster:).
struct Layer {
  Layer() = default;
  Layer(std::string at, YAML::Node node) : at(std::move(at)), node(std::move(node)) {}
  Layer(const Layer&) = default;
  // Rebinds, as Field's does.
  Layer& operator=(const Layer& other) {
    at = other.at;
    node.reset(other.node);
    return *this;
  }

  std::string at;
  YAML::Node node;
};

// One value in a document: the node (for its mark), the document, and its dotted key path. A
// layered map (see above) is `node`, the lowest of its maps, whose place is reported, with what
// is laid over it in `over`, lowest first.
struct Field {
  Field() = default;
  Field(YAML::Node node, const Doc* doc, std::string path, std::vector<Layer> over = {})
      : node(std::move(node)), doc(doc), path(std::move(path)), over(std::move(over)) {}
  Field(const Field&) = default;
  // Rebinds the handles: YAML::Node's own assignment would write into the tree they refer to.
  Field& operator=(const Field& other);

  YAML::Node node;
  const Doc* doc = nullptr;
  std::string path;
  std::vector<Layer> over;
};

// Whether `path`, or a map above it, is one the compare entry of `doc` replaced.
bool replaced_by_entry(const Doc& doc, std::string path);

std::string join(const std::string& path, std::string_view key);
std::string join_list(const Keys& names);
// `value` with `decimals` decimals, whatever the locale.
std::string rounded(double value, int decimals);
// "a list", "a map", or the scalar in quotes.
std::string describe(const YAML::Node& node);
// `did you mean "nodes"? ` when candidates are plausible typos of `word`, else empty.
std::string did_you_mean(std::string_view word, const Keys& candidates);

// Throws the ScenarioError for a mistake at `f`: a compare entry's key is named
// compare[i].<path>, a value the base gives a variant is reported "in variant ...".
[[noreturn]] void fail(const Field& f, const std::string& problem, const std::string& hint = {});

// ---- maps ------------------------------------------------------------------------------------

struct Entry {
  std::string key;
  Field value;
};
// Every key of a map with its value, in the order written (keys a layer adds after the rest).
std::vector<Entry> entries(const Field& map);
// Checks that `f` is a map whose keys are all in `allowed`, each once.
void expect_map(const Field& f, const Keys& allowed);
// Every map at or below `f` has each key once (a foreign file's, which expect_map does not
// read: readers disagree on which of two counts, Python's json taking the last).
void expect_unique_keys(const Field& f);
std::optional<Field> find(const Field& map, std::string_view key);
Field require(const Field& map, std::string_view key);
void require_keys(const Field& map, const Keys& keys);

// ---- scalar values ---------------------------------------------------------------------------

const std::string& scalar(const Field& f, std::string_view expected);
std::string read_string(const Field& f);
// A name a person gives (the scenario's, a variant's), shown in tables and result files: text
// on one line, not blank, at most 200 characters.
std::string read_name(const Field& f);
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
int read_int(const Field& f, int min);
std::uint64_t read_uint64(const Field& f);
double read_number(const Field& f);
bool read_bool(const Field& f);
// One of `allowed`; values in `later` are known but not supported yet and get `later_hint`.
std::string read_choice(const Field& f, const Keys& allowed, const Keys& later = {},
                        std::string_view later_hint = {});
// The elements of a list of exactly `count` entries (count 0: any length but empty).
std::vector<Field> read_list(const Field& f, std::size_t count, std::string_view what);
// A provenance: "measured: ...", "published: ...", "extrapolated: ..." or "assumed: ...".
std::string read_provenance(const Field& f);

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
std::string_view quantity_name(Quantity q);
double read_quantity(const Field& f, Quantity q, Zero zero = Zero::rejected,
                     Floor floor = Floor::hardware);
double read_fraction(const Field& f);
double read_positive(const Field& f);
double read_non_negative(const Field& f);
// A latency or a collective's fixed cost: a duration from 0 to 1s.
SimTime read_time(const Field& f);

// ---- files -----------------------------------------------------------------------------------

// The YAML (or JSON) file at `path`, named `shown` in messages: `what` it is ("scenario file").
YAML::Node parse_yaml_file(const std::filesystem::path& path, const std::string& shown,
                           std::string_view what);
bool is_preset_name(const std::string& name);
// The preset names (file stems) of the .yaml files in `dir`, sorted.
std::vector<std::string> available_presets(const std::filesystem::path& dir);

// ---- layers ----------------------------------------------------------------------------------

// The value of `key` in a plain YAML map, if it has one.
std::optional<YAML::Node> child_node(const YAML::Node& map, const std::string& key);
// The dotted paths of `over` that replace or add a value in `base` when `over` is laid on it
// (maps merge key by key), `skip` left out at the top.
std::set<std::string> replaced_paths(const YAML::Node& base, const YAML::Node& over,
                                     std::string_view skip = {});
}  // namespace fleetsim::fields
