// A progress bar on stderr for long simulations: shown once the work has run a second, redrawn
// at most ten times a second, with the share done and an estimate of the time left; silent
// when stderr is not a terminal or when the user asked for quiet. Any thread may advance it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>

namespace fleetsim {

class ProgressBar {
 public:
  // `total` units of work described by `unit` ("replications"); `shown` false: never drawn.
  ProgressBar(std::int64_t total, std::string unit, bool shown);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void advance(std::int64_t units = 1);
  // Clears the bar's line, if one was drawn.
  void finish();

  // Whether a bar belongs on stderr: a terminal, and not asked to be quiet.
  static bool wanted(bool quiet);

 private:
  void draw(std::int64_t done);

  const std::int64_t total_;
  const std::string unit_;
  const bool shown_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<std::int64_t> done_{0};
  std::mutex drawing_;
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
};

// Says on stderr that the command waits for another process writing into `directory` (an
// OutputLock's wait), so that a pause is not taken for a hang.
void say_waiting_for(const std::filesystem::path& directory);

}  // namespace fleetsim
