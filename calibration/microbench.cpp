#include "calibration/microbench.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "sim/engine/rng.hpp"
#include "sim/engine/text.hpp"

namespace fleetsim {
namespace {

std::string trim(const std::string& text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  for (std::string field; std::getline(in, field, ',');) fields.push_back(trim(field));
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

// One data row, its fields by column name.
class Row {
 public:
  Row(const std::string& file, int line, const std::map<std::string, std::size_t>& columns,
      std::vector<std::string> fields)
      : file_(file), line_(line), columns_(&columns), fields_(std::move(fields)) {}

  int line() const { return line_; }
  bool has(const std::string& column) const {
    const auto it = columns_->find(column);
    return it != columns_->end() && !fields_[it->second].empty();
  }
  const std::string& text(const std::string& column) const {
    if (!has(column)) fail("no value in column '" + column + "'");
    return fields_[columns_->at(column)];
  }
  double number(const std::string& column) const {
    const std::string& field = text(column);
    double value = 0;
    const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (error != std::errc() || end != field.data() + field.size() || !std::isfinite(value) ||
        !(value > 0)) {
      fail("column '" + column + "': expected a positive number, got \"" + field + "\"");
    }
    return value;
  }
  bool flag(const std::string& column) const {
    const std::string& field = text(column);
    if (field == "true" || field == "1") return true;
    if (field == "false" || field == "0") return false;
    fail("column '" + column + "': expected true or false, got \"" + field + "\"");
  }
  // The time of a row that gives a time, a rate (`per_second` of `amount`, scaled by `unit`) or
  // both, which must then agree.
  double seconds(const std::string& rate_column, double amount, double unit) const {
    const bool has_time = has("time_us");
    const bool has_rate = has(rate_column);
    if (!has_time && !has_rate) fail("needs time_us or " + rate_column);
    const double from_rate = has_rate ? amount / (number(rate_column) * unit) : 0;
    if (!has_time) return from_rate;
    const double time = number("time_us") * 1e-6;
    if (has_rate && std::abs(from_rate / time - 1) > 0.01) {
      fail("time_us and " + rate_column + " disagree by more than 1%");
    }
    return time;
  }
  [[noreturn]] void fail(const std::string& problem) const {
    throw MicrobenchError(file_, line_, problem);
  }

 private:
  std::string file_;
  int line_;
  const std::map<std::string, std::size_t>* columns_;
  std::vector<std::string> fields_;
};

enum class Kind { gemm, memory, attention, overlap };

const std::vector<std::string>& required_columns(Kind kind) {
  static const std::vector<std::string> gemm{"dtype", "m", "n", "k"};
  static const std::vector<std::string> memory{"op", "bytes"};
  static const std::vector<std::string> attention{"impl", "dtype",    "batch",  "heads",
                                                  "seq",  "head_dim", "causal", "direction"};
  static const std::vector<std::string> overlap{"dtype", "m", "n", "k", "alone_us", "with_comm_us"};
  switch (kind) {
    case Kind::gemm: return gemm;
    case Kind::memory: return memory;
    case Kind::attention: return attention;
    case Kind::overlap: return overlap;
  }
  return gemm;
}

std::optional<Kind> kind_of(const std::map<std::string, std::size_t>& columns) {
  const auto has_all = [&](Kind kind) {
    const auto& needed = required_columns(kind);
    return std::all_of(needed.begin(), needed.end(),
                       [&](const std::string& c) { return columns.count(c) > 0; });
  };
  for (const Kind kind : {Kind::attention, Kind::overlap, Kind::gemm, Kind::memory}) {
    if (has_all(kind)) return kind;
  }
  return std::nullopt;
}

}  // namespace

double AttentionSample::forward_flops() const {
  return 4 * batch * heads * seq * seq * head_dim / (causal ? 2 : 1);
}

double AttentionSample::flops() const {
  const double forward = forward_flops();
  if (direction == "bwd") return 2.5 * forward;
  if (direction == "fwd_bwd") return 3.5 * forward;
  return forward;
}

MicrobenchFile read_microbench_file(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MicrobenchError(file, 0, "cannot open the file");
  std::stringstream whole;
  whole << in.rdbuf();
  MicrobenchFile result;
  result.path = file;
  result.checksum = fingerprint(whole.str());
  std::istringstream lines(whole.str());
  std::map<std::string, std::size_t> columns;
  std::optional<Kind> kind;
  int number = 0;
  for (std::string raw; std::getline(lines, raw);) {
    ++number;
    const std::string line = trim(raw);
    if (line.empty()) continue;
    if (line.front() == '#') {
      const std::string comment = trim(line.substr(1));
      if (comment.rfind("source:", 0) == 0) result.source = trim(comment.substr(7));
      if (comment.rfind("gpu:", 0) == 0) {
        const std::string gpu = trim(comment.substr(4));
        result.gpu = gpu.substr(0, gpu.find(','));
      }
      if (comment.rfind("load:", 0) == 0) {
        const std::string load = trim(comment.substr(5));
        if (load != "short" && load != "sustained") {
          throw MicrobenchError(file, number,
                                "load: expected short or sustained, got \"" + load + "\"");
        }
        result.sustained = load == "sustained";
      }
      if (comment.rfind("provenance:", 0) == 0) {
        result.provenance = trim(comment.substr(11));
        if (result.provenance != "measured" && result.provenance != "published") {
          throw MicrobenchError(
              file, number,
              "provenance: expected measured or published, got \"" + result.provenance + "\"");
        }
      }
      continue;
    }
    std::vector<std::string> fields = split_csv(line);
    if (!kind) {
      for (std::size_t i = 0; i < fields.size(); ++i) {
        if (fields[i].empty()) throw MicrobenchError(file, number, "an empty column name");
        if (!columns.emplace(fields[i], i).second) {
          throw MicrobenchError(file, number, "column '" + fields[i] + "' appears twice");
        }
      }
      kind = kind_of(columns);
      if (!kind) {
        throw MicrobenchError(file, number,
                              "a header of gemm (dtype,m,n,k,...), memory (op,bytes,...), "
                              "attention (impl,dtype,batch,heads,seq,head_dim,causal,direction,"
                              "...) or overlap (dtype,m,n,k,alone_us,with_comm_us,...) columns "
                              "was expected");
      }
      continue;
    }
    if (fields.size() != columns.size()) {
      throw MicrobenchError(file, number,
                            "expected " + std::to_string(columns.size()) + " fields, got " +
                                std::to_string(fields.size()));
    }
    const Row row(file, number, columns, std::move(fields));
    // Types and implementations compare in lower case: BF16 and bf16 are one type.
    switch (*kind) {
      case Kind::gemm: {
        GemmSample s;
        s.dtype = ascii_lower(row.text("dtype"));
        s.m = row.number("m");
        s.n = row.number("n");
        s.k = row.number("k");
        s.batch = row.has("batch") ? row.number("batch") : 1;
        s.seconds = row.seconds("tflops", s.flops(), 1e12);
        s.line = number;
        result.gemms.push_back(s);
        break;
      }
      case Kind::memory: {
        MemorySample s;
        s.op = row.text("op");
        s.bytes = row.number("bytes");
        s.seconds = row.seconds("gb_per_s", s.bytes, 1e9);
        s.line = number;
        result.memory.push_back(s);
        break;
      }
      case Kind::overlap: {
        OverlapSample s;
        s.dtype = ascii_lower(row.text("dtype"));
        s.m = row.number("m");
        s.n = row.number("n");
        s.k = row.number("k");
        s.alone_seconds = row.number("alone_us") * 1e-6;
        s.with_comm_seconds = row.number("with_comm_us") * 1e-6;
        if (row.has("gpus") && row.number("gpus") < 2) {
          row.fail(
              "an overlap row needs a collective over two GPUs or more: a one-rank "
              "all-reduce moves nothing");
        }
        s.line = number;
        result.overlap.push_back(s);
        break;
      }
      case Kind::attention: {
        AttentionSample s;
        s.impl = ascii_lower(row.text("impl"));
        s.dtype = ascii_lower(row.text("dtype"));
        s.batch = row.number("batch");
        s.heads = row.number("heads");
        s.seq = row.number("seq");
        s.head_dim = row.number("head_dim");
        s.causal = row.flag("causal");
        s.direction = row.text("direction");
        if (s.direction != "fwd" && s.direction != "bwd" && s.direction != "fwd_bwd") {
          row.fail("column 'direction': expected fwd, bwd or fwd_bwd, got \"" + s.direction + "\"");
        }
        s.seconds = row.seconds("tflops", s.flops(), 1e12);
        s.line = number;
        result.attention.push_back(s);
        break;
      }
    }
  }
  if (!kind) throw MicrobenchError(file, number, "no header row");
  if (result.provenance.empty()) {
    throw MicrobenchError(file, 1,
                          "no '# provenance: measured' or '# provenance: published' line: a "
                          "profile says where each of its numbers comes from");
  }
  if (result.gemms.empty() && result.memory.empty() && result.attention.empty() &&
      result.overlap.empty()) {
    throw MicrobenchError(file, number, "no data rows");
  }
  return result;
}

std::vector<MicrobenchFile> read_microbench_dir(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> paths;
  if (std::filesystem::is_directory(dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.is_regular_file() && entry.path().extension() == ".csv") {
        paths.push_back(entry.path());
      }
    }
  }
  if (paths.empty()) throw MicrobenchError(dir.string(), 0, "no .csv files of microbenchmarks");
  std::sort(paths.begin(), paths.end());
  std::vector<MicrobenchFile> files;
  for (const auto& path : paths) files.push_back(read_microbench_file(path));
  return files;
}

}  // namespace fleetsim
