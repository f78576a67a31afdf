// Breeze TTS 2 glue kernels of the device frame loop (frame_batch_cuda.h): the depth decoder's and
// the backbone's input rows from the sampled codes, the guidance combination, and the per-stream
// counters. A fixed batch holds S streams of NB guidance branches each (sequence q = s·NB + j is
// branch j of stream s); a pool holds one branch per slot (NB = 1, Guide::branch). Codes are [S, G]
// (G codebooks). Rows are summed and combined in the CPU's f32 order (prompt.cpp frame_row,
// generation.cpp combine), without FMA contraction.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"

namespace chorus::breeze_tts::gpu {

// The shared audio table [G·V, width] (bf16): codebook k's code c is row k·V + c.
struct AudioTable {
  const uint16_t* data = nullptr;
  int64_t vocab = 0;  // V
  int64_t width = 0;
};

// Depth step 1 inputs: out[2q] = hidden[q] ([Q, width]); out[2q+1] = table row (codebook 0, c0 of
// the stream of q). Codes outside [0, V) give a zero row (a stream that just chose EOS).
Status depth_first_rows(const float* hidden, AudioTable t, const int32_t* codes, int G, int S, int NB, float* out,
                        cudaStream_t s);
// Depth step k >= 2 inputs: out[q] = table row (codebook k − 1, code c_{k−1} of the stream of q).
Status depth_code_rows(AudioTable t, const int32_t* codes, int G, int k, int S, int NB, float* out, cudaStream_t s);
// Backbone inputs: out[q] = Σ_k table row (codebook k, c_k of the stream of q), k = 0..G−1 in order.
Status frame_rows(AudioTable t, const int32_t* codes, int G, int S, int NB, float* out, cudaStream_t s);

// Per-stream guidance: mode 0 none (l = b0), 1 CFG (b0 cond, b1 uncond: l = b1 + s1·(b0 − b1)),
// 2 dual (b0 uncond, b1 ref, b2 ins: l = b0 + s1·(b1 − b0) + s2·(b2 − b0)).
// In a pool every slot holds one branch (NB = 1) and a stream's branches take adjacent slots:
// slot s is branch `branch` of the stream whose b0 is slot s − branch. Each of those slots gets
// the same combination, so each samples the stream's same codes (the same logits, settings and
// random draws).
struct Guide {
  int32_t mode = 0;
  float s1 = 0, s2 = 0;
  int32_t branch = 0;
};
// out[s, i] (stride ld_out) from branch logits in[(s·NB − branch + j), i] (stride ld_in), i < n.
Status guide_logits(const float* in, int64_t ld_in, const Guide* guides, int S, int NB, int64_t n, float* out,
                    int64_t ld_out, cudaStream_t s);

// frames[s] += 1; pos[q] = min(prompt_rows[q] + frames[s] − 1, capacity − 1); saved[s, :] = codes[s, :]
// (the frame's codes, [S, G], kept for the report before the backbone samples the next codebook 0).
Status advance_positions(int32_t* frames, const int32_t* prompt_rows, int32_t capacity, int32_t* pos, int S, int NB,
                         const int32_t* codes, int G, int32_t* saved, cudaStream_t s);

}  // namespace chorus::breeze_tts::gpu
