// The storage of a program's task names, dependencies and kernels: every view stays what was
// copied in, however the runs fall against the blocks' ends; equal kernels are kept once.
#include <catch2/catch.hpp>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "workloads/task_graph.hpp"

namespace fleetsim {
namespace {

TEST_CASE("an arena's views keep what was copied in, across blocks and past a block's size") {
  BlockArena<TaskIndex> arena;
  CHECK(arena.add({}).empty());
  // Blocks hold 64 KiB: 16,384 indices. Runs of 1,000 fill one up to 16,000, so the 17th
  // starts a new block; then one longer than a block (its own), then short ones after it.
  std::vector<std::vector<TaskIndex>> runs;
  for (std::size_t length : {1000, 1000, 1000, 1000, 1000, 1000, 1000,  1000, 1000, 1000,  1000,
                             1000, 1000, 1000, 1000, 1000, 1000, 40000, 3,    1,    20000, 7}) {
    std::vector<TaskIndex>& run = runs.emplace_back(length);
    std::iota(run.begin(), run.end(), static_cast<TaskIndex>(runs.size() * 100000));
  }
  std::vector<std::span<const TaskIndex>> views;
  for (const std::vector<TaskIndex>& run : runs) views.push_back(arena.add(run));
  for (std::size_t i = 0; i < runs.size(); ++i) {
    INFO(i);
    CHECK(std::vector<TaskIndex>(views[i].begin(), views[i].end()) == runs[i]);
  }
}

TEST_CASE("a program's copy keeps its tasks' names and dependencies when the original is gone") {
  Program copy;
  {
    Program program;
    program.add("first task", Stream::compute, ComputeWork{}, {});
    const std::vector<TaskIndex> deps{0};
    program.add(std::string(100, 'x'), Stream::tensor, CollectiveWork{}, deps);
    copy = program;
  }
  REQUIRE(copy.size() == 2);
  CHECK(copy[0].name == "first task");
  CHECK(copy[0].deps.empty());
  CHECK(copy[1].name == std::string(100, 'x'));
  CHECK(std::vector<TaskIndex>(copy[1].deps.begin(), copy[1].deps.end()) ==
        std::vector<TaskIndex>{0});
}

TEST_CASE("a program keeps each distinct kernel once, and equal ones as that one") {
  Program program;
  const Kernel gemm = gemm_kernel(4096, 4096, 4096, 2);
  const Kernel* kept = program.kernel(gemm);
  CHECK(*kept == gemm);
  CHECK(program.kernel(Kernel(gemm)) == kept);
  Kernel negative_zero = gemm;  // -0 equals 0: the same kernel
  negative_zero.window = -0.0;
  CHECK(program.kernel(negative_zero) == kept);
  Kernel beside_communication = gemm;
  beside_communication.sm_margin = 16;
  const Kernel* other = program.kernel(beside_communication);
  CHECK(other != kept);
  CHECK(*other == beside_communication);
  // A copy of the program reads the same kernels.
  const Program copy = program;
  CHECK(Program(copy).kernel(gemm) == kept);
}

}  // namespace
}  // namespace fleetsim
