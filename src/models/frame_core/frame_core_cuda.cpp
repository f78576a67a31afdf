#ifdef CHORUS_HAVE_CUDA

#include "models/frame_core/frame_core_cuda.h"

#include <algorithm>
#include <numeric>

#include "models/frame_core/frame_kernels_cuda.h"

namespace chorus::frame_core::gpu {

namespace {

// Prompts are prefilled in groups of sequences of at most this many rows (one longer prompt alone),
// which bounds the prefill activations.
constexpr int64_t kPrefillChunkRows = 1024;

cuda::DeviceSampler device_params(const sampling::SamplerParams& p, const SlotSetup& slot, bool penalty) {
  cuda::DeviceSampler d;
  d.greedy = p.greedy ? 1 : 0;
  d.temperature = p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.repetition_penalty = penalty ? p.repetition_penalty : 1.0f;
  d.seed_lo = static_cast<uint32_t>(slot.seed);
  d.seed_hi = static_cast<uint32_t>(slot.seed >> 32);
  d.rng_stream = slot.rng_stream;
  return d;
}

}  // namespace

FrameCore::~FrameCore() {
  if (stream_.get()) cudaStreamSynchronize(stream_.get());  // no kernel may outlive the buffers
}

Status FrameCore::alloc(cuda::DeviceBuffer& b, size_t bytes) {
  CHORUS_ASSIGN(b, cuda::DeviceBuffer::alloc(std::max<size_t>(bytes, 16)));
  bytes_ += b.bytes();
  return ok_status();
}

Status FrameCore::init(const FrameRecipe& r, std::span<const SlotSetup> slots, int64_t capacity) {
  if (!r.backbone || !r.depth || slots.empty()) return make_error(ErrorCode::kInternal, "frame batch: no model or no streams");
  r_ = r;
  S_ = static_cast<int>(slots.size());
  NB_ = static_cast<int>(slots[0].prompt_rows.size());
  Q_ = S_ * NB_;
  G_ = r.codebooks;
  H_ = r.backbone->dims().hidden;
  BV_ = r.backbone_head.rows;
  cap_ = capacity;
  const int64_t S = S_, Q = Q_, G = G_, H = H_, D = r.depth_hidden, DV = r.depth_vocab;
  int64_t total_prompt = 0, longest = 0;
  std::vector<int32_t> prompt_rows, min_frames, iota(static_cast<size_t>(Q)), first_seq, first_pos, depth_pos;
  std::vector<cuda::DeviceSampler> pb, pd;
  for (const SlotSetup& slot : slots) {
    if (static_cast<int>(slot.prompt_rows.size()) != NB_)
      return make_error(ErrorCode::kInternal, "frame batch: every slot needs the same branches");
    for (int64_t rows : slot.prompt_rows) {
      total_prompt += rows;
      longest = std::max(longest, rows);
      prompt_rows.push_back(static_cast<int32_t>(rows));
    }
    min_frames.push_back(static_cast<int32_t>(slot.min_frames));
    pb.push_back(device_params(slot.backbone, slot, true));
    pd.push_back(device_params(slot.depth, slot, slot.depth_penalty));
  }
  bb_rows_ = std::max({Q, std::min(total_prompt, std::max(kPrefillChunkRows, longest))});
  const nn::Qwen3Dims& bd = r.backbone->dims();
  const nn::Qwen3Dims& dd = r.depth->dims();
  CHORUS_TRY(cuda::attention_reserve(cap_, bd.head_dim));
  CHORUS_TRY(cuda::attention_reserve(G, dd.head_dim));

  CHORUS_ASSIGN(stream_, cuda::Stream::create());
  for (auto& e : ev_) {
    CHORUS_ASSIGN(e, cuda::Event::create());
  }
  const int64_t ws_rows = std::max(bb_rows_, 2 * Q);
  const int64_t ws_k = std::max({r.backbone->max_linear_k(), r.depth->max_linear_k(), H, D});
  const int64_t ws_n = std::max({r.backbone->max_linear_n_total(), r.depth->max_linear_n_total(), BV_, DV, D});
  CHORUS_ASSIGN(ws_, cuda::LinearWorkspace::create(ws_rows, ws_k, ws_n));
  bytes_ += ws_.bytes();
  CHORUS_ASSIGN(bb_scratch_, StackScratch::create(bd, bb_rows_, r.backbone->fused_mlp()));
  CHORUS_ASSIGN(depth_scratch_, StackScratch::create(dd, 2 * Q, r.depth->fused_mlp()));
  bytes_ += bb_scratch_.bytes() + depth_scratch_.bytes();

  const size_t F = sizeof(float), I = sizeof(int32_t);
  const auto n = [](int64_t v) { return static_cast<size_t>(v); };
  CHORUS_TRY(alloc(bb_kv_, n(KvCacheRef::floats(bd.layers, Q, cap_, bd.kv_heads * bd.head_dim)) * F));
  CHORUS_TRY(alloc(depth_kv_, n(KvCacheRef::floats(dd.layers, Q, G, dd.kv_heads * dd.head_dim)) * F));
  CHORUS_TRY(alloc(bb_h_, n(bb_rows_ * H) * F));
  CHORUS_TRY(alloc(bb_out_, n(bb_rows_ * H) * F));
  CHORUS_TRY(alloc(z_, n(Q * H) * F));
  CHORUS_TRY(alloc(logits_b_, n(Q * BV_) * F));
  const int64_t vmax = std::max(BV_, DV);
  CHORUS_TRY(alloc(scratch_w_, n(S * vmax) * sizeof(double)));
  CHORUS_TRY(alloc(scratch_ids_, n(2 * S * vmax) * I));
  CHORUS_TRY(alloc(report_, n(2 * S * G + S) * I));
  CHORUS_ASSIGN(pipe_, cuda::FramePipeline::create(report_.data(), n(2 * S * G + S) * I));
  CHORUS_TRY(alloc(frames_, n(S) * I));
  CHORUS_TRY(alloc(prompt_rows_, n(Q) * I));
  CHORUS_TRY(alloc(bb_pos_, n(Q) * I));
  CHORUS_TRY(alloc(min_frames_, n(S) * I));
  CHORUS_TRY(alloc(history_, n(S * BV_)));
  CHORUS_TRY(alloc(params_b_, n(S) * sizeof(cuda::DeviceSampler)));
  CHORUS_TRY(alloc(params_d_, n(S) * sizeof(cuda::DeviceSampler)));
  CHORUS_TRY(alloc(iota_, n(Q) * I));
  CHORUS_TRY(alloc(first_seq_, n(2 * Q) * I));
  CHORUS_TRY(alloc(first_pos_, n(2 * Q) * I));
  CHORUS_TRY(alloc(depth_pos_, n(G * Q) * I));
  CHORUS_TRY(alloc(prefill_seq_, n(bb_rows_) * I));
  CHORUS_TRY(alloc(prefill_pos_, n(bb_rows_) * I));
  CHORUS_TRY(alloc(last_row_, n(Q) * I));

  std::iota(iota.begin(), iota.end(), 0);
  for (int32_t q = 0; q < Q; ++q) {
    first_seq.insert(first_seq.end(), {q, q});
    first_pos.insert(first_pos.end(), {0, 1});
  }
  for (int64_t k = 0; k < G; ++k)
    for (int64_t q = 0; q < Q; ++q) depth_pos.push_back(static_cast<int32_t>(k + r.depth_pos_first));
  CHORUS_TRY(upload(prompt_rows_, prompt_rows));
  CHORUS_TRY(upload(min_frames_, min_frames));
  CHORUS_TRY(upload(params_b_, pb));
  CHORUS_TRY(upload(params_d_, pd));
  CHORUS_TRY(upload(iota_, iota));
  CHORUS_TRY(upload(first_seq_, first_seq));
  CHORUS_TRY(upload(first_pos_, first_pos));
  CHORUS_TRY(upload(depth_pos_, depth_pos));
  return ok_status();
}

Status FrameCore::sample_backbone(cudaStream_t s) {
  cuda::LinearArgs head;
  head.x = z_.as<float>();
  head.ldx = H_;
  head.M = Q_;
  head.out[0] = {r_.backbone_head, nullptr, logits_b_.as<float>(), BV_};
  r_.depth->prefetch_attention(0, head.prefetch);  // the next frame's first depth step
  CHORUS_TRY(cuda::linear(head, &ws_, s));
  CHORUS_ASSIGN(float* logits, combine_backbone(logits_b_.as<float>(), s));
  cuda::SampleArgs a;
  a.logits = logits;
  a.ld = BV_;
  a.vocab = static_cast<int32_t>(BV_);
  a.rows = S_;
  a.params = params_b_.as<cuda::DeviceSampler>();
  a.frame = frames_.as<int32_t>();
  a.codebook = 0;
  a.penalized = history_.as<uint8_t>();
  a.allowed_below = r_.allowed_below;
  a.also_allowed = r_.eos;
  a.blocked_id = r_.eos;
  a.block_until_frame = min_frames_.as<int32_t>();
  a.out = codes_dev();
  a.out_stride = G_;
  a.mark_chosen = history_.as<uint8_t>();
  a.error = errors_dev();
  a.scratch_w = scratch_w_.as<double>();
  a.scratch_ids = scratch_ids_.as<int32_t>();
  return cuda::sample(a, s);
}

Status FrameCore::prefill_sequences(std::span<const SeqRows> seqs) {
  if (static_cast<int>(seqs.size()) != Q_) return make_error(ErrorCode::kInternal, "frame batch: one prompt per sequence");
  cudaStream_t s = stream_.get();
  const nn::Qwen3Dims& bd = r_.backbone->dims();
  const KvCacheRef kv{bb_kv_.as<float>(), Q_, cap_, bd.kv_heads * bd.head_dim};
  CHORUS_TRY(ev_[0].record(s));
  for (int q0 = 0; q0 < Q_;) {
    int q1 = q0;  // sequences q0..q1−1 form one chunk
    int64_t rows = 0;
    while (q1 < Q_ && (q1 == q0 || rows + seqs[q1].rows <= bb_rows_)) rows += seqs[q1++].rows;
    std::vector<float> x;
    x.reserve(static_cast<size_t>(rows * H_));
    std::vector<int32_t> seq, pos, last;
    for (int q = q0; q < q1; ++q) {
      const SeqRows& p = seqs[q];
      x.insert(x.end(), p.data, p.data + p.rows * H_);
      for (int64_t t = 0; t < p.rows; ++t) {
        seq.push_back(q);
        pos.push_back(static_cast<int32_t>(t));
      }
      last.push_back(static_cast<int32_t>(seq.size() - 1));
    }
    CHORUS_TRY(stream_.synchronize());  // the previous chunk may still read these buffers
    CHORUS_TRY(upload(bb_h_, x));
    CHORUS_TRY(upload(prefill_seq_, seq));
    CHORUS_TRY(upload(prefill_pos_, pos));
    CHORUS_TRY(upload(last_row_, last));
    const cuda::RowMap map{prefill_seq_.as<int32_t>(), prefill_pos_.as<int32_t>(), rows, false};
    CHORUS_TRY(r_.backbone->forward(bb_h_.as<float>(), bb_out_.as<float>(), map, kv, bb_scratch_, ws_, s, r_.bf16));
    CHORUS_TRY(gather_rows(bb_out_.as<float>(), last_row_.as<int32_t>(), H_, q1 - q0, z_.as<float>() + q0 * H_, s));
    q0 = q1;
  }
  CHORUS_TRY(sample_backbone(s));
  CHORUS_TRY(ev_[1].record(s));
  CHORUS_TRY(pipe_.publish_and_wait(s));
  CHORUS_ASSIGN(times_.prefill_ms, ev_[1].elapsed_ms_since(ev_[0]));
  return ok_status();
}

KvCacheRef FrameCore::depth_kv() const {
  const nn::Qwen3Dims& dd = r_.depth->dims();
  return KvCacheRef{depth_kv_.as<float>(), Q_, G_, dd.kv_heads * dd.head_dim};
}

cuda::RowMap FrameCore::first_step_map() const {
  return cuda::RowMap{first_seq_.as<int32_t>(), first_pos_.as<int32_t>(), 2 * Q_, false};
}

cuda::RowMap FrameCore::step_map(int index) const {
  return cuda::RowMap{iota_.as<int32_t>(), depth_pos_.as<int32_t>() + index * Q_, Q_, true};
}

cuda::SampleArgs FrameCore::depth_sampler(float* logits, int64_t ld) const {
  cuda::SampleArgs sa;
  sa.logits = logits;
  sa.ld = ld;
  sa.vocab = static_cast<int32_t>(r_.depth_vocab);
  sa.rows = S_;
  sa.params = params_d_.as<cuda::DeviceSampler>();
  sa.frame = frames_.as<int32_t>();
  sa.out_stride = G_;
  sa.error = errors_dev();
  sa.scratch_w = scratch_w_.as<double>();
  sa.scratch_ids = scratch_ids_.as<int32_t>();
  return sa;
}

cuda::LinearArgs FrameCore::depth_head(const float* out, bool first, const cuda::DeviceMatrix& head, float* logits,
                                       bool last) const {
  const int64_t D = r_.depth_hidden;
  cuda::LinearArgs a;  // each sequence's last row
  a.x = first ? out + D : out;
  a.ldx = first ? 2 * D : D;
  a.M = Q_;
  a.out[0] = {head, nullptr, logits, r_.depth_vocab};
  // The next step's stack, or after the last step the backbone's.
  if (!last)
    r_.depth->prefetch_attention(0, a.prefetch);
  else
    r_.backbone->prefetch_attention(0, a.prefetch);
  return a;
}

Status FrameCore::advance_single(cudaStream_t s) {
  return advance_frames(frames_.as<int32_t>(), prompt_rows_.as<int32_t>(), static_cast<int32_t>(cap_),
                        bb_pos_.as<int32_t>(), S_, codes_dev(), G_, frame_codes_dev(), s);
}

Status FrameCore::enqueue_backbone(cudaStream_t s) {
  const nn::Qwen3Dims& bd = r_.backbone->dims();
  const KvCacheRef kv{bb_kv_.as<float>(), Q_, cap_, bd.kv_heads * bd.head_dim};
  CHORUS_TRY(backbone_inputs(s));
  const cuda::RowMap map{iota_.as<int32_t>(), bb_pos_.as<int32_t>(), Q_, true};
  CHORUS_TRY(r_.backbone->forward(bb_h_.as<float>(), z_.as<float>(), map, kv, bb_scratch_, ws_, s, r_.bf16));
  return sample_backbone(s);
}

Status FrameCore::run_frame(bool feed, std::optional<bool> then) {
  cudaStream_t s = stream_.get();
  CHORUS_TRY(pipe_.run_frame(s, feed, then, [&] { return enqueue_depth(s); }, [&] { return enqueue_backbone(s); }));
  times_.depth_ms = pipe_.first_half_ms();
  times_.backbone_ms = pipe_.second_half_ms();
  return ok_status();
}

}  // namespace chorus::frame_core::gpu

#endif  // CHORUS_HAVE_CUDA
