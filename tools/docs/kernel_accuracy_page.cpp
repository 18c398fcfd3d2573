#include "tools/docs/kernel_accuracy_page.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <vector>

#include "calibration/kernel_fit.hpp"
#include "calibration/linear_fit.hpp"
#include "calibration/microbench.hpp"
#include "calibration/profile_file.hpp"
#include "sim/scenario/scenario.hpp"

namespace fleetsim::docs {
namespace fs = std::filesystem;

namespace {

std::string formatted(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof text, pattern, value);
  return text;
}

std::string file_name(const std::string& path) {
  return fs::path(path).filename().string();
}

// A table cell also read as Markdown: no bar, no line break.
std::string cell(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::string escaped;
  for (const char c : text) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
  return escaped;
}

// "n: median / max" of the rows' |errors|, or a dash for none.
std::string error_summary(const std::vector<KernelFitPoint>& points) {
  if (points.empty()) return "—";
  std::vector<double> errors;
  for (const KernelFitPoint& point : points) errors.push_back(std::abs(point.error()));
  return std::to_string(points.size()) + ": " + formatted("%.1f%%", 100 * median(errors)) + " / " +
         formatted("%.1f%%", 100 * *std::max_element(errors.begin(), errors.end()));
}

std::string points_table(const std::vector<KernelFitPoint>& points) {
  std::string table =
      "| row | file | measured (µs) | model (µs) | error |\n|---|---|---|---|---|\n";
  for (const KernelFitPoint& point : points) {
    table += "| " + cell(point.what) + " | " + cell(file_name(point.file)) + ":" +
             std::to_string(point.line) + " | " + formatted("%.2f", 1e6 * point.measured_s) +
             " | " + formatted("%.2f", 1e6 * point.fitted_s) + " | " +
             formatted("%+.1f%%", 100 * point.error()) + " |\n";
  }
  return table;
}

// The fitted entries in the units the profile writes them in.
std::string parameters_table(const KernelFit& fit) {
  std::string table = "| entry | value | sigma | from |\n|---|---|---|---|\n";
  for (const KernelFitParameter& p : fit.parameters) {
    const std::string unit = profile_entry_unit(p.key);
    const double scale = unit == "us" ? 1e6 : unit == "TFLOPS" ? 1e-12 : 1;
    const std::string shown = unit == "us" ? " µs" : unit.empty() ? "" : " " + unit;
    table += "| `" + p.key + "` | " + formatted("%.4g", scale * p.value) + shown + " | " +
             formatted("%.3g", scale * p.sigma) + shown + " | " + cell(p.basis) + " |\n";
  }
  return table;
}

struct ProfileFit {
  std::string name;
  std::vector<MicrobenchFile> files;  // the fit points into these
  KernelFit fit;
};

// The GEMM rows at the 16-bit rate: BF16's, and FP16's where the profile reads them as BF16.
std::vector<KernelFitPoint> sixteen_bit_gemms(const std::vector<KernelFitPoint>& points) {
  std::vector<KernelFitPoint> gemms = points_of(points, "gemm", "bf16");
  for (const KernelFitPoint& point : points_of(points, "gemm", "fp16")) gemms.push_back(point);
  return gemms;
}

std::string summary_row(const ProfileFit& profile) {
  const KernelFit& fit = profile.fit;
  return "| [" + profile.name + "](#" + profile.name + ") | " +
         error_summary(sixteen_bit_gemms(fit.points)) + " | " +
         error_summary(sixteen_bit_gemms(fit.held_out)) + " | " +
         error_summary(points_of(fit.points, "gemm", "fp8")) + " | " +
         error_summary(points_of(fit.held_out, "gemm", "fp8")) + " | " +
         error_summary(points_of(fit.points, "attention")) + " | " +
         error_summary(points_of(fit.points, "memory")) + " | " +
         error_summary(points_of(fit.points, "overlap")) + " |\n";
}

std::string profile_section(const ProfileFit& profile) {
  std::string section =
      "## " + profile.name + "\n\nInputs (`calibration/microbench/" + profile.name + "/`):\n\n";
  for (const MicrobenchFile& file : profile.files) {
    section += "* `" + file_name(file.path) + "` (" + file.provenance +
               (file.gpu.empty() ? "" : ", " + file.gpu) +
               (file.sustained ? ", sustained load" : "") + ")" +
               (file.source.empty() ? "" : ": " + file.source) + "\n";
  }
  section += "\n" + parameters_table(profile.fit) + "\nEvery row at the fit:\n\n" +
             points_table(profile.fit.points);
  if (!profile.fit.held_out.empty()) {
    section +=
        "\nHeld out (every third GEMM row of a sweep, predicted by a fit of the others):\n\n" +
        points_table(profile.fit.held_out);
  }
  if (!profile.fit.skipped.empty()) {
    section += "\nNot in the model:\n\n";
    for (const std::string& skipped : profile.fit.skipped) section += "* " + cell(skipped) + "\n";
  }
  return section;
}

}  // namespace

std::string kernel_accuracy_page(const fs::path& source) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(source / "calibration/microbench")) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  const DataPaths data{source};
  std::vector<ProfileFit> profiles;
  profiles.reserve(names.size());
  for (const std::string& name : names) {
    ProfileFit& profile = profiles.emplace_back();
    profile.name = name;
    profile.files = read_microbench_dir(source / "calibration/microbench" / name);
    profile.fit = fit_kernels(load_gpu_profile(data, name), profile.files);
  }
  std::string page =
      "# Kernels: accuracy\n\n<!-- Generated by fleetsim_docs from calibration/microbench/ and "
      "calibration/profiles/: edit those, not this page. -->\n\n"
      "How each GPU profile's kernel model (calibration/kernel_cost.hpp) compares with the "
      "microbenchmark rows it is fitted to. `fleetsim calibrate --kernels "
      "calibration/microbench/<profile> --gpu <profile>` fits the GEMM, memory, FP8, attention "
      "and overlap entries to every row of that folder; a test keeps each shipped profile equal "
      "to its fit, so the errors below are the shipped model's. An error is the model's time "
      "over the measured one, less one: positive, the model is slower than measured. Rows of a "
      "file under sustained load are compared at the clocks the power limit settles, short runs "
      "at boost clocks. With six rows or more of four shapes or more, every third GEMM row is "
      "held out, predicted by a fit of the others: the out-of-sample error. Entries a profile "
      "keeps from another GPU say so in their provenance (`extrapolated:`), and profiles "
      "without a folder here are extrapolated throughout. Collectives are compared with "
      "nccl-tests logs on [their own page](collective-accuracy.md), end-to-end runs on the "
      "[accuracy page](accuracy.md).\n\n"
      "Reading the fits:\n\n"
      "* A best-shape row (mamf-finder's: the highest rate of a search over shapes) on its own "
      "caps every GEMM at its rate, so the model runs that very shape slower by its fixed "
      "time; beside a sweep it is one row of the fit.\n"
      "* Azure's cuBLASLt sweeps (10,000 warm-ups a shape) are read as runs under sustained "
      "load: true of the shapes that reach the ceiling, which set it; their small shapes run "
      "too briefly to settle the clocks, and draw too little power to be held by them.\n"
      "* Square shapes say little about K: the FP8 fits' K overhead is wide, and an FP8 GEMM "
      "of short K (a best shape of K 1536 or so) runs slower in the model than measured.\n"
      "* On Blackwell XLA's sm_100 table and mamf-finder's best shapes disagree; the fits "
      "follow the table, whose shapes training runs.\n"
      "* The sizes of the STREAM arrays are not published: BabelStream's default is "
      "assumed.\n\n## Summary\n\n"
      "Rows, then median / max |error|.\n\n"
      "| profile | BF16 / FP16 GEMMs | held out | FP8 GEMMs | held out | attention | memory | "
      "overlap |\n|---|---|---|---|---|---|---|---|\n";
  for (const ProfileFit& profile : profiles) page += summary_row(profile);
  for (const ProfileFit& profile : profiles) page += "\n" + profile_section(profile);
  return page;
}

}  // namespace fleetsim::docs
