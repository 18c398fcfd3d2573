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

// "n: median / max" of the rows' |errors|.
std::string error_summary(const std::vector<KernelFitPoint>& points) {
  const std::vector<double> errors = abs_errors(points);
  return std::to_string(points.size()) + ": " + formatted("%.1f%%", 100 * median(errors)) + " / " +
         formatted("%.1f%%", 100 * *std::max_element(errors.begin(), errors.end()));
}

// A summary cell: the rows fitted (median / max |error|), those that set an entry alone (their
// error near nil by construction: counted, not scored), those only checked; a dash for none.
std::string rows_cell(const std::vector<KernelFitPoint>& points) {
  const std::vector<KernelFitPoint> fitted = points_in_role(points, FitRole::fitted);
  const std::vector<KernelFitPoint> sets = points_in_role(points, FitRole::sets);
  const std::vector<KernelFitPoint> checked = points_in_role(points, FitRole::checked);
  std::vector<std::string> parts;
  if (!fitted.empty()) parts.push_back(error_summary(fitted));
  if (!sets.empty()) parts.push_back(std::to_string(sets.size()) + " setting an entry");
  if (!checked.empty()) parts.push_back("checked " + error_summary(checked));
  if (parts.empty()) return "—";
  std::string text = parts.front();
  for (std::size_t i = 1; i < parts.size(); ++i) text += "; " + parts[i];
  return text;
}

std::string points_table(const std::vector<KernelFitPoint>& points) {
  std::string table =
      "| row | file | role | measured (µs) | model (µs) | error |\n|---|---|---|---|---|---|\n";
  for (const KernelFitPoint& point : points) {
    table += "| " + cell(point.what) + " | " + cell(file_name(point.file)) + ":" +
             std::to_string(point.line) + " | " + to_string(point.role) + " | " +
             formatted("%.2f", 1e6 * point.measured_s) + " | " +
             formatted("%.2f", 1e6 * point.fitted_s) + " | " +
             formatted("%+.1f%%", 100 * point.error()) + " |\n";
  }
  return table;
}

// The fitted entries as the profile writes them.
std::string parameters_table(const KernelFit& fit) {
  std::string table = "| entry | value | sigma | from |\n|---|---|---|---|\n";
  for (const KernelFitParameter& p : fit.parameters) {
    table += "| `" + p.key + "` | " + profile_entry_text(p.key, p.value) + " | " +
             profile_entry_text(p.key, p.sigma) + " | " + cell(p.basis) + " |\n";
  }
  return table;
}

struct ProfileFit {
  std::string name;
  std::vector<MicrobenchFile> files;  // the fit points into these
  KernelFit fit;
};

std::string summary_row(const ProfileFit& profile) {
  const KernelFit& fit = profile.fit;
  return "| [" + profile.name + "](#" + profile.name + ") | " +
         rows_cell(gemm_points(fit.points, false)) + " | " +
         rows_cell(gemm_points(fit.held_out, false)) + " | " +
         rows_cell(gemm_points(fit.points, true)) + " | " +
         rows_cell(gemm_points(fit.held_out, true)) + " | " +
         rows_cell(points_of(fit.points, "attention")) + " | " +
         rows_cell(points_of(fit.points, "memory")) + " | " +
         rows_cell(points_of(fit.points, "overlap")) + " |\n";
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
    for (const KernelFitSkip& skipped : profile.fit.skipped) {
      section += "* " + cell(file_name(skipped.file)) + ":" + std::to_string(skipped.line) + ": " +
                 cell(skipped.why) + "\n";
    }
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
      "over the measured one, less one: positive, the model is slower than measured "
      "(pessimistic; the end-to-end page's errors are of throughput, positive where the model "
      "is optimistic). Rows of a file under sustained load are compared at the clocks the "
      "power limit settles, short runs at boost clocks. Each row has a role: fitted (one of "
      "several rows its entries are fitted to), setting an entry alone (a best shape, a single "
      "copy, GEMMs under sustained load beside short runs: its error near nil by construction, "
      "counted but not scored), or checked (compared only: short runs beside a sweep under "
      "sustained "
      "load). With six GEMM rows or more of four shapes or more, every third is held out and "
      "predicted by a fit of the others: the out-of-sample error. Entries a profile keeps "
      "from another GPU say so in their provenance (`extrapolated:`), except the memory "
      "variants `a100-sxm-40gb` and `h100-sxm-96gb`, which carry their parent's entries with "
      "their parent's provenance, a test keeping them in step: but for what the 96 GB part's "
      "500 W limit changes (its own rows set its sustained BF16 rate; its attention and FP8 "
      "entries, its parent's scaled to that limit, say `extrapolated:`). Profiles without a "
      "folder here are extrapolated throughout. "
      "Collectives are compared with nccl-tests logs on [their own page]"
      "(collective-accuracy.md), end-to-end runs on the [accuracy page](accuracy.md).\n\n"
      "Reading the fits:\n\n"
      "* A best-shape row (mamf-finder's: the highest rate of a search over shapes) on its own "
      "caps every GEMM at its rate, so the model runs that very shape slower by its fixed "
      "time; beside a sweep of short runs it is one of the rows fitted.\n"
      "* Sweeps run after thousands of warm-ups (the files' headers say) are read as under "
      "sustained load: true of the shapes that reach the ceiling, which set it; their small "
      "shapes run too briefly to settle the clocks, and draw too little power to be held by "
      "them.\n"
      "* Square shapes say little about K: where an FP8 fit's K overhead is wide, an FP8 GEMM "
      "of short K runs slower in the model than measured.\n"
      "* On Blackwell XLA's sm_100 table and mamf-finder's best shapes disagree; the fits "
      "follow the table, whose many shapes outweigh one best shape.\n\n## Summary\n\n"
      "Rows fitted, with median / max |error|; rows setting an entry alone; rows checked, "
      "with theirs.\n\n"
      "| profile | BF16 / FP16 GEMMs | held out | FP8 GEMMs | held out | attention | memory | "
      "overlap |\n|---|---|---|---|---|---|---|---|\n";
  for (const ProfileFit& profile : profiles) page += summary_row(profile);
  for (const ProfileFit& profile : profiles) page += "\n" + profile_section(profile);
  return page;
}

}  // namespace fleetsim::docs
