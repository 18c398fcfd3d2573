// Atomic file replacement: write a temporary file beside the target, fsync it, rename it over.
#include "sim/report/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <system_error>

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

}  // namespace

std::filesystem::path temp_path_for(const std::filesystem::path& target) {
  std::filesystem::path temp = target;
  temp += ".tmp." + std::to_string(::getpid());
  return temp;
}

void discard_temp_file(const std::filesystem::path& temp) noexcept {
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
  } catch (const ModelError& e) {
    discard_temp_file(temp);
    throw ModelError("cannot write " + what + " " + target.string() + ": " + e.what());
  }
}

}  // namespace report_detail

void write_text_atomically(const std::filesystem::path& path, const std::string& content) {
  const std::filesystem::path temp = report_detail::temp_path_for(path);
  try {
    report_detail::write_new_file(temp, content);
  } catch (const ModelError& e) {
    report_detail::discard_temp_file(temp);
    throw ModelError("cannot write file " + path.string() + ": " + e.what());
  }
  report_detail::commit_temp_file(temp, path, "file");
}

}  // namespace fleetsim
