// A fit rewrites one entry of a GPU profile file in place, keeping every other line.
#include <catch2/catch.hpp>

#include <string>

#include "calibration/profile_file.hpp"
#include "sim/engine/errors.hpp"

namespace fleetsim {

TEST_CASE("a fitted entry replaces its block in a profile and nothing else") {
  const std::string profile =
      "name: p\n"
      "link_efficiency:\n"
      "  nvlink: {value: 0.8, sigma: 0.1, provenance: 'assumed: x'}\n"
      "  pcie:\n"
      "    value: 0.7\n"
      "\n"
      "    sigma: 0.1   # spread\n"
      "    provenance: 'assumed: y'\n"
      "# the library\n"
      "collective_library: nccl\n";
  const Calibrated entry{0.65, 0.02, "measured: it's a fit"};
  CHECK(with_profile_entry(profile, "p.yaml", "link_efficiency.pcie", entry) ==
        "name: p\n"
        "link_efficiency:\n"
        "  nvlink: {value: 0.8, sigma: 0.1, provenance: 'assumed: x'}\n"
        "  pcie:\n"
        "    value: 0.650\n"
        "    sigma: 0.020\n"
        "    provenance: 'measured: it''s a fit'\n"
        "# the library\n"
        "collective_library: nccl\n");
  CHECK(with_profile_entry(profile, "p.yaml", "link_efficiency.nvlink", entry)
            .find("  nvlink:\n    value: 0.650\n") != std::string::npos);
  try {
    with_profile_entry(profile, "p.yaml", "link_efficiency.efa", entry);
    FAIL("no efa entry to replace");
  } catch (const ScenarioError& e) {
    CHECK(e.file() == "p.yaml");
    CHECK_THAT(e.what(), Catch::Contains("no link_efficiency.efa entry to replace"));
  }
  CHECK_THROWS_AS(with_profile_entry(profile, "p.yaml", "nvls_efficiency", entry), ScenarioError);

  // A comment that introduces the next entry stays with it, even indented like the entry.
  const std::string commented =
      "link_efficiency:\n"
      "  nvlink:\n"
      "    value: 0.8\n"
      "    # the PCIe figure below is extrapolated\n"
      "  pcie: {value: 0.7, sigma: 0.1, provenance: 'assumed: y'}\n";
  CHECK(with_profile_entry(commented, "p.yaml", "link_efficiency.nvlink", entry) ==
        "link_efficiency:\n"
        "  nvlink:\n"
        "    value: 0.650\n"
        "    sigma: 0.020\n"
        "    provenance: 'measured: it''s a fit'\n"
        "    # the PCIe figure below is extrapolated\n"
        "  pcie: {value: 0.7, sigma: 0.1, provenance: 'assumed: y'}\n");
  // Windows line endings stay Windows line endings.
  const std::string crlf = "link_efficiency:\r\n  pcie:\r\n    value: 0.7\r\n\r\nname: p\r\n";
  CHECK(with_profile_entry(crlf, "p.yaml", "link_efficiency.pcie", {0.5, 0.01, "measured: x"}) ==
        "link_efficiency:\r\n  pcie:\r\n    value: 0.500\r\n    sigma: 0.010\r\n"
        "    provenance: 'measured: x'\r\n\r\nname: p\r\n");
  // A flow-style map cannot be edited in place.
  try {
    with_profile_entry("link_efficiency: {pcie: {value: 0.7}}\n", "p.yaml", "link_efficiency.pcie",
                       entry);
    FAIL("flow style");
  } catch (const ScenarioError& e) {
    CHECK_THAT(e.what(), Catch::Contains("write link_efficiency as a block map"));
  }
}

}  // namespace fleetsim
