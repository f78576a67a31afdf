#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace chorus {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* job = job_;
    const int64_t n = job_n_, chunk = job_chunk_;
    const int parts = job_parts_;
    lk.unlock();
    if (index < parts) {
      const int64_t b = index * chunk, e = std::min(n, b + chunk);
      if (b < e) (*job)(b, e);
    }
    lk.lock();
    if (--pending_ == 0) cv_done_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_parts = std::max<int64_t>(1, n / grain);
  const int parts = static_cast<int>(std::min<int64_t>(size(), max_parts));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run_lk(run_mu_);
  const int64_t chunk = (n + parts - 1) / parts;
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    job_parts_ = parts;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  cv_start_.notify_all();
  fn(0, std::min(n, chunk));
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [&] { return pending_ == 0; });
  job_ = nullptr;
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    const char* env = std::getenv("CHORUS_THREADS");
    if (env) {
      const int v = std::atoi(env);
      if (v > 0 && v <= 1024) return v;
    }
    return 0;
  }());
  return pool;
}

}  // namespace chorus
