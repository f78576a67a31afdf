// Internal: the GPU decoder's device weights (CudaDecoderModel, immutable, shared by all streams)
// and one stream's device state (CudaStreamState). Only with CUDA.
//
// Batching later (ROADMAP: continuous batching): every per-stream quantity a kernel reads is either
// in the state's buffers (histories, ring KV, activations) or a host scalar passed per launch
// (pos0, the history parity). Decoding many streams in one launch means giving these buffers a
// leading stream index and turning pos0 into a device array; the weights stay as they are.
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
  const float* b = nullptr;
  int64_t cin = 0, cout = 0, kernel = 1, dilation = 1;
  size_t hist = 0;
  int64_t history() const { return (kernel - 1) * dilation; }
};

// Causal transposed conv: weight [cin, cout·kernel]; with kernel > stride the previous call's last
// input column of Wᵀ·x ([cout·kernel]) lives at `hist`.
struct DevConvT {
  const float* w = nullptr;
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

// Sizes of a stream's scratch for steps of `block` frames (floats).
struct ScratchPlan {
  size_t act = 0;   // each of the activation buffers
  size_t col = 0;   // im2col
  size_t z = 0;     // Wᵀ·x of the transposed convs
  size_t rows = 0;  // transformer rows: block × the widest transformer activation
};
ScratchPlan scratch_plan(const CudaDecoderModel& m, int64_t block);

// What the forward pass runs on: one CUDA stream, cuBLAS handle and scratch, shared by every stream
// of a decoder that decodes with this block size (decode() takes them in turn), and, during a call,
// the history of the stream being decoded (moved in from its StreamHistory and back).
struct CudaStreamState {
  static constexpr int kActBuffers = 6;

  std::shared_ptr<const CudaDecoderModel> model;
  int64_t block = 0;
  cuda::Stream stream;
  cuda::Cublas cublas;
  std::array<cuda::DeviceBuffer, 2> hist;  // read hist[parity], write hist[1 − parity]
  int parity = 0;
  cuda::DeviceBuffer kv;  // [layer][k|v][capacity][kv_heads·head_dim]
  int64_t kv_capacity = 0;
  cuda::DeviceBuffer codes;  // [block, Q] int32
  std::array<cuda::DeviceBuffer, kActBuffers> act;
  cuda::DeviceBuffer col, z;
  // transformer activations, time-major
  cuda::DeviceBuffer h, xn, qkv, q, attn, proj, gate_up, inter;
  cuda::DeviceBuffer audio;        // [block · samples_per_frame]
  cuda::PinnedBuffer audio_host;   // same size
  int64_t next_pos = 0;
};

// One stream's own device state: the convolution histories and the attention ring, a few MB.
struct StreamHistory {
  std::shared_ptr<const CudaDecoderModel> model;
  int64_t block = 0;
  std::array<cuda::DeviceBuffer, 2> hist;
  int parity = 0;
  cuda::DeviceBuffer kv;
  int64_t kv_capacity = 0;
  int64_t next_pos = 0, frames = 0;
  bool finished = false;
  bool broken = false;  // a device error left the state inconsistent
};

// The shared workspaces of a decoder, one per block size in use.
struct Workspaces {
  std::mutex mu;  // guards the map; each workspace has its own lock
  struct Entry {
    std::mutex mu;
    CudaStreamState state;
  };
  std::map<int64_t, std::unique_ptr<Entry>> by_block;
};

// Enqueues one step of n <= block frames whose codes are already in state.codes; the samples end
// up in state.audio. Reads histories from hist[parity] and writes hist[1 − parity].
Status run_step_cuda(const CudaDecoderModel& m, CudaStreamState& s, int64_t n);

}  // namespace chorus::codec::detail

#endif  // CHORUS_HAVE_CUDA
