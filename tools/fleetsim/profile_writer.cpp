#include "tools/fleetsim/profile_writer.hpp"
#include "calibration/profile_file.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>

#include "sim/engine/errors.hpp"
#include "sim/engine/rng.hpp"
#include "sim/report/report.hpp"
#include "tools/fleetsim/progress.hpp"

namespace fleetsim {
namespace {

// The lines of `after` that differ from `before`: the new entries, as they will read in the file.
std::string changed_lines(const std::string& before, const std::string& after) {
  std::istringstream old_text(before), new_text(after);
  std::vector<std::string> old_lines;
  for (std::string line; std::getline(old_text, line);) old_lines.push_back(line);
  std::vector<std::string> new_lines;
  for (std::string line; std::getline(new_text, line);) new_lines.push_back(line);
  std::size_t head = 0;
  while (head < old_lines.size() && head < new_lines.size() && old_lines[head] == new_lines[head])
    ++head;
  std::size_t tail = 0;
  while (tail < old_lines.size() - head && tail < new_lines.size() - head &&
         old_lines[old_lines.size() - 1 - tail] == new_lines[new_lines.size() - 1 - tail])
    ++tail;
  std::string out;
  for (std::size_t i = head; i < new_lines.size() - tail; ++i) out += new_lines[i] + "\n";
  return out.empty() ? "    (the profile holds these entries already)\n" : out;
}

}  // namespace

std::string file_fingerprint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return fingerprint(text.str());
}

double profile_value(const GpuProfile& profile, const std::string& key) {
  const std::optional<Calibrated> entry = profile_entry(profile, key);
  if (!entry) throw ModelError("the profile has no entry '" + key + "' to read back");
  return entry->value;
}

void put_profile_entries(const DataPaths& data, const std::string& gpu,
                         const std::vector<std::pair<std::string, Calibrated>>& entries,
                         bool write) {
  const std::filesystem::path profile = std::filesystem::canonical(gpu_profile_file(data, gpu));
  // Two calibrations writing one profile take turns, each reading what the other wrote.
  std::optional<OutputLock> lock;
  if (write) lock.emplace(std::vector<std::filesystem::path>{profile}, say_waiting_for);
  std::string before;
  {
    std::ifstream in(profile);
    before.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string after = before;
  for (const auto& [key, entry] : entries) {
    after = with_profile_entry(after, profile.string(), key, entry);
  }
  std::printf("profile entries (in %s):\n%s", profile.string().c_str(),
              changed_lines(before, after).c_str());
  if (!write) return;
  const auto permissions = std::filesystem::status(profile).permissions();
  write_text_atomically(profile, after);
  std::filesystem::permissions(profile, permissions);
  try {
    const GpuProfile written = load_gpu_profile(data, gpu);
    for (const auto& [key, entry] : entries) {
      // Written with three decimals (three significant digits below 0.0095; durations in
      // microseconds): what reads back is that close.
      const double value = profile_value(written, key);
      const bool with_unit = !profile_entry_unit(key).empty();
      const double tolerance = std::max(0.005 * std::abs(entry.value), with_unit ? 0.0 : 0.0005);
      if (std::abs(value - entry.value) > tolerance) {
        throw ModelError(profile.string() + ": " + key + " reads back as " + std::to_string(value) +
                         ", not the " + std::to_string(entry.value) + " written");
      }
    }
  } catch (const std::exception& failure) {
    try {
      write_text_atomically(profile, before);
      std::filesystem::permissions(profile, permissions);
    } catch (const std::exception& restore) {
      throw ModelError(std::string(failure.what()) + "; restoring " + profile.string() +
                       " failed too: " + restore.what());
    }
    throw;
  }
  std::printf("written to %s\n", profile.string().c_str());
}

}  // namespace fleetsim
