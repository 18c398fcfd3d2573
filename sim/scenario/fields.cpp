#include "sim/scenario/fields.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

#include <utf8cpp/utf8.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include "sim/engine/text.hpp"

namespace fleetsim::fields {
namespace fs = std::filesystem;
namespace {

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

double parse_unit(Quantity q, const std::string& text, Zero zero, Floor floor) {
  switch (q) {
    case Quantity::bandwidth: return parse_bandwidth(text, zero, floor);
    case Quantity::size: return parse_size(text, zero);
    case Quantity::duration: return parse_duration(text, zero);
    case Quantity::flop_rate: return parse_flop_rate(text, zero, floor);
    case Quantity::frequency: return parse_frequency(text);
    case Quantity::hourly_price: return parse_hourly_price(text);
    case Quantity::fraction:
    case Quantity::count: break;
  }
  return 0;
}

}  // namespace

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

// `value` with `decimals` decimals, whatever the locale.
std::string rounded(double value, int decimals) {
  return fixed_decimals(value, decimals);
}

[[noreturn]] void fail(const Field& f, const std::string& problem, const std::string& hint) {
  const YAML::Mark mark = f.node.Mark();
  const Doc& doc = *f.doc;
  // A key of a foreign file may be anything: escaped and cut as a value is.
  std::string key = escaped(f.path, 200);
  std::string text = problem;
  if (doc.entry >= 0) {
    if (replaced_by_entry(doc, f.path)) {
      key = "compare[" + std::to_string(doc.entry) + "]." + key;
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
    case YAML::NodeType::Sequence: return node.size() == 0 ? "an empty list" : "a list";
    case YAML::NodeType::Map: return "a map";
    default: return "nothing";
  }
}

// `did you mean "nodes"? ` when candidates are plausible typos of `word` (all the closest ones,
// since `nods` is as near to `node` as to `nodes`), else empty.
// Case and a preset file's suffix aside: `DGX-H100` and `dgx-h100.yaml` mean "dgx-h100".
std::string did_you_mean(std::string_view word, const Keys& candidates) {
  // A long word is no typo of a name (and would cost its length times theirs to compare).
  constexpr std::size_t kLongestTypo = 64;
  if (word.size() > kLongestTypo) return {};
  std::string typed = ascii_lower(word);
  for (const std::string_view suffix : {".yaml", ".yml"}) {
    if (typed.ends_with(suffix)) typed.resize(typed.size() - suffix.size());
  }
  const auto distance = [&](std::string_view candidate) {
    return edit_distance(typed, ascii_lower(candidate));
  };
  const std::size_t close_enough = std::max<std::size_t>(1, typed.size() / 3);
  std::size_t best = close_enough + 1;
  for (std::string_view candidate : candidates) {
    best = std::min(best, distance(candidate));
  }
  if (best > close_enough) {
    return {};
  }
  std::string names;
  for (std::string_view candidate : candidates) {
    if (distance(candidate) == best) {
      names += (names.empty() ? "" : " or ") + in_quotes(candidate);
    }
  }
  return "did you mean " + names + "? ";
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

Field& Field::operator=(const Field& other) {
  if (this == &other) return *this;
  node.reset(other.node);
  doc = other.doc;
  path = other.path;
  over.clear();
  for (const Layer& layer : other.over) over.push_back({layer.at, layer.node});
  return *this;
}

// ---- maps ----------------------------------------------------------------------------------

namespace {

// What is laid in a map, lowest first: the map itself, then the layers over it.
std::vector<Layer> layers(const Field& map) {
  std::vector<Layer> all{Layer{"", map.node}};
  for (const Layer& layer : map.over) all.push_back({layer.at, layer.node});
  return all;
}

// The first key of a dotted path, and the rest.
std::pair<std::string_view, std::string_view> split_first(std::string_view path) {
  const auto dot = path.find('.');
  if (dot == std::string_view::npos) return {path, {}};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

}  // namespace

std::vector<Entry> entries(const Field& map) {
  std::vector<Entry> out;
  if (map.over.empty()) {
    for (const auto& kv : map.node) {
      const std::string key = kv.first.Scalar();
      out.push_back({key, Field{kv.second, map.doc, join(map.path, key)}});
    }
    return out;
  }
  // The lowest map's keys in its order, then each layer's new ones in theirs, each with its
  // merged value.
  std::set<std::string> listed;
  const auto list = [&](const std::string& key) {
    if (listed.insert(key).second) out.push_back({key, *find(map, key)});
  };
  for (const Layer& layer : layers(map)) {
    if (!layer.at.empty()) {
      list(std::string(split_first(layer.at).first));
      continue;
    }
    for (const auto& kv : layer.node) list(kv.first.Scalar());
  }
  return out;
}

void expect_map(const Field& f, const Keys& allowed) {
  if (!f.node.IsMap()) {
    fail(f, "expected a map with keys " + join_list(allowed) + ", got " + describe(f.node),
         "write its keys indented on the lines below it, or inline as {key: value, ...}");
  }
  // The maps laid in it; a value laid at a path stands where the scenario sets one already.
  for (const Layer& layer : layers(f)) {
    if (!layer.at.empty()) continue;
    std::set<std::string> seen;
    for (const auto& kv : layer.node) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : describe(kv.first);
      const Field key_field{kv.first, f.doc, join(f.path, key)};
      if (!kv.first.IsScalar()) {
        fail(key_field, "expected a key name, got " + key, "a key is a plain name, like tp");
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
}

void expect_unique_keys(const Field& f) {
  if (f.node.IsSequence()) {
    for (std::size_t i = 0; i < f.node.size(); ++i) {
      expect_unique_keys({f.node[i], f.doc, f.path + "[" + std::to_string(i) + "]"});
    }
    return;
  }
  if (!f.node.IsMap()) return;
  std::set<std::string> seen;
  for (const auto& kv : f.node) {
    if (!kv.first.IsScalar()) continue;
    const std::string key = kv.first.Scalar();
    if (!seen.insert(key).second) {
      fail({kv.first, f.doc, join(f.path, key)}, "duplicate key " + in_quotes(key),
           "keep one: readers disagree on which of two counts");
    }
    expect_unique_keys({kv.second, f.doc, join(f.path, key)});
  }
}

// The top-most layer's value; where that is a map, merged with the maps below it down to the
// first layer whose value is not one (which the maps above replaced). A value laid deeper
// below the key stands in a map there.
std::optional<Field> find(const Field& map, std::string_view key) {
  std::vector<Layer> found;  // top-most first
  const std::vector<Layer> all = layers(map);
  for (auto layer = all.rbegin(); layer != all.rend(); ++layer) {
    std::optional<Layer> value;
    if (layer->at.empty()) {
      if (!layer->node.IsMap()) continue;
      if (const auto child = child_node(layer->node, std::string(key))) value = Layer{"", *child};
    } else if (const auto [first, rest] = split_first(layer->at); first == key) {
      value = Layer{std::string(rest), layer->node};
    }
    if (!value) continue;
    const bool in_map = !value->at.empty() || value->node.IsMap();
    if (!found.empty() && !in_map) break;
    found.push_back(*value);
    if (!in_map) break;
  }
  if (found.empty()) return std::nullopt;
  // The lowest is the scenario's own map or value: a value is laid only where one is written.
  Field field{found.back().node, map.doc, join(map.path, key)};
  for (auto layer = found.rbegin() + 1; layer != found.rend(); ++layer) {
    field.over.push_back({layer->at, layer->node});
  }
  return field;
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
    fail(f, "expected " + std::string(expected) + ", got " + describe(f.node),
         f.node.IsDefined() && !f.node.IsNull() ? "one value here, not a list or a map"
                                                : "give a value after the colon");
  }
  return f.node.Scalar();
}

std::string read_string(const Field& f) {
  return scalar(f, "a string");
}

std::string read_name(const Field& f) {
  constexpr std::size_t kLongest = 200;
  const std::string name = read_string(f);
  const bool blank = name.find_first_not_of(" \t") == std::string::npos;
  const bool control = escaped(name) != name;
  if (blank || control || name.size() > kLongest) {
    fail(f,
         "expected a name: text on one line, not blank, at most " + std::to_string(kLongest) +
             " characters, got " + describe(f.node),
         "name it as tables should show it, e.g. h100 tp8");
  }
  return name;
}

constexpr long long kMostInt = std::numeric_limits<int>::max();

int read_int(const Field& f, int min) {
  const std::string expected =
      min == 1 ? "a positive integer" : "an integer >= " + std::to_string(min);
  const std::string& text = scalar(f, expected);
  const auto value = parse_whole<int>(text);
  if (!value || *value < min) {
    // A whole number past what a count holds says so, with the most it may be.
    if (const auto wide = parse_whole<long long>(text); wide && *wide > kMostInt) {
      fail(f,
           "expected " + expected + " of at most " + std::to_string(kMostInt) + ", got " +
               describe(f.node),
           "counts here are 32-bit; a value this large is a slip of the digits");
    }
    fail(f, "expected " + expected + ", got " + describe(f.node), "a whole number, like 8");
  }
  return *value;
}

std::uint64_t read_uint64(const Field& f) {
  const auto value = parse_whole<std::uint64_t>(scalar(f, "an unsigned integer"));
  if (!value) {
    fail(f, "expected an unsigned integer, got " + describe(f.node), "a whole number, like 1");
  }
  return *value;
}

double read_number(const Field& f) {
  const auto value = parse_whole<double>(scalar(f, "a number"));
  if (!value || !std::isfinite(*value)) {
    fail(f, "expected a number, got " + describe(f.node),
         "a finite number, like 0.5 or 1e-3 (not .nan or .inf)");
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
  fail(f, "expected true or false, got " + describe(f.node), "true or false, unquoted");
}

// One of `allowed`; values in `later` are known but not supported yet and get `later_hint`.
std::string read_choice(const Field& f, const Keys& allowed, const Keys& later,
                        std::string_view later_hint) {
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

double read_quantity(const Field& f, Quantity q, Zero zero, Floor floor) {
  const std::string& text = scalar(f, quantity_name(q));
  try {
    return parse_unit(q, text, zero, floor);
  } catch (const UnitError& e) {
    fail(f, e.what(), e.hint());
  }
}

double read_fraction(const Field& f) {
  const double value = read_number(f);
  if (!(value > 0 && value <= 1)) {
    fail(f, "expected a fraction in (0, 1], got " + describe(f.node), "a share, like 0.1");
  }
  return value;
}

double read_positive(const Field& f) {
  const double value = read_number(f);
  if (!(value > 0)) {
    fail(f, "expected a number > 0, got " + describe(f.node), "a number above zero, like 1.5");
  }
  return value;
}

double read_non_negative(const Field& f) {
  const double value = read_number(f);
  if (value < 0) {
    fail(f, "expected a number >= 0, got " + describe(f.node), "zero or more, like 2.5");
  }
  return value;
}

SimTime read_time(const Field& f) {
  const double seconds = read_quantity(f, Quantity::duration, Zero::allowed);
  // Latencies and a collective's fixed costs, summed over hops and steps: a second is far past
  // any (microseconds), and far enough from the clock's end that no sum overflows it.
  constexpr double kLongestLatency_s = 1;
  if (!(seconds <= kLongestLatency_s)) {
    fail(f, "expected a latency of at most 1s, got " + describe(f.node),
         "latencies are ns to us: 500ns, 2us");
  }
  return from_seconds(seconds);
}

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

// ---- presets -------------------------------------------------------------------------------

namespace {

// What a parser meets that the node tree hides: the documents (and where the second starts),
// and the first explicit tag (`!!binary`, `!weird`), which the loader would otherwise ignore.
class DocumentEvents : public YAML::EventHandler {
 public:
  int starts = 0;
  YAML::Mark second;
  std::optional<std::pair<YAML::Mark, std::string>> tagged;
  void OnDocumentStart(const YAML::Mark& at) override {
    if (++starts == 2) second = at;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark& at, const std::string& tag, YAML::anchor_t,
                const std::string&) override {
    note(at, tag);
  }
  void OnSequenceStart(const YAML::Mark& at, const std::string& tag, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    note(at, tag);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& at, const std::string& tag, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    note(at, tag);
  }
  void OnMapEnd() override {}

 private:
  // "?" a plain node's, "!" a quoted scalar's: no tag written.
  void note(const YAML::Mark& at, const std::string& tag) {
    if (!tagged && !tag.empty() && tag != "?" && tag != "!") tagged.emplace(at, tag);
  }
};

}  // namespace

YAML::Node parse_yaml_file(const fs::path& path, const std::string& shown, std::string_view what) {
  // Not a device, a pipe or a directory: /dev/zero would never end, a FIFO never open.
  std::error_code error;
  if (fs::exists(path, error) && !fs::is_regular_file(path, error)) {
    throw ScenarioError(shown, 0, 0, "", std::string(what) + " is not a regular file",
                        "give the path of a file");
  }
  // Scenarios, presets and model configs are kilobytes: a file of megabytes is not one, and
  // reading a gigabyte would take memory past any limit before a line of it is checked.
  // Its size as read, not only as stat says (a file may grow, a /proc file says 0): read in
  // blocks, refused at the first byte past the limit.
  constexpr std::uintmax_t kLargestFile = 16 << 20;
  const auto too_large = [&](std::uintmax_t bytes) {
    throw ScenarioError(shown, 0, 0, "",
                        std::string(what) + " of more than 16 MiB" +
                            (bytes > kLargestFile + 1
                                 ? " (" + std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB)"
                                 : std::string()) +
                            ", more than any fleetsim reads",
                        "give the scenario or config file itself");
  };
  if (const std::uintmax_t bytes = fs::file_size(path, error); !error && bytes > kLargestFile) {
    too_large(bytes);
  }
  std::ifstream in(path);
  if (!in) {
    const bool exists = fs::exists(path, error);
    throw ScenarioError(shown, 0, 0, "", "cannot open " + std::string(what),
                        exists ? "check that it is a readable file" : "no such file");
  }
  std::stringstream text;
  std::array<char, 1 << 16> block;
  std::uintmax_t read = 0;
  while (in.read(block.data(), block.size()) || in.gcount() > 0) {
    read += static_cast<std::uintmax_t>(in.gcount());
    if (read > kLargestFile) too_large(read);
    text.write(block.data(), in.gcount());
  }
  YAML::Node document;
  DocumentEvents events;
  // Names and labels print as they are read: a stray byte, a cut or overlong sequence or a
  // surrogate is refused where it stands (utfcpp's validation).
  const std::string_view read_text = text.view();
  if (const auto bad = utf8::find_invalid(read_text.begin(), read_text.end());
      bad != read_text.end()) {
    const std::size_t at = static_cast<std::size_t>(bad - read_text.begin());
    const std::string_view before = read_text.substr(0, at);
    const auto line_start = before.rfind('\n');
    const int line = static_cast<int>(std::count(before.begin(), before.end(), '\n')) + 1;
    const int column =
        static_cast<int>(at - (line_start == std::string_view::npos ? 0 : line_start + 1)) + 1;
    throw ScenarioError(shown, line, column, "", "a byte that is not UTF-8",
                        "save the file as UTF-8");
  }
  try {
    document = YAML::Load(text.str());
    // Asked for two documents at the most: yaml-cpp's LoadAll returns documents without end on
    // some malformed input (a fuzzer's finding, tests/fuzz/regressions).
    std::istringstream again(text.str());
    YAML::Parser parser(again);
    if (parser.HandleNextDocument(events)) parser.HandleNextDocument(events);
  } catch (const YAML::DeepRecursion& e) {
    throw ScenarioError(shown, e.mark.line + 1, e.mark.column + 1, "",
                        "lists or maps nested " + std::to_string(e.depth()) + " deep",
                        "no file fleetsim reads nests more than a few levels");
  } catch (const YAML::ParserException& e) {
    throw ScenarioError(shown, e.mark.line + 1, e.mark.column + 1, "",
                        "YAML syntax error: " + e.msg);
  }
  // A second document (after `---`, or text after `...`) would be silently dropped.
  if (events.starts > 1) {
    throw ScenarioError(shown, events.second.line + 1, events.second.column + 1, "",
                        "a second YAML document: a file holds one",
                        "remove the `---` or `...` line and what follows it, or merge the two");
  }
  if (events.tagged) {
    const auto& [at, resolved] = *events.tagged;
    // The parser resolves `!!binary` to the standard's name: shown as the file writes it.
    constexpr std::string_view kStandard = "tag:yaml.org,2002:";
    const std::string tag =
        resolved.starts_with(kStandard) ? "!!" + resolved.substr(kStandard.size()) : resolved;
    throw ScenarioError(shown, at.line + 1, at.column + 1, "",
                        "a YAML tag (" + in_quotes(tag) + "): fleetsim reads plain values",
                        "remove the tag; quote the value if it should be text");
  }
  return document;
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

// ---- layers ----------------------------------------------------------------------------------

std::optional<YAML::Node> child_node(const YAML::Node& map, const std::string& key) {
  for (const auto& kv : map) {
    if (kv.first.IsScalar() && kv.first.Scalar() == key) {
      return kv.second;
    }
  }
  return std::nullopt;
}

namespace {

void collect_replaced(const YAML::Node& base, const YAML::Node& over, const std::string& path,
                      std::set<std::string>& replaced, std::string_view skip) {
  for (const auto& kv : over) {
    const std::string key = kv.first.Scalar();
    if (key == skip) continue;
    const std::string child_path = join(path, key);
    const std::optional<YAML::Node> existing =
        base.IsMap() ? child_node(base, key) : std::optional<YAML::Node>();
    if (existing && existing->IsMap() && kv.second.IsMap()) {
      collect_replaced(*existing, kv.second, child_path, replaced, {});
      continue;
    }
    replaced.insert(child_path);
  }
}

}  // namespace

std::set<std::string> replaced_paths(const YAML::Node& base, const YAML::Node& over,
                                     std::string_view skip) {
  std::set<std::string> replaced;
  collect_replaced(base, over, "", replaced, skip);
  return replaced;
}

}  // namespace fleetsim::fields
