// The console table: one column per variant, one row per quantity, units in the row labels.
//
// Everything here is text layout; the numbers come from the result registry (result_fields.hpp),
// each table a list of the registered fields it shows and how it writes them (console_text.hpp
// writes numbers and lines columns up; console_analysis.cpp the attribution and sensitivity).
#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "sim/report/console_analysis.hpp"
#include "sim/report/console_text.hpp"
#include "sim/report/report.hpp"
#include "sim/report/result_fields.hpp"

namespace fleetsim {
namespace {

using namespace console;

using CellFn = std::function<std::string(const VariantReport&)>;

std::vector<std::string> cells_for(const RunReport& report, const CellFn& cell) {
  std::vector<std::string> cells;
  for (const VariantReport& variant : report.variants) {
    cells.push_back(cell(variant));
  }
  return cells;
}

int total_gpus(const StepInputs& inputs) {
  return inputs.nodes * inputs.node.gpus;
}

// ---- What the tables show, read through the result registry (result_fields.hpp): a
// quantity is a few registered fields of one group and how a person reads them. The registry
// says what each field is; this says how the console writes it.

using Values = std::vector<FieldValue>;

double number(const FieldValue& value) {
  return std::visit(
      [](const auto& v) -> double {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_arithmetic_v<T>) {
          return static_cast<double>(v);
        } else {
          return std::numeric_limits<double>::quiet_NaN();
        }
      },
      value);
}
const SampleSummary& summary(const FieldValue& value) {
  return std::get<SampleSummary>(value);
}

struct Quantity {
  std::string_view label;  // "{first}" stands for the first variant's name
  FieldGroup group;
  std::vector<std::string_view> fields;  // of `group`, by name
  std::string (*text)(const Values& values);
  // Whether a variant has it, beyond having the group: by default, wherever it has the group.
  bool (*has)(const VariantReport& variant) = nullptr;
  // Whether a table shows it: by default wherever some variant has it, a step's always (it
  // says which layouts do not fit).
  bool (*shown)(const RunReport& report, const Quantity& quantity) = nullptr;
  std::string_view missing = kMissing;  // the cell of a variant without it
};

std::string cell(const RunReport& report, std::size_t index, const Quantity& quantity) {
  const VariantReport& variant = report.variants[index];
  if (!in_json(quantity.group, variant) || (quantity.has && !quantity.has(variant))) {
    return std::string(quantity.missing);
  }
  Values values;
  for (const std::string_view name : quantity.fields) {
    values.push_back(result_field(quantity.group, name).get(report, index));
  }
  // A quantity that does not exist (no price, no baseline) is absent or NaN.
  if (std::holds_alternative<std::monostate>(values.front()) ||
      (std::holds_alternative<double>(values.front()) && std::isnan(number(values.front())))) {
    return kMissing;
  }
  return quantity.text(values);
}

bool has(const VariantReport& variant, const Quantity& quantity) {
  return in_json(quantity.group, variant) && (!quantity.has || quantity.has(variant));
}

bool shown(const RunReport& report, const Quantity& quantity) {
  if (quantity.shown) return quantity.shown(report, quantity);
  if (quantity.group == FieldGroup::step) return true;
  return std::any_of(report.variants.begin(), report.variants.end(),
                     [&](const VariantReport& v) { return has(v, quantity); });
}

// Whether some variant's value of the quantity's first field passes `test`.
bool any_value(const RunReport& report, const Quantity& quantity, bool (*test)(double)) {
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    if (!has(report.variants[i], quantity)) continue;
    if (test(number(result_field(quantity.group, quantity.fields.front()).get(report, i)))) {
      return true;
    }
  }
  return false;
}
bool any_positive(const RunReport& report, const Quantity& quantity) {
  return any_value(report, quantity, [](double value) { return value > 0; });
}
bool any_finite(const RunReport& report, const Quantity& quantity) {
  return any_value(report, quantity, [](double value) { return std::isfinite(value); });
}

std::string label_of(const RunReport& report, const Quantity& quantity) {
  std::string label(quantity.label);
  const std::size_t first = label.find("{first}");
  if (first != std::string::npos) label.replace(first, 7, report.variants.front().name);
  return label;
}

// One row per quantity shown, one column per variant.
void add_rows(Table& table, const RunReport& report, std::span<const Quantity> quantities) {
  for (const Quantity& quantity : quantities) {
    if (!shown(report, quantity)) continue;
    std::vector<std::string> cells;
    for (std::size_t i = 0; i < report.variants.size(); ++i) {
      cells.push_back(cell(report, i, quantity));
    }
    table.add(label_of(report, quantity), std::move(cells));
  }
}

// How values read.
std::string as_text(const Values& v) {
  return std::get<std::string>(v[0]);
}
std::string as_integer(const Values& v) {
  return std::to_string(std::llround(number(v[0])));
}
std::string as_grouped(const Values& v) {
  return grouped_integer(number(v[0]));
}
std::string as_seconds(const Values& v) {
  return seconds_text(number(v[0]));
}
std::string as_percent(const Values& v) {
  return percent_text(number(v[0]));
}
std::string as_gb(const Values& v) {
  return gb_text(number(v[0]));
}
// The share of a GPU left free, marked low under the 15% practitioners keep (where it fits).
std::string headroom_text(double fraction, bool fits) {
  return percent_text(fraction) + (fits && fraction < kMinComfortableHeadroom ? " low" : "");
}
std::string as_hours(double seconds) {
  return fixed(seconds / 3600, 1);
}
std::string p50_p90_days(const Values& v) {
  return fixed(summary(v[0]).p50 / kDay, 2) + " / " + fixed(summary(v[0]).p90 / kDay, 2);
}
std::string p50_p90_usd(const Values& v) {
  return grouped_integer(summary(v[0]).p50) + " / " + grouped_integer(summary(v[0]).p90);
}
std::string mean_and_p90(const Values& v) {
  return fixed(summary(v[0]).mean, 1) + " (" + fixed(summary(v[0]).p90, 0) + ")";
}

bool multi_node(const VariantReport& v) {
  return v.inputs.nodes > 1;
}

// The variant's setup: the first rows of `run` and `memory`.
const Quantity kSetup[] = {
    {"node preset", FieldGroup::variant, {"node"}, as_text},
    {"GPUs (nodes x GPUs/node)",
     FieldGroup::variant,
     {"gpus", "nodes", "gpus_per_node"},
     [](const Values& v) {
       return as_integer(v) + " (" + as_integer({v[1]}) + " x " + as_integer({v[2]}) + ")";
     }},
    {.label = "fabric (oversubscription, placement)",
     .group = FieldGroup::variant,
     .fields = {"fabric_oversubscription", "fabric_placement"},
     .text =
         [](const Values& v) {
           const double ratio = number(v[0]);
           return fixed(ratio, ratio == std::floor(ratio) ? 0 : 1) + ":1 " + as_text({v[1]});
         },
     .has = multi_node},
    {"GPU profile", FieldGroup::variant, {"gpu_profile"}, as_text},
    {"model",
     FieldGroup::variant,
     {"model", "lora_rank", "lora_quantized_base", "lora_weight_decomposed", "precision"},
     [](const Values& v) {
       std::string text = as_text(v);
       if (number(v[1]) > 0) {
         const std::string method = std::get<bool>(v[3]) ? "DoRA" : "LoRA";
         text += std::string(std::get<bool>(v[2]) ? " (Q" : " (") + method + " rank " +
                 as_integer({v[1]}) + ")";
       }
       // BF16, the default, goes unsaid.
       const std::string precision = as_text({v[4]});
       return precision == "fp8" ? text + " FP8" : precision == "fp16" ? text + " FP16" : text;
     }},
    {"layout", FieldGroup::variant, {"layout_label"}, as_text},
};

// A part of the step's exposed communication, shown where some variant has any.
Quantity exposed_part(std::string_view label, std::string_view field) {
  return {.label = label,
          .group = FieldGroup::step,
          .fields = {field},
          .text = as_seconds,
          .shown = any_positive};
}

// The quantities of the step that every table shows.
const Quantity kStepTime{.label = "step time (s)",
                         .group = FieldGroup::step,
                         .fields = {"step_time_s"},
                         .text = as_seconds,
                         .missing = "does not fit"};
const Quantity kTokens{"tokens/s", FieldGroup::step, {"tokens_per_s"}, as_grouped};
const Quantity kTokensPerGpu{
    "tokens/s per GPU", FieldGroup::step, {"tokens_per_s_per_gpu"}, as_grouped};
const Quantity kMfu{kMfuTitle, FieldGroup::step, {"mfu"}, as_percent};

// The step, its breakdown, its memory and how it compares with the first variant.
const Quantity kStep[] = {
    kStepTime,
    kTokens,
    kTokensPerGpu,
    kMfu,
    {kHfuTitle, FieldGroup::step, {"hfu"}, as_percent},
    {"compute per step (s)", FieldGroup::step, {"compute_s"}, as_seconds},
    {"exposed comm per step (s)", FieldGroup::step, {"exposed_comm_s"}, as_seconds},
    // What the exposed communication is for, where any is.
    exposed_part("  data-parallel (s)", "exposed_dp_s"),
    exposed_part("  tensor-parallel (s)", "exposed_tp_s"),
    exposed_part("  context-parallel (s)", "exposed_cp_s"),
    exposed_part("  expert-parallel (s)", "exposed_ep_s"),
    exposed_part("  pipeline transfers (s)", "exposed_pp_s"),
    exposed_part("  offload copies (s)", "exposed_host_s"),
    {"idle per step (s)", FieldGroup::step, {"idle_s"}, as_seconds},
    {"comm per GPU per step (GB)", FieldGroup::step, {"comm_bytes_per_gpu"}, as_gb},
    {"memory per GPU (GB, % of capacity)",
     FieldGroup::memory,
     {"total_bytes", "capacity_bytes"},
     [](const Values& v) {
       const double capacity = number(v[1]);
       return as_gb(v) + " (" + percent_text(capacity > 0 ? number(v[0]) / capacity : 0.0) + "%)";
     }},
    {"headroom (%)",
     FieldGroup::memory,
     {"headroom_fraction", "fits"},
     [](const Values& v) { return headroom_text(number(v[0]), std::get<bool>(v[1])); }},
    {"speed-up vs {first} (tokens/s)",
     FieldGroup::variant,
     {"speedup_vs_first"},
     [](const Values& v) { return fixed(number(v[0]), 2) + "x"; }},
    {.label = "scaling efficiency vs {first} (%, per GPU)",
     .group = FieldGroup::variant,
     .fields = {"scaling_efficiency_vs_first"},
     .text = as_percent,
     .shown = any_finite},
};

bool jitters(const RunReport& report, const Quantity&) {
  return std::any_of(report.variants.begin(), report.variants.end(),
                     [](const VariantReport& v) { return v.job && v.job->jitter_factor != 1; });
}
bool repairs(const RunReport& report, const Quantity&) {
  return std::any_of(report.variants.begin(), report.variants.end(),
                     [](const VariantReport& v) { return v.job && v.job->node_repair_s > 0; });
}
bool shrinks(const VariantReport& v) {
  return v.job && v.job->when_short == ShortagePolicy::shrink;
}
bool degrades(const VariantReport& v) {
  return v.job && !v.job->degradations.empty();
}

// A run's Monte Carlo, for the variants that have one (see sim/job).
const Quantity kRun[] = {
    {"run: steps to train", FieldGroup::run, {"steps"}, as_grouped},
    {.label = "run step with jitter (s)",
     .group = FieldGroup::run,
     .fields = {"step_s"},
     .text = as_seconds,
     .shown = jitters},
    {"checkpoint write, restore (s)",
     FieldGroup::run,
     {"checkpoint_write", "checkpoint_write_s", "checkpoint_copy_s", "peer_copy_s",
      "peer_restore_s", "restore_s"},
     [](const Values& v) {
       const std::string write = as_text(v);
       std::string text = as_seconds({v[1]});
       if (write == "async") {
         text = "async: copy " + as_seconds({v[2]}) + ", write " + text;
       } else if (write == "in_memory") {
         text = "in memory: copy " + as_seconds({v[2]}) + ", to peer " + as_seconds({v[3]}) +
                ", write " + text;
       }
       const std::string restore =
           write == "in_memory" ? as_seconds({v[4]}) + " (from storage " + as_seconds({v[5]}) + ")"
                                : as_seconds({v[5]});
       return text + ", " + restore;
     }},
    {"mean time between interruptions (h)",
     FieldGroup::run,
     {"mtbf_s"},
     [](const Values& v) {
       return std::isfinite(number(v[0])) ? fixed(number(v[0]) / 3600, 2) : std::string("none");
     }},
    {"checkpoint every (steps, min)",
     FieldGroup::run,
     {"checkpoint_interval_steps", "step_s"},
     [](const Values& v) {
       return as_grouped(v) + ", " + fixed(number(v[0]) * number(v[1]) / 60, 1);
     }},
    {"time to train P50 / P90 (days)", FieldGroup::run, {"wall_s"}, p50_p90_days},
    {"goodput, mean (99% CI)",
     FieldGroup::run,
     {"goodput"},
     [](const Values& v) {
       return fixed(summary(v[0]).mean, 3) + " +- " + fixed(summary(v[0]).ci99_half_width, 3);
     }},
    {"interruptions, mean (P90)", FieldGroup::run, {"interruptions"}, mean_and_p90},
    {"spot preemptions, mean (P90)", FieldGroup::spot, {"preemptions"}, mean_and_p90},
    {.label = "node repair (h), hot spares",
     .group = FieldGroup::run,
     .fields = {"node_repair_s", "hot_spares"},
     .text = [](const Values& v) { return as_hours(number(v[0])) + ", " + as_integer({v[1]}); },
     .shown = repairs},
    {.label = "waiting for nodes (h), mean (P90)",
     .group = FieldGroup::run,
     .fields = {"node_wait_s"},
     .text =
         [](const Values& v) {
           return as_hours(summary(v[0]).mean) + " (" + as_hours(summary(v[0]).p90) + ")";
         },
     .shown = repairs},
    {.label = "shrunk (h), regrows, mean",
     .group = FieldGroup::run,
     .fields = {"shrunk_s", "regrows"},
     .text =
         [](const Values& v) {
           return as_hours(summary(v[0]).mean) + ", " + fixed(summary(v[1]).mean, 1);
         },
     .has = shrinks,
     .shown =
         [](const RunReport& report,
            const Quantity& quantity) {  // shrinking is a way to wait for repairs
           return repairs(report, quantity) &&
                  std::any_of(report.variants.begin(), report.variants.end(), shrinks);
         }},
    {.label = "degraded (h), evictions, mean",
     .group = FieldGroup::run,
     .fields = {"degraded_s", "evictions"},
     .text =
         [](const Values& v) {
           return as_hours(summary(v[0]).mean) + ", " + fixed(summary(v[1]).mean, 1);
         },
     .has = degrades},
    {"lost GPU-hours, mean",
     FieldGroup::run,
     {"lost_gpu_hours"},
     [](const Values& v) { return grouped_integer(summary(v[0]).mean); }},
    {"cost P50 / P90 (USD)", FieldGroup::run, {"cost_usd"}, p50_p90_usd},
    {"per million tokens P50 (USD)",
     FieldGroup::run,
     {"usd_per_million_tokens"},
     [](const Values& v) { return fixed(summary(v[0]).p50, 3); }},
    {"stall per written checkpoint, mean (USD)",
     FieldGroup::run,
     {"usd_per_checkpoint"},
     [](const Values& v) { return fixed(summary(v[0]).mean, 2); }},
};

// `fleetsim sweep`'s columns around the scaling efficiency within the point's group (a sweep's
// own quantity, not a field of every variant).
const Quantity kSweepSize[] = {
    {"GPUs", FieldGroup::variant, {"gpus"}, as_grouped},
    kStepTime,
    kTokens,
    kTokensPerGpu,
};
const Quantity kSweepShape[] = {
    kMfu,
    {"largest share of the step", FieldGroup::step, {"largest_share"}, as_text},
    {"layout", FieldGroup::variant, {"layout_label"}, as_text},
};

// `fleetsim plan`'s columns: the step of each ranked layout, and its run where there is one (a
// run that could not be simulated shows "—", see the warnings).
const Quantity kPlanStep[] = {
    kStepTime,
    kTokens,
    kMfu,
    {"memory (GB)", FieldGroup::memory, {"total_bytes"}, as_gb},
    {"headroom (%)", FieldGroup::memory, {"headroom_fraction"}, as_percent},
};
const Quantity kPlanRun[] = {
    {"time to train P50 / P90 (days)", FieldGroup::run, {"wall_s"}, p50_p90_days},
    {"goodput",
     FieldGroup::run,
     {"goodput"},
     [](const Values& v) { return fixed(summary(v[0]).mean, 3); }},
};
const Quantity kPlanCost{"cost P50 / P90 (USD)", FieldGroup::run, {"cost_usd"}, p50_p90_usd};

// A table of one row per variant: the quantities as columns.
std::vector<std::string> headers_of(const RunReport& report, std::span<const Quantity> columns) {
  std::vector<std::string> headers;
  for (const Quantity& column : columns) headers.push_back(label_of(report, column));
  return headers;
}
std::vector<std::string> row_of(const RunReport& report, std::size_t index,
                                std::span<const Quantity> columns) {
  std::vector<std::string> cells;
  for (const Quantity& column : columns) cells.push_back(cell(report, index, column));
  return cells;
}

std::string header_text(const RunReport& report) {
  std::string text = "scenario: " + report.scenario_name;
  if (!report.description.empty()) {
    text += " — " + report.description;
  }
  text += "\n";
  if (!report.scenario_file.empty()) {
    text += "file: " + report.scenario_file + ", ";
  }
  text += "seed " + std::to_string(report.seed);
  if (!report.fleetsim_version.empty()) {
    text += ", fleetsim " + report.fleetsim_version;
  }
  text += "\n";
  if (const auto& partial = report.partial) {
    text += "partial: " + partial->stopped_by + "; " + std::to_string(report.variants.size()) +
            " of " + std::to_string(planned_variants(report)) +
            (report.swept ? " points" : " variants") + " finished";
    for (std::size_t i = 0; i < partial->left_out.size(); ++i) {
      text += (i == 0 ? "; left out: " : ", ") + partial->left_out[i];
    }
    text += "\n";
  }
  return text + "\n";
}

// Every field a table names is registered: checked once, whatever a report shows, so that a
// renamed field fails every rendering rather than only the reports that show its row.
void check_registered() {
  static const bool checked = [] {
    for (const std::span<const Quantity> table :
         {std::span<const Quantity>(kSetup), std::span<const Quantity>(kStep),
          std::span<const Quantity>(kRun), std::span<const Quantity>(kSweepSize),
          std::span<const Quantity>(kSweepShape), std::span<const Quantity>(kPlanStep),
          std::span<const Quantity>(kPlanRun), std::span<const Quantity>(&kPlanCost, 1)}) {
      for (const Quantity& quantity : table) {
        for (const std::string_view name : quantity.fields) result_field(quantity.group, name);
      }
    }
    return true;
  }();
  (void)checked;
}

std::string main_table(const RunReport& report) {
  check_registered();
  Table table(cells_for(report, [](const VariantReport& v) { return v.name; }));
  add_rows(table, report, kSetup);
  add_rows(table, report, kStep);
  add_rows(table, report, kRun);
  return table.render();
}

// Item names in the memory model's order: each variant lists its items in that order, so one
// that only some variants list goes right after the item before it in the first that does.
std::vector<std::string> memory_item_names(const RunReport& report) {
  std::vector<std::string> names;
  for (const VariantReport& variant : report.variants) {
    auto next = names.begin();
    for (const MemoryItem& item : variant.outcome.memory.items) {
      const auto known = std::find(names.begin(), names.end(), item.name);
      next = known != names.end() ? known + 1 : names.insert(next, item.name) + 1;
    }
  }
  return names;
}

// An item held at a moment other than the peak's is shown in parentheses: not in the total.
std::string item_gb(const MemoryBreakdown& memory, const std::string& name) {
  const auto item = std::find_if(memory.items.begin(), memory.items.end(),
                                 [&](const MemoryItem& i) { return i.name == name; });
  if (item == memory.items.end()) return std::string(kMissing);
  return memory.at_peak(*item) ? gb_text(item->bytes) : "(" + gb_text(item->bytes) + ")";
}

// With `headroom`, the share of each GPU left free against the 15-30% practitioners keep (the
// run table has its own line for it).
std::string memory_table(const RunReport& report, bool headroom) {
  Table table(cells_for(report, [](const VariantReport& v) { return v.name; }));
  for (const std::string& name : memory_item_names(report)) {
    table.add("  " + name, cells_for(report, [&](const VariantReport& v) {
                return item_gb(v.outcome.memory, name);
              }));
  }
  table.add("  total (peak reserved)", cells_for(report, [](const VariantReport& v) {
              return gb_text(v.outcome.memory.total_bytes);
            }));
  table.add("  peak allocated (less fragmentation)", cells_for(report, [](const VariantReport& v) {
              return gb_text(v.outcome.memory.allocated_bytes());
            }));
  table.add("  capacity", cells_for(report, [](const VariantReport& v) {
              return gb_text(v.outcome.memory.capacity_bytes);
            }));
  table.add("  peak at", cells_for(report, [](const VariantReport& v) {
              return std::string(to_string(v.outcome.memory.peak));
            }));
  if (headroom) {
    table.add("  headroom (%, 15-30 kept free in practice)",
              cells_for(report, [](const VariantReport& v) {
                const MemoryBreakdown& memory = v.outcome.memory;
                return headroom_text(memory.headroom_fraction(), memory.fits());
              }));
  }
  const bool offloads =
      std::any_of(report.variants.begin(), report.variants.end(),
                  [](const VariantReport& v) { return v.inputs.plan.offloads_to_host(); });
  if (offloads) {
    table.add("host memory per node", cells_for(report, [](const VariantReport& v) {
                const MemoryBreakdown& memory = v.outcome.memory;
                if (!v.inputs.plan.offloads_to_host()) return std::string(kMissing);
                return gb_text(memory.host_bytes_per_node) + " of " +
                       gb_text(memory.host_capacity_bytes);
              }));
  }
  return "\nmemory per GPU at peak (GB; in parentheses, held at another moment)\n" + table.render();
}

std::string does_not_fit_section(const VariantReport& variant, double min_headroom) {
  const MemoryBreakdown& memory = variant.outcome.memory;
  const double usable = memory.usable_bytes(min_headroom);  // a plan's --min-headroom
  if (memory.gpu_fits(min_headroom)) {
    const std::string what = variant.inputs.plan.offload_optimizer
                                 ? "FP32 master weights, Adam moments and gradients of its shard"
                                 : "the offloaded layers' activations";
    return "\n" + variant.name + " does not fit: what is offloaded needs " +
           gb_text(memory.host_bytes_per_node) + " GB of host memory per node (" +
           gb_text(memory.host_bytes_per_rank) + " GB per rank: " + what + "), " +
           gb_text(memory.host_capacity_bytes) + " GB available\n";
  }
  std::size_t name_width = std::string("capacity").size();
  std::size_t gb_width = gb_text(memory.capacity_bytes).size();
  for (const MemoryItem& item : memory.items) {
    name_width = std::max(name_width, display_width(item.name));
    gb_width = std::max(gb_width, gb_text(item.bytes).size());
  }
  gb_width = std::max(gb_width, gb_text(memory.total_bytes).size());
  const auto line = [&](const std::string& name, double bytes, const std::string& basis) {
    std::string text =
        "  " + pad_right(name, name_width) + "  " + pad_left(gb_text(bytes), gb_width) + " GB";
    return (basis.empty() ? text : text + "  " + basis) + "\n";
  };
  const std::string kept_free = percent_text(min_headroom) + "% of it kept free";
  std::string text = "\n" + variant.name + " does not fit: needs " + gb_text(memory.total_bytes) +
                     " GB per GPU, " + gb_text(usable) + " GB available" +
                     (min_headroom > 0 ? " with " + kept_free : std::string()) + " (" +
                     gb_text(memory.total_bytes - usable) + " GB over)\n";
  for (const MemoryItem& item : memory.items) {
    text += line(item.name, item.bytes,
                 memory.at_peak(item) ? item.basis
                                      : item.basis + " (at " + to_string(item.moment) +
                                            ", not at the peak: not in the total)");
  }
  text +=
      line("total", memory.total_bytes,
           memory.peak == MemoryMoment::all_along ? std::string()
                                                  : std::string("at ") + to_string(memory.peak));
  text += line("capacity", memory.capacity_bytes, min_headroom > 0 ? kept_free : "");
  text += line("over by", memory.total_bytes - usable, "");
  return text;
}

std::string warnings_section(const RunReport& report) {
  std::string text;
  for (const VariantReport& variant : report.variants) {
    for (const std::string& warning : variant.outcome.warnings) {
      text += "  " + variant.name + ": " + warning + "\n";
    }
    // Every assumed interruption rate is said to be one.
    if (!variant.job) continue;
    for (const InterruptionCause& cause : variant.job->causes) {
      if (cause.source.starts_with("assumed:")) {
        text += "  " + variant.name + ": the " + cause.name + " interruption rate is " +
                cause.source + "\n";
      }
    }
    if (variant.job->spot && variant.job->spot->source.starts_with("assumed:")) {
      text +=
          "  " + variant.name + ": the spot preemption rate is " + variant.job->spot->source + "\n";
    }
    for (const DegradedStep& degraded : variant.job->degradations) {
      const Degradation& degradation = degraded.degradation;
      if (degradation.source.starts_with("assumed:")) {
        text += "  " + variant.name + ": the " + degradation.name + " rate is " +
                degradation.source + "\n";
      }
    }
  }
  return text.empty() ? text : "\nwarnings\n" + text;
}

std::string basis_section(const RunReport& report) {
  std::string text;
  std::vector<std::string> seen;
  for (const VariantReport& variant : report.variants) {
    for (const MemoryItem& item : variant.outcome.memory.items) {
      const std::string line = "  " + item.name + ": " + item.basis + "\n";
      if (std::find(seen.begin(), seen.end(), line) != seen.end()) continue;
      seen.push_back(line);
      text += line;
    }
  }
  return text.empty() ? text : "\nwhat each item assumes\n" + text;
}

// Each measured variant's prediction beside its measurement (`fleetsim memory`: the memory).
std::string measured_sections(const RunReport& report) {
  std::string text;
  for (const VariantReport& variant : report.variants) {
    if (!variant.measured) continue;
    text += measured_section(variant.name, *variant.measured,
                             compare_measured(*variant.measured, variant.inputs, variant.outcome));
  }
  return text;
}

}  // namespace

std::string render_memory(const RunReport& report) {
  check_registered();
  std::string text = header_text(report);
  if (report.variants.empty()) {
    return text + "no variants\n";
  }
  Table table(cells_for(report, [](const VariantReport& v) { return v.name; }));
  add_rows(table, report, kSetup);
  text += table.render() + memory_table(report, /*headroom=*/true);
  text += basis_section(report);
  for (const VariantReport& variant : report.variants) {
    if (!variant.outcome.memory.fits()) text += does_not_fit_section(variant, 0);
  }
  text += measured_sections(report);
  return text + warnings_section(report);
}

std::string render_sweep(const RunReport& report) {
  check_registered();
  std::string text = header_text(report);
  std::vector<std::string> headers = headers_of(report, kSweepSize);
  headers.push_back("scaling efficiency");
  for (const std::string& header : headers_of(report, kSweepShape)) headers.push_back(header);
  Table table(std::move(headers));
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    std::vector<std::string> cells = row_of(report, i, kSweepSize);
    const std::optional<double> efficiency = scaling_efficiency_in_sweep(report, i);
    cells.push_back(efficiency ? fixed(*efficiency, 3) : kMissing);
    for (std::string& shape : row_of(report, i, kSweepShape)) cells.push_back(std::move(shape));
    table.add(report.variants[i].name, std::move(cells));
  }
  return text + table.render() + warnings_section(report);
}

std::string render_plan(const RunReport& report) {
  check_registered();
  std::string text = header_text(report);
  if (report.plan) {
    const PlanSummary& plan = *report.plan;
    text += "layouts: " + grouped_integer(static_cast<double>(plan.layouts)) + " searched, " +
            grouped_integer(static_cast<double>(plan.refused)) + " refused by the job rules, " +
            grouped_integer(static_cast<double>(plan.not_fitting)) +
            (plan.min_headroom > 0
                 ? " do not fit with " + percent_text(plan.min_headroom) + "% of memory free, "
                 : std::string(" do not fit, ")) +
            grouped_integer(static_cast<double>(plan.replayed)) + " replayed, " +
            grouped_integer(static_cast<double>(plan.bounded_out)) +
            " ruled out by their lower bound" +
            (plan.offload_alternatives > 0
                 ? " (" + grouped_integer(static_cast<double>(plan.offload_alternatives)) +
                       " tried twice: recomputed, and with activations offloaded)"
                 : std::string()) +
            "\nsearch: " + fixed(plan.search_s, 2) + " s\n\n";
  }
  if (report.variants.empty()) {
    text += report.plan && report.plan->min_headroom > 0
                ? "no layout fits with " + percent_text(report.plan->min_headroom) +
                      "% of memory free\n"
                : std::string("no layout fits\n");
    if (report.plan && report.plan->leanest) {
      text +=
          "\nthe leanest:" + does_not_fit_section(*report.plan->leanest, report.plan->min_headroom);
    }
    return text;
  }
  const VariantReport& first = report.variants.front();
  text += "model " + first.inputs.model.name + " on " + grouped_integer(total_gpus(first.inputs)) +
          (total_gpus(first.inputs) == 1 ? " GPU (" : " GPUs (") +
          std::to_string(first.inputs.nodes) + " x " + first.inputs.node.name + ", " +
          first.inputs.gpu.name + "), global batch " +
          grouped_integer(first.inputs.training.global_batch) + " x " +
          grouped_integer(first.inputs.training.seq_len) + " tokens\n\n";
  // With a run, the layouts are ranked by their run's expected cost (or wall time).
  const bool runs = first.job_result.has_value();
  const bool priced = runs && first.run->priced;
  if (runs) {
    text += std::string("ranked by the run's expected ") +
            (priced ? "cost to train" : "time to train") + " (mean of " +
            grouped_integer(static_cast<double>(first.job_result->replications.size())) +
            " replications)\n\n";
  }
  std::vector<Quantity> columns(std::begin(kPlanStep), std::end(kPlanStep));
  if (runs) columns.insert(columns.end(), std::begin(kPlanRun), std::end(kPlanRun));
  if (priced) columns.push_back(kPlanCost);
  Table table(headers_of(report, columns));
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    table.add(std::to_string(i + 1) + ". " + report.variants[i].name, row_of(report, i, columns));
  }
  return text + table.render() + warnings_section(report);
}

std::string render_console(const RunReport& report) {
  std::string text = header_text(report);
  if (report.variants.empty()) {
    return text + "no variants\n";
  }
  text += main_table(report);
  text += memory_table(report, /*headroom=*/false);
  for (const VariantReport& variant : report.variants) {
    if (!variant.outcome.simulated) {
      text += does_not_fit_section(variant, 0);
    }
  }
  for (const VariantReport& variant : report.variants) {
    if (variant.attribution) text += attribution_section(*variant.attribution);
  }
  for (const VariantReport& variant : report.variants) {
    if (variant.sensitivity) text += sensitivity_section(variant.name, *variant.sensitivity);
  }
  text += measured_sections(report);
  return text + warnings_section(report);
}

}  // namespace fleetsim
