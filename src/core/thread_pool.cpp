#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

namespace chorus {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace

// Polls done() for up to kSpinMicros; true when it became true. After the first few µs each poll
// yields the core, so on a machine with more runnable threads than cores the thread being waited
// for can run.
template <class Done>
bool ThreadPool::spin_until(const Done& done) const {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 0; i < 256; ++i) {
    if (done()) return true;
    cpu_relax();
  }
  for (;;) {
    if (done()) return true;
    std::this_thread::yield();
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

// The sleep/wake hand-offs are Dekker pairs, all seq_cst: a worker announces itself in sleepers_
// and then re-reads generation_, the caller bumps generation_ and then reads sleepers_, so at
// least one of them sees the other (likewise caller_waiting_ against pending_). The notifying
// side takes mu_, so a notification cannot fall between the waiter's check and its wait.
void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto fresh = [&] { return generation_.load() != seen || stop_.load(); };
    if (!spin_until(fresh)) {
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      cv_start_.wait(lk, fresh);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    const auto* job = job_;
    const int64_t n = job_n_, chunk = job_chunk_;
    if (index < job_parts_) {
      const int64_t b = index * chunk, e = std::min(n, b + chunk);
      if (b < e) (*job)(b, e);
    }
    if (pending_.fetch_sub(1) == 1 && caller_waiting_.load()) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_done_.notify_one();
    }
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
  job_ = &fn;
  job_n_ = n;
  job_chunk_ = chunk;
  job_parts_ = parts;
  pending_.store(static_cast<int>(workers_.size()));
  generation_.fetch_add(1);  // seq_cst: publishes the job (release) and orders the sleepers_ read
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(mu_);
    cv_start_.notify_all();
  }
  fn(0, std::min(n, chunk));
  const auto done = [&] { return pending_.load() == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lk(mu_);
    caller_waiting_.store(true);
    cv_done_.wait(lk, done);
    caller_waiting_.store(false);
  }
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
