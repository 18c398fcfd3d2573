// Internal to fleetsim_report: the temporary-file-then-rename protocol shared by the writers.
//
// A result is first written in full to `<target>.tmp.<host>.<pid>` in the target's directory (same
// file system, so the rename is atomic), flushed to disk, and only then renamed over the target.
// Readers see either the old file or the new one, never a partial one.
#pragma once

#include <filesystem>
#include <string>

namespace fleetsim::report_detail {

// Writes `content` to `<target>.tmp.<host>.<pid>` beside `target` and renames it over; on failure
// removes it and throws ModelError("cannot write <what> <target>: <detail>"), the target
// untouched. Temporary files of processes that have ended (a run killed while writing, which
// no handler could clean up) are removed first; the one being written is noted for a signal
// handler (temp_file_being_written) until it is committed or discarded.
void write_atomically(const std::filesystem::path& target, const std::string& content,
                      const std::string& what);

}  // namespace fleetsim::report_detail
