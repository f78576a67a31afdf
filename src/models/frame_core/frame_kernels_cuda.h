// Device kernels of the frame core that do not depend on a family: the per-slot counters of a
// batch with one sequence per slot, the row gather that picks each prompt's last row, and the
// copies that save and restore parked slots and move streams between slots.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"

namespace chorus::frame_core::gpu {

// frames[b] += 1; pos[b] = min(prompt_rows[b] + frames[b] − 1, capacity − 1); and the frame's
// codes saved: saved[b·G + g] = codes[b·G + g].
Status advance_frames(int32_t* frames, const int32_t* prompt_rows, int32_t capacity, int32_t* pos, int B,
                      const int32_t* codes, int G, int32_t* saved, cudaStream_t s);

// table[index[i]] = page[i] for i < n, in stream order (kernel arguments: the host's arrays may go
// at once). Paged caches' table entries change between frames this way.
Status set_table_entries(float** table, const int64_t* index, float* const* page, int n, cudaStream_t s);

// A slot's state that a frame changes, as regions of per-slot buffers: slot s's part of region r
// is base[r] + s·bytes[r].
struct SlotRegions {
  static constexpr int kMax = 16;
  uint8_t* base[kMax] = {};
  int64_t bytes[kMax] = {};
  int count = 0;
  // Host only: region `bytes` per slot from `base` on (false: no room for another).
  bool add(void* base, int64_t bytes) {
    if (count == kMax) return false;
    this->base[count] = static_cast<uint8_t*>(base);
    this->bytes[count++] = bytes;
    return true;
  }
  int64_t total() const {
    int64_t t = 0;
    for (int r = 0; r < count; ++r) t += bytes[r];
    return t;
  }
};

// The regions of the `n` slots `slots` (a host array) into `stash` (slot i's regions one after
// another at i·total()), or with `restore` from the stash back into the slots.
Status copy_slot_state(const SlotRegions& regions, const int32_t* slots, int n, uint8_t* stash, bool restore,
                       cudaStream_t s);

// The regions of slot from[i] copied to slot to[i], i < n (host arrays; no slot in both).
Status move_slot_state(const SlotRegions& regions, const int32_t* from, const int32_t* to, int n, cudaStream_t s);

// dst[i] = src[index[i]] for rows of `width` floats.
Status gather_rows(const float* src, const int32_t* index, int64_t width, int n, float* dst, cudaStream_t s);

}  // namespace chorus::frame_core::gpu
