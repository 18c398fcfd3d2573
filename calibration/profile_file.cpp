#include "calibration/profile_file.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "sim/engine/errors.hpp"

namespace fleetsim {

std::optional<ProfileQuantity> profile_entry_quantity(std::string_view key) {
  for (const ProfileEntryKey& entry : kProfileEntryKeys) {
    if (entry.key == key) return entry.quantity;
  }
  for (const Fp8EntryKey& entry : kFp8Entries) {
    if (entry.key == key) return entry.quantity;
  }
  if (key.starts_with("link_efficiency.")) return ProfileQuantity::fraction;
  if (key.starts_with("attention.")) {
    for (const AttentionEntryKey& entry : kAttentionEntries) {
      if (key.ends_with(std::string(".") + entry.pass + "." + entry.field)) return entry.quantity;
    }
  }
  return std::nullopt;
}

std::string profile_entry_unit(const std::string& key) {
  const std::optional<ProfileQuantity> quantity = profile_entry_quantity(key);
  if (quantity == ProfileQuantity::duration) return "us";
  if (quantity == ProfileQuantity::flop_rate) return "TFLOPS";
  return "";
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

std::string profile_entry_text(const std::string& key, double value) {
  // Durations and rates carry their unit (microseconds, TFLOPS); the other fitted entries are
  // plain numbers.
  const std::string unit = profile_entry_unit(key);
  if (unit == "us") return format_number(value * 1e6) + unit;
  if (unit == "TFLOPS") return format_number(value / 1e12) + unit;
  return format_number(value);
}

std::string with_profile_entry(const std::string& text, const std::string& file,
                               const std::string& parameter, const Calibrated& entry) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ScenarioError(file, e.mark.line + 1, e.mark.column + 1, "", e.msg);
  }
  // Mistakes are the profile's, reported at its start.
  const auto fail = [&file](const std::string& problem, const std::string& hint = {}) {
    throw ScenarioError(file, 1, 1, "", problem, hint);
  };
  if (!root.IsMap()) fail("expected a GPU profile (a map)");
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
  // "fp8.gemm_efficiency", "attention.fa2.fwd.efficiency": the maps down to the entry.
  const std::string::size_type dot = parameter.rfind('.');
  const std::string parent = dot == std::string::npos ? "" : parameter.substr(0, dot);
  const std::string key = dot == std::string::npos ? parameter : parameter.substr(dot + 1);
  YAML::Node map = root;
  for (std::string::size_type start = 0; start < parent.size();) {
    const std::string::size_type end = std::min(parent.find('.', start), parent.size());
    const auto found = find_key(map, parent.substr(start, end - start));
    if (!found || !found->second.IsMap()) {
      fail("no " + parent + " map to hold the fitted " + key,
           "add " + parent + ": with a " + key + " entry first");
    }
    map = found->second;
    start = end + 1;
  }
  if (map.Style() == YAML::EmitterStyle::Flow) {
    fail(parent + " is written in flow style ({...}), which a fit cannot edit in place",
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
    fail("no " + parameter + " entry to replace",
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
    fail(parameter + " does not start its own line", "put the entry on a line of its own");
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
  const auto written = [&](double value) { return profile_entry_text(parameter, value); };
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
