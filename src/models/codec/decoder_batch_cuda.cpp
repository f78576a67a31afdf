// CudaDecoder::decode and decode_batch: every check before anything is touched, the steps of
// batch_plan.h on a workspace, each step's codes and per-stream arrays to the device in two
// copies, its samples back in one. decode() is a batch of one stream on a small workspace; both
// run the same kernels (decoder_forward_cuda.cpp), so a stream's samples are the same either way.
#include "models/codec/decoder_cuda.h"

#ifdef CHORUS_HAVE_CUDA

#include <algorithm>
#include <cstring>

#include "models/codec/batch_plan.h"
#include "models/codec/decoder_model_cuda.h"

namespace chorus::codec {

using detail::BatchWorkspace;
using detail::CudaDecoderModel;
using detail::StreamArrays;
using detail::StreamHistory;

namespace detail {

namespace {
template <class T>
Result<cuda::DeviceBuffer> alloc_n(size_t n) {
  return cuda::DeviceBuffer::alloc(std::max<size_t>(1, n) * sizeof(T));
}
}  // namespace

Status make_workspace(const std::shared_ptr<const CudaDecoderModel>& model, int64_t frames, BatchWorkspace& w) {
  const CudaDecoderModel& m = *model;
  w.model = model;
  w.frames = frames;
  CHORUS_ASSIGN(w.stream, cuda::Stream::create());
  const size_t codes = static_cast<size_t>(frames * m.config.decoder.num_quantizers);
  CHORUS_ASSIGN(w.codes, alloc_n<int32_t>(codes));
  CHORUS_ASSIGN(w.codes_host, cuda::PinnedBuffer::alloc(std::max<size_t>(1, codes) * sizeof(int32_t)));
  CHORUS_ASSIGN(w.arrays, cuda::DeviceBuffer::alloc(StreamArrays::bytes(frames)));
  CHORUS_ASSIGN(w.arrays_host, cuda::PinnedBuffer::alloc(StreamArrays::bytes(frames)));
  const ScratchPlan plan = scratch_plan(m, frames);
  for (auto& a : w.act) {
    CHORUS_ASSIGN(a, alloc_n<float>(plan.act));
  }
  CHORUS_ASSIGN(w.col, alloc_n<float>(plan.col));
  CHORUS_ASSIGN(w.z, alloc_n<float>(plan.z));
  CHORUS_ASSIGN(w.partial, alloc_n<float>(plan.partial));
  w.partial_floats = plan.partial;
  for (cuda::DeviceBuffer* b : {&w.h, &w.xn, &w.qkv, &w.q, &w.attn, &w.proj, &w.gate_up, &w.inter}) {
    CHORUS_ASSIGN(*b, alloc_n<float>(plan.rows));
  }
  const size_t samples = static_cast<size_t>(frames * m.config.samples_per_frame);
  CHORUS_ASSIGN(w.audio, alloc_n<float>(samples));
  CHORUS_ASSIGN(w.audio_host, cuda::PinnedBuffer::alloc(std::max<size_t>(1, samples) * sizeof(float)));
  return ok_status();
}

}  // namespace detail

namespace {

// One stream of a call.
struct Item {
  StreamHistory* s = nullptr;
  const int32_t* codes = nullptr;
  int64_t frames = 0;
  std::vector<float>* out = nullptr;
  size_t out_start = 0;
  int64_t done = 0;      // frames decoded in this call so far
  bool stepped = false;  // its state has been (or was being) advanced
};

Status check_state(const StreamHistory* s, const std::shared_ptr<const CudaDecoderModel>& model) {
  if (!s || s->model != model) return make_error(ErrorCode::kInvalidArgument, "decoder state was not made by this decoder");
  if (s->finished) return make_error(ErrorCode::kInvalidArgument, "decoder stream already flushed");
  if (s->broken) return make_error(ErrorCode::kInternal, "decoder state is unusable after a device error (reset it)");
  return ok_status();
}

Status check_room(const std::vector<float>& out, int64_t frames, int64_t spf) {
  if (frames > static_cast<int64_t>(out.max_size() - out.size()) / spf)
    return make_error(ErrorCode::kResourceExhausted, "too many frames for one output buffer");
  return ok_status();
}

// The per-stream arrays of a step, written on the host in StreamArrays' layout.
struct HostArrays {
  const float** hist_in;
  float** hist_out;
  float** kv;
  int64_t* kv_capacity;
  int64_t* pos0;
};
HostArrays host_arrays(BatchWorkspace& w) {
  auto* p = static_cast<char*>(w.arrays_host.data());
  const size_t n = static_cast<size_t>(w.frames) * 8;
  return {reinterpret_cast<const float**>(p), reinterpret_cast<float**>(p + n), reinterpret_cast<float**>(p + 2 * n),
          reinterpret_cast<int64_t*>(p + 3 * n), reinterpret_cast<int64_t*>(p + 4 * n)};
}

// Runs the items' frames as batch_plan.h cuts them on `w`. On a device error every output is cut
// back to where it was and every stream that stepped is marked broken.
Status run_items(const CudaDecoderModel& m, BatchWorkspace& w, std::vector<Item>& items) {
  std::vector<int64_t> frames, blocks;
  for (const Item& it : items) {
    frames.push_back(it.frames);
    blocks.push_back(it.s->block);  // the ring holds window − 1 + block positions
  }
  const int64_t Q = m.config.decoder.num_quantizers, spf = m.config.samples_per_frame;
  cudaStream_t st = w.stream.get();
  for (const BatchStep& step : plan_batch_steps(frames, blocks, w.frames)) {
    const int64_t B = static_cast<int64_t>(step.streams.size()), n = step.frames;
    Status status = [&]() -> Status {
      auto* codes = w.codes_host.as<int32_t>();
      const HostArrays a = host_arrays(w);
      for (int64_t j = 0; j < B; ++j) {
        Item& it = items[step.streams[static_cast<size_t>(j)]];
        const StreamHistory& s = *it.s;
        std::memcpy(codes + j * n * Q, it.codes + it.done * Q, sizeof(int32_t) * static_cast<size_t>(n * Q));
        a.hist_in[j] = s.hist[static_cast<size_t>(s.parity)].as<const float>();
        a.hist_out[j] = s.hist[static_cast<size_t>(1 - s.parity)].as<float>();
        a.kv[j] = s.kv.as<float>();
        a.kv_capacity[j] = s.kv_capacity;
        a.pos0[j] = s.next_pos;
        it.stepped = true;
      }
      CHORUS_CUDA_TRY(cudaMemcpyAsync(w.codes.data(), codes, sizeof(int32_t) * static_cast<size_t>(B * n * Q),
                                      cudaMemcpyHostToDevice, st));
      CHORUS_CUDA_TRY(cudaMemcpyAsync(w.arrays.data(), w.arrays_host.data(), StreamArrays::bytes(w.frames),
                                      cudaMemcpyHostToDevice, st));
      CHORUS_TRY(detail::run_step_cuda(m, w, B, n));
      CHORUS_CUDA_TRY(cudaMemcpyAsync(w.audio_host.data(), w.audio.data(), sizeof(float) * static_cast<size_t>(B * n * spf),
                                      cudaMemcpyDeviceToHost, st));
      return w.stream.synchronize();
    }();
    if (!status.ok()) {
      (void)w.stream.synchronize();  // nothing of this call may still read the pinned buffers
      for (Item& it : items) {
        it.out->resize(it.out_start);
        if (it.stepped) it.s->broken = true;
      }
      return status;
    }
    const float* pcm = w.audio_host.as<const float>();
    for (int64_t j = 0; j < B; ++j) {
      Item& it = items[step.streams[static_cast<size_t>(j)]];
      it.out->insert(it.out->end(), pcm + j * n * spf, pcm + (j + 1) * n * spf);
      StreamHistory& s = *it.s;
      s.parity ^= 1;
      s.next_pos += n;
      s.frames += n;
      it.done += n;
    }
  }
  return ok_status();
}

Status with_stream(size_t i, Status st) {
  if (st.ok()) return st;
  Error e = std::move(st).error();
  e.message = "stream " + std::to_string(i) + ": " + e.message;
  return e;
}

}  // namespace

Status CudaDecoder::decode(CudaDecoderState& state, const int32_t* codes, int64_t frames,
                           std::vector<float>& out) const {
  StreamHistory* s = state.impl_.get();
  CHORUS_TRY(check_state(s, model_));
  CHORUS_TRY(validate_codes(codes, frames));
  if (frames == 0) return ok_status();
  CHORUS_TRY(check_room(out, frames, samples_per_frame()));
  // A free workspace of this block size, a new one while there are fewer than kPerBlock, else a
  // busy one in turn. It holds up to kBatchFrames frames per step (a larger block only takes more
  // steps: the samples are the same).
  std::unique_lock<std::mutex> lock;
  detail::Workspaces::Entry* entry = nullptr;
  {
    std::lock_guard<std::mutex> guard(work_->mu);
    auto& list = work_->by_block[s->block];
    for (auto& e : list) {
      std::unique_lock<std::mutex> l(e->mu, std::try_to_lock);
      if (l.owns_lock()) {
        entry = e.get();
        lock = std::move(l);
        break;
      }
    }
    if (!entry && list.size() < detail::Workspaces::kPerBlock) {
      auto e = std::make_unique<detail::Workspaces::Entry>();
      Status made = detail::make_workspace(model_, std::min(s->block, kBatchFrames), e->w);
      if (made.ok()) {
        entry = e.get();
        lock = std::unique_lock<std::mutex>(entry->mu);
        list.push_back(std::move(e));
      } else if (list.empty()) {
        return made;
      }
    }
    if (!entry) entry = list[work_->turn++ % list.size()].get();
  }
  if (!lock.owns_lock()) lock = std::unique_lock<std::mutex>(entry->mu);
  std::vector<Item> items(1);
  items[0].s = s;
  items[0].codes = codes;
  items[0].frames = frames;
  items[0].out = &out;
  items[0].out_start = out.size();
  return run_items(*model_, entry->w, items);
}

Status CudaDecoder::decode_batch(std::span<CudaDecoderState* const> states, std::span<const int32_t* const> codes,
                                 std::span<const int64_t> frames, std::span<std::vector<float>* const> outs) const {
  if (codes.size() != states.size() || frames.size() != states.size() || outs.size() != states.size())
    return make_error(ErrorCode::kInvalidArgument, "decode_batch: states, codes, frames and outputs differ in number");
  std::vector<Item> items(states.size());
  int64_t total = 0;
  for (size_t i = 0; i < states.size(); ++i) {
    Item& it = items[i];
    if (!states[i] || !outs[i]) return with_stream(i, make_error(ErrorCode::kInvalidArgument, "no state or no output"));
    it.s = states[i]->impl_.get();
    CHORUS_TRY(with_stream(i, check_state(it.s, model_)));
    CHORUS_TRY(with_stream(i, validate_codes(codes[i], frames[i])));
    CHORUS_TRY(with_stream(i, check_room(*outs[i], frames[i], samples_per_frame())));
    it.codes = codes[i];
    it.frames = frames[i];
    it.out = outs[i];
    it.out_start = outs[i]->size();
    total += frames[i];
  }
  // A state twice would step twice in one kernel (its histories read and written at once), and
  // one output for two streams would interleave them.
  std::vector<const void*> seen;
  for (const Item& it : items) seen.push_back(it.s);
  for (const Item& it : items) seen.push_back(it.out);
  std::sort(seen.begin(), seen.end());
  if (std::adjacent_find(seen.begin(), seen.end()) != seen.end())
    return make_error(ErrorCode::kInvalidArgument, "decode_batch: a state or an output appears twice");
  if (total == 0) return ok_status();
  std::lock_guard<std::mutex> lock(work_->batch_mu);
  if (!work_->batch) {
    auto w = std::make_unique<BatchWorkspace>();
    CHORUS_TRY(detail::make_workspace(model_, kBatchFrames, *w));
    work_->batch = std::move(w);
  }
  return run_items(*model_, *work_->batch, items);
}

}  // namespace chorus::codec

#endif  // CHORUS_HAVE_CUDA
