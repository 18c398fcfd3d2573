// Atomic file replacement: write a temporary file beside the target, fsync it, rename it over.
#include "sim/report/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <system_error>
#include <vector>

#include "sim/engine/errors.hpp"
#include "sim/report/report.hpp"

namespace fleetsim {
namespace report_detail {
namespace {

std::string errno_text(int error) {
  return std::generic_category().message(error);
}

// A closed file is not necessarily on disk; without fsync a power loss right after the rename
// can leave an empty target on some file systems, which is what the protocol must prevent.
void sync_to_disk(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw ModelError(errno_text(errno));
  }
  const int rc = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (rc != 0) {
    throw ModelError(errno_text(error));
  }
}

// Writes all of `content`, retrying short writes and interrupted calls.
void write_all(int fd, std::string_view content) {
  while (!content.empty()) {
    const ssize_t written = ::write(fd, content.data(), content.size());
    if (written < 0 && errno == EINTR) {
      continue;
    }
    if (written < 0) {
      throw ModelError(errno_text(errno));
    }
    content.remove_prefix(static_cast<std::size_t>(written));
  }
}

void write_new_file(const std::filesystem::path& file, const std::string& content) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw ModelError(errno_text(errno));
  }
  try {
    write_all(fd, content);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) {
    throw ModelError(errno_text(errno));
  }
}

// The temporary file being written, for a signal handler: a copy in a fixed buffer, published
// by an atomic pointer (null while none is).
char being_written_buffer[4096];
std::atomic<const char*> being_written{nullptr};

void note_being_written(const std::filesystem::path& temp) noexcept {
  being_written.store(nullptr);
  const std::string& text = temp.native();
  if (text.size() >= sizeof being_written_buffer) return;  // too long to note: not removed
  std::memcpy(being_written_buffer, text.c_str(), text.size() + 1);
  being_written.store(being_written_buffer);
}

// Removes `<target>.tmp.<pid>` files whose process no longer runs.
void remove_stale_temp_files(const std::filesystem::path& target) noexcept {
  const std::filesystem::path directory =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code error;
  std::vector<std::filesystem::path> stale;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const std::string_view digits = std::string_view(name).substr(prefix.size());
    pid_t pid = 0;
    const auto [end, parsed] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (parsed != std::errc() || end != digits.data() + digits.size() || pid <= 0) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(entry.path());
  }
  for (const auto& file : stale) std::filesystem::remove(file, error);
}

std::filesystem::path temp_path_for(const std::filesystem::path& target) {
  remove_stale_temp_files(target);
  std::filesystem::path temp = target;
  temp += ".tmp." + std::to_string(::getpid());
  note_being_written(temp);
  return temp;
}

void discard_temp_file(const std::filesystem::path& temp) noexcept {
  being_written.store(nullptr);
  std::error_code ignored;
  std::filesystem::remove(temp, ignored);
}

void commit_temp_file(const std::filesystem::path& temp, const std::filesystem::path& target,
                      const std::string& what) {
  try {
    sync_to_disk(temp);
    std::error_code error;
    std::filesystem::rename(temp, target, error);
    if (error) {
      throw ModelError(error.message());
    }
    being_written.store(nullptr);
  } catch (const ModelError& e) {
    discard_temp_file(temp);
    throw ModelError("cannot write " + what + " " + target.string() + ": " + e.what());
  }
}

}  // namespace

void write_atomically(const std::filesystem::path& target, const std::string& content,
                      const std::string& what) {
  const std::filesystem::path temp = temp_path_for(target);
  try {
    write_new_file(temp, content);
  } catch (const ModelError& e) {
    discard_temp_file(temp);
    throw ModelError("cannot write " + what + " " + target.string() + ": " + e.what());
  }
  commit_temp_file(temp, target, what);
}

}  // namespace report_detail

const char* temp_file_being_written() noexcept {
  return report_detail::being_written.load();
}

std::string output_target_problem(const std::filesystem::path& path,
                                  const std::vector<std::filesystem::path>& inputs) {
  std::error_code error;
  const std::filesystem::path directory =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(directory, error)) {
    return "its directory " + directory.string() + " does not exist";
  }
  // Written by a temporary file beside it and a rename: the directory must take new files.
  if (::access(directory.c_str(), W_OK | X_OK) != 0) {
    return "its directory " + directory.string() + " is not writable";
  }
  const auto status = std::filesystem::status(path, error);
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    return std::filesystem::is_directory(status)
               ? "it is a directory"
               : "it is not a regular file (a device or a pipe): a result would replace it";
  }
  for (const std::filesystem::path& input : inputs) {
    if (std::filesystem::exists(status) && std::filesystem::equivalent(path, input, error)) {
      return "it is the input " + input.string() + ", which a result would replace";
    }
  }
  return {};
}

void write_text_atomically(const std::filesystem::path& path, const std::string& content) {
  report_detail::write_atomically(path, content, "file");
}

}  // namespace fleetsim
