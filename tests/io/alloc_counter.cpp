#include "io/alloc_counter.h"

#include <atomic>
#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define CHORUS_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHORUS_TEST_ASAN 1
#endif
#endif

namespace {

std::atomic<size_t> g_live{0};     // bytes live from operator new
std::atomic<size_t> g_aligned{0};  // bytes ever returned by aligned_alloc
std::atomic<size_t> g_peak{0};     // max of g_live + g_aligned since the last reset

void note_peak() {
  const size_t now = g_live.load() + g_aligned.load();
  size_t peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

// Each block carries its size in front so that unsized delete can subtract it.
constexpr size_t kHeader = alignof(std::max_align_t);

void* counted_alloc(size_t n) {
  void* raw = std::malloc(n + kHeader);
  if (!raw) return nullptr;
  *static_cast<size_t*>(raw) = n;
  g_live += n;
  note_peak();
  return static_cast<char*>(raw) + kHeader;
}

void counted_free(void* p) {
  if (!p) return;
  void* raw = static_cast<char*>(p) - kHeader;
  g_live -= *static_cast<size_t*>(raw);
  std::free(raw);
}

}  // namespace

void* operator new(size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  if (void* p = counted_alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_free(p); }

#ifndef CHORUS_TEST_ASAN
// Interposes the C library's aligned_alloc for this binary; posix_memalign memory is freed by free.
extern "C" void* aligned_alloc(size_t alignment, size_t size) noexcept {
  void* p = nullptr;
  if (posix_memalign(&p, alignment < sizeof(void*) ? sizeof(void*) : alignment, size) != 0) return nullptr;
  g_aligned += size;
  note_peak();
  return p;
}
#endif

namespace chorus::test {

bool counts_aligned_alloc() {
#ifdef CHORUS_TEST_ASAN
  return false;
#else
  return true;
#endif
}

AllocationScope::AllocationScope() {
  base_ = g_live.load() + g_aligned.load();
  g_peak.store(base_);
}

size_t AllocationScope::peak() const {
  const size_t p = g_peak.load();
  return p > base_ ? p - base_ : 0;
}

}  // namespace chorus::test
