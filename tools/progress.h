#pragma once
// Progress of long work (tp-plan search, tp-run verify, profile, bench) on stderr, in one of two styles:
//
//   bar (stderr is a terminal): one line redrawn in place
//     Progress bar("profile", Progress::enabled(quiet));   // on a terminal and without --quiet only
//     for (...) bar.update(done, total, "steps");          // "[#####.....] 3/7 steps, 1.2 s, ETA 1.6 s"
//     bar.clear();                                         // erase the line before printing results
//   lines (stderr is a pipe or a file, as under mpirun, which pipes every rank's stderr): a plain line every
//   `interval_s` seconds (10 by default), the first one after the first interval, so that short work prints nothing
//   and long work prints a few lines a minute whatever its number of steps:
//     Progress bar("tp-run verify", Progress::style(quiet), progress_interval_s());
//     "tp-run verify: 40% (812 of 2030 ops, 12.3 s, ETA 18.4 s)"
//
// The bar draws nothing until the work has run for `delay_s` (short work stays silent), redraws at most every 100 ms,
// and never writes when off, so a log file or a pipe gets no carriage returns. ETA = elapsed x (total - done) / done,
// the linear estimate; none is shown before the first step is done.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "plans/util/error.h"

namespace tptune::tools {

inline constexpr double kProgressLineIntervalS = 10;

// The seconds between plain lines: TPTUNE_PROGRESS_INTERVAL_S when set (a number in [0.01, 3600]: tests, or busy
// logs), else kProgressLineIntervalS. Throws tptune::Error for any other value of the variable.
inline double progress_interval_s() {
  const char* v = std::getenv("TPTUNE_PROGRESS_INTERVAL_S");
  if (!v) return kProgressLineIntervalS;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s >= 0.01 && s <= 3600))
    throw Error("TPTUNE_PROGRESS_INTERVAL_S: expected seconds in [0.01, 3600], got '" + std::string(v).substr(0, 40) +
                "'");
  return s;
}

class Progress {
 public:
  enum class Style { off, bar, lines };
  // True when stderr is a terminal and the user did not ask for --quiet.
  static bool enabled(bool quiet) { return !quiet && isatty(fileno(stderr)) != 0; }
  // bar on a terminal, lines elsewhere (a pipe, a file), off with --quiet.
  static Style style(bool quiet) {
    if (quiet) return Style::off;
    return isatty(fileno(stderr)) != 0 ? Style::bar : Style::lines;
  }

  // The bar when `enabled`, else nothing.
  explicit Progress(std::string what, bool enabled, double delay_s = 1.0)
      : Progress(std::move(what), enabled ? Style::bar : Style::off, kProgressLineIntervalS, delay_s) {}
  // `interval_s`: the seconds between plain lines (Style::lines).
  Progress(std::string what, Style style, double interval_s, double delay_s = 1.0)
      : what_(std::move(what)),
        style_(style),
        delay_s_(delay_s),
        interval_s_(interval_s),
        start_(clock::now()),
        last_(start_) {}
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(size_t done, size_t total, std::string_view unit = "steps") {
    if (style_ == Style::off || total == 0) return;
    const auto now = clock::now();
    const double s = std::chrono::duration<double>(now - start_).count();
    if (style_ == Style::lines) {
      if (std::chrono::duration<double>(now - last_).count() < interval_s_) return;
      last_ = now;
      const size_t d = std::min(done, total);
      std::fprintf(stderr, "%s: %d%% (%zu of %zu %.*s, %s, %s)\n", what_.c_str(),
                   static_cast<int>(100.0 * static_cast<double>(d) / static_cast<double>(total)), d, total,
                   static_cast<int>(unit.size()), unit.data(), seconds(s).c_str(), eta(s, d, total).c_str());
      std::fflush(stderr);
      return;
    }
    if (s < delay_s_ && !drawn_) return;
    if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr size_t width = 30;
    const size_t filled = width * std::min(done, total) / total;
    std::fprintf(stderr, "\r%s [%s%s] %zu/%zu %.*s, %s, %s   ", what_.c_str(), std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), done, total, static_cast<int>(unit.size()), unit.data(),
                 seconds(s).c_str(), eta(s, std::min(done, total), total).c_str());
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
  static std::string eta(double elapsed_s, size_t done, size_t total) {
    if (done == 0) return "ETA ?";
    return "ETA " + seconds(elapsed_s * static_cast<double>(total - done) / static_cast<double>(done));
  }
  std::string what_;
  Style style_;
  double delay_s_, interval_s_;
  bool drawn_ = false;
  clock::time_point start_, last_;
};

}  // namespace tptune::tools
