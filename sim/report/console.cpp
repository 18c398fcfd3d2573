// The console table: one column per variant, one row per quantity, units in the row labels.
//
// Everything here is text layout; the numbers come straight from the report records. Widths are
// measured in displayed characters (UTF-8 code points) because the table uses "—" for missing
// values.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "sim/report/report.hpp"

namespace fleetsim {
namespace {

constexpr const char* kMissing = "—";
constexpr double kBytesPerGB = 1e9;  // decimal GB, as HBM capacities are quoted
constexpr double kDay = 86400;       // seconds

// std::to_chars, unlike printf, ignores the process locale: a table never shows "1,5" for 1.5.
std::string fixed(double value, int decimals) {
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed, decimals);
  return std::string(buffer, result.ptr);
}

std::string significant(double value, int digits) {
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general, digits);
  return std::string(buffer, result.ptr);
}

// Milliseconds matter in a step breakdown, so small values keep three significant digits
// instead of rounding to 0.000.
std::string seconds_text(double seconds) {
  if (seconds == 0.0 || std::abs(seconds) >= 0.01) {
    return fixed(seconds, 3);
  }
  return significant(seconds, 3);
}

// 1234567.8 -> "1,234,568"
std::string grouped_integer(double value) {
  const long long rounded = std::llround(value);
  const std::string digits = std::to_string(rounded < 0 ? -rounded : rounded);
  std::string text;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      text += ',';
    }
    text += digits[i];
  }
  return rounded < 0 ? "-" + text : text;
}

std::string gb_text(double bytes) {
  return fixed(bytes / kBytesPerGB, 2);
}
std::string percent_text(double fraction) {
  return fixed(100.0 * fraction, 1);
}

std::size_t display_width(const std::string& text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

std::string pad_left(const std::string& text, std::size_t width) {
  const std::size_t shown = display_width(text);
  return shown >= width ? text : std::string(width - shown, ' ') + text;
}

std::string pad_right(const std::string& text, std::size_t width) {
  const std::size_t shown = display_width(text);
  return shown >= width ? text : text + std::string(width - shown, ' ');
}

// A label column followed by right-aligned value columns; widths fit the content.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back({"", std::move(header)}); }

  void add(std::string label, std::vector<std::string> cells) {
    rows_.push_back({std::move(label), std::move(cells)});
  }

  std::string render() const {
    const std::vector<std::size_t> widths = column_widths();
    std::string text;
    for (const Row& row : rows_) {
      std::string line = pad_right(row.label, widths[0]);
      for (std::size_t column = 0; column < row.cells.size(); ++column) {
        line += "  " + pad_left(row.cells[column], widths[column + 1]);
      }
      text += line + "\n";
    }
    return text;
  }

 private:
  struct Row {
    std::string label;
    std::vector<std::string> cells;
  };

  std::vector<std::size_t> column_widths() const {
    std::vector<std::size_t> widths(1, 0);
    for (const Row& row : rows_) {
      widths.resize(std::max(widths.size(), row.cells.size() + 1), 0);
      widths[0] = std::max(widths[0], display_width(row.label));
      for (std::size_t column = 0; column < row.cells.size(); ++column) {
        widths[column + 1] = std::max(widths[column + 1], display_width(row.cells[column]));
      }
    }
    return widths;
  }

  std::vector<Row> rows_;
};

using CellFn = std::function<std::string(const VariantReport&)>;

std::vector<std::string> cells_for(const RunReport& report, const CellFn& cell) {
  std::vector<std::string> cells;
  for (const VariantReport& variant : report.variants) {
    cells.push_back(cell(variant));
  }
  return cells;
}

// A step quantity exists only for simulated variants.
CellFn step_cell(std::function<std::string(const StepResult&)> format) {
  return [format = std::move(format)](const VariantReport& v) {
    return v.outcome.simulated ? format(v.outcome.step) : std::string(kMissing);
  };
}

int total_gpus(const StepInputs& inputs) {
  return inputs.nodes * inputs.node.gpus;
}

bool low_headroom(const MemoryBreakdown& memory) {
  return memory.fits() && memory.headroom_fraction() < kMinComfortableHeadroom;
}

void add_setup_rows(Table& table, const RunReport& report) {
  table.add("node preset",
            cells_for(report, [](const VariantReport& v) { return v.inputs.node.name; }));
  table.add("GPUs (nodes x GPUs/node)", cells_for(report, [](const VariantReport& v) {
              return std::to_string(total_gpus(v.inputs)) + " (" + std::to_string(v.inputs.nodes) +
                     " x " + std::to_string(v.inputs.node.gpus) + ")";
            }));
  const bool multi_node = std::any_of(report.variants.begin(), report.variants.end(),
                                      [](const VariantReport& v) { return v.inputs.nodes > 1; });
  if (multi_node) {
    table.add("fabric (oversubscription, placement)", cells_for(report, [](const VariantReport& v) {
                if (v.inputs.nodes == 1) return std::string(kMissing);
                const FabricSpec& f = v.inputs.fabric;
                return fixed(f.oversubscription,
                             f.oversubscription == std::floor(f.oversubscription) ? 0 : 1) +
                       ":1 " + (f.placement == NodePlacement::spread ? "spread" : "packed");
              }));
  }
  table.add("GPU profile",
            cells_for(report, [](const VariantReport& v) { return v.inputs.gpu.name; }));
  table.add("model", cells_for(report, [](const VariantReport& v) {
              const auto& lora = v.inputs.training.lora;
              return v.inputs.model.name +
                     (lora ? std::string(lora->quantized_base ? " (QLoRA rank " : " (LoRA rank ") +
                                 std::to_string(lora->rank) + ")"
                           : "") +
                     (v.inputs.training.precision == Precision::fp8 ? " FP8" : "");
            }));
  table.add("layout",
            cells_for(report, [](const VariantReport& v) { return layout_label(v.inputs.plan); }));
}

void add_step_rows(Table& table, const RunReport& report) {
  table.add("step time (s)", cells_for(report, [](const VariantReport& v) {
              return v.outcome.simulated ? seconds_text(v.outcome.step.step_time_s)
                                         : std::string("does not fit");
            }));
  table.add("tokens/s", cells_for(report, step_cell([](const StepResult& s) {
                                    return grouped_integer(s.tokens_per_s);
                                  })));
  table.add("tokens/s per GPU", cells_for(report, [](const VariantReport& v) {
              const int gpus = total_gpus(v.inputs);
              if (!v.outcome.simulated || gpus <= 0) {
                return std::string(kMissing);
              }
              return grouped_integer(v.outcome.step.tokens_per_s / gpus);
            }));
  table.add("MFU (%)",
            cells_for(report, step_cell([](const StepResult& s) { return percent_text(s.mfu); })));
  table.add("HFU (%)",
            cells_for(report, step_cell([](const StepResult& s) { return percent_text(s.hfu); })));
}

void add_breakdown_rows(Table& table, const RunReport& report) {
  table.add("compute per step (s)", cells_for(report, step_cell([](const StepResult& s) {
                                                return seconds_text(s.breakdown.compute_s);
                                              })));
  table.add("exposed comm per step (s)",
            cells_for(report, step_cell([](const StepResult& s) {
                        return seconds_text(s.breakdown.exposed_comm_s);
                      })));
  // What the exposed communication is for, where any is.
  const auto kinds = [&](double StepBreakdown::*member) {
    return std::any_of(report.variants.begin(), report.variants.end(), [&](const auto& v) {
      return v.outcome.simulated && v.outcome.step.breakdown.*member > 0;
    });
  };
  for (const auto& [label, member] :
       {std::pair{"  data-parallel (s)", &StepBreakdown::exposed_dp_s},
        std::pair{"  tensor/context/expert-parallel (s)", &StepBreakdown::exposed_tp_s},
        std::pair{"  pipeline transfers (s)", &StepBreakdown::exposed_pp_s},
        std::pair{"  offload copies (s)", &StepBreakdown::exposed_host_s}}) {
    if (!kinds(member)) continue;
    table.add(label, cells_for(report, step_cell([member = member](const StepResult& s) {
                                 return seconds_text(s.breakdown.*member);
                               })));
  }
  table.add("idle per step (s)", cells_for(report, step_cell([](const StepResult& s) {
                                             return seconds_text(s.breakdown.idle_s);
                                           })));
  table.add("comm per GPU per step (GB)", cells_for(report, step_cell([](const StepResult& s) {
                                                      return gb_text(s.comm_bytes_per_gpu);
                                                    })));
}

void add_memory_rows(Table& table, const RunReport& report) {
  table.add("memory per GPU (GB, % of capacity)", cells_for(report, [](const VariantReport& v) {
              const MemoryBreakdown& memory = v.outcome.memory;
              const double used =
                  memory.capacity_bytes > 0 ? memory.total_bytes / memory.capacity_bytes : 0.0;
              return gb_text(memory.total_bytes) + " (" + percent_text(used) + "%)";
            }));
  table.add("headroom (%)", cells_for(report, [](const VariantReport& v) {
              const MemoryBreakdown& memory = v.outcome.memory;
              const std::string value = percent_text(memory.headroom_fraction());
              return low_headroom(memory) ? value + " low" : value;
            }));
}

void add_speedup_row(Table& table, const RunReport& report) {
  std::vector<std::string> cells;
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    const std::optional<double> speedup = speedup_vs_first(report, i);
    cells.push_back(speedup ? fixed(*speedup, 2) + "x" : std::string(kMissing));
  }
  table.add("speed-up vs " + report.variants.front().name + " (tokens/s)", std::move(cells));

  const bool any_scaling = [&] {
    for (std::size_t i = 0; i < report.variants.size(); ++i) {
      if (scaling_efficiency_vs_first(report, i)) return true;
    }
    return false;
  }();
  if (!any_scaling) return;
  cells.clear();
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    const std::optional<double> scaling = scaling_efficiency_vs_first(report, i);
    cells.push_back(scaling ? percent_text(*scaling) : std::string(kMissing));
  }
  table.add("scaling efficiency vs " + report.variants.front().name + " (%, per GPU)",
            std::move(cells));
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

// A run's Monte Carlo, for the variants that have one (see sim/job).
void add_run_rows(Table& table, const RunReport& report) {
  const bool any = std::any_of(report.variants.begin(), report.variants.end(),
                               [](const VariantReport& v) { return v.job_result.has_value(); });
  if (!any) return;
  const auto run_cell = [](auto text_of) {
    return [text_of](const VariantReport& v) {
      return v.job_result ? text_of(*v.job, *v.job_result) : std::string(kMissing);
    };
  };
  table.add("run: steps to train",
            cells_for(report, run_cell([](const JobSpec& job, const JobResult&) {
                        return grouped_integer(job.steps);
                      })));
  const bool jitters =
      std::any_of(report.variants.begin(), report.variants.end(),
                  [](const VariantReport& v) { return v.job && v.job->jitter_factor != 1; });
  if (jitters) {
    table.add("run step with jitter (s)",
              cells_for(report, run_cell([](const JobSpec& job, const JobResult&) {
                          return seconds_text(job.step_s);
                        })));
  }
  table.add("checkpoint write, restore (s)",
            cells_for(report, run_cell([](const JobSpec& job, const JobResult&) {
                        std::string write = seconds_text(job.checkpoint_write_s);
                        if (job.write == CheckpointWrite::async) {
                          write = "async: copy " + seconds_text(job.checkpoint_copy_s) +
                                  ", write " + write;
                        } else if (job.write == CheckpointWrite::in_memory) {
                          write = "in memory: copy " + seconds_text(job.checkpoint_copy_s) +
                                  ", to peer " + seconds_text(job.peer_copy_s) + ", write " + write;
                        }
                        const std::string restore = job.write == CheckpointWrite::in_memory
                                                        ? seconds_text(job.peer_restore_s) +
                                                              " (from storage " +
                                                              seconds_text(job.restore_s) + ")"
                                                        : seconds_text(job.restore_s);
                        return write + ", " + restore;
                      })));
  table.add("mean time between interruptions (h)",
            cells_for(report, run_cell([](const JobSpec&, const JobResult& r) {
                        return std::isfinite(r.mtbf_s) ? fixed(r.mtbf_s / 3600, 2)
                                                       : std::string("none");
                      })));
  table.add("checkpoint every (steps, min)",
            cells_for(report, run_cell([](const JobSpec& job, const JobResult& r) {
                        return grouped_integer(r.interval_steps) + ", " +
                               fixed(r.interval_steps * job.step_s / 60, 1);
                      })));
  table.add("time to train P50 / P90 (days)",
            cells_for(report, run_cell([](const JobSpec&, const JobResult& r) {
                        return fixed(r.wall_s.p50 / kDay, 2) + " / " +
                               fixed(r.wall_s.p90 / kDay, 2);
                      })));
  table.add("goodput, mean (99% CI)",
            cells_for(report, run_cell([](const JobSpec&, const JobResult& r) {
                        return fixed(r.goodput.mean, 3) + " +- " +
                               fixed(r.goodput.ci99_half_width, 3);
                      })));
  table.add("interruptions, mean (P90)",
            cells_for(report, run_cell([](const JobSpec&, const JobResult& r) {
                        return fixed(r.interruptions.mean, 1) + " (" +
                               fixed(r.interruptions.p90, 0) + ")";
                      })));
  const bool spot = std::any_of(report.variants.begin(), report.variants.end(),
                                [](const VariantReport& v) { return v.job && v.job->spot; });
  if (spot) {
    table.add("spot preemptions, mean (P90)",
              cells_for(report, run_cell([](const JobSpec& job, const JobResult& r) {
                          if (!job.spot) return std::string(kMissing);
                          return fixed(r.preemptions.mean, 1) + " (" + fixed(r.preemptions.p90, 0) +
                                 ")";
                        })));
  }
  const bool repairs =
      std::any_of(report.variants.begin(), report.variants.end(),
                  [](const VariantReport& v) { return v.job && v.job->node_repair_s > 0; });
  if (repairs) {
    table.add("node repair (h), hot spares",
              cells_for(report, run_cell([](const JobSpec& job, const JobResult&) {
                          return fixed(job.node_repair_s / 3600, 1) + ", " +
                                 std::to_string(job.hot_spares);
                        })));
    table.add("waiting for nodes (h), mean (P90)",
              cells_for(report, run_cell([](const JobSpec&, const JobResult& r) {
                          return fixed(r.node_wait_s.mean / 3600, 1) + " (" +
                                 fixed(r.node_wait_s.p90 / 3600, 1) + ")";
                        })));
    const bool shrinks =
        std::any_of(report.variants.begin(), report.variants.end(), [](const VariantReport& v) {
          return v.job && v.job->when_short == ShortagePolicy::shrink;
        });
    if (shrinks) {
      table.add("shrunk (h), regrows, mean",
                cells_for(report, run_cell([](const JobSpec& job, const JobResult& r) {
                            if (job.when_short != ShortagePolicy::shrink) {
                              return std::string(kMissing);
                            }
                            return fixed(r.shrunk_s.mean / 3600, 1) + ", " +
                                   fixed(r.regrows.mean, 1);
                          })));
    }
  }
  const bool degrades =
      std::any_of(report.variants.begin(), report.variants.end(),
                  [](const VariantReport& v) { return v.job && !v.job->degradations.empty(); });
  if (degrades) {
    table.add("degraded (h), evictions, mean",
              cells_for(report, run_cell([](const JobSpec& job, const JobResult& r) {
                          if (job.degradations.empty()) return std::string(kMissing);
                          return fixed(r.degraded_s.mean / 3600, 1) + ", " +
                                 fixed(r.evictions.mean, 1);
                        })));
  }
  table.add("lost GPU-hours, mean",
            cells_for(report, run_cell([](const JobSpec&, const JobResult& r) {
                        return grouped_integer(r.lost_gpu_hours.mean);
                      })));
  const auto priced_cell = [](auto text_of) {
    return [text_of](const VariantReport& v) {
      return v.job_result && v.run->priced ? text_of(*v.job_result) : std::string(kMissing);
    };
  };
  table.add("cost P50 / P90 (USD)", cells_for(report, priced_cell([](const JobResult& r) {
                                                return grouped_integer(r.cost_usd.p50) + " / " +
                                                       grouped_integer(r.cost_usd.p90);
                                              })));
  table.add("per million tokens P50 (USD)", cells_for(report, priced_cell([](const JobResult& r) {
                                                        return fixed(r.usd_per_million_tokens.p50,
                                                                     3);
                                                      })));
  table.add("stall per written checkpoint, mean (USD)",
            cells_for(report, priced_cell([](const JobResult& r) {
                        return fixed(r.usd_per_checkpoint.mean, 2);
                      })));
}

std::string main_table(const RunReport& report) {
  Table table(cells_for(report, [](const VariantReport& v) { return v.name; }));
  add_setup_rows(table, report);
  add_step_rows(table, report);
  add_breakdown_rows(table, report);
  add_memory_rows(table, report);
  add_speedup_row(table, report);
  add_run_rows(table, report);
  return table.render();
}

// Item names in order of first appearance; every variant normally lists the same items.
std::vector<std::string> memory_item_names(const RunReport& report) {
  std::vector<std::string> names;
  for (const VariantReport& variant : report.variants) {
    for (const MemoryItem& item : variant.outcome.memory.items) {
      if (std::find(names.begin(), names.end(), item.name) == names.end()) {
        names.push_back(item.name);
      }
    }
  }
  return names;
}

std::string item_gb(const MemoryBreakdown& memory, const std::string& name) {
  const auto item = std::find_if(memory.items.begin(), memory.items.end(),
                                 [&](const MemoryItem& i) { return i.name == name; });
  return item == memory.items.end() ? std::string(kMissing) : gb_text(item->bytes);
}

std::string memory_table(const RunReport& report) {
  Table table(cells_for(report, [](const VariantReport& v) { return v.name; }));
  for (const std::string& name : memory_item_names(report)) {
    table.add("  " + name, cells_for(report, [&](const VariantReport& v) {
                return item_gb(v.outcome.memory, name);
              }));
  }
  table.add("  total", cells_for(report, [](const VariantReport& v) {
              return gb_text(v.outcome.memory.total_bytes);
            }));
  table.add("  capacity", cells_for(report, [](const VariantReport& v) {
              return gb_text(v.outcome.memory.capacity_bytes);
            }));
  const bool offloads =
      std::any_of(report.variants.begin(), report.variants.end(),
                  [](const VariantReport& v) { return v.inputs.plan.offload_optimizer; });
  if (offloads) {
    table.add("host memory per node", cells_for(report, [](const VariantReport& v) {
                const MemoryBreakdown& memory = v.outcome.memory;
                if (!v.inputs.plan.offload_optimizer) return std::string(kMissing);
                return gb_text(memory.host_bytes_per_node) + " of " +
                       gb_text(memory.host_capacity_bytes);
              }));
  }
  return "\nmemory per GPU at peak (GB)\n" + table.render();
}

std::string does_not_fit_section(const VariantReport& variant) {
  const MemoryBreakdown& memory = variant.outcome.memory;
  if (memory.gpu_fits()) {
    return "\n" + variant.name + " does not fit: the offloaded optimizer needs " +
           gb_text(memory.host_bytes_per_node) + " GB of host memory per node (" +
           gb_text(memory.host_bytes_per_rank) +
           " GB per rank: FP32 master weights, Adam moments and gradients of its shard), " +
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
  std::string text = "\n" + variant.name + " does not fit: needs " + gb_text(memory.total_bytes) +
                     " GB per GPU, " + gb_text(memory.capacity_bytes) + " GB available (" +
                     gb_text(memory.total_bytes - memory.capacity_bytes) + " GB over)\n";
  for (const MemoryItem& item : memory.items) {
    text += line(item.name, item.bytes, item.basis);
  }
  text += line("total", memory.total_bytes, "");
  text += line("capacity", memory.capacity_bytes, "");
  text += line("over by", memory.total_bytes - memory.capacity_bytes, "");
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

}  // namespace

std::string render_memory(const RunReport& report) {
  std::string text = header_text(report);
  if (report.variants.empty()) {
    return text + "no variants\n";
  }
  Table table(cells_for(report, [](const VariantReport& v) { return v.name; }));
  add_setup_rows(table, report);
  text += table.render() + memory_table(report);
  text += basis_section(report);
  for (const VariantReport& variant : report.variants) {
    if (!variant.outcome.memory.fits()) text += does_not_fit_section(variant);
  }
  return text + warnings_section(report);
}

// What holds a step most: computing, the exposed communication of one kind (data-, tensor- or
// pipeline-parallel, offload copies), or waiting (pipeline bubbles, ranks waiting for each
// other); ties to the first.
std::string largest_share(const StepBreakdown& parts) {
  const std::pair<const char*, double> shares[] = {{"compute", parts.compute_s},
                                                   {"exposed DP comm", parts.exposed_dp_s},
                                                   {"exposed TP/CP/EP comm", parts.exposed_tp_s},
                                                   {"exposed PP comm", parts.exposed_pp_s},
                                                   {"exposed offload copies", parts.exposed_host_s},
                                                   {"idle (bubble, waits)", parts.idle_s}};
  const auto* largest = &shares[0];
  for (const auto& share : shares) {
    if (share.second > largest->second) largest = &share;
  }
  return largest->first;
}

// A CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180).
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string render_sweep(const RunReport& report) {
  std::string text = header_text(report);
  Table table({"GPUs", "step time (s)", "tokens/s", "tokens/s per GPU", "scaling efficiency",
               "MFU (%)", "largest share of the step", "layout"});
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    const VariantReport& point = report.variants[i];
    const std::string gpus = grouped_integer(total_gpus(point.inputs));
    if (!point.outcome.simulated) {
      table.add(point.name, {gpus, "does not fit", kMissing, kMissing, kMissing, kMissing, kMissing,
                             layout_label(point.inputs.plan)});
      continue;
    }
    const StepResult& step = point.outcome.step;
    const std::optional<double> efficiency = scaling_efficiency_in_sweep(report, i);
    table.add(point.name, {gpus, seconds_text(step.step_time_s), grouped_integer(step.tokens_per_s),
                           grouped_integer(step.tokens_per_s / total_gpus(point.inputs)),
                           efficiency ? fixed(*efficiency, 3) : kMissing, fixed(100 * step.mfu, 1),
                           largest_share(step.breakdown), layout_label(point.inputs.plan)});
  }
  return text + table.render() + warnings_section(report);
}

std::string render_sweep_csv(const RunReport& report) {
  std::string text = "point";
  if (!report.variants.empty()) {
    for (const auto& [path, value] : report.variants.front().swept) text += "," + csv_field(path);
  }
  text +=
      ",gpus,fits,step_time_s,tokens_per_s,tokens_per_s_per_gpu,scaling_efficiency,mfu,"
      "largest_share,layout\n";
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    const VariantReport& point = report.variants[i];
    text += csv_field(point.name);
    for (const auto& [path, value] : point.swept) text += "," + csv_field(value);
    const int gpus = total_gpus(point.inputs);
    text += "," + std::to_string(gpus);
    const std::string layout = csv_field(layout_label(point.inputs.plan));
    if (!point.outcome.simulated) {
      text += ",false,,,,,,," + layout + "\n";
      continue;
    }
    const StepResult& step = point.outcome.step;
    const std::optional<double> efficiency = scaling_efficiency_in_sweep(report, i);
    text += ",true," + significant(step.step_time_s, 9) + "," + significant(step.tokens_per_s, 9) +
            "," + significant(step.tokens_per_s / gpus, 9) + "," +
            (efficiency ? significant(*efficiency, 9) : "") + "," + significant(step.mfu, 9) + "," +
            csv_field(largest_share(step.breakdown)) + "," + layout + "\n";
  }
  return text;
}

std::string render_plan(const RunReport& report) {
  std::string text = header_text(report);
  if (report.plan) {
    const PlanSummary& plan = *report.plan;
    text += "layouts: " + grouped_integer(static_cast<double>(plan.layouts)) + " searched, " +
            grouped_integer(static_cast<double>(plan.refused)) + " refused by the job rules, " +
            grouped_integer(static_cast<double>(plan.not_fitting)) + " do not fit, " +
            grouped_integer(static_cast<double>(plan.replayed)) + " replayed, " +
            grouped_integer(static_cast<double>(plan.bounded_out)) +
            " ruled out by their lower bound\nsearch: " + fixed(plan.search_s, 2) + " s\n\n";
  }
  if (report.variants.empty()) {
    text += "no layout fits\n";
    if (report.plan && report.plan->leanest) {
      text += "\nthe leanest:" + does_not_fit_section(*report.plan->leanest);
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
  std::vector<std::string> columns{"step time (s)", "tokens/s", "MFU (%)", "memory (GB)",
                                   "headroom (%)"};
  if (runs) {
    columns.insert(columns.end(), {"time to train P50 / P90 (days)", "goodput"});
    if (priced) columns.push_back("cost P50 / P90 (USD)");
  }
  Table table(columns);
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    const VariantReport& variant = report.variants[i];
    const StepResult& step = variant.outcome.step;
    const MemoryBreakdown& memory = variant.outcome.memory;
    std::vector<std::string> cells{seconds_text(step.step_time_s),
                                   grouped_integer(step.tokens_per_s), fixed(100 * step.mfu, 1),
                                   fixed(memory.total_bytes / kBytesPerGB, 2),
                                   fixed(100 * memory.headroom_fraction(), 1)};
    if (runs && !variant.job_result) {  // its run could not be simulated (see the warnings)
      cells.insert(cells.end(), priced ? 3 : 2, std::string(kMissing));
    } else if (runs) {
      const JobResult& r = *variant.job_result;
      cells.push_back(fixed(r.wall_s.p50 / kDay, 2) + " / " + fixed(r.wall_s.p90 / kDay, 2));
      cells.push_back(fixed(r.goodput.mean, 3));
      if (priced) {
        cells.push_back(grouped_integer(r.cost_usd.p50) + " / " + grouped_integer(r.cost_usd.p90));
      }
    }
    table.add(std::to_string(i + 1) + ". " + variant.name, cells);
  }
  return text + table.render() + warnings_section(report);
}

// A table's rows, the first column left-aligned, the others right-aligned, two spaces apart.
std::string aligned_rows(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (std::size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], display_width(row[c]));
    }
  }
  std::string text;
  for (const auto& row : rows) {
    text += "  " + pad_right(row[0], widths[0]);
    for (std::size_t c = 1; c < row.size(); ++c) text += "  " + pad_left(row[c], widths[c]);
    text += "\n";
  }
  return text;
}

// A metric's name and its value as the console shows it.
std::string metric_title(const std::string& metric) {
  if (metric == "step_time_s") return "step time (s)";
  if (metric == "tokens_per_s") return "tokens/s";
  if (metric == "mfu") return "MFU (%)";
  if (metric == "wall_s_mean") return "time to train, mean (days)";
  return "cost, mean (USD)";
}
std::string metric_text(const std::string& metric, double value) {
  if (metric == "step_time_s") return seconds_text(value);
  if (metric == "tokens_per_s") return grouped_integer(value);
  if (metric == "mfu") return percent_text(value);
  if (metric == "wall_s_mean") return fixed(value / kDay, 2);
  return grouped_integer(value);
}

// Why a variant differs from the first: one row per factor, one column per attributed metric,
// the parts adding up to the total row (Shapley values, sim/analysis/attribution.hpp).
std::string attribution_section(const Attribution& a) {
  std::string text = "\nwhy " + a.variant + " differs from " + a.baseline;
  if (!a.not_attributed.empty()) return text + ": not attributed, " + a.not_attributed + "\n";
  if (a.factors.empty()) return text + ": it does not, in anything the simulation reads\n";
  text += " (Shapley values over " + std::to_string(a.factors.size()) + " factor" +
          (a.factors.size() == 1 ? "" : "s") + ", " + std::to_string(a.counterfactuals) +
          " simulations)\n";
  // A part with its sign; exactly zero (a factor that changes nothing the metric depends on)
  // reads "0".
  const auto part_text = [&](std::size_t m, double value) {
    if (value == 0) return std::string("0");
    const std::string number = metric_text(a.metrics[m], value);
    return number.front() == '-' ? number : "+" + number;
  };
  std::vector<std::vector<std::string>> rows{{""}};
  for (const std::string& metric : a.metrics) rows[0].push_back(metric_title(metric));
  for (std::size_t i = 0; i < a.factors.size(); ++i) {
    rows.push_back({label(a.factors[i])});
    for (std::size_t m = 0; m < a.metrics.size(); ++m)
      rows.back().push_back(part_text(m, a.parts[i][m]));
  }
  std::vector<std::string> total{"total"}, from{a.baseline}, to{a.variant};
  for (std::size_t m = 0; m < a.metrics.size(); ++m) {
    total.push_back(part_text(m, a.variant_values[m] - a.baseline_values[m]));
    from.push_back(metric_text(a.metrics[m], a.baseline_values[m]));
    to.push_back(metric_text(a.metrics[m], a.variant_values[m]));
  }
  rows.push_back(std::move(total));
  rows.push_back(std::move(from));
  rows.push_back(std::move(to));
  return text + aligned_rows(rows);
}

// A variant's prediction interval, then its inputs by how far one sigma moves the result.
std::string sensitivity_section(const std::string& name, const Sensitivity& s) {
  std::string text = "\nsensitivity of " + name;
  if (!s.not_simulated.empty()) return text + ": not simulated: " + s.not_simulated + "\n";
  const std::string low = "P" + fixed(100 * (1 - s.coverage) / 2, 0);
  const std::string high = "P" + fixed(100 * (1 + s.coverage) / 2, 0);
  text += " (" + std::to_string(s.draws) + " draws of " + std::to_string(s.swings.size()) +
          " uncertain inputs within their sigma)\n";
  if (s.failed_draws > 0) {
    text += "  " + std::to_string(s.failed_draws) + " draws did not run and are left out (" +
            s.failure + ")\n";
  } else if (!s.failure.empty()) {
    text += "  a swing did not run, shown as nan (" + s.failure + ")\n";
  }
  std::vector<std::vector<std::string>> rows{{"", "nominal", low, "P50", high}};
  for (const MetricInterval& interval : s.intervals) {
    rows.push_back({metric_title(interval.metric), metric_text(interval.metric, interval.nominal),
                    metric_text(interval.metric, interval.low),
                    metric_text(interval.metric, interval.median),
                    metric_text(interval.metric, interval.high)});
  }
  text += aligned_rows(rows);
  if (s.swings.empty()) return text;
  // The swing of the first metric (the step time) and, for runs, of the time to train.
  std::vector<std::size_t> shown{0};
  for (std::size_t m = 0; m < s.metrics.size(); ++m) {
    if (s.metrics[m] == "wall_s_mean") shown.push_back(m);
  }
  text += "each input one sigma below and above its value, the others at theirs:\n";
  std::vector<std::vector<std::string>> swing_rows{{"input", "value", "sigma"}};
  for (std::size_t m : shown) {
    swing_rows[0].push_back(metric_title(s.metrics[m]) + " -1 sigma");
    swing_rows[0].push_back("+1 sigma");
  }
  for (const InputSwing& swing : s.swings) {
    std::vector<std::string> row{swing.input.name, significant(swing.input.value, 4),
                                 significant(swing.input.sigma, 3)};
    for (std::size_t m : shown) {
      row.push_back(metric_text(s.metrics[m], swing.minus[m]));
      row.push_back(metric_text(s.metrics[m], swing.plus[m]));
    }
    swing_rows.push_back(std::move(row));
  }
  return text + aligned_rows(swing_rows);
}

std::string render_console(const RunReport& report) {
  std::string text = header_text(report);
  if (report.variants.empty()) {
    return text + "no variants\n";
  }
  text += main_table(report);
  text += memory_table(report);
  for (const VariantReport& variant : report.variants) {
    if (!variant.outcome.simulated) {
      text += does_not_fit_section(variant);
    }
  }
  for (const VariantReport& variant : report.variants) {
    if (variant.attribution) text += attribution_section(*variant.attribution);
  }
  for (const VariantReport& variant : report.variants) {
    if (variant.sensitivity) text += sensitivity_section(variant.name, *variant.sensitivity);
  }
  return text + warnings_section(report);
}

}  // namespace fleetsim
