#pragma once
// A one-line progress indicator on stderr for long work (tp-plan search, tp-run profile, tp-run bench):
//
//   Progress bar("profile", Progress::enabled(quiet));   // on a terminal and without --quiet only
//   for (...) bar.update(done, total, "steps");          // "[#####.....] 3/7 steps, 1.2 s, ETA 1.6 s"
//   bar.clear();                                         // erase the line before printing results
//
// It draws nothing until the work has run for `delay_s` (short work stays silent), redraws at most every 100 ms,
// and never writes when disabled, so a log file or a pipe gets no carriage returns. ETA = elapsed x (total - done)
// / done, the linear estimate; none is shown before the first step is done.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

namespace tptune::tools {

class Progress {
 public:
  // True when stderr is a terminal and the user did not ask for --quiet.
  static bool enabled(bool quiet) { return !quiet && isatty(fileno(stderr)) != 0; }

  explicit Progress(std::string what, bool enabled, double delay_s = 1.0)
      : what_(std::move(what)), enabled_(enabled), delay_s_(delay_s), start_(clock::now()) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(size_t done, size_t total, std::string_view unit = "steps") {
    if (!enabled_ || total == 0) return;
    const auto now = clock::now();
    const double s = std::chrono::duration<double>(now - start_).count();
    if (s < delay_s_ && !drawn_) return;
    if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr size_t width = 30;
    const size_t filled = width * std::min(done, total) / total;
    std::string eta = "ETA ?";
    if (done > 0) eta = "ETA " + seconds(s * static_cast<double>(total - std::min(done, total)) / done);
    std::fprintf(stderr, "\r%s [%s%s] %zu/%zu %.*s, %s, %s   ", what_.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, total, static_cast<int>(unit.size()), unit.data(),
                 seconds(s).c_str(), eta.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }

  void clear() {
    if (!drawn_) return;
    std::fprintf(stderr, "\r%s\r", std::string(100, ' ').c_str());
    std::fflush(stderr);
    drawn_ = false;
  }

 private:
  using clock = std::chrono::steady_clock;
  static std::string seconds(double s) {
    char b[32];
    if (s < 60)
      std::snprintf(b, sizeof b, "%.1f s", s);
    else
      std::snprintf(b, sizeof b, "%d min %02d s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
    return b;
  }
  std::string what_;
  bool enabled_;
  double delay_s_;
  bool drawn_ = false;
  clock::time_point start_, last_;
};

}  // namespace tptune::tools
