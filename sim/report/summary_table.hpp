// The summary table: one row per variant (a sweep's points, a plan's ranking) and a column for
// every scalar a variant's results carry (result_fields.hpp, expanded: a Monte Carlo summary
// is five columns), the layout's dimensions and, in a sweep, the swept values in their type and
// the scaling efficiency. It is the HDF5 file's /summary dataset and the CSV that `run`,
// `sweep` and `plan` print with --csv: one table for notebooks and scripts, where the variant
// groups keep the same values as attributes beside their tables.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sim/report/report.hpp"

namespace fleetsim {

struct SummaryColumn {
  enum class Kind { text, number, flag };
  std::string name;  // CSV header and HDF5 member: a field's HDF5 attribute (else its JSON key),
                     // run fields prefixed "run_", a swept field by its path
  Kind kind = Kind::number;
  std::string unit;  // "s", "bytes", "1" for a ratio, "" for text and counts
  std::string description;
};

// A cell: absent (a group the variant lacks, a step not simulated, a cost without a price), a
// number, a flag or text.
using SummaryCell = std::variant<std::monostate, double, bool, std::string>;

struct SummaryTable {
  std::vector<SummaryColumn> columns;
  std::vector<std::vector<SummaryCell>> rows;  // by variant, a cell per column
  std::vector<std::string> swept;              // a sweep's swept columns (its paths), in order
};

// The table of the report's variants. A field no variant has (no run: block anywhere, no
// price) has no column.
SummaryTable summary_table(const RunReport& report);

// The HDF5 group name of each variant under /variants: its name in letters, digits, '.', '-'
// and '_' (each run of other characters one '_'), "_<index>" added where names then collide
// (the index alone for a name with none of those).
std::vector<std::string> variant_group_names(const RunReport& report);

// RFC 4180 CSV: a header line of the column names, then a line per row. Numbers in the
// shortest form that reads back to the same double; flags true or false; absent cells empty.
std::string render_summary_csv(const SummaryTable& table);

// `fleetsim collective --csv`: a line per message size under a header of these columns (one run,
// out-of-place and in-place alike, and the algorithm and protocol the tuner chose). count is
// nccl-tests' element count (floats), redop "sum" for the reductions, "none" otherwise.
inline constexpr std::string_view kCollectiveCsvColumns =
    "op,size_bytes,count,type,redop,time_us,algbw_gb_per_s,busbw_gb_per_s,algorithm,protocol";
std::string render_collective_csv(const CollectiveReport& report);

// A CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180).
std::string csv_field(const std::string& text);
// A number as CSV writes it: the shortest text that reads back to the same double, empty for
// NaN.
std::string csv_number(double value);

}  // namespace fleetsim
