// The memory model against the validation runs (validation/*/*.yaml): every one ran on its
// cluster, so it must fit; where its source publishes the peak memory, the estimate must come
// within 10% of it. The exceptions are listed by name with what keeps them out, so that the list
// shrinks as the model learns them: an exception that starts to agree fails the test too.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "sim/scenario/scenario.hpp"
#include "sim/step/memory_check.hpp"

using namespace fleetsim;

namespace {

constexpr double kPeakMemoryTolerance = 0.10;

// Runs that ran but that the model calls out of memory.
const std::set<std::string> kKnownOutOfMemory = {};

// Validation files the loader refuses, as the accuracy page lists them: NeMo's long-sequence
// B200 rows whose layouts do not use every GPU, OPT-175B's batch that 124 replicas do not
// divide.
const std::set<std::string> kRefused = {
    "nemo_longseq_llama3_8b_1024k_1024xb200_fp8",
    "nemo_longseq_llama3_8b_128k_128xb200_fp8",
    "nemo_longseq_llama3_8b_16k_16xb200_fp8",
    "nemo_longseq_llama3_8b_256k_256xb200_fp8",
    "nemo_longseq_llama3_8b_32k_32xb200_fp8",
    "nemo_longseq_llama3_8b_512k_512xb200_fp8",
    "nemo_longseq_llama3_8b_64k_64xb200_fp8",
    "nemo_longseq_llama3_8b_8k_8xb200_fp8",
    "opt_175b_992xa100",
};

// Published peaks the estimate misses by more than the tolerance, with the bound it keeps.
// torchtitan's Llama 3.1 405B under PyTorch's pipelining: the estimate is 11-22% under the
// allocator's peak reserved memory (torchtitan's metrics.py reads reserved_bytes.all.peak, the
// most of any rank), by more than the tensors PyTorch's pipelining keeps beside the layers
// account for (each micro-batch's stage output and gradient receive buffer, 2 GB on stage 0).
// Much of it is the allocator's state, not tensors: the 1F1B row at sequence 8,192 and the 4D
// row at 32,768 hold the same tensors (the same tokens a micro-batch, schedule and code path)
// and published 82.5 and 75.3 GiB.
const std::map<std::string, double> kKnownPeakGaps = {
    {"tt_h100_405b_512gpu_3d_1f1b", 0.25},
    {"tt_h100_405b_512gpu_3d_interleaved", 0.25},
    {"tt_h100_405b_512gpu_4d_cp1_seq32k", 0.25},
    {"tt_h100_405b_512gpu_4d_cp8_seq256k", 0.25},
};

}  // namespace

TEST_CASE("validation runs fit in memory, and peak memory is within 10% where published") {
  const std::filesystem::path source = FLEETSIM_SOURCE_DIR;
  const DataPaths data{source};
  std::set<std::string> out_of_memory, refused, gaps_seen;
  int runs = 0, peaks = 0;
  for (const auto& directory : std::filesystem::directory_iterator(source / "validation")) {
    if (!directory.is_directory()) continue;
    for (const auto& entry : std::filesystem::directory_iterator(directory.path())) {
      if (entry.path().extension() != ".yaml") continue;
      // Refused files are kRefused (the accuracy page lists them with their messages).
      Scenario scenario;
      try {
        scenario = load_scenario(entry.path(), data);
      } catch (const ScenarioError&) {
        refused.insert(entry.path().stem().string());
        continue;
      }
      for (std::size_t i = 0; i < scenario.variants.size(); ++i) {
        const Variant& variant = scenario.variants[i];
        if (!variant.measured) continue;
        const std::string name = scenario.name + (i == 0 ? "" : ": " + variant.name);
        INFO(name);
        ++runs;
        const MemoryBreakdown memory = check_memory(variant.inputs).memory;
        if (!memory.fits()) out_of_memory.insert(name);
        if (!variant.measured->peak_memory_bytes) continue;
        ++peaks;
        const double error = memory.total_bytes / *variant.measured->peak_memory_bytes - 1;
        INFO("error " << 100 * error << "%");
        const auto gap = kKnownPeakGaps.find(name);
        if (gap == kKnownPeakGaps.end()) {
          CHECK(std::abs(error) <= kPeakMemoryTolerance);
        } else {
          gaps_seen.insert(name);
          CHECK(std::abs(error) <= gap->second);
          CHECK(std::abs(error) > kPeakMemoryTolerance);  // agrees now: take it off the list
        }
      }
    }
  }
  CHECK(runs >= 130);
  CHECK(peaks == 15);
  CHECK(refused == kRefused);
  CHECK(out_of_memory == kKnownOutOfMemory);
  CHECK(gaps_seen.size() == kKnownPeakGaps.size());
}
