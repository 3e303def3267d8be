#include "tools/tp_run/watchdog.h"

#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tools/tp_run/session.h"

namespace tptune::tools {
namespace {

double g_timeout_s = kDefaultTimeoutS;
int g_rank = -1, g_size = -1;

// The line the handler writes, prepared when a scope is armed (the handler may only write(2) and _exit(2)).
char g_message[512];
volatile sig_atomic_t g_message_len = 0;

void on_alarm(int) {
  if (g_message_len > 0) {
    const ssize_t ignored = write(STDERR_FILENO, g_message, static_cast<size_t>(g_message_len));
    (void)ignored;
  }
  _exit(2);
}

void set_timer(double seconds) {
  itimerval t{};
  const double whole = std::floor(seconds);
  t.it_value.tv_sec = static_cast<time_t>(whole);
  t.it_value.tv_usec = static_cast<suseconds_t>((seconds - whole) * 1e6);
  if (seconds > 0 && t.it_value.tv_sec == 0 && t.it_value.tv_usec == 0) t.it_value.tv_usec = 1;
  setitimer(ITIMER_REAL, &t, nullptr);
}

bool parse_seconds(const char* text, double& out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (*end != '\0' || !(v >= 0 && v <= 1e6)) return false;
  out = v;
  return true;
}

}  // namespace

double timeout_from_argv(int argc, char** argv) {
  double t = kDefaultTimeoutS;
  for (int i = 1; i < argc; ++i) {
    double v = 0;
    if (std::strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
      t = parse_seconds(argv[i + 1], v) ? v : kDefaultTimeoutS;
      ++i;
    } else if (std::strncmp(argv[i], "--timeout=", 10) == 0) {
      t = parse_seconds(argv[i] + 10, v) ? v : kDefaultTimeoutS;
    }
  }
  return t;
}

void set_process_timeout(double seconds) { g_timeout_s = seconds; }
double process_timeout() { return g_timeout_s; }

void set_process_rank(int rank, int size) {
  g_rank = rank;
  g_size = size;
}

WatchdogScope::WatchdogScope(const char* what) {
  set_timer(0);
  if (g_timeout_s <= 0) return;
  const int n =
      g_rank >= 0 && g_size > 0
          ? std::snprintf(g_message, sizeof g_message,
                          "tp-run: error (rank %d of %d): %s did not complete within %g s (tp-run --timeout): a peer "
                          "rank is stopped, hung or slower than the timeout\n",
                          g_rank, g_size, what, g_timeout_s)
          : std::snprintf(g_message, sizeof g_message,
                          "tp-run: error: %s did not complete within %g s (tp-run --timeout): a peer rank is "
                          "stopped, hung or slower than the timeout\n",
                          what, g_timeout_s);
  if (n < 0) {
    g_message_len = 0;
  } else if (n >= static_cast<int>(sizeof g_message)) {  // cut: still one line
    g_message[sizeof g_message - 2] = '\n';
    g_message_len = static_cast<int>(sizeof g_message) - 1;
  } else {
    g_message_len = n;
  }
  struct sigaction sa {};
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, nullptr);  // again at every scope: a library may have replaced it since the last one
  set_timer(g_timeout_s);
}

WatchdogScope::~WatchdogScope() { set_timer(0); }

void maybe_stop_at(const char* stage) {
  const char* v = std::getenv("TPTUNE_TP_RUN_STOP_AT");
  if (v && std::strcmp(v, stage) == 0) raise(SIGSTOP);
}

}  // namespace tptune::tools
