#include "tools/fleetsim/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

namespace fleetsim {
namespace {

constexpr auto kQuietFor = std::chrono::seconds(1);  // short work shows no bar
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);
constexpr int kWidth = 30;  // characters of bar
constexpr double kEstimateFrom = 0.02;

std::string duration_text(double seconds) {
  const auto whole = static_cast<long long>(std::ceil(seconds));
  char text[32];
  if (whole < 60) {
    std::snprintf(text, sizeof text, "%llds", whole);
  } else if (whole < 3600) {
    std::snprintf(text, sizeof text, "%lldm%02llds", whole / 60, whole % 60);
  } else {
    std::snprintf(text, sizeof text, "%lldh%02lldm", whole / 3600, whole % 3600 / 60);
  }
  return text;
}

}  // namespace

ProgressBar::ProgressBar(std::int64_t total, std::string unit, bool shown)
    : total_(total),
      unit_(std::move(unit)),
      shown_(shown && total > 0),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
  finish();
}

bool ProgressBar::wanted(bool quiet) {
  return !quiet && isatty(STDERR_FILENO) == 1;
}

void ProgressBar::advance(std::int64_t units) {
  const std::int64_t done = done_.fetch_add(units) + units;
  if (!shown_) return;
  // One thread draws; the others carry on rather than wait for the terminal.
  std::unique_lock lock(drawing_, std::try_to_lock);
  if (lock.owns_lock()) draw(done);
}

void ProgressBar::draw(std::int64_t done) {
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < kQuietFor || now - last_draw_ < kRedrawEvery) return;
  last_draw_ = now;
  drawn_ = true;
  const double fraction = std::clamp(static_cast<double>(done) / total_, 0.0, 1.0);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const int filled = static_cast<int>(fraction * kWidth);
  const std::string bar = std::string(filled, '=') + std::string(kWidth - filled, ' ');
  // Too early to extrapolate: the first units may have waited for other work.
  const std::string left = fraction >= kEstimateFrom
                               ? duration_text(elapsed * (1 - fraction) / fraction)
                               : std::string("?");
  std::fprintf(stderr, "\r[%s] %3.0f%% %lld/%lld %s, %s left ", bar.c_str(), 100 * fraction,
               static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(),
               left.c_str());
  std::fflush(stderr);
}

void ProgressBar::finish() {
  const std::lock_guard lock(drawing_);
  if (!drawn_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  drawn_ = false;
}

void say_waiting_for(const std::filesystem::path& directory) {
  std::cerr << "fleetsim: waiting for another process writing into " << directory.string() << "\n";
}

}  // namespace fleetsim
