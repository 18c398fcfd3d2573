// Atomic file replacement: write a temporary file beside the target, fsync it, rename it over.
#include "sim/report/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "sim/engine/errors.hpp"
#include "sim/engine/stop.hpp"
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

// The temporary files noted, each kept whole to the end (a signal handler on any thread may
// still be reading one), and the one being written published by an atomic pointer (null
// while none is). Appended under a mutex; the handler only loads the pointer.
std::mutex noted_mutex;
std::deque<std::string> noted;
std::atomic<const char*> being_written{nullptr};

void note_being_written(const std::filesystem::path& temp) {
  const std::lock_guard<std::mutex> lock(noted_mutex);
  being_written.store(noted.emplace_back(temp.native()).c_str());
}

std::filesystem::path directory_of(const std::filesystem::path& file) {
  return file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
}

// `<target>.<kind>.<host>.<pid>`, a temporary file ("tmp") or the empty file that checks a
// directory takes new ones ("probe"): the host too, so that a writer on another machine
// sharing the directory is never taken for a process of this one that has ended.
std::string temp_prefix(const std::filesystem::path& target, std::string_view kind = "tmp") {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return target.filename().string() + "." + std::string(kind) + "." + host + ".";
}

// Removes this host's `<target>.tmp.<host>.<pid>` and `<target>.probe.<host>.<pid>` files
// whose process no longer runs.
void remove_stale_temp_files(const std::filesystem::path& target) noexcept {
  const std::string prefixes[] = {temp_prefix(target), temp_prefix(target, "probe")};
  std::error_code error;
  std::vector<std::filesystem::path> stale;
  std::filesystem::directory_iterator entry(directory_of(target), error);
  for (; !error && entry != std::filesystem::directory_iterator(); entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    const auto prefix = std::find_if(std::begin(prefixes), std::end(prefixes),
                                     [&](const std::string& p) { return name.starts_with(p); });
    if (prefix == std::end(prefixes)) continue;
    const std::string_view digits = std::string_view(name).substr(prefix->size());
    pid_t pid = 0;
    const auto [end, parsed] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (parsed != std::errc() || end != digits.data() + digits.size() || pid <= 0) continue;
    if (::kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(entry->path());
  }
  for (const auto& file : stale) std::filesystem::remove(file, error);
}

}  // namespace

void write_atomically(const std::filesystem::path& target, const std::string& content,
                      const std::string& what) {
  remove_stale_temp_files(target);
  std::filesystem::path temp =
      directory_of(target) / (temp_prefix(target) + std::to_string(::getpid()));
  note_being_written(temp);
  try {
    write_new_file(temp, content);
    sync_to_disk(temp);
    std::error_code error;
    std::filesystem::rename(temp, target, error);
    if (error) throw ModelError(error.message());
    being_written.store(nullptr);
  } catch (const ModelError& e) {
    being_written.store(nullptr);
    std::error_code ignored;
    std::filesystem::remove(temp, ignored);
    throw ModelError("cannot write " + what + " " + target.string() + ": " + e.what());
  }
}

}  // namespace report_detail

OutputLock::OutputLock(const std::vector<std::filesystem::path>& paths,
                       const std::function<void(const std::filesystem::path&)>& waiting,
                       Wait wait) {
  // Each directory once, by its device and inode (two paths, a bind mount, may name one: a
  // second lock on it from this process would wait for the first forever), taken in the order
  // of their canonical paths, the same in every process and on every host, so that no two wait
  // for each other.
  std::map<std::filesystem::path, int> directories;
  std::set<std::pair<dev_t, ino_t>> seen;
  try {
    for (const std::filesystem::path& path : paths) {
      if (path.empty()) continue;
      std::error_code error;
      const std::filesystem::path directory =
          std::filesystem::weakly_canonical(report_detail::directory_of(path), error);
      if (error) continue;  // the write itself reports what is wrong with it
      const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) continue;
      struct stat status {};
      if (::fstat(fd, &status) != 0 || !seen.insert({status.st_dev, status.st_ino}).second) {
        ::close(fd);  // a directory already held (the same one reached by another path)
        continue;
      }
      directories.emplace(directory, fd);
    }
    for (const auto& [directory, fd] : directories) {
      descriptors_.push_back(fd);
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) continue;
      // Held by another process; any other failure (a file system without flock) is not
      // waited for: the write goes ahead unlocked, as it would without the lock.
      if (errno != EWOULDBLOCK) continue;
      if (waiting) waiting(directory);
      if (wait == Wait::until_free) {
        while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
        }
        continue;
      }
      // flock has no timeout: tried again every 20 ms, the stop polled in between.
      while (::flock(fd, LOCK_EX | LOCK_NB) != 0 && (errno == EWOULDBLOCK || errno == EINTR)) {
        throw_if_stop_requested();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  } catch (...) {  // a callback that throws, or a stop: what is open is closed, locks released
    for (const auto& [directory, fd] : directories) ::close(fd);
    throw;
  }
}

OutputLock::~OutputLock() {
  for (const int fd : descriptors_) ::close(fd);  // closing releases the lock
}

const char* temp_file_being_written() noexcept {
  return report_detail::being_written.load();
}

std::string output_target_problem(const std::filesystem::path& path,
                                  const std::vector<std::filesystem::path>& inputs) {
  std::error_code error;
  const std::filesystem::path directory = report_detail::directory_of(path);
  if (!std::filesystem::is_directory(directory, error)) {
    return "its directory " + directory.string() + " does not exist";
  }
  // Written by a temporary file beside it and a rename: the directory must take new files.
  if (::access(directory.c_str(), W_OK | X_OK) != 0) {
    return "its directory " + directory.string() + " is not writable";
  }
  // Root passes access() where no file can be made (/proc, /sys): one is tried, named as a
  // probe, which the next run that writes here removes should this one be killed first.
  const std::filesystem::path probe =
      directory / (report_detail::temp_prefix(path, "probe") + std::to_string(::getpid()));
  const int probed = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (probed < 0 && errno != EEXIST) {
    return "its directory " + directory.string() + " takes no new file (" + std::strerror(errno) +
           ")";
  }
  if (probed >= 0) {
    ::close(probed);
    std::filesystem::remove(probe, error);
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
