// The result fields: every scalar a variant's results carry, registered once with its name,
// unit and meaning. The JSON rendering, the HDF5 file and the generated schema page
// (docs/results-schema.md) are rendered from this list. A new scalar result is a row here
// (and the value it reads); the console's tables (console.cpp) choose which fields to show a
// person and how to write them, and read each through this list; the summary table
// (summary_table.hpp: HDF5 /summary, --csv) has a column per field.
//
// Fields come in groups: the variant's setup, its step (present in JSON once simulated; in
// HDF5 NaN until then), its memory, its run's Monte Carlo and the run's spot capacity (each
// present where the variant has one). A quantity that does not exist (no baseline to compare
// with, no price) is NaN: JSON writes it as null, HDF5 as NaN. The layout's fields are the
// dimensions of workloads/layout/dimensions.hpp, the tables (memory items, links, breakdown,
// causes, ...) are listed in result_tables().
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "sim/report/report.hpp"

namespace fleetsim {

enum class FieldGroup { scenario, plan, variant, step, memory, run, spot };

struct ResultGroup {
  FieldGroup group;
  std::string_view json;  // its object in a variant's JSON ("" for the variant's own keys)
  std::string_view hdf5;  // "variant attributes", "run attributes": where HDF5 keeps its fields
  std::string_view description;
};

// A value, of the type outputs write: absent (a group or summary that is not there), an
// integer, a count, a number, a flag (HDF5: int 0 or 1), a string, or a Monte Carlo summary
// (JSON: {mean, ci99_half_width, p50, p90, p99}; HDF5: <name>_mean, ... attributes).
using FieldValue =
    std::variant<std::monostate, int, std::uint64_t, double, bool, std::string, SampleSummary>;

// A Monte Carlo summary's members as every output names them: JSON's keys, and the suffixes
// (`<name>_mean`, ...) of HDF5's attributes and the summary table's columns.
inline constexpr std::pair<std::string_view, double SampleSummary::*> kSummaryMembers[] = {
    {"mean", &SampleSummary::mean},
    {"ci99_half_width", &SampleSummary::ci99_half_width},
    {"p50", &SampleSummary::p50},
    {"p90", &SampleSummary::p90},
    {"p99", &SampleSummary::p99}};

struct ResultField {
  FieldGroup group;
  std::string_view name;  // its key in the group's JSON object; "" where JSON has none
  std::string_view hdf5;  // its HDF5 attribute; "" where the file has none (or has a table)
  std::string_view unit;  // "s", "bytes", "tokens/s", "USD", "1" for a ratio, "" for text
  std::string_view description;
  FieldValue (*get)(const RunReport& report, std::size_t variant);
};

std::span<const ResultGroup> result_groups();
std::span<const ResultField> result_fields();

// The titles tables give MFU and HFU: of the dense BF16 peak whatever the precision (the
// fields' descriptions), so that an FP8 run's share past 100% reads as what it is.
inline constexpr const char* kMfuTitle = "MFU (% of BF16 peak)";
inline constexpr const char* kHfuTitle = "HFU (% of BF16 peak)";

// The field of `group` with the JSON key (or, where JSON has none, the HDF5 attribute) `name`;
// throws std::logic_error for a name not registered (a renderer asking for what is not there).
const ResultField& result_field(FieldGroup group, std::string_view name);
// The group's presence in each output: the step's JSON object is null until simulated (its
// HDF5 attributes NaN), the run's and spot's are absent without them.
bool in_json(FieldGroup group, const VariantReport& variant);
bool in_hdf5(FieldGroup group, const VariantReport& variant);

// A table of a variant's results: its JSON key and HDF5 dataset, and its columns.
struct ResultTable {
  FieldGroup group;
  std::string_view json;  // "" where JSON has none
  std::string_view hdf5;  // "" where HDF5 has none
  std::string_view columns;
  std::string_view description;
};
std::span<const ResultTable> result_tables();

// docs/results-schema.md: every group, field (with its unit) and table, the layout's
// dimensions and the root attributes, generated from the registries.
std::string render_results_schema();

}  // namespace fleetsim
