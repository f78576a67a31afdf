// ISA selection for the CPU kernels, and MatrixRef. The kernels themselves live in linear.cpp,
// attention.cpp, conv.cpp and pointwise.cpp; their inner blocks in micro_kernels_*.cpp.
#include <atomic>
#include <cstdlib>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cstring>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/micro_kernels.h"

namespace chorus::cpu {

MatrixRef MatrixRef::of(const Tensor& t) {
  MatrixRef m;
  m.dtype = t.dtype();
  m.data = t.data();
  if (t.rank() == 2) {
    m.rows = t.dim(0);
    m.cols = t.dim(1);
  } else if (t.rank() == 1) {
    m.rows = 1;
    m.cols = t.dim(0);
  }  // other ranks: an empty matrix, which every kernel treats as "nothing to do"
  return m;
}

namespace {

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C through cpuid (leaf 1, ECX bit 29): clang 14's __builtin_cpu_supports does not know it.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

const detail::MicroKernels* usable_avx2() {
  static const bool ok = cpu_has_avx2();
  return ok ? detail::avx2_kernels() : nullptr;
}

const detail::MicroKernels* detect() {
  const char* env = std::getenv("CHORUS_CPU_ISA");
  if (env && std::strcmp(env, "portable") == 0) return &detail::portable_kernels();
  if (const auto* k = usable_avx2()) return k;
  return &detail::portable_kernels();
}

std::atomic<const detail::MicroKernels*> g_active{nullptr};

}  // namespace

namespace detail {
const MicroKernels& active_kernels() {
  const MicroKernels* k = g_active.load(std::memory_order_acquire);
  if (!k) {
    const MicroKernels* expected = nullptr;
    k = detect();
    if (!g_active.compare_exchange_strong(expected, k, std::memory_order_acq_rel)) k = expected;
  }
  return *k;
}
}  // namespace detail

Isa active_isa() {
  return &detail::active_kernels() == &detail::portable_kernels() ? Isa::kPortable : Isa::kAvx2;
}

const char* isa_name() { return active_isa() == Isa::kAvx2 ? "avx2+fma" : "portable"; }

bool set_isa(Isa isa) {
  const detail::MicroKernels* k =
      isa == Isa::kAvx2 ? usable_avx2() : &detail::portable_kernels();
  if (!k) return false;
  g_active.store(k, std::memory_order_release);
  return true;
}

}  // namespace chorus::cpu
