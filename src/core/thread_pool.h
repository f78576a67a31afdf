// A fixed pool of worker threads for data-parallel loops. parallel_for splits [0, n) into at most
// one contiguous range per thread; the calling thread takes part, so a pool of size 1 runs inline.
// Results never depend on the thread count: every range computes the same values it would alone.
//
// Hand-off: a decode step issues hundreds of short parallel_for calls (a few tens of µs each), and
// waking a sleeping thread through the kernel costs about as much. So after a job a worker
// watches for the next one for a short while (kSpinMicros) before it sleeps, and the caller
// watches for the workers to finish the same way. An idle pool sleeps: nothing spins longer than
// kSpinMicros after the last job. On the 2-core box 100 µs gives int4 0.6B at 2 threads 24–27 ms
// per frame against 35–36 when sleeping at once (docs/quantization.md).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) over disjoint ranges covering [0, n). Ranges are at least `grain` long.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

  // The process-wide default pool (sized by CHORUS_THREADS or the hardware).
  static ThreadPool& global();

  static constexpr int kSpinMicros = 100;

 private:
  void worker_loop(int index);
  template <class Done>
  bool spin_until(const Done& done) const;

  std::vector<std::thread> workers_;
  // The job: written by the caller before it bumps generation_ (release), read by the workers
  // after they see the new generation (acquire).
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_chunk_ = 0;
  int job_parts_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};       // workers that have not finished the current job
  std::atomic<int> sleepers_{0};      // workers blocked on cv_start_
  std::atomic<bool> caller_waiting_{false};
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // only for the blocking waits and their notifications
  std::condition_variable cv_start_, cv_done_;
  std::mutex run_mu_;  // one parallel_for at a time per pool
};

}  // namespace chorus
