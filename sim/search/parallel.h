#pragma once
// parallel_for for the search: `threads` workers pull indices 0..n-1 from a shared counter (candidates differ a
// lot in cost: a pruned one takes nanoseconds, a scheduled one ~1 ms, so static chunking would idle threads).
// The calling thread only waits, calling `progress(done, n)` about every `progress_every` until all are done, so a
// caller can draw a progress bar without touching the workers. The first exception a worker throws is rethrown
// on the calling thread after every worker has stopped.
//
//   parallel_for(n, threads, [&](size_t i, int worker) { results[i] = evaluators[worker].evaluate(c[i]); });

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tptune {

// Hardware threads (at least 1).
inline int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

inline void parallel_for(size_t n, int threads, const std::function<void(size_t i, int worker)>& body,
                         const std::function<void(size_t done, size_t total)>& progress = {},
                         std::chrono::milliseconds progress_every = std::chrono::milliseconds(100)) {
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<size_t>(n, 1))));
  std::atomic<size_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex m;
  std::condition_variable finished;
  int running = threads;
  auto work = [&](int worker) {
    for (;;) {
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n || failed.load(std::memory_order_relaxed)) break;
      try {
        body(i, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
        failed = true;
      }
      done.fetch_add(1, std::memory_order_relaxed);
    }
    std::lock_guard<std::mutex> lock(m);
    if (--running == 0) finished.notify_all();
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int w = 0; w < threads; ++w) pool.emplace_back(work, w);
  {
    std::unique_lock<std::mutex> lock(m);
    while (running > 0) {
      finished.wait_for(lock, progress_every);
      if (progress && running > 0) {
        lock.unlock();
        progress(done.load(std::memory_order_relaxed), n);
        lock.lock();
      }
    }
  }
  for (std::thread& t : pool) t.join();
  if (progress) progress(done.load(), n);
  if (error) std::rethrow_exception(error);
}

}  // namespace tptune
