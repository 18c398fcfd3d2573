// docs/accuracy.md from the validation cases: every number on it is computed here from the
// simulated steps and the scenarios' measured: blocks.
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/job/job.hpp"
#include "sim/report/console_analysis.hpp"
#include "sim/report/console_text.hpp"
#include "tools/accuracy/accuracy.hpp"
#include "workloads/layout/dimensions.hpp"

namespace fleetsim::accuracy {
namespace {

using console::fixed;
using console::significant;

// The goal, per GPU family with enough runs to judge it (docs/accuracy.md states it).
constexpr double kGoalMedian = 0.08;
constexpr double kGoalP90 = 0.15;
constexpr double kGoalMeanSigned = 0.04;
constexpr std::size_t kFamilyRunsJudged = 5;

std::string signed_percent(double fraction) {
  const std::string text = fixed(100.0 * fraction, 1) + "%";
  return fraction >= 0 ? "+" + text : text;
}

std::string percent(double fraction) {
  return fixed(100.0 * fraction, 1) + "%";
}

// Table cells: a '|' would split the cell, a newline the row.
std::string cell(std::string text) {
  std::string out;
  for (const char ch : text) {
    if (ch == '|') {
      out += "\\|";
    } else if (ch == '\n') {
      out += ' ';
    } else {
      out += ch;
    }
  }
  return out;
}

int gpus_of(const Case& c) {
  return c.inputs.nodes * c.inputs.node.gpus;
}

// Where a simulated step went, in shares of it: compute; exposed communication by what it is
// for (data-, tensor-, context-, expert-, pipeline-parallel; offload copies); idle.
std::string breakdown_text(const StepResult& step) {
  const StepBreakdown& b = step.breakdown;
  const double t = step.step_time_s;
  if (!(t > 0)) return "";
  std::string text = "compute " + fixed(100 * b.compute_s / t, 0) + "%";
  const auto add = [&](const char* name, double s) {
    if (s / t >= 0.005) text += ", " + std::string(name) + " " + fixed(100 * s / t, 0) + "%";
  };
  for (const ExposedPart& part : kExposedParts) add(part.key, b.*part.seconds);
  add("idle", b.idle_s);
  return text;
}

std::string memory_text(const Case& c) {
  const MemoryBreakdown& m = c.outcome.memory;
  std::string text = console::gb_text(m.total_bytes) + " of " + console::gb_text(m.capacity_bytes);
  if (!m.fits()) text = "**does not fit**: " + text;
  return text;
}

// Signed throughput errors of a group of runs.
using Errors = std::vector<double>;

std::string summary_row(const std::string& label, const Errors& errors, bool judged) {
  std::vector<double> magnitudes;
  int optimistic = 0;
  for (const double e : errors) {
    magnitudes.push_back(std::abs(e));
    if (e > 0) ++optimistic;
  }
  const SampleSummary s = summarise(magnitudes);
  const double mean = summarise(errors).mean;
  std::string verdict = "—";
  if (judged) {
    const bool met = s.p50 <= kGoalMedian && s.p90 <= kGoalP90 && std::abs(mean) <= kGoalMeanSigned;
    verdict = met ? "met" : "not met";
  }
  return "| " + label + " | " + std::to_string(errors.size()) + " | " + percent(s.p50) + " | " +
         percent(s.p90) + " | " + signed_percent(mean) + " | " + std::to_string(optimistic) +
         " / " + std::to_string(errors.size() - static_cast<std::size_t>(optimistic)) + " | " +
         verdict + " |\n";
}

std::string summary_table(const std::string& heading, const std::map<std::string, Errors>& groups,
                          const Errors& all, bool judge_groups) {
  std::string out = "| " + heading +
                    " | runs | median \\|error\\| | P90 \\|error\\| | mean signed error | "
                    "optimistic / pessimistic | goal |\n|---|---|---|---|---|---|---|\n";
  for (const auto& [name, errors] : groups) {
    out += summary_row(name, errors, judge_groups && errors.size() >= kFamilyRunsJudged);
  }
  out += summary_row("**all**", all, true);
  return out;
}

std::string file_link(const Case& c) {
  const std::string name = c.file.substr(c.file.rfind('/') + 1);
  return "[" + name.substr(0, name.size() - 5) + "](../" + c.file + ")";
}

// A file's link, and the variant's name where the file holds more than one run.
std::string run_label(const Case& c, const std::map<std::string, int>& runs_per_file) {
  return runs_per_file.at(c.file) > 1 ? file_link(c) + ": " + cell(c.variant) : file_link(c);
}

// The throughput errors of the cases that ran, per GPU family, per source and all together.
struct ErrorGroups {
  std::map<std::string, Errors> by_family;
  std::map<std::string, Errors> by_source;
  Errors all;
};

ErrorGroups error_groups(const std::vector<Case>& cases) {
  ErrorGroups groups;
  for (const Case& c : cases) {
    if (!c.refusal.empty()) continue;
    if (const auto e = throughput_error(c)) {
      groups.by_family[gpu_family(c.inputs.gpu)].push_back(*e);
      groups.by_source[c.source].push_back(*e);
      groups.all.push_back(*e);
    }
  }
  return groups;
}

}  // namespace

std::string readme_section(const std::vector<Case>& cases, const std::string& example_file) {
  const ErrorGroups groups = error_groups(cases);
  std::string out = summary_table("GPU", groups.by_family, groups.all, true);
  for (const Case& c : cases) {
    if (c.file != example_file || !c.refusal.empty()) continue;
    out += "\n```\n$ fleetsim run " + c.file + "\n...\n" +
           measured_section(c.variant, *c.measured, c.metrics) + "```\n";
    return out;
  }
  throw std::runtime_error("the README's example " + example_file +
                           " is not a validation scenario that runs");
}

std::string render_page(const std::vector<Case>& cases) {
  const ErrorGroups groups = error_groups(cases);
  std::map<std::string, std::vector<const Case*>> runs_by_source;
  std::vector<const Case*> refused;
  std::vector<const Case*> out_of_memory;
  std::vector<const Case*> with_memory;
  std::map<std::string, int> runs_per_file;
  for (const Case& c : cases) ++runs_per_file[c.file];
  const auto label = [&](const Case& c) { return run_label(c, runs_per_file); };
  for (const Case& c : cases) {
    if (!c.refusal.empty()) {
      refused.push_back(&c);
      continue;
    }
    runs_by_source[c.source].push_back(&c);
    if (!c.outcome.memory.fits()) out_of_memory.push_back(&c);
    if (c.measured->peak_memory_bytes) with_memory.push_back(&c);
  }
  const std::size_t ran = cases.size() - refused.size();

  std::ostringstream page;
  page << "# Accuracy\n\n"
          "<!-- Generated by fleetsim_accuracy from validation/: edit those scenarios or the "
          "model, not this page. -->\n\n"
          "Every published end-to-end training run of the reference set is a scenario under "
          "[`validation/`](../validation/README.md): the run's model, layout, batch, precision "
          "and cluster as its source states them, what the source leaves unsaid assumed and "
          "listed in the file's header, and what the run measured in its `measured:` block. "
          "`fleetsim_accuracy` simulates each and writes this page; a test fails when the page "
          "is stale. Nothing in the model is fitted to these runs: the GPU profiles come from "
          "kernel microbenchmarks and spec sheets (see [kernels](kernel-accuracy.md) and "
          "[collectives](collective-accuracy.md)).\n\n"
       << runs_per_file.size() << " scenarios, " << cases.size() << " published runs: " << ran
       << " simulated, " << refused.size()
       << " that fleetsim cannot express yet (listed at the end: each is a gap in the model). "
          "The error of a run is predicted / published − 1 of its per-GPU throughput: "
          "tokens/s per GPU where the source gives it, else its step time (inverted), "
          "TFLOP/s per GPU or MFU, each counted by the source's own FLOP convention and peak "
          "(see [`measured:`](scenario-reference.md#measured)). Positive is optimistic. "
          "Median and P90 are of |error| (nearest rank). The goal is a median within "
       << fixed(100 * kGoalMedian, 0) << "% and a P90 within " << fixed(100 * kGoalP90, 0)
       << "% for every GPU family with at least " << kFamilyRunsJudged
       << " runs and overall, a mean signed error within ±" << fixed(100 * kGoalMeanSigned, 0)
       << "%.\n\n";

  page << "## Summary\n\n"
       << summary_table("GPU", groups.by_family, groups.all, true) << "\n"
       << summary_table("source", groups.by_source, groups.all, false) << "\n";

  page << "## Memory\n\n"
       << out_of_memory.size() << " of " << ran << " runs, all of which ran for real, "
       << (out_of_memory.size() == 1 ? "is" : "are") << " called out of memory by `fleetsim memory`"
       << (out_of_memory.empty() ? ".\n\n"
                                 : " (their step is simulated all the same for the error "
                                   "above):\n\n");
  if (!out_of_memory.empty()) {
    page << "| run | GPUs | layout | predicted per GPU |\n|---|---|---|---|\n";
    for (const Case* c : out_of_memory) {
      page << "| " << label(*c) << " | " << gpus_of(*c) << " × " << gpu_family(c->inputs.gpu)
           << " | " << cell(layout_label(c->inputs.plan)) << " | " << memory_text(*c) << " GB |\n";
    }
    page << "\n";
  }
  if (!with_memory.empty()) {
    page << "Peak memory per GPU where the source reports it, as it logs it (torchtitan's is "
            "the caching allocator's peak reserved memory, `reserved_bytes.all.peak` in "
            "torchtitan/components/metrics.py, above what the framework allocates); fleetsim's "
            "is its estimate of the fullest rank's allocations, with 5% of each step's "
            "allocations assumed lost to fragmentation:\n\n"
            "| run | published (GB) | predicted (GB) | error |\n|---|---|---|---|\n";
    for (const Case* c : with_memory) {
      for (const MetricComparison& m : c->metrics) {
        if (m.metric != "peak_memory_bytes" || !m.error) continue;
        const MeasuredMetricFormat format = measured_metric_format(m);
        page << "| " << label(*c) << " | " << format.text(m.measured) << " | "
             << format.text(*m.predicted) << " | " << signed_percent(*m.error) << " |\n";
      }
    }
    page << "\n";
  }

  page << "## Runs\n\n"
          "Each run's headline figure, the simulated step and where its time goes (shares of "
          "the step: compute; communication left exposed, by data-, tensor-, context-, "
          "expert- and pipeline-parallel groups and offload copies (host); idle, mostly the "
          "pipeline's bubble), and the memory per GPU fleetsim estimates against the GPU's "
          "capacity.\n\n";
  for (const auto& [source, runs] : runs_by_source) {
    page << "### " << source << "\n\n"
         << "| run | GPUs | layout | figure | published | predicted | error | step | where "
            "it goes | memory (GB) |\n|---|---|---|---|---|---|---|---|---|---|\n";
    for (const Case* c : runs) {
      const MetricComparison* m = headline(*c);
      page << "| " << label(*c) << " | " << gpus_of(*c) << " × " << gpu_family(c->inputs.gpu)
           << " | " << cell(layout_label(c->inputs.plan)) << " | ";
      if (m != nullptr) {
        const MeasuredMetricFormat format = measured_metric_format(*m);
        page << cell(format.title) << " | " << format.text(m->measured) << " | "
             << format.text(*m->predicted) << " | " << signed_percent(*throughput_error(*c));
      } else {
        page << "— | — | — | —";
      }
      page << " | " << significant(c->outcome.step.step_time_s, 3) << " s | "
           << breakdown_text(c->outcome.step) << " | " << memory_text(*c) << " |\n";
    }
    page << "\n";
  }

  page << "## Cannot run yet\n\n";
  if (refused.empty()) {
    page << "None.\n";
  } else {
    page << "Each scenario below encodes a run as published; fleetsim refuses it with the "
            "message shown, which names the feature it lacks.\n\n"
            "| run | refusal |\n|---|---|\n";
    for (const Case* c : refused) {
      page << "| " << label(*c) << " | " << cell(c->refusal) << " |\n";
    }
  }
  return page.str();
}

}  // namespace fleetsim::accuracy
