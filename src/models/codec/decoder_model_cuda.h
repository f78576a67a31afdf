// Internal: the GPU decoder's device weights (CudaDecoderModel, immutable, shared by all streams),
// one stream's device state (StreamHistory) and the shared workspaces a step of many streams runs
// on (BatchWorkspace). Only with CUDA.
//
// A step decodes n frames of each of `streams` streams at once: every activation holds all of
// their columns (conv_ops.h), and what is a stream's own (its histories, its attention ring, its
// position) is reached through per-stream device arrays filled for the step (StreamArrays).
#pragma once

#ifdef CHORUS_HAVE_CUDA

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "models/codec/codec_config.h"
#include "runtime/cuda/conv_ops.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::codec::detail {

using cuda::codec_ops::Snake;

// Causal conv (stride 1, groups 1 unless depthwise): weight [cout, cin·kernel]; its input history
// [cin, (kernel − 1)·dilation] lives at `hist` floats into each state's history buffers.
struct DevConv {
  const float* w = nullptr;
  const uint16_t* w16 = nullptr;  // w rounded to bf16 (bf16 products): codec_ops::gemm_bf16_operands' A
  const float* b = nullptr;
  int64_t cin = 0, cout = 0, kernel = 1, dilation = 1;
  size_t hist = 0;
  int64_t history() const { return (kernel - 1) * dilation; }
};

// Causal transposed conv: weight [cin, cout·kernel]; with kernel > stride the previous call's last
// input column of Wᵀ·x ([cout·kernel]) lives at `hist`.
struct DevConvT {
  const float* w = nullptr;
  const uint16_t* w16t = nullptr;  // Wᵀ [cout·kernel, cin] rounded to bf16 (bf16 products), as w16
  const float* b = nullptr;
  int64_t cin = 0, cout = 0, kernel = 1, stride = 1;
  size_t hist = 0;
};

struct DevLayer {
  const float *input_norm, *post_norm, *attn_scale, *mlp_scale;
  const float* qkv;   // [q_heads·D + 2·kv_heads·D, hidden]: q, k, v stacked
  const float* o;     // [hidden, q_heads·D]
  const float* gate_up;  // [2·intermediate, hidden]: gate then up
  const float* down;  // [hidden, intermediate]
};

struct DevUpsample {
  DevConvT up;
  DevConv dw;  // depthwise k7
  const float *norm_w, *norm_b, *pw1, *pw1_b, *pw2, *pw2_b, *gamma;
};

struct DevResidualUnit {
  Snake act1, act2;
  DevConv conv1, conv2;
};

struct DevBlock {
  Snake act;
  DevConvT up;
  std::array<DevResidualUnit, 3> units;
};

struct CudaDecoderModel {
  CodecConfig config;
  CodecPrecision precision = CodecPrecision::kF32;  // of the matrix products
  std::vector<cuda::DeviceBuffer> owned;  // every weight tensor
  size_t weight_bytes = 0;

  const float* rvq_tables = nullptr;  // [Q, codebook_size, codebook_dim / 2]
  const float *proj_first = nullptr, *proj_rest = nullptr;  // [codebook_dim, codebook_dim / 2]
  DevConv pre_conv;
  const float *input_proj = nullptr, *input_b = nullptr, *output_proj = nullptr, *output_b = nullptr;
  const float *final_norm = nullptr, *inv_freq = nullptr;
  std::vector<DevLayer> layers;
  std::vector<DevUpsample> upsample;
  DevConv conv_in, conv_out;
  std::vector<DevBlock> blocks;
  Snake act_out;

  size_t hist_floats = 0;  // one copy of every stream history
};

// Sizes of a workspace's scratch for steps of at most `frames` frames in all (streams × frames
// each), in floats.
struct ScratchPlan {
  size_t act = 0;      // each of the activation buffers
  size_t col = 0;      // im2col
  size_t z = 0;        // Wᵀ·x of the transposed convs
  size_t rows = 0;     // transformer rows: frames × the widest transformer activation
  size_t partial = 0;  // the GEMM's chunk sums (codec_ops::gemm_partial_floats)
};
ScratchPlan scratch_plan(const CudaDecoderModel& m, int64_t frames);

// One stream's own device state: the convolution histories and the attention ring, a few MB.
struct StreamHistory {
  std::shared_ptr<const CudaDecoderModel> model;
  int64_t block = 0;  // frames per step at most (the ring holds window − 1 + block positions)
  std::array<cuda::DeviceBuffer, 2> hist;  // read hist[parity], write hist[1 − parity]
  int parity = 0;
  cuda::DeviceBuffer kv;  // [layer][k|v][kv_capacity][kv_heads·head_dim]
  int64_t kv_capacity = 0;
  int64_t next_pos = 0, frames = 0;
  bool finished = false;
  bool broken = false;  // a device error left the state inconsistent
};

// The per-stream arrays of one step, in one device block (filled on the host, copied with the
// codes): history read and write bases, ring bases, ring capacities, first positions.
struct StreamArrays {
  const float* const* hist_in = nullptr;
  float* const* hist_out = nullptr;
  float* const* kv = nullptr;
  const int64_t* kv_capacity = nullptr;
  const int64_t* pos0 = nullptr;
  static size_t bytes(int64_t streams) { return static_cast<size_t>(streams) * 5 * 8; }
  // The arrays laid out in `base` (device or pinned host memory of bytes(streams)).
  static StreamArrays at(void* base, int64_t streams);
};

// What the forward pass runs on: one CUDA stream and the scratch for steps of up to `frames`
// frames in all. The decoder keeps a few (decoder_batch_cuda.cpp); each call takes one.
struct BatchWorkspace {
  static constexpr int kActBuffers = 6;

  std::shared_ptr<const CudaDecoderModel> model;
  int64_t frames = 0;  // capacity: streams × frames per stream of one step
  cuda::Stream stream;
  cuda::DeviceBuffer codes;        // [frames, Q] int32
  cuda::PinnedBuffer codes_host;   // same size
  cuda::DeviceBuffer arrays;       // StreamArrays of up to `frames` streams
  cuda::PinnedBuffer arrays_host;  // same size
  std::array<cuda::DeviceBuffer, kActBuffers> act;
  cuda::DeviceBuffer col, z, partial;
  size_t partial_floats = 0;
  // transformer activations, time-major
  cuda::DeviceBuffer h, xn, qkv, q, attn, proj, gate_up, inter;
  cuda::DeviceBuffer audio;       // [frames · samples_per_frame]
  cuda::PinnedBuffer audio_host;  // same size
};

Status make_workspace(const std::shared_ptr<const CudaDecoderModel>& model, int64_t frames, BatchWorkspace& w);

// The workspaces of a decoder (shared by its copies). decode() of one stream takes a small one
// sized for the stream's block: up to kPerBlock per block size, so that as many decode() calls of
// different streams run at once (each on its own CUDA stream; the GPU overlaps their small
// kernels). decode_batch() takes the one large workspace of CudaDecoder::kBatchFrames frames.
// Both run the same kernels, so which one a stream's step runs on never changes its samples.
struct Workspaces {
  static constexpr size_t kPerBlock = 16;
  struct Entry {
    std::mutex mu;
    BatchWorkspace w;
  };
  std::mutex mu;  // guards the map and its lists (each entry has its own lock)
  std::map<int64_t, std::vector<std::unique_ptr<Entry>>> by_block;
  uint64_t turn = 0;  // which busy workspace a caller waits for when all are taken
  std::mutex batch_mu;  // held for a whole decode_batch() call; guards `batch`
  std::unique_ptr<BatchWorkspace> batch;
};

// Enqueues one step of n frames for each of `streams` streams (streams · n <= w.frames) whose codes
// ([streams · n, Q], stream by stream) and StreamArrays are already on the device; the samples end
// up in w.audio, stream by stream. Each stream reads its histories from hist_in and writes hist_out.
Status run_step_cuda(const CudaDecoderModel& m, BatchWorkspace& w, int64_t streams, int64_t n);

}  // namespace chorus::codec::detail

#endif  // CHORUS_HAVE_CUDA
