// ISA selection for the CPU kernels, and MatrixRef. The kernels themselves live in linear.cpp,
// attention.cpp, conv.cpp, pointwise.cpp and quant_linear.cpp; their inner blocks in
// micro_kernels_*.cpp.
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

CpuFeatures detect_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  // F16C through cpuid (leaf 1, ECX bit 29): clang 14's __builtin_cpu_supports does not know it.
  // (__builtin_cpu_supports reports AVX/AVX-512 only when the OS saves their registers.)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
  f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
#endif
  return f;
}

const detail::MicroKernels* usable(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::kPortable: return &detail::portable_kernels();
    case Isa::kAvx2: return f.avx2 ? detail::avx2_kernels() : nullptr;
    case Isa::kAvx512: return f.avx512 ? detail::avx512_kernels() : nullptr;
    case Isa::kAvx512Vnni: return f.avx512_vnni ? detail::avx512_vnni_kernels() : nullptr;
  }
  return nullptr;
}

const detail::MicroKernels* detect() {
  Isa cap = Isa::kAvx512Vnni;
  if (const char* env = std::getenv("CHORUS_CPU_ISA")) {
    if (std::strcmp(env, "portable") == 0) cap = Isa::kPortable;
    else if (std::strcmp(env, "avx2") == 0) cap = Isa::kAvx2;
    else if (std::strcmp(env, "avx512") == 0) cap = Isa::kAvx512;
  }
  for (Isa isa : {Isa::kAvx512Vnni, Isa::kAvx512, Isa::kAvx2})
    if (static_cast<int>(isa) <= static_cast<int>(cap))
      if (const auto* k = usable(isa)) return k;
  return &detail::portable_kernels();
}

std::atomic<const detail::MicroKernels*> g_active{nullptr};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect_features();
  return f;
}

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
  const detail::MicroKernels* k = &detail::active_kernels();
  if (k == detail::avx512_vnni_kernels()) return Isa::kAvx512Vnni;
  if (k == detail::avx512_kernels()) return Isa::kAvx512;
  if (k == detail::avx2_kernels()) return Isa::kAvx2;
  return Isa::kPortable;
}

const char* isa_name() { return detail::active_kernels().name; }

bool set_isa(Isa isa) {
  const detail::MicroKernels* k = usable(isa);
  if (!k) return false;
  g_active.store(k, std::memory_order_release);
  return true;
}

}  // namespace chorus::cpu
