// The HDF5 result file: every scalar from the result registry (result_fields.hpp) as an
// attribute of the root, a variant's group or its run group, and the tables as datasets. The
// layout of the file is docs/results-schema.md, generated from the registry.
#include <H5Cpp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "sim/analysis/configuration.hpp"
#include "sim/engine/errors.hpp"
#include "sim/report/atomic_file.hpp"
#include "sim/report/hdf5_lock.hpp"
#include "sim/report/report.hpp"
#include "sim/report/result_fields.hpp"
#include "sim/report/summary_table.hpp"

namespace fleetsim {
namespace report_detail {

std::mutex& hdf5_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace report_detail

namespace {

constexpr double kNotSimulated = std::numeric_limits<double>::quiet_NaN();

H5::StrType string_type() {
  H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  type.setCset(H5T_CSET_UTF8);
  return type;
}

H5::DataSpace scalar_space() {
  return H5::DataSpace(H5S_SCALAR);
}

void write_attribute(const H5::H5Object& object, const char* name, const std::string& value) {
  const H5::StrType type = string_type();
  object.createAttribute(name, type, scalar_space()).write(type, value);
}

void write_attribute(const H5::H5Object& object, const char* name, double value) {
  object.createAttribute(name, H5::PredType::IEEE_F64LE, scalar_space())
      .write(H5::PredType::NATIVE_DOUBLE, &value);
}

void write_attribute(const H5::H5Object& object, const char* name, int value) {
  object.createAttribute(name, H5::PredType::STD_I32LE, scalar_space())
      .write(H5::PredType::NATIVE_INT, &value);
}

void write_attribute(const H5::H5Object& object, const char* name, std::uint64_t value) {
  object.createAttribute(name, H5::PredType::STD_U64LE, scalar_space())
      .write(H5::PredType::NATIVE_UINT64, &value);
}

// A one-dimensional attribute of UTF-8 strings.
void write_attribute(const H5::H5Object& object, const char* name,
                     const std::vector<std::string>& values) {
  std::vector<const char*> pointers;
  for (const std::string& value : values) pointers.push_back(value.c_str());
  const hsize_t count = values.size();
  const H5::StrType type = string_type();
  const H5::Attribute attribute = object.createAttribute(name, type, H5::DataSpace(1, &count));
  if (!pointers.empty()) attribute.write(type, pointers.data());
}

// Rows hold pointers into the report's strings, which outlive the write.
struct BreakdownRow {
  const char* component;
  double seconds;
};

struct MemoryRow {
  const char* item;
  double bytes;
  const char* basis;
  const char* moment;
};

struct LinkRow {
  const char* name;
  const char* kind;
  double capacity_bytes_per_s;
  double bytes;
  double utilisation;
};

// A compound type of a string member `name` and then doubles.
template <typename Row>
H5::CompType doubles_after_name(const char* name, std::size_t name_offset,
                                const std::vector<std::pair<const char*, std::size_t>>& doubles) {
  H5::CompType type(sizeof(Row));
  type.insertMember(name, name_offset, string_type());
  for (const auto& [member, offset] : doubles) {
    type.insertMember(member, offset, H5::PredType::NATIVE_DOUBLE);
  }
  return type;
}

H5::CompType breakdown_type() {
  return doubles_after_name<BreakdownRow>("component", HOFFSET(BreakdownRow, component),
                                          {{"seconds", HOFFSET(BreakdownRow, seconds)}});
}

H5::CompType memory_type() {
  H5::CompType type(sizeof(MemoryRow));
  type.insertMember("item", HOFFSET(MemoryRow, item), string_type());
  type.insertMember("bytes", HOFFSET(MemoryRow, bytes), H5::PredType::NATIVE_DOUBLE);
  type.insertMember("basis", HOFFSET(MemoryRow, basis), string_type());
  type.insertMember("moment", HOFFSET(MemoryRow, moment), string_type());
  return type;
}

H5::CompType link_type() {
  H5::CompType type(sizeof(LinkRow));
  type.insertMember("name", HOFFSET(LinkRow, name), string_type());
  type.insertMember("kind", HOFFSET(LinkRow, kind), string_type());
  type.insertMember("capacity_bytes_per_s", HOFFSET(LinkRow, capacity_bytes_per_s),
                    H5::PredType::NATIVE_DOUBLE);
  type.insertMember("bytes", HOFFSET(LinkRow, bytes), H5::PredType::NATIVE_DOUBLE);
  type.insertMember("utilisation", HOFFSET(LinkRow, utilisation), H5::PredType::NATIVE_DOUBLE);
  return type;
}

struct MeasuredRow {
  const char* metric;
  const char* basis;
  double measured;
  double predicted;  // NaN where the simulation has none
  double error;
};

H5::CompType measured_type() {
  H5::CompType type(sizeof(MeasuredRow));
  type.insertMember("metric", HOFFSET(MeasuredRow, metric), string_type());
  type.insertMember("basis", HOFFSET(MeasuredRow, basis), string_type());
  type.insertMember("measured", HOFFSET(MeasuredRow, measured), H5::PredType::NATIVE_DOUBLE);
  type.insertMember("predicted", HOFFSET(MeasuredRow, predicted), H5::PredType::NATIVE_DOUBLE);
  type.insertMember("error", HOFFSET(MeasuredRow, error), H5::PredType::NATIVE_DOUBLE);
  return type;
}

// Creates the dataset even with no rows, so readers always find it with its type.
template <typename Row>
void write_rows(const H5::Group& group, const char* name, const H5::DataType& type,
                const std::vector<Row>& rows) {
  const hsize_t count = rows.size();
  const H5::DataSpace space(1, &count);
  const H5::DataSet dataset = group.createDataSet(name, type, space);
  if (!rows.empty()) {
    dataset.write(rows.data(), type);
  }
}

void write_breakdown(const H5::Group& group, const StepOutcome& outcome) {
  const StepBreakdown& breakdown = outcome.step.breakdown;
  const auto seconds = [&](double value) { return outcome.simulated ? value : kNotSimulated; };
  // Compute, exposed communication and idle time, then the exposed time by kind.
  std::vector<std::pair<std::string, double>> parts{{"compute", breakdown.compute_s},
                                                    {"exposed_comm", breakdown.exposed_comm_s},
                                                    {"idle", breakdown.idle_s}};
  for (const ExposedPart& part : kExposedParts) {
    parts.emplace_back(std::string("exposed_") + part.key, breakdown.*part.seconds);
  }
  std::vector<BreakdownRow> rows;
  for (const auto& [component, value] : parts) rows.push_back({component.c_str(), seconds(value)});
  write_rows(group, "breakdown", breakdown_type(), rows);
}

void write_memory(const H5::Group& group, const MemoryBreakdown& memory) {
  std::vector<MemoryRow> rows;
  for (const MemoryItem& item : memory.items) {
    rows.push_back({item.name.c_str(), item.bytes, item.basis.c_str(), to_string(item.moment)});
  }
  write_rows(group, "memory", memory_type(), rows);
}

void write_links(const H5::Group& group, const std::vector<LinkUsage>& links) {
  std::vector<LinkRow> rows;
  for (const LinkUsage& link : links) {
    rows.push_back({link.name.c_str(), link.kind.c_str(), link.capacity_bytes_per_s, link.bytes,
                    link.utilisation});
  }
  write_rows(group, "links", link_type(), rows);
}

struct ProfileRow {
  const char* key;
  double value;
  double sigma;
  const char* provenance;
};

// <variant>/profile: the GPU profile's entries the variant read (read_profile_keys), each with
// its one-sigma uncertainty and provenance.
void write_profile(const H5::Group& group, const StepInputs& inputs) {
  const std::vector<std::string> keys = read_profile_keys(inputs);
  std::vector<ProfileRow> rows;
  for (const std::string& key : keys) {
    if (const Calibrated* entry = find_profile_entry(inputs.gpu, key)) {
      rows.push_back({key.c_str(), entry->value, entry->sigma, entry->provenance.c_str()});
    }
  }
  H5::CompType type(sizeof(ProfileRow));
  type.insertMember("key", HOFFSET(ProfileRow, key), string_type());
  type.insertMember("value", HOFFSET(ProfileRow, value), H5::PredType::NATIVE_DOUBLE);
  type.insertMember("sigma", HOFFSET(ProfileRow, sigma), H5::PredType::NATIVE_DOUBLE);
  type.insertMember("provenance", HOFFSET(ProfileRow, provenance), string_type());
  write_rows(group, "profile", type, rows);
}

void write_warnings(const H5::Group& group, const std::vector<std::string>& warnings) {
  std::vector<const char*> rows;
  for (const std::string& warning : warnings) {
    rows.push_back(warning.c_str());
  }
  write_rows(group, "warnings", string_type(), rows);
}

struct AttributionRow {
  const char* factor;
  double step_time_s;
  double wall_s_mean;    // NaN: not attributed (no run on both sides)
  double cost_usd_mean;  // NaN: not attributed (not both priced)
};

H5::CompType attribution_type() {
  return doubles_after_name<AttributionRow>(
      "factor", HOFFSET(AttributionRow, factor),
      {{"step_time_s", HOFFSET(AttributionRow, step_time_s)},
       {"wall_s_mean", HOFFSET(AttributionRow, wall_s_mean)},
       {"cost_usd_mean", HOFFSET(AttributionRow, cost_usd_mean)}});
}

// <variant>/attribution: why the variant differs from the first, a row per factor.
void write_attribution(const H5::Group& variant, const Attribution& a) {
  const H5::Group group = variant.createGroup("attribution");
  write_attribute(group, "against", a.baseline);
  write_attribute(group, "counterfactuals", static_cast<std::uint64_t>(a.counterfactuals));
  write_attribute(group, "not_attributed", a.not_attributed);
  const auto metric = [&](const std::vector<double>& values, const char* name) {
    for (std::size_t m = 0; m < a.metrics.size() && m < values.size(); ++m) {
      if (a.metrics[m] == name) return values[m];
    }
    return kNotSimulated;
  };
  for (const char* name : {"step_time_s", "wall_s_mean", "cost_usd_mean"}) {
    write_attribute(group, ("baseline_" + std::string(name)).c_str(),
                    metric(a.baseline_values, name));
    write_attribute(group, ("variant_" + std::string(name)).c_str(),
                    metric(a.variant_values, name));
  }
  std::vector<AttributionRow> rows;
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    rows.push_back({to_string(a.factors[i]), metric(a.parts[i], "step_time_s"),
                    metric(a.parts[i], "wall_s_mean"), metric(a.parts[i], "cost_usd_mean")});
  }
  write_rows(group, "parts", attribution_type(), rows);
}

struct IntervalRow {
  const char* metric;
  double nominal;
  double low;
  double median;
  double high;
};

struct SwingRow {
  const char* input;
  double value;
  double sigma;
  double step_time_s_minus;
  double step_time_s_plus;
  double wall_s_mean_minus;  // NaN without a run
  double wall_s_mean_plus;
};

// <variant>/sensitivity: the prediction interval per metric, each input's swing, every draw.
void write_sensitivity(const H5::Group& variant, const Sensitivity& s) {
  const H5::Group group = variant.createGroup("sensitivity");
  write_attribute(group, "draws", s.draws);
  write_attribute(group, "coverage", s.coverage);
  write_attribute(group, "not_simulated", s.not_simulated);
  write_attribute(group, "failed_draws", s.failed_draws);
  write_attribute(group, "failure", s.failure);
  std::vector<IntervalRow> intervals;
  for (const MetricInterval& i : s.intervals) {
    intervals.push_back({i.metric.c_str(), i.nominal, i.low, i.median, i.high});
  }
  write_rows(group, "intervals",
             doubles_after_name<IntervalRow>("metric", HOFFSET(IntervalRow, metric),
                                             {{"nominal", HOFFSET(IntervalRow, nominal)},
                                              {"low", HOFFSET(IntervalRow, low)},
                                              {"median", HOFFSET(IntervalRow, median)},
                                              {"high", HOFFSET(IntervalRow, high)}}),
             intervals);
  const auto wall = std::find(s.metrics.begin(), s.metrics.end(), "wall_s_mean");
  const auto at = [&](const std::vector<double>& values) {
    return wall == s.metrics.end() ? kNotSimulated : values[wall - s.metrics.begin()];
  };
  std::vector<SwingRow> swings;
  for (const InputSwing& w : s.swings) {
    swings.push_back({w.input.name.c_str(), w.input.value, w.input.sigma, w.minus[0], w.plus[0],
                      at(w.minus), at(w.plus)});
  }
  write_rows(
      group, "inputs",
      doubles_after_name<SwingRow>("input", HOFFSET(SwingRow, input),
                                   {{"value", HOFFSET(SwingRow, value)},
                                    {"sigma", HOFFSET(SwingRow, sigma)},
                                    {"step_time_s_minus", HOFFSET(SwingRow, step_time_s_minus)},
                                    {"step_time_s_plus", HOFFSET(SwingRow, step_time_s_plus)},
                                    {"wall_s_mean_minus", HOFFSET(SwingRow, wall_s_mean_minus)},
                                    {"wall_s_mean_plus", HOFFSET(SwingRow, wall_s_mean_plus)}}),
      swings);
  std::vector<const char*> metrics;
  for (const std::string& metric : s.metrics) metrics.push_back(metric.c_str());
  write_rows(group, "metrics", string_type(), metrics);
  std::vector<double> samples;
  for (const auto& sample : s.samples) samples.insert(samples.end(), sample.begin(), sample.end());
  const hsize_t dims[2] = {s.samples.size(), s.metrics.size()};
  const H5::DataSet table =
      group.createDataSet("samples", H5::PredType::NATIVE_DOUBLE, H5::DataSpace(2, dims));
  if (!samples.empty()) table.write(samples.data(), H5::PredType::NATIVE_DOUBLE);
}

// A registered field's value (result_fields.hpp) as an attribute of `object`: a summary as its
// five <name>_ attributes, a flag as int 0 or 1, nothing for an absent value.
void write_field(const H5::H5Object& object, std::string_view name, const FieldValue& value) {
  const std::string attribute(name);
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return;
        } else if constexpr (std::is_same_v<T, SampleSummary>) {
          for (const auto& [member, pointer] : kSummaryMembers) {
            write_attribute(object, (attribute + "_" + std::string(member)).c_str(), v.*pointer);
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          write_attribute(object, attribute.c_str(), v ? 1 : 0);
        } else {
          write_attribute(object, attribute.c_str(), v);
        }
      },
      value);
}

// The registered fields of `groups` that HDF5 keeps, as attributes of `object`.
void write_fields(const H5::H5Object& object, std::initializer_list<FieldGroup> groups,
                  const RunReport& report, std::size_t index) {
  for (const FieldGroup group : groups) {
    if (!report.variants.empty() && index < report.variants.size() &&
        !in_hdf5(group, report.variants[index])) {
      continue;
    }
    for (const ResultField& field : result_fields()) {
      if (field.group == group && !field.hdf5.empty()) {
        write_field(object, field.hdf5, field.get(report, index));
      }
    }
  }
}

// A variant's setup, step and memory fields, and its layout's dimensions (flags as 0 or 1).
void write_variant_attributes(const H5::Group& group, const RunReport& report, std::size_t index) {
  write_fields(group, {FieldGroup::variant, FieldGroup::step, FieldGroup::memory}, report, index);
  for (const LayoutDimension& dimension : layout_dimensions()) {
    write_field(group, dimension.output,
                std::visit([](const auto& v) { return FieldValue{v}; },
                           dimension.get(report.variants[index].inputs.plan)));
  }
}

// /summary: the summary table (summary_table.hpp), a compound member per column in its order:
// text as a UTF-8 string ("" where absent), numbers and flags as doubles (NaN where absent,
// flags 0 or 1); the columns' units and descriptions as attributes in the same order, and a
// sweep's swept columns as the attribute `swept`.
void write_summary(const H5::H5File& file, const SummaryTable& table) {
  // Every member one slot wide: a double, or a string's pointer.
  constexpr std::size_t kSlot = sizeof(double);
  static_assert(sizeof(const char*) == kSlot);
  const std::size_t width = table.columns.size();
  H5::CompType type(kSlot * width);
  std::vector<std::string> units, descriptions;
  for (std::size_t c = 0; c < width; ++c) {
    const SummaryColumn& column = table.columns[c];
    type.insertMember(column.name, kSlot * c,
                      column.kind == SummaryColumn::Kind::text
                          ? static_cast<H5::DataType>(string_type())
                          : static_cast<H5::DataType>(H5::PredType::NATIVE_DOUBLE));
    units.push_back(column.unit);
    descriptions.push_back(column.description);
  }
  static const char* const kNoText = "";
  std::vector<unsigned char> rows(kSlot * width * table.rows.size());
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    for (std::size_t c = 0; c < width; ++c) {
      unsigned char* slot = rows.data() + kSlot * (r * width + c);
      const SummaryCell& cell = table.rows[r][c];
      if (table.columns[c].kind == SummaryColumn::Kind::text) {
        const char* text = std::holds_alternative<std::string>(cell)
                               ? std::get<std::string>(cell).c_str()
                               : kNoText;
        std::memcpy(slot, &text, kSlot);
        continue;
      }
      const double number = std::holds_alternative<double>(cell) ? std::get<double>(cell)
                            : std::holds_alternative<bool>(cell)
                                ? (std::get<bool>(cell) ? 1.0 : 0.0)
                                : kNotSimulated;
      std::memcpy(slot, &number, kSlot);
    }
  }
  const hsize_t count = table.rows.size();
  const H5::DataSet dataset = file.createDataSet("summary", type, H5::DataSpace(1, &count));
  if (!table.rows.empty()) dataset.write(rows.data(), type);
  write_attribute(dataset, "units", units);
  write_attribute(dataset, "descriptions", descriptions);
  if (!table.swept.empty()) write_attribute(dataset, "swept", table.swept);
}

void write_root_attributes(const H5::H5File& file, const RunReport& report) {
  for (const ResultField& field : result_fields()) {
    if (field.group == FieldGroup::scenario) write_field(file, field.hdf5, field.get(report, 0));
    if (field.group == FieldGroup::plan && report.plan) {
      write_field(file, field.hdf5, field.get(report, 0));
    }
  }
  write_attribute(file, "partial", report.partial ? 1 : 0);
  if (const auto& partial = report.partial) {
    const auto joined = [](const auto& items, const auto& text_of) {
      std::string text;
      for (const auto& item : items) text += (text.empty() ? "" : "; ") + text_of(item);
      return text;
    };
    write_attribute(file, "stopped_by", partial->stopped_by);
    write_attribute(file, "variants_planned", static_cast<std::uint64_t>(planned_variants(report)));
    write_attribute(file, "not_finished",
                    joined(partial->not_finished, [](const VariantReport& v) { return v.name; }));
    write_attribute(file, "left_out",
                    joined(partial->left_out, [](const std::string& item) { return item; }));
  }
}

// Every HDF5 handle is closed when this returns or throws, so the file can then be renamed or
// removed.
void write_run(const H5::Group& variant_group, const RunReport& report, std::size_t index) {
  const VariantReport& variant = report.variants[index];
  if (!in_hdf5(FieldGroup::run, variant)) return;
  const JobSpec& job = *variant.job;
  const JobResult& result = *variant.job_result;
  const bool priced = variant.run->priced;
  const H5::Group group = variant_group.createGroup("run");
  write_fields(group, {FieldGroup::run, FieldGroup::spot}, report, index);
  std::vector<double> wall, interruptions, checkpoints, lost, node_wait, cost;
  for (const JobReplication& run : result.replications) {
    wall.push_back(run.wall_s);
    cost.push_back(run_cost_usd(job, run.wall_s));
    interruptions.push_back(static_cast<double>(run.interruptions));
    checkpoints.push_back(static_cast<double>(run.checkpoints));
    lost.push_back(run.lost_training_s);
    node_wait.push_back(run.node_wait_s);
  }
  write_rows(group, "wall_s", H5::PredType::NATIVE_DOUBLE, wall);
  write_rows(group, "interruptions", H5::PredType::NATIVE_DOUBLE, interruptions);
  write_rows(group, "checkpoints", H5::PredType::NATIVE_DOUBLE, checkpoints);
  write_rows(group, "lost_training_s", H5::PredType::NATIVE_DOUBLE, lost);
  write_rows(group, "node_wait_s", H5::PredType::NATIVE_DOUBLE, node_wait);
  if (priced) write_rows(group, "cost_usd", H5::PredType::NATIVE_DOUBLE, cost);
}

// The measured: block against the simulation: a row per metric, and the source.
void write_measured(const H5::Group& group, const VariantReport& variant) {
  const std::vector<MetricComparison> comparisons =
      compare_measured(*variant.measured, variant.inputs, variant.outcome);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<MeasuredRow> rows;
  for (const MetricComparison& c : comparisons) {
    rows.push_back({c.metric.c_str(), c.basis.c_str(), c.measured, c.predicted.value_or(nan),
                    c.error.value_or(nan)});
  }
  write_rows(group, "measured", measured_type(), rows);
  write_attribute(group, "measured_source", variant.measured->source);
}

void write_file(const RunReport& report, const H5::H5File& file) {
  write_root_attributes(file, report);
  write_summary(file, summary_table(report));
  const H5::Group variants = file.createGroup("variants");
  const std::vector<std::string> groups = variant_group_names(report);
  for (std::size_t i = 0; i < report.variants.size(); ++i) {
    const VariantReport& variant = report.variants[i];
    const H5::Group group = variants.createGroup(groups[i]);
    write_variant_attributes(group, report, i);
    write_breakdown(group, variant.outcome);
    write_memory(group, variant.outcome.memory);
    write_links(group, variant.outcome.step.links);
    write_warnings(group, variant.outcome.warnings);
    write_profile(group, variant.inputs);
    write_run(group, report, i);
    if (variant.attribution) write_attribution(group, *variant.attribution);
    if (variant.sensitivity) write_sensitivity(group, *variant.sensitivity);
    if (variant.measured) write_measured(group, variant);
  }
}

// The file built in memory (HDF5's core driver, no backing store), then its bytes written as
// any output is (report_detail::write_atomically): HDF5 itself never writes to disk, so a full disk
// or an I/O error is that writer's error message, and no half-closed HDF5 file is left to the
// library's exit (where a failed close would crash it).
template <typename Writer>
void write_built_in_memory(const std::filesystem::path& path, Writer write) {
  std::string image;
  const auto failed = [&path](const std::string& detail) {
    return ModelError("cannot write HDF5 file " + path.string() + ": " + detail);
  };
  try {
    const std::lock_guard<std::mutex> lock(report_detail::hdf5_mutex());
    H5::Exception::dontPrint();
    H5::FileAccPropList in_memory;
    in_memory.setCore(1 << 20, false);  // grown in 1 MiB steps, never written back
    // A name no file can have: nothing on disk is read or written under it.
    H5::H5File file("/dev/null/fleetsim-in-memory.h5", H5F_ACC_TRUNC,
                    H5::FileCreatPropList::DEFAULT, in_memory);
    write(file);
    file.flush(H5F_SCOPE_GLOBAL);
    const ssize_t size = H5Fget_file_image(file.getId(), nullptr, 0);
    if (size < 0) throw ModelError("the file's image cannot be read from memory");
    image.resize(static_cast<std::size_t>(size));
    if (H5Fget_file_image(file.getId(), image.data(), image.size()) != size) {
      throw ModelError("the file's image cannot be read from memory");
    }
    file.close();
  } catch (const H5::Exception& e) {
    throw failed(e.getFuncName() + ": " + e.getDetailMsg());
  } catch (const std::exception& e) {  // ModelError, and memory for the image
    throw failed(e.what());
  }
  report_detail::write_atomically(path, image, "HDF5 file");
}

struct CollectiveRow {
  double size_bytes;
  double time_us;
  double algbw_gb_per_s;
  double busbw_gb_per_s;
  const char* algorithm;
  const char* protocol;
};

H5::CompType collective_row_type() {
  H5::CompType type(sizeof(CollectiveRow));
  type.insertMember("size_bytes", HOFFSET(CollectiveRow, size_bytes), H5::PredType::NATIVE_DOUBLE);
  type.insertMember("time_us", HOFFSET(CollectiveRow, time_us), H5::PredType::NATIVE_DOUBLE);
  type.insertMember("algbw_gb_per_s", HOFFSET(CollectiveRow, algbw_gb_per_s),
                    H5::PredType::NATIVE_DOUBLE);
  type.insertMember("busbw_gb_per_s", HOFFSET(CollectiveRow, busbw_gb_per_s),
                    H5::PredType::NATIVE_DOUBLE);
  type.insertMember("algorithm", HOFFSET(CollectiveRow, algorithm), string_type());
  type.insertMember("protocol", HOFFSET(CollectiveRow, protocol), string_type());
  return type;
}

void write_collective_file(const CollectiveReport& report, const H5::H5File& file) {
  write_attribute(file, "fleetsim_version", report.fleetsim_version);
  write_attribute(file, "node", report.node);
  write_attribute(file, "gpu_profile", report.gpu_profile);
  write_attribute(file, "op", report.op);
  write_attribute(file, "nodes", report.nodes);
  write_attribute(file, "ranks", report.ranks);
  std::vector<CollectiveRow> rows;
  for (const CollectiveSample& sample : report.samples) {
    rows.push_back({sample.size_bytes, sample.time_us, sample.algbw_gb_per_s, sample.busbw_gb_per_s,
                    to_string(sample.algorithm), to_string(sample.protocol)});
  }
  const H5::Group root = file.openGroup("/");
  write_rows(root, "collective", collective_row_type(), rows);
}

}  // namespace

void write_hdf5(const RunReport& report, const std::filesystem::path& path) {
  write_built_in_memory(path, [&](const H5::H5File& file) { write_file(report, file); });
}

void write_collective_hdf5(const CollectiveReport& report, const std::filesystem::path& path) {
  write_built_in_memory(path, [&](const H5::H5File& file) { write_collective_file(report, file); });
}

}  // namespace fleetsim
