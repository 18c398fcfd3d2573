// Internal to fleetsim_report: the temporary-file-then-rename protocol shared by the writers.
//
// A result is first written in full to `<target>.tmp.<pid>` in the target's directory (same
// file system, so the rename is atomic), flushed to disk, and only then renamed over the target.
// Readers see either the old file or the new one, never a partial one.
#pragma once

#include <filesystem>
#include <string>

namespace fleetsim::report_detail {

// `<target>.tmp.<pid>`, after removing those of processes that have ended (a run killed while
// writing, which no handler could clean up), and noted as the file being written until it is
// committed or discarded.
std::filesystem::path temp_path_for(const std::filesystem::path& target);

// Flushes `temp` to disk and renames it over `target`. On failure removes `temp` and throws
// ModelError("cannot write <what> <target>: <detail>").
void commit_temp_file(const std::filesystem::path& temp, const std::filesystem::path& target,
                      const std::string& what);

// Removes a temporary file if it exists; never throws (used on error paths).
void discard_temp_file(const std::filesystem::path& temp) noexcept;

}  // namespace fleetsim::report_detail
