// Times plain reads of a depth layer's MLP bytes (50.3 MB), of one matrix (16.8 MB) and of a layer's
// attention weights (3.1 MB) by several strategies, each from 16 distinct buffers (so nothing stays
// in L2) in one CUDA graph with programmatic dependent launch, and the cost of one launch boundary in
// a chain of dependent launches. Run on the GPU machine; it needs no part of chorus. On the H200:
// bulk copies through a shared-memory ring read 50 MB at 4.06 TB/s against 3.03 TB/s for 128-thread
// blocks of register loads, and a boundary costs 0.61-0.64 us.
//
//   nvcc -O3 -arch=sm_90 -std=c++17 scripts/device/read_probe.cu -o .devcarry/probe/read_probe
//   then run .devcarry/probe/read_probe there (carry .devcarry/probe).
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)

__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" :::);
}
__device__ __forceinline__ uint64_t pol_ef() { uint64_t p; asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p)); return p; }
__device__ __forceinline__ uint4 ldw(const uint4* p, uint64_t pol) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(pol));
  return r;
}

// Chunks i, i + stride, ... below `end` with U loads in flight per thread, folded into a value
// the compiler must keep.
template <int U>
__device__ uint32_t read_strided(const uint4* p, size_t i, size_t end, size_t stride) {
  const uint64_t pol = pol_ef();
  uint32_t acc = 0;
  for (; i + (U - 1) * stride < end; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int c = 0; c < U; ++c) v[c] = ldw(p + i + c * stride, pol);
#pragma unroll
    for (int c = 0; c < U; ++c) acc ^= v[c].x ^ v[c].y ^ v[c].z ^ v[c].w;
  }
  for (; i < end; i += stride) { uint4 v = ldw(p + i, pol); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
  return acc;
}

// The whole grid strides over the buffer.
template <int U>
__global__ void read_grid(const uint4* p, size_t n16, unsigned* sink) {
  pdl_wait();
  const uint32_t acc = read_strided<U>(p, blockIdx.x * size_t(blockDim.x) + threadIdx.x, n16, size_t(gridDim.x) * blockDim.x);
  if (acc == 0x9e3779b9u) *sink = acc;
}

// Contiguous share per block, U loads in flight per thread.
template <int U>
__global__ void read_block_contig(const uint4* p, size_t n16, unsigned* sink) {
  pdl_wait();
  const size_t per = (n16 + gridDim.x - 1) / gridDim.x;
  const size_t b0 = blockIdx.x * per, b1 = min(n16, b0 + per);
  const uint32_t acc = read_strided<U>(p, b0 + threadIdx.x, b1, blockDim.x);
  if (acc == 0x9e3779b9u) *sink = acc;
}

// Thread 0 initializes the ring's mbarriers (one arrival each) and the block syncs.
template <int STAGES>
__device__ void init_bars(uint64_t* bar) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      unsigned a = (unsigned)__cvta_generic_to_shared(&bar[s]);
      asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"(a));
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
}

// One thread streams [b0, b1) in steps of `step` bytes through the ring: issue(s, off) fills stage
// s from offset off; each stage is refilled once its mbarrier completes. Returns a value folded from
// the first byte of each stage (stage_bytes apart), so the reads cannot be dropped.
template <int STAGES, class Issue>
__device__ uint32_t drive_ring(uint64_t* bar, const uint8_t* ring, size_t stage_bytes, size_t b0, size_t b1,
                               size_t step, Issue issue) {
  size_t next = b0;
  int issued = 0;
  for (int s = 0; s < STAGES && next < b1; ++s, next += step) { issue(s, next); ++issued; }
  uint32_t acc = 0;
  int phase[STAGES] = {};
  for (int k = 0; k < issued; ++k) {
    const int s = k % STAGES;
    unsigned a = (unsigned)__cvta_generic_to_shared(&bar[s]);
    uint32_t done = 0;
    while (!done) {
      asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
                   : "=r"(done) : "r"(a), "r"(phase[s]) : "memory");
    }
    phase[s] ^= 1;
    acc ^= ring[s * stage_bytes];
    if (next < b1) { issue(s, next); next += step; ++issued; }
  }
  return acc;
}

// Bulk copies (cp.async.bulk, the tensor memory accelerator) through a shared-memory ring: thread 0
// keeps STAGES copies of STAGE bytes in flight and refills a stage when its mbarrier completes.
template <int STAGES, int STAGE>
__global__ void read_tma(const uint8_t* p, size_t bytes, unsigned* sink) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t bar[STAGES];
  const uint64_t pol = pol_ef();
  const size_t per = ((bytes + gridDim.x - 1) / gridDim.x + 15) & ~size_t(15);
  const size_t b0 = blockIdx.x * per, b1 = min(bytes, b0 + per);
  init_bars<STAGES>(bar);
  pdl_wait();
  if (threadIdx.x != 0) return;
  auto issue = [&](int s, size_t off) {
    const unsigned n = (unsigned)min((size_t)STAGE, b1 - off);
    unsigned a = (unsigned)__cvta_generic_to_shared(&bar[s]);
    unsigned d = (unsigned)__cvta_generic_to_shared(ring + s * STAGE);
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(a), "r"(n) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 :: "r"(d), "l"(p + off), "r"(n), "r"(a), "l"(pol) : "memory");
  };
  const uint32_t acc = drive_ring<STAGES>(bar, ring, STAGE, b0, b1, STAGE, issue);
  if (acc == 0x9e3779b9u) *sink = acc;
}

// The bulk-copy MLP's read pattern (mlp.cu): each block streams its contiguous share of three
// equal matrices (gate rows, up rows, down's columns) through STAGES stages of three COPY-byte
// copies, one per matrix, all completing on the stage's mbarrier.
template <int STAGES, int COPY>
__global__ void read_tma3(const uint8_t* a, const uint8_t* b, const uint8_t* c, size_t each, unsigned* sink) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ __align__(8) uint64_t bar[STAGES];
  const uint64_t pol = pol_ef();
  const size_t per = ((each + gridDim.x - 1) / gridDim.x + 2047) & ~size_t(2047);
  const size_t b0 = min(each, blockIdx.x * per), b1 = min(each, b0 + per);
  init_bars<STAGES>(bar);
  pdl_wait();
  if (threadIdx.x != 0) return;
  const uint8_t* src[3] = {a, b, c};
  auto issue = [&](int s, size_t off) {
    const unsigned n = (unsigned)min((size_t)COPY, b1 - off);
    unsigned ad = (unsigned)__cvta_generic_to_shared(&bar[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" :: "r"(ad), "r"(3 * n) : "memory");
    for (int m = 0; m < 3; ++m) {
      unsigned d = (unsigned)__cvta_generic_to_shared(ring + (s * 3 + m) * COPY);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                   :: "r"(d), "l"(src[m] + off), "r"(n), "r"(ad), "l"(pol) : "memory");
    }
  };
  const uint32_t acc = drive_ring<STAGES>(bar, ring, 3 * COPY, b0, b1, COPY, issue);
  if (acc == 0x9e3779b9u) *sink = acc;
}

// Boundary probe: each launch reads the previous launch's value (L2) and writes value + 1.
__global__ void chain_kernel(unsigned* x) {
  pdl_wait();
  if (blockIdx.x == 0 && threadIdx.x == 0) { unsigned v = __ldcg(x); __stcg(x, v + 1); }
}

template <class F>
double us_per(cudaStream_t s, int n, F&& enqueue) {
  cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  enqueue();
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ge, s));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  const int reps = 20;
  CK(cudaEventRecord(a, s));
  for (int i = 0; i < reps; ++i) CK(cudaGraphLaunch(ge, s));
  CK(cudaEventRecord(b, s)); CK(cudaEventSynchronize(b));
  float ms; CK(cudaEventElapsedTime(&ms, a, b));
  cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
  return ms * 1000.0 / (reps * n);
}

template <class... KA, class... A>
void L(void (*k)(KA...), dim3 g, dim3 b, size_t sm, cudaStream_t s, A... a) {
  cudaLaunchConfig_t c = {}; c.gridDim = g; c.blockDim = b; c.dynamicSmemBytes = sm; c.stream = s;
  cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1; c.attrs = at; c.numAttrs = 1;
  CK(cudaLaunchKernelEx(&c, k, a...));
}

int main() {
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int NB = 16;
  const size_t sizes[] = {50331648, 16777216, 3145728};
  std::vector<uint8_t*> buf(NB);
  for (auto& b : buf) { CK(cudaMalloc(&b, sizes[0])); CK(cudaMemset(b, 1, sizes[0])); }
  unsigned* sink; CK(cudaMalloc(&sink, 64)); CK(cudaMemset(sink, 0, 64));
  CK(cudaFuncSetAttribute(read_tma<6, 32768>, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * 32768));
  CK(cudaFuncSetAttribute(read_tma<4, 32768>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 32768));
  CK(cudaFuncSetAttribute(read_tma<8, 16384>, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * 16384));
  CK(cudaFuncSetAttribute(read_tma<12, 16384>, cudaFuncAttributeMaxDynamicSharedMemorySize, 12 * 16384));
  CK(cudaFuncSetAttribute(read_tma<4, 49152>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * 49152));
  CK(cudaFuncSetAttribute(read_tma3<4, 16384>, cudaFuncAttributeMaxDynamicSharedMemorySize, 12 * 16384));
  for (size_t bytes : sizes) {
    const size_t n16 = bytes / 16;
    auto rep = [&](const char* name, double us) { printf("%6.1f MB  %-36s %7.2f us  %5.2f TB/s\n", bytes / 1e6, name, us, bytes / us / 1e6); };
#define RUN(name, ...) rep(name, us_per(s, NB, [&] { for (int l = 0; l < NB; ++l) { __VA_ARGS__; } }))
    RUN("grid 264x128 U4", L(read_grid<4>, 264, 128, 0, s, (const uint4*)buf[l], n16, sink));
    RUN("grid 264x128 U8", L(read_grid<8>, 264, 128, 0, s, (const uint4*)buf[l], n16, sink));
    RUN("grid 528x256 U4", L(read_grid<4>, 528, 256, 0, s, (const uint4*)buf[l], n16, sink));
    RUN("grid 264x256 U8", L(read_grid<8>, 264, 256, 0, s, (const uint4*)buf[l], n16, sink));
    RUN("grid 132x1024 U4", L(read_grid<4>, 132, 1024, 0, s, (const uint4*)buf[l], n16, sink));
    RUN("grid 132x512 U16", L(read_grid<16>, 132, 512, 0, s, (const uint4*)buf[l], n16, sink));
    RUN("contig 264x128 U8", L(read_block_contig<8>, 264, 128, 0, s, (const uint4*)buf[l], n16, sink));
    RUN("contig 132x512 U8", L(read_block_contig<8>, 132, 512, 0, s, (const uint4*)buf[l], n16, sink));
    RUN("contig 132x256 U16", L(read_block_contig<16>, 132, 256, 0, s, (const uint4*)buf[l], n16, sink));
    RUN("tma 132 x 4x32K", L(read_tma<4, 32768>, 132, 32, 4 * 32768, s, (const uint8_t*)buf[l], bytes, sink));
    RUN("tma 132 x 6x32K", L(read_tma<6, 32768>, 132, 32, 6 * 32768, s, (const uint8_t*)buf[l], bytes, sink));
    RUN("tma 132 x 8x16K", L(read_tma<8, 16384>, 132, 32, 8 * 16384, s, (const uint8_t*)buf[l], bytes, sink));
    RUN("tma 264 x 8x16K", L(read_tma<8, 16384>, 264, 32, 8 * 16384, s, (const uint8_t*)buf[l], bytes, sink));
    RUN("tma 132 x 12x16K", L(read_tma<12, 16384>, 132, 32, 12 * 16384, s, (const uint8_t*)buf[l], bytes, sink));
    RUN("tma 132 x 4x48K", L(read_tma<4, 49152>, 132, 32, 4 * 49152, s, (const uint8_t*)buf[l], bytes, sink));
    // The MLP's pattern: three matrices of a third each (here thirds of one buffer), 4 stages of 3 x 16K.
    RUN("tma3 132 x 4x(3x16K)", L(read_tma3<4, 16384>, 132, 32, 12 * 16384, s, (const uint8_t*)buf[l],
                                  (const uint8_t*)buf[l] + bytes / 3 / 2048 * 2048, (const uint8_t*)buf[l] + 2 * (bytes / 3 / 2048 * 2048),
                                  bytes / 3 / 2048 * 2048, sink));
  }
  unsigned* x; CK(cudaMalloc(&x, 64)); CK(cudaMemset(x, 0, 64));
  printf("chain 1 block:   %.3f us per launch\n", us_per(s, 64, [&] { for (int i = 0; i < 64; ++i) L(chain_kernel, 1, 128, 0, s, x); }));
  printf("chain 128 blocks: %.3f us per launch\n", us_per(s, 64, [&] { for (int i = 0; i < 64; ++i) L(chain_kernel, 128, 128, 0, s, x); }));
  printf("chain 264 blocks: %.3f us per launch\n", us_per(s, 64, [&] { for (int i = 0; i < 64; ++i) L(chain_kernel, 264, 128, 0, s, x); }));
  CK(cudaDeviceSynchronize());
  return 0;
}
