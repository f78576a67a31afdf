// Qwen3-TTS-specific device kernels of the frame loop: building the code predictor's and the
// talker's input rows from the sampled codes, and advancing the per-stream counters. Each one
// reproduces the CPU code's order of f32 additions (model.cpp frame_embedding, stream.cpp feed).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"

namespace chorus::qwen3_tts::gpu {

// xt[2b] = z[b]; xt[2b+1] = codec_embedding[codes[b·G]] (the code predictor's first two rows).
Status cp_first_inputs(const float* z, const uint16_t* codec_embedding, int64_t hidden, const int32_t* codes, int G,
                       int B, float* xt, cudaStream_t s);
// xt[b] = table[codes[b·G + k]] (codebook k's embedding, k >= 1).
Status cp_step_inputs(const uint16_t* table, int64_t hidden, const int32_t* codes, int G, int k, int B, float* xt,
                      cudaStream_t s);

// Text row of a stream for the frame fed now: row frames[b]−1 of its trailing text, or its pad row.
struct TextRows {
  const float* rows = nullptr;       // all streams' trailing rows, [Σ count, hidden]
  const int32_t* offset = nullptr;   // [B] first row of stream b
  const int32_t* count = nullptr;    // [B]
  const float* pad = nullptr;        // [B, hidden]
};

// x[b] = Σ_k table_k[codes[b·G + k]] (k = 0..G−1 in order, table 0 = the talker's codec embedding)
// + the stream's text row.
Status talker_inputs(const uint16_t* const* tables, int64_t hidden, const int32_t* codes, int G, int B, TextRows text,
                     const int32_t* frames, float* x, cudaStream_t s);

}  // namespace chorus::qwen3_tts::gpu
