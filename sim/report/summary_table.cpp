#include "sim/report/summary_table.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include "sim/report/result_fields.hpp"
#include "workloads/layout/dimensions.hpp"

namespace fleetsim {
namespace {

using Kind = SummaryColumn::Kind;

// A swept value's column: its path under this prefix, which no registered field has ("model"
// may be swept and is a field too).
const std::string kSweptPrefix = "sweep.";

// A sweep's swept paths, in the scenario's order (every point has the same); none otherwise.
std::vector<std::string> swept_paths(const RunReport& report) {
  std::vector<std::string> paths;
  if (!report.swept || report.variants.empty()) return paths;
  for (const auto& [path, value] : report.variants.front().swept) paths.push_back(path);
  return paths;
}

// A column and how each row's cell is read.
struct Source {
  SummaryColumn column;
  std::function<SummaryCell(std::size_t)> cell;
};

// A plain value as a cell (a summary is read member by member, never through here).
SummaryCell cell_of(const FieldValue& value) {
  return std::visit(
      [](const auto& v) -> SummaryCell {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return std::monostate{};
        } else if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
          return v;
        } else if constexpr (std::is_same_v<T, SampleSummary>) {
          throw std::logic_error("a Monte Carlo summary read as one cell");
        } else {
          return static_cast<double>(v);
        }
      },
      value);
}

Kind kind_of(const SummaryCell& cell) {
  if (std::holds_alternative<std::string>(cell)) return Kind::text;
  if (std::holds_alternative<bool>(cell)) return Kind::flag;
  return Kind::number;
}

// The value as a finite number, if all of it reads as one (a swept count or rate written
// bare), in C's locale whatever the process's.
std::optional<double> number_in(const std::string& value) {
  double number = 0;
  const char* end = value.data() + value.size();
  const std::from_chars_result read = std::from_chars(value.data(), end, number);
  if (value.empty() || read.ec != std::errc{} || read.ptr != end || !std::isfinite(number)) {
    return std::nullopt;
  }
  return number;
}

// The registered field's columns: one, or a summary's five; none where no variant has it.
void add_field(std::vector<Source>& sources, const RunReport& report, const ResultField& field) {
  const bool in_run = field.group == FieldGroup::run || field.group == FieldGroup::spot;
  const std::string name =
      (in_run ? "run_" : "") + std::string(field.hdf5.empty() ? field.name : field.hdf5);
  const auto present = [&report, &field](std::size_t i) {
    return in_json(field.group, report.variants[i]);
  };
  std::optional<FieldValue> example;
  for (std::size_t i = 0; i < report.variants.size() && !example; ++i) {
    if (!present(i)) continue;
    FieldValue value = field.get(report, i);
    if (!std::holds_alternative<std::monostate>(value)) example = std::move(value);
  }
  if (!example) return;
  const auto value_at = [&report, &field, present](std::size_t i) -> std::optional<FieldValue> {
    if (!present(i)) return std::nullopt;
    return field.get(report, i);
  };
  if (std::holds_alternative<SampleSummary>(*example)) {
    for (const auto& entry : kSummaryMembers) {
      const std::string member(entry.first);
      sources.push_back({{name + "_" + member, Kind::number, std::string(field.unit),
                          std::string(field.description) + " (" + member + ")"},
                         [value_at, pointer = entry.second](std::size_t i) -> SummaryCell {
                           const std::optional<FieldValue> value = value_at(i);
                           if (!value || !std::holds_alternative<SampleSummary>(*value)) {
                             return std::monostate{};
                           }
                           return std::get<SampleSummary>(*value).*pointer;
                         }});
    }
    return;
  }
  sources.push_back(
      {{name, kind_of(cell_of(*example)), std::string(field.unit), std::string(field.description)},
       [value_at](std::size_t i) -> SummaryCell {
         const std::optional<FieldValue> value = value_at(i);
         return value ? cell_of(*value) : SummaryCell{};
       }});
}

// The registered fields of `group`, but the one whose JSON key is `skip` (if any).
void add_fields(std::vector<Source>& sources, const RunReport& report, FieldGroup group,
                std::optional<std::string_view> skip = std::nullopt) {
  for (const ResultField& field : result_fields()) {
    if (field.group == group && field.name != skip) add_field(sources, report, field);
  }
}

}  // namespace

std::vector<std::string> variant_group_names(const RunReport& report) {
  std::vector<std::string> names;
  std::set<std::string> used;
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    // Letters, digits, '.', '-' and '_' (a path's part, a Python key, a shell word as they
    // are); each run of anything else one '_'.
    std::string name;
    for (const char c : report.variants[i].name) {
      const bool plain =
          std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' || c == '_';
      if (plain) {
        name += c;
      } else if (!name.empty() && name.back() != '_') {
        name += '_';
      }
    }
    while (!name.empty() && name.back() == '_') name.pop_back();
    // "." and ".." name groups already; an empty or taken name gets the variant's index, and
    // after it a count while even that is taken ("b_2" named so by another variant).
    if (name.empty() || name == "." || name == ".." || used.count(name) > 0) {
      const std::string base = name + (name.empty() ? "" : "_") + std::to_string(i);
      name = base;
      for (int more = 2; used.count(name) > 0; ++more) name = base + "_" + std::to_string(more);
    }
    used.insert(name);
    names.push_back(std::move(name));
  }
  return names;
}

SummaryTable summary_table(const RunReport& report) {
  std::vector<Source> sources;
  const std::vector<std::string> groups = variant_group_names(report);
  sources.push_back({{"name", Kind::text, "", "the variant's name (a sweep's point)"},
                     [&report](std::size_t i) -> SummaryCell { return report.variants[i].name; }});
  sources.push_back({{"group", Kind::text, "", "its group under /variants in the HDF5 file"},
                     [&groups](std::size_t i) -> SummaryCell { return groups[i]; }});
  for (const std::string& path : swept_paths(report)) {
    std::vector<std::string> values;
    for (const VariantReport& point : report.variants) {
      const auto found = std::find_if(point.swept.begin(), point.swept.end(),
                                      [&](const auto& swept) { return swept.first == path; });
      if (found == point.swept.end()) {
        throw std::logic_error("sweep point " + point.name + " has no value of " + path);
      }
      values.push_back(found->second);
    }
    const bool numbers = std::all_of(values.begin(), values.end(), [](const std::string& value) {
      return number_in(value).has_value();
    });
    sources.push_back({{kSweptPrefix + path, numbers ? Kind::number : Kind::text, "",
                        "the swept value of " + path + ", as the scenario writes it"},
                       [values, numbers](std::size_t i) -> SummaryCell {
                         if (numbers) return *number_in(values[i]);
                         return values[i];
                       }});
  }
  add_fields(sources, report, FieldGroup::variant, "name");
  for (const LayoutDimension& dimension : layout_dimensions()) {
    const DimensionValue example = dimension.get(ParallelPlan{});
    const Kind kind = std::holds_alternative<std::string>(example) ? Kind::text
                      : std::holds_alternative<bool>(example)      ? Kind::flag
                                                                   : Kind::number;
    sources.push_back(
        {{std::string(dimension.output), kind, dimension.kind == DimensionKind::size ? "bytes" : "",
          std::string(dimension.description)},
         [&report, &dimension](std::size_t i) -> SummaryCell {
           return std::visit(
               [](const auto& v) -> SummaryCell {
                 using T = std::decay_t<decltype(v)>;
                 if constexpr (std::is_same_v<T, int>) {
                   return static_cast<double>(v);
                 } else {
                   return v;
                 }
               },
               dimension.get(report.variants[i].inputs.plan));
         }});
  }
  add_fields(sources, report, FieldGroup::step);
  add_fields(sources, report, FieldGroup::memory);
  if (report.swept) {
    sources.push_back({{"scaling_efficiency", Kind::number, "1",
                        "tokens/s per GPU over that of the smallest point of its series (the "
                        "same but for cluster.nodes and layout.dp)"},
                       [&report](std::size_t i) -> SummaryCell {
                         const std::optional<double> value = scaling_efficiency_in_sweep(report, i);
                         return value ? SummaryCell{*value} : SummaryCell{};
                       }});
  }
  add_fields(sources, report, FieldGroup::run);
  add_fields(sources, report, FieldGroup::spot);

  SummaryTable table;
  for (const std::string& path : swept_paths(report)) table.swept.push_back(kSweptPrefix + path);
  std::set<std::string> names;
  for (const Source& source : sources) {
    if (!names.insert(source.column.name).second) {
      throw std::logic_error("summary table: two columns named " + source.column.name);
    }
    table.columns.push_back(source.column);
  }
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    std::vector<SummaryCell>& row = table.rows.emplace_back();
    for (const Source& source : sources) {
      SummaryCell cell = source.cell(i);
      if (!std::holds_alternative<std::monostate>(cell) && kind_of(cell) != source.column.kind) {
        throw std::logic_error("summary table: column " + source.column.name +
                               " changes type between variants");
      }
      row.push_back(std::move(cell));
    }
  }
  return table;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string csv_number(double value) {
  if (std::isnan(value)) return "";
  char buffer[32];
  const std::to_chars_result written = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, written.ptr);
}

std::string render_collective_csv(const CollectiveReport& report) {
  const bool reduces = report.op == "all_reduce" || report.op == "reduce_scatter";
  std::string text = std::string(kCollectiveCsvColumns) + "\n";
  for (const CollectiveSample& sample : report.samples) {
    text += csv_field(report.op) + "," + csv_number(sample.size_bytes) + "," +
            csv_number(std::floor(sample.size_bytes / 4)) + ",float," + (reduces ? "sum" : "none") +
            "," + csv_number(sample.time_us) + "," + csv_number(sample.algbw_gb_per_s) + "," +
            csv_number(sample.busbw_gb_per_s) + "," + to_string(sample.algorithm) + "," +
            to_string(sample.protocol) + "\n";
  }
  return text;
}

std::string render_summary_csv(const SummaryTable& table) {
  std::string text;
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    text += (c > 0 ? "," : "") + csv_field(table.columns[c].name);
  }
  text += "\n";
  for (const std::vector<SummaryCell>& row : table.rows) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (c > 0) text += ",";
      std::visit(
          [&text](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, double>) {
              text += csv_number(v);
            } else if constexpr (std::is_same_v<T, bool>) {
              text += v ? "true" : "false";
            } else if constexpr (std::is_same_v<T, std::string>) {
              text += csv_field(v);
            }
          },
          row[c]);
    }
    text += "\n";
  }
  return text;
}

}  // namespace fleetsim
