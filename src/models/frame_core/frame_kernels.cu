#include "models/frame_core/frame_kernels_cuda.h"

#include <algorithm>

#include "runtime/cuda/cuda_handles.h"
#include "runtime/cuda/launch.cuh"

namespace chorus::frame_core::gpu {

namespace {

__global__ void advance_kernel(int32_t* frames, const int32_t* prompt_rows, int32_t cap, int32_t* pos, int B,
                               const int32_t* codes, int G, int32_t* saved) {
  cuda::dev::pdl_wait();
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  const int32_t f = frames[b] + 1;
  frames[b] = f;
  pos[b] = min(prompt_rows[b] + f - 1, cap - 1);
  for (int g = 0; g < G; ++g) saved[b * G + g] = codes[b * G + g];
}

__global__ void gather_kernel(const float* src, const int32_t* index, int64_t width, float* dst) {
  cuda::dev::pdl_wait();
  const int i = blockIdx.x;
  const float* s = src + static_cast<int64_t>(index[i]) * width;
  for (int64_t d = threadIdx.x; d < width; d += blockDim.x) dst[i * width + d] = s[d];
}

// Entries per launch of set_table_entries (its arguments stay well under the 4 KB limit).
constexpr int kTableEntries = 64;
struct TableEntries {
  int64_t index[kTableEntries];
  float* page[kTableEntries];
  int n;
};

// Launched without PDL: it starts after the kernels before it, which may read the table, are done.
__global__ void set_entries_kernel(float** table, TableEntries e) {
  const int i = threadIdx.x;
  if (i < e.n) table[e.index[i]] = e.page[i];
}

// The slots of one launch, passed by value so that no host-to-device copy (and no wait for the
// stream) is needed to name them.
constexpr int kSlotsPerLaunch = 128;
struct SlotList {
  int32_t slot[kSlotsPerLaunch];
  int n;
};

// Block (i, r): region r of slot list.slot[i]. It lets no later kernel start before it has ended
// (no launch_dependents): what follows is a frame that reads, or writes, the slots it copies.
__global__ void slot_state_kernel(SlotRegions regions, SlotList list, uint8_t* stash, int64_t total, bool restore) {
  cuda::dev::pdl_wait_only();
  const int i = blockIdx.x, r = blockIdx.y;
  int64_t off = 0;
  for (int k = 0; k < r; ++k) off += regions.bytes[k];
  const int64_t n = regions.bytes[r];
  uint8_t* slot_part = regions.base[r] + static_cast<int64_t>(list.slot[i]) * n;
  uint8_t* saved = stash + static_cast<int64_t>(i) * total + off;
  for (int64_t b = threadIdx.x; b < n; b += blockDim.x) {
    if (restore) slot_part[b] = saved[b];
    else saved[b] = slot_part[b];
  }
}

// Block (i, r): region r of slot from.slot[i] copied to slot to.slot[i] (no slot is in both
// lists). Ordered like slot_state_kernel.
__global__ void move_state_kernel(SlotRegions regions, SlotList from, SlotList to) {
  cuda::dev::pdl_wait_only();
  const int i = blockIdx.x, r = blockIdx.y;
  const int64_t n = regions.bytes[r];
  const uint8_t* src = regions.base[r] + static_cast<int64_t>(from.slot[i]) * n;
  uint8_t* dst = regions.base[r] + static_cast<int64_t>(to.slot[i]) * n;
  for (int64_t b = threadIdx.x; b < n; b += blockDim.x) dst[b] = src[b];
}

}  // namespace

Status move_slot_state(const SlotRegions& regions, const int32_t* from, const int32_t* to, int n, cudaStream_t s) {
  if (n <= 0 || regions.count <= 0) return ok_status();
  for (int a = 0; a < n; a += kSlotsPerLaunch) {
    SlotList f{}, t{};
    f.n = t.n = std::min(kSlotsPerLaunch, n - a);
    for (int i = 0; i < f.n; ++i) {
      f.slot[i] = from[a + i];
      t.slot[i] = to[a + i];
    }
    CHORUS_CUDA_TRY(cuda::launch(move_state_kernel, dim3(static_cast<unsigned>(f.n), static_cast<unsigned>(regions.count)),
                                 dim3(256), 0, s, regions, f, t));
  }
  return ok_status();
}

Status set_table_entries(float** table, const int64_t* index, float* const* page, int n, cudaStream_t s) {
  for (int a = 0; a < n; a += kTableEntries) {
    TableEntries e{};
    e.n = n - a < kTableEntries ? n - a : kTableEntries;
    for (int i = 0; i < e.n; ++i) {
      e.index[i] = index[a + i];
      e.page[i] = page[a + i];
    }
    set_entries_kernel<<<1, kTableEntries, 0, s>>>(table, e);
    CHORUS_CUDA_LAUNCHED("set_entries_kernel");
  }
  return ok_status();
}

Status copy_slot_state(const SlotRegions& regions, const int32_t* slots, int n, uint8_t* stash, bool restore,
                       cudaStream_t s) {
  if (n <= 0 || regions.count <= 0) return ok_status();
  const int64_t total = regions.total();
  for (int a = 0; a < n; a += kSlotsPerLaunch) {
    SlotList list{};
    list.n = std::min(kSlotsPerLaunch, n - a);
    for (int i = 0; i < list.n; ++i) list.slot[i] = slots[a + i];
    CHORUS_CUDA_TRY(cuda::launch(slot_state_kernel, dim3(static_cast<unsigned>(list.n), static_cast<unsigned>(regions.count)),
                                 dim3(256), 0, s, regions, list, stash + static_cast<int64_t>(a) * total, total, restore));
  }
  return ok_status();
}

Status advance_frames(int32_t* frames, const int32_t* prompt_rows, int32_t capacity, int32_t* pos, int B,
                      const int32_t* codes, int G, int32_t* saved, cudaStream_t s) {
  if (B <= 0) return ok_status();
  CHORUS_CUDA_TRY(cuda::launch(advance_kernel, dim3((B + 255) / 256), dim3(256), 0, s, frames, prompt_rows, capacity, pos, B,
                               codes, G, saved));
  return ok_status();
}

Status gather_rows(const float* src, const int32_t* index, int64_t width, int n, float* dst, cudaStream_t s) {
  if (n <= 0) return ok_status();
  CHORUS_CUDA_TRY(cuda::launch(gather_kernel, dim3(n), dim3(256), 0, s, src, index, width, dst));
  return ok_status();
}

}  // namespace chorus::frame_core::gpu
