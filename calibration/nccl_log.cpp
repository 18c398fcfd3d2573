#include "calibration/nccl_log.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fstream>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include "sim/engine/text.hpp"

namespace fleetsim {

namespace {

// ---- Text helpers -------------------------------------------------------------------------------

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Whitespace-separated tokens as views into `text`, so that the rest of a line after a token
// (a device name with spaces in it) can be recovered.
std::vector<std::string_view> split(std::string_view text) {
  std::vector<std::string_view> tokens;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    const std::size_t start = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    if (i > start) tokens.push_back(text.substr(start, i - start));
  }
  return tokens;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

template <typename T>
std::optional<T> parse_number(std::string_view token) {
  T value{};
  const char* end = token.data() + token.size();
  const auto [ptr, ec] = std::from_chars(token.data(), end, value);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) return std::nullopt;
  }
  return value;
}

std::string in_quotes(std::string_view text) {
  return "'" + std::string(text) + "'";
}

// Shortest text that reads back as the same double ("33554432", "344.8").
std::string format_number(double value) {
  std::array<char, 32> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  return std::string(buffer.data(), result.ptr);
}

// Two decimals, as the tools print bandwidths.
std::string format_bandwidth(double gb_per_s) {
  return fixed_decimals(gb_per_s, 2);
}

// ---- Op names -----------------------------------------------------------------------------------

// Canonical op for a test binary or collective name ("all_reduce_perf", "AllReduce",
// "allreduce"), or "" when it names none of the collectives this reader knows.
std::string canonical_op(std::string_view name) {
  std::string key;
  for (char c : lowercase(name)) {
    if (c != '_' && c != '-') key += c;
  }
  if (key.size() > 4 && key.ends_with("perf")) key.resize(key.size() - 4);
  static const std::array<std::pair<std::string_view, std::string_view>, 7> ops = {{
      {"allreduce", "all_reduce"},
      {"allgather", "all_gather"},
      {"reducescatter", "reduce_scatter"},
      {"alltoall", "alltoall"},
      {"sendrecv", "sendrecv"},
      {"broadcast", "broadcast"},
      {"reduce", "reduce"},
  }};
  for (const auto& [spelled, op] : ops) {
    if (key == spelled) return std::string(op);
  }
  return "";
}

// The op a file name suggests ("...-allreduce-...log"). Plain "reduce" is not looked for: it is a
// substring of the other reductions' names and of too many unrelated words.
std::string op_from_file_name(const std::string& file_name) {
  std::string key;
  for (char c : lowercase(std::filesystem::path(file_name).filename().string())) {
    if (c != '_' && c != '-') key += c;
  }
  static const std::array<std::pair<std::string_view, std::string_view>, 6> ops = {{
      {"reducescatter", "reduce_scatter"},
      {"allreduce", "all_reduce"},
      {"allgather", "all_gather"},
      {"alltoall", "alltoall"},
      {"sendrecv", "sendrecv"},
      {"broadcast", "broadcast"},
  }};
  for (const auto& [spelled, op] : ops) {
    if (key.find(spelled) != std::string::npos) return std::string(op);
  }
  return "";
}

// ---- Column layout ------------------------------------------------------------------------------

struct SideColumns {
  int time = -1, algbw = -1, busbw = -1, wrong = -1;
  bool present() const { return time >= 0 && algbw >= 0 && busbw >= 0; }
};

struct ColumnLayout {
  int n_fields = 0;
  int size = -1, count = -1, type = -1, redop = -1, root = -1;
  std::array<SideColumns, 2> sides;  // out-of-place, in-place
  int header_line = 0;               // 0: the headerless fallback
};

// Maps the column header ("#  size  count  type  redop  root  time  algbw  busbw #wrong  time
// ...") by name. The n-th occurrence of a timing name belongs to side n (0 out-of-place,
// 1 in-place); columns this reader does not know are counted but not read.
ColumnLayout layout_from_header(const std::vector<std::string_view>& names, int line) {
  ColumnLayout layout;
  layout.n_fields = static_cast<int>(names.size());
  layout.header_line = line;
  std::array<int, 4> seen{};  // occurrences of time, algbw, busbw, #wrong
  auto side_slot = [&](int kind, int column, int SideColumns::*member) {
    const int side = seen[kind]++;
    if (side < 2) layout.sides[side].*member = column;
  };
  for (int i = 0; i < layout.n_fields; ++i) {
    const std::string_view name = names[i];
    if (name == "size") layout.size = i;
    if (name == "count") layout.count = i;
    if (name == "type") layout.type = i;
    if (name == "redop") layout.redop = i;
    if (name == "root") layout.root = i;
    // report_cputime (-C 1) renames the time column.
    if (name == "time" || name == "cputime") side_slot(0, i, &SideColumns::time);
    if (name == "algbw") side_slot(1, i, &SideColumns::algbw);
    if (name == "busbw") side_slot(2, i, &SideColumns::busbw);
    if (name == "#wrong") side_slot(3, i, &SideColumns::wrong);
  }
  return layout;
}

// A partial log may have lost its column header. Then the row's field count picks between the
// current layout, "size count type redop root" plus two groups of "time algbw busbw #wrong"
// (13 fields), and the same without root used by versions before root was printed (12 fields).
// Any other count cannot be interpreted and is reported as an error by the caller.
std::optional<ColumnLayout> headerless_layout(std::size_t n_fields) {
  if (n_fields != 12 && n_fields != 13) return std::nullopt;
  const bool with_root = n_fields == 13;
  ColumnLayout layout;
  layout.n_fields = static_cast<int>(n_fields);
  layout.size = 0;
  layout.count = 1;
  layout.type = 2;
  layout.redop = 3;
  layout.root = with_root ? 4 : -1;
  const int first_timing = with_root ? 5 : 4;
  for (int side = 0; side < 2; ++side) {
    const int base = first_timing + 4 * side;
    layout.sides[side] = SideColumns{base, base + 1, base + 2, base + 3};
  }
  return layout;
}

// ---- Line classification ------------------------------------------------------------------------

// `srun -l` prefixes every line with the task label ("0: "); it is not part of the tool's output.
std::string_view strip_task_label(std::string_view line) {
  const std::string_view body = trim(line);
  std::size_t i = 0;
  while (i < body.size() && is_digit(body[i])) ++i;
  if (i == 0 || i >= body.size() || body[i] != ':') return line;
  if (i + 1 < body.size() && !is_space(body[i + 1])) return line;  // "12:34" is not a label
  return body.substr(i + 1);
}

// NCCL/RCCL debug logging interleaved with the output: "host:pid:tid [dev] NCCL INFO ...".
bool is_library_logging(const std::vector<std::string_view>& tokens) {
  if (tokens.size() < 2) return false;
  auto is_library = [](std::string_view t) { return t == "NCCL" || t == "RCCL"; };
  if (is_library(tokens[1])) return tokens[0].find(':') != std::string_view::npos;
  return tokens.size() >= 3 && tokens[1].starts_with('[') && tokens[1].ends_with(']') &&
         is_library(tokens[2]);
}

// ---- The parser ---------------------------------------------------------------------------------

class Parser {
 public:
  explicit Parser(const std::string& file_name) { log_.file = file_name; }

  void feed(std::string_view raw, int line) {
    line_ = line;
    const std::string_view text = trim(strip_task_label(raw));
    if (text.empty()) return;
    if (text.front() == '#') return header_line(text);
    const std::vector<std::string_view> tokens = split(text);
    if (is_library_logging(tokens)) return;
    // Data rows start with the message size. Anything else outside '#' lines is a banner the
    // tools print ("NCCL version 2.16.2+cuda11.6", "RCCL version : ...", "rccl-tests: Version
    // ...") or an elision left by whoever pasted the log ("...").
    if (!is_digit(text.front())) return;
    data_row(tokens);
  }

  NcclLog finish(const std::string& op_hint) {
    if (log_.rows.empty()) {
      fail(0, "no data rows",
           "an nccl-tests / rccl-tests log has rows that start with the message size in bytes");
    }
    if (log_.op.empty()) log_.op = op_from_hint(op_hint);
    if (log_.op.empty()) log_.op = op_from_file_name(log_.file);
    return std::move(log_);
  }

  std::string op_from_hint(const std::string& op_hint) const {
    if (op_hint.empty()) return "";
    std::string op = canonical_op(op_hint);
    if (op.empty()) {
      fail(0, "unknown op hint " + in_quotes(op_hint),
           "use all_reduce, all_gather, reduce_scatter, alltoall, sendrecv, broadcast or reduce");
    }
    return op;
  }

 private:
  [[noreturn]] void fail(int line, const std::string& problem, const std::string& hint) const {
    throw NcclLogError(log_.file, line, problem, hint);
  }
  [[noreturn]] void fail(const std::string& problem, const std::string& hint) const {
    fail(line_, problem, hint);
  }

  void header_line(std::string_view text) {
    const std::string_view body = text.substr(1);
    const std::vector<std::string_view> tokens = split(body);
    if (tokens.empty()) return;
    if (tokens[0] == "size") {
      layout_ = layout_from_header(tokens, line_);
      return;
    }
    if (tokens[0] == "nThread") return run_parameters(tokens);
    if (tokens[0] == "Rank") return device(body, tokens);
    const std::string_view trimmed = trim(body);
    constexpr std::string_view avg = "Avg bus bandwidth";
    if (trimmed.starts_with(avg)) return average_busbw(trimmed.substr(avg.size()));
    constexpr std::string_view starting = "Collective test starting:";
    if (trimmed.starts_with(starting) && log_.op.empty()) {
      log_.op = canonical_op(trim(trimmed.substr(starting.size())));
    }
    // Everything else ('# Using devices', units, '# Out of bounds values', ...) is a comment.
  }

  // "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 ..."
  void run_parameters(const std::vector<std::string_view>& tokens) {
    for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
      const std::string_view key = tokens[i];
      const std::string_view value = tokens[i + 1];
      if (key == "nThread") log_.n_threads = header_int(key, value);
      if (key == "nGpus") log_.n_gpus = header_int(key, value);
      if (key == "minBytes") log_.min_bytes = header_double(key, value);
      if (key == "maxBytes") log_.max_bytes = header_double(key, value);
    }
  }

  int header_int(std::string_view key, std::string_view value) const {
    if (auto v = parse_number<int>(value)) return *v;
    fail("expected an integer after " + in_quotes(key) + ", found " + in_quotes(value),
         "the '# nThread' header line is garbled; re-copy it from the original output");
  }

  double header_double(std::string_view key, std::string_view value) const {
    if (auto v = parse_number<double>(value)) return *v;
    fail("expected a number after " + in_quotes(key) + ", found " + in_quotes(value),
         "the '# nThread' header line is garbled; re-copy it from the original output");
  }

  // "#  Rank  0 Group  0 Pid  50781 on host device  0 [0x18] NVIDIA H100 80GB HBM3"; older
  // rccl-tests print no Group, some builds print no device name after the bus id.
  void device(std::string_view body, const std::vector<std::string_view>& tokens) {
    const char* hint = "a '# Rank' line reads 'Rank R [Group G] Pid P on HOST device D [BUS] NAME'";
    NcclLogDevice dev;
    const auto rank = tokens.size() > 1 ? parse_number<int>(tokens[1]) : std::nullopt;
    if (!rank) fail("expected a rank number after 'Rank'", hint);
    dev.rank = *rank;
    const auto on = std::find(tokens.begin(), tokens.end(), "on");
    if (on == tokens.end() || on + 1 == tokens.end())
      fail("expected 'on HOST' in a device line", hint);
    dev.host = std::string(*(on + 1));
    const auto device_word = std::find(on + 1, tokens.end(), "device");
    const auto index = device_word != tokens.end() && device_word + 1 != tokens.end()
                           ? parse_number<int>(*(device_word + 1))
                           : std::nullopt;
    if (!index) fail("expected 'device N' in a device line", hint);
    dev.device = *index;
    auto last = device_word + 1;
    if (last + 1 != tokens.end() && (last + 1)->starts_with('[')) ++last;  // the bus id
    const std::size_t name_start =
        static_cast<std::size_t>(last->data() + last->size() - body.data());
    dev.name = std::string(trim(body.substr(name_start)));
    log_.devices.push_back(std::move(dev));
  }

  // "# Avg bus bandwidth    : 142.735"
  void average_busbw(std::string_view rest) {
    rest = trim(rest);
    if (rest.starts_with(':')) rest = trim(rest.substr(1));
    const auto value = parse_number<double>(rest);
    if (!value) {
      fail("expected a number after 'Avg bus bandwidth :', found " + in_quotes(rest),
           "the summary line is garbled; re-copy it from the original output");
    }
    log_.avg_busbw_gb_per_s = *value;
  }

  void data_row(const std::vector<std::string_view>& tokens) {
    if (!layout_) layout_ = headerless_layout(tokens.size());
    if (!layout_) {
      fail(
          "expected 13 fields (size count type redop root, then time algbw busbw #wrong for "
          "out-of-place and in-place) or 12 (the same without root), found " +
              std::to_string(tokens.size()),
          "no column header was seen, so the row is read in the standard layout; paste the "
          "'#  size  count ...' header line above the rows");
    }
    const std::vector<std::string_view> fields = align(tokens);
    NcclLogRow row;
    row.line = line_;
    row.size_bytes = number(fields, layout_->size, "size");
    if (layout_->count >= 0) row.count = number(fields, layout_->count, "count");
    if (layout_->type >= 0) row.type = std::string(fields[layout_->type]);
    if (layout_->redop >= 0) row.redop = std::string(fields[layout_->redop]);
    if (layout_->root >= 0) row.root = static_cast<int>(integer(fields, layout_->root, "root"));
    row.out_of_place = timing(fields, layout_->sides[0], "out-of-place", row.size_bytes);
    row.in_place = timing(fields, layout_->sides[1], "in-place", row.size_bytes);
    log_.rows.push_back(std::move(row));
  }

  // The row's fields in header order. Old alltoall/sendrecv print an empty redop under a "redop"
  // header, so such a row is one field short; it is recognised by a number where the redop
  // belongs and gets an empty redop put back.
  std::vector<std::string_view> align(const std::vector<std::string_view>& tokens) const {
    const int n = static_cast<int>(tokens.size());
    if (n == layout_->n_fields) return tokens;
    const int redop = layout_->redop;
    if (n == layout_->n_fields - 1 && redop >= 0 && redop < n &&
        parse_number<double>(tokens[redop])) {
      std::vector<std::string_view> fields = tokens;
      fields.insert(fields.begin() + redop, std::string_view());
      return fields;
    }
    const std::string source =
        layout_->header_line > 0
            ? "the column header on line " + std::to_string(layout_->header_line)
            : "the first data row (no column header was seen)";
    fail("expected " + std::to_string(layout_->n_fields) + " fields as in " + source + ", found " +
             std::to_string(n),
         "the row was cut short or two rows were pasted together; compare it with its neighbours");
  }

  double number(const std::vector<std::string_view>& fields, int column, const std::string& what) {
    if (column < 0) fail("the column header has no " + what + " column", "check the header line");
    if (auto v = parse_number<double>(fields[column])) return *v;
    fail("expected a number for " + what + ", found " + in_quotes(fields[column]),
         "the row is garbled; re-copy it from the original output");
  }

  long integer(const std::vector<std::string_view>& fields, int column, const std::string& what) {
    if (auto v = parse_number<long>(fields[column])) return *v;
    fail("expected an integer for " + what + ", found " + in_quotes(fields[column]),
         "the row is garbled; re-copy it from the original output");
  }

  std::optional<NcclTiming> timing(const std::vector<std::string_view>& fields,
                                   const SideColumns& side, const std::string& name,
                                   double size_bytes) {
    if (!side.present()) return std::nullopt;
    NcclTiming t;
    t.time_us = number(fields, side.time, name + " time");
    t.algbw_gb_per_s = number(fields, side.algbw, name + " algbw");
    t.busbw_gb_per_s = number(fields, side.busbw, name + " busbw");
    if (side.wrong >= 0 && fields[side.wrong] != "N/A") {
      t.wrong = integer(fields, side.wrong, name + " #wrong");
    }
    check_algbw(t, name, size_bytes);
    return t;
  }

  // algbw is printed with two decimals from size / time, and time is itself rounded to about four
  // significant digits, so 2% relative plus 0.01 GB/s absolute covers the printed rounding; a
  // mismatch beyond it means shifted columns or a value pasted from another row.
  void check_algbw(const NcclTiming& t, const std::string& name, double size_bytes) const {
    if (t.time_us <= 0) {
      fail(name + " time must be positive, found " + format_number(t.time_us),
           "the row is garbled; re-copy it from the original output");
    }
    const double expected = size_bytes / t.time_us / 1e3;  // B/us = 1e6 B/s; GB/s = 1e9 B/s
    if (std::abs(t.algbw_gb_per_s - expected) <= 0.02 * expected + 0.01) return;
    fail(
        name + " algbw " + format_number(t.algbw_gb_per_s) +
            " GB/s does not match size / time = " + format_number(size_bytes) + " B / " +
            format_number(t.time_us) + " us = " + format_bandwidth(expected) + " GB/s",
        "nccl-tests prints algbw = size / time; the columns are shifted or a value was mis-pasted");
  }

  NcclLog log_;
  std::optional<ColumnLayout> layout_;
  int line_ = 0;
};

std::string error_message(const std::string& file, int line, const std::string& problem,
                          const std::string& hint) {
  std::string where = line > 0 ? file + ":" + std::to_string(line) : file;
  return where + ": " + problem + " (hint: " + hint + ")";
}

}  // namespace

NcclLogError::NcclLogError(std::string file, int line, const std::string& problem,
                           const std::string& hint)
    : std::runtime_error(error_message(file, line, problem, hint)),
      file_(std::move(file)),
      line_(line) {}

NcclLog parse_nccl_log(std::istream& in, const std::string& file_name, std::string op_hint) {
  Parser parser(file_name);
  // Validate the hint before reading, so a bad hint is reported even for a bad log.
  parser.op_from_hint(op_hint);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) parser.feed(line, ++number);
  if (in.bad()) {
    throw NcclLogError(file_name, 0, "read error after line " + std::to_string(number),
                       "check that the file is readable and complete");
  }
  return parser.finish(op_hint);
}

NcclLog read_nccl_log(const std::filesystem::path& path, std::string op_hint) {
  const std::string file = path.string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw NcclLogError(file, 0, "cannot open: not a readable regular file", "check the path");
  }
  std::ifstream in(path);
  if (!in) {
    throw NcclLogError(file, 0, "cannot open for reading", "check the file's permissions");
  }
  return parse_nccl_log(in, file, std::move(op_hint));
}

double nccl_bus_factor(const std::string& op, int ranks) {
  if (ranks < 1) throw std::invalid_argument("nccl_bus_factor: ranks must be >= 1");
  const double n = ranks;
  if (op == "all_reduce") return 2 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "alltoall") return (n - 1) / n;
  if (op == "broadcast" || op == "reduce" || op == "sendrecv") return 1;
  throw std::invalid_argument("nccl_bus_factor: unknown op '" + op + "'");
}

}  // namespace fleetsim
