#ifdef CHORUS_HAVE_CUDA

#include "models/qwen3_tts/frame_batch_cuda.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "models/qwen3_tts/frame_kernels_cuda.h"

namespace chorus::qwen3_tts::gpu {

namespace {

// Prompts are prefilled in groups of streams of at most this many rows (one longer prompt alone),
// which bounds the prefill activations.
constexpr int64_t kPrefillChunkRows = 1024;

cuda::DeviceSampler device_params(const sampling::SamplerParams& p, const GenerationSettings& g) {
  cuda::DeviceSampler d;
  d.greedy = p.greedy ? 1 : 0;
  d.temperature = p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.repetition_penalty = p.repetition_penalty;
  d.seed_lo = static_cast<uint32_t>(g.seed);
  d.seed_hi = static_cast<uint32_t>(g.seed >> 32);
  d.rng_stream = g.rng_stream;
  return d;
}

template <class T>
Status upload(const cuda::DeviceBuffer& dst, const std::vector<T>& v) {
  if (v.empty()) return ok_status();
  if (dst.bytes() < v.size() * sizeof(T)) return make_error(ErrorCode::kInternal, "frame batch: upload overflows");
  return cuda::check(cudaMemcpy(dst.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
}

}  // namespace

FrameBatch::~FrameBatch() {
  if (stream_.get()) cudaStreamSynchronize(stream_.get());  // no kernel may outlive the buffers
}

Status FrameBatch::alloc(cuda::DeviceBuffer& b, size_t bytes) {
  CHORUS_ASSIGN(b, cuda::DeviceBuffer::alloc(std::max<size_t>(bytes, 16)));
  bytes_ += b.bytes();
  return ok_status();
}

Result<std::unique_ptr<FrameBatch>> FrameBatch::create(std::shared_ptr<const DeviceModel> model,
                                                       std::span<const StreamSetup> streams) {
  if (!model || streams.empty()) return make_error(ErrorCode::kInternal, "frame batch: no model or no streams");
  std::unique_ptr<FrameBatch> fb(new FrameBatch());
  FrameBatch& f = *fb;
  f.m_ = std::move(model);
  const DeviceModel& m = *f.m_;
  f.B_ = static_cast<int>(streams.size());
  f.G_ = m.groups();
  f.H_ = m.hidden();
  f.C_ = m.cp_hidden();
  f.V_ = m.vocab();
  f.CV_ = m.cp_vocab();
  const int64_t B = f.B_, G = f.G_, H = f.H_, C = f.C_;
  int64_t total_prompt = 0, longest = 0, trailing = 0;
  for (const StreamSetup& s : streams) {
    if (!s.prompt || s.prompt->hidden != H) return make_error(ErrorCode::kInternal, "frame batch: prompt of another model");
    f.cap_ = std::max(f.cap_, s.prompt->prefill_rows + s.settings.max_frames);
    total_prompt += s.prompt->prefill_rows;
    longest = std::max(longest, s.prompt->prefill_rows);
    trailing += s.prompt->trailing_rows;
  }
  if (f.cap_ > std::numeric_limits<int32_t>::max() / 2) return make_error(ErrorCode::kOutOfRange, "frame batch: context too long");
  f.talker_rows_ = std::max({B, std::min(total_prompt, std::max(kPrefillChunkRows, longest))});
  const nn::Qwen3Dims& td = m.talker().dims();
  const nn::Qwen3Dims& cd = m.code_predictor().dims();
  CHORUS_TRY(cuda::attention_reserve(f.cap_, td.head_dim));
  CHORUS_TRY(cuda::attention_reserve(G, cd.head_dim));

  CHORUS_ASSIGN(f.stream_, cuda::Stream::create());
  for (auto& e : f.ev_) {
    CHORUS_ASSIGN(e, cuda::Event::create());
  }
  const int64_t ws_rows = std::max(f.talker_rows_, 2 * B);
  const int64_t ws_k = std::max({m.talker().max_linear_k(), m.code_predictor().max_linear_k(), H, C});
  const int64_t ws_n = std::max({m.talker().max_linear_n_total(), m.code_predictor().max_linear_n_total(), f.V_, f.CV_, C});
  CHORUS_ASSIGN(f.ws_, cuda::LinearWorkspace::create(ws_rows, ws_k, ws_n));
  f.bytes_ += f.ws_.bytes();
  CHORUS_ASSIGN(f.talker_scratch_, StackScratch::create(td, f.talker_rows_, m.talker().fused_mlp()));
  CHORUS_ASSIGN(f.cp_scratch_, StackScratch::create(cd, 2 * B, m.code_predictor().fused_mlp()));
  f.bytes_ += f.talker_scratch_.bytes() + f.cp_scratch_.bytes();

  const size_t F = sizeof(float), I = sizeof(int32_t);
  CHORUS_TRY(f.alloc(f.talker_kv_, static_cast<size_t>(KvCacheRef::floats(td.layers, B, f.cap_, td.kv_heads * td.head_dim)) * F));
  CHORUS_TRY(f.alloc(f.cp_kv_, static_cast<size_t>(KvCacheRef::floats(cd.layers, B, G, cd.kv_heads * cd.head_dim)) * F));
  CHORUS_TRY(f.alloc(f.talker_h_, static_cast<size_t>(f.talker_rows_ * H) * F));
  CHORUS_TRY(f.alloc(f.talker_out_, static_cast<size_t>(f.talker_rows_ * H) * F));
  CHORUS_TRY(f.alloc(f.z_, static_cast<size_t>(B * H) * F));
  CHORUS_TRY(f.alloc(f.logits_t_, static_cast<size_t>(B * f.V_) * F));
  CHORUS_TRY(f.alloc(f.xt_, static_cast<size_t>(2 * B * H) * F));
  if (m.has_projection()) CHORUS_TRY(f.alloc(f.xc_, static_cast<size_t>(2 * B * C) * F));
  CHORUS_TRY(f.alloc(f.logits_cp_, static_cast<size_t>(B * f.CV_) * F));
  const int64_t vmax = std::max(f.V_, f.CV_);
  CHORUS_TRY(f.alloc(f.scratch_w_, static_cast<size_t>(B * vmax) * sizeof(double)));
  CHORUS_TRY(f.alloc(f.scratch_ids_, static_cast<size_t>(2 * B * vmax) * I));
  CHORUS_TRY(f.alloc(f.report_, static_cast<size_t>(2 * B * G + B) * I));
  CHORUS_TRY(f.alloc(f.frames_, B * I));
  CHORUS_TRY(f.alloc(f.prompt_rows_, B * I));
  CHORUS_TRY(f.alloc(f.talker_pos_, B * I));
  CHORUS_TRY(f.alloc(f.min_frames_, B * I));
  CHORUS_TRY(f.alloc(f.history_, static_cast<size_t>(B * f.V_)));
  CHORUS_TRY(f.alloc(f.params_t_, B * sizeof(cuda::DeviceSampler)));
  CHORUS_TRY(f.alloc(f.params_cp_, B * sizeof(cuda::DeviceSampler)));
  CHORUS_TRY(f.alloc(f.text_rows_, static_cast<size_t>(std::max<int64_t>(1, trailing) * H) * F));
  CHORUS_TRY(f.alloc(f.text_off_, B * I));
  CHORUS_TRY(f.alloc(f.text_count_, B * I));
  CHORUS_TRY(f.alloc(f.pad_, static_cast<size_t>(B * H) * F));
  CHORUS_TRY(f.alloc(f.iota_, B * I));
  CHORUS_TRY(f.alloc(f.cp_first_seq_, 2 * B * I));
  CHORUS_TRY(f.alloc(f.cp_first_pos_, 2 * B * I));
  CHORUS_TRY(f.alloc(f.cp_pos_, static_cast<size_t>(G * B) * I));
  CHORUS_TRY(f.alloc(f.prefill_seq_, static_cast<size_t>(f.talker_rows_) * I));
  CHORUS_TRY(f.alloc(f.prefill_pos_, static_cast<size_t>(f.talker_rows_) * I));
  CHORUS_TRY(f.alloc(f.last_row_, B * I));
  CHORUS_ASSIGN(f.pipe_, cuda::FramePipeline::create(f.report_.data(), f.report_.bytes()));

  std::vector<int32_t> prompt_rows, min_frames, off, count, iota(B), first_seq, first_pos, cp_pos;
  std::vector<cuda::DeviceSampler> pt, pc;
  std::vector<float> text, pad;
  std::iota(iota.begin(), iota.end(), 0);
  for (int64_t b = 0; b < B; ++b) {
    const StreamSetup& s = streams[static_cast<size_t>(b)];
    prompt_rows.push_back(static_cast<int32_t>(s.prompt->prefill_rows));
    min_frames.push_back(static_cast<int32_t>(std::min<int64_t>(s.settings.min_frames, 1 << 30)));
    off.push_back(static_cast<int32_t>(text.size() / static_cast<size_t>(H)));
    count.push_back(static_cast<int32_t>(s.prompt->trailing_rows));
    text.insert(text.end(), s.prompt->trailing.begin(), s.prompt->trailing.end());
    pad.insert(pad.end(), s.prompt->pad.begin(), s.prompt->pad.end());
    pt.push_back(device_params(s.settings.talker, s.settings));
    pc.push_back(device_params(s.settings.code_predictor, s.settings));
    first_seq.insert(first_seq.end(), {static_cast<int32_t>(b), static_cast<int32_t>(b)});
    first_pos.insert(first_pos.end(), {0, 1});
  }
  for (int64_t k = 0; k < G; ++k)
    for (int64_t b = 0; b < B; ++b) cp_pos.push_back(static_cast<int32_t>(k + 1));
  CHORUS_TRY(upload(f.prompt_rows_, prompt_rows));
  CHORUS_TRY(upload(f.min_frames_, min_frames));
  CHORUS_TRY(upload(f.text_off_, off));
  CHORUS_TRY(upload(f.text_count_, count));
  CHORUS_TRY(upload(f.text_rows_, text));
  CHORUS_TRY(upload(f.pad_, pad));
  CHORUS_TRY(upload(f.params_t_, pt));
  CHORUS_TRY(upload(f.params_cp_, pc));
  CHORUS_TRY(upload(f.iota_, iota));
  CHORUS_TRY(upload(f.cp_first_seq_, first_seq));
  CHORUS_TRY(upload(f.cp_first_pos_, first_pos));
  CHORUS_TRY(upload(f.cp_pos_, cp_pos));
  return fb;
}

Status FrameBatch::sample_talker(cudaStream_t s) {
  cuda::LinearArgs head;
  head.x = z_.as<float>();
  head.ldx = H_;
  head.M = B_;
  head.out[0] = {m_->codec_head().matrix(), nullptr, logits_t_.as<float>(), V_};
  m_->code_predictor().prefetch_attention(0, head.prefetch);  // the next frame's first stack
  CHORUS_TRY(cuda::linear(head, &ws_, s));
  cuda::SampleArgs a;
  a.logits = logits_t_.as<float>();
  a.ld = V_;
  a.vocab = static_cast<int32_t>(V_);
  a.rows = B_;
  a.params = params_t_.as<cuda::DeviceSampler>();
  a.frame = frames_.as<int32_t>();
  a.codebook = 0;
  a.penalized = history_.as<uint8_t>();
  a.allowed_below = m_->allowed_below();
  a.also_allowed = m_->eos_id();
  a.blocked_id = m_->eos_id();
  a.block_until_frame = min_frames_.as<int32_t>();
  a.out = codes_dev();
  a.out_stride = G_;
  a.mark_chosen = history_.as<uint8_t>();
  a.error = errors_dev();
  a.scratch_w = scratch_w_.as<double>();
  a.scratch_ids = scratch_ids_.as<int32_t>();
  return cuda::sample(a, s);
}

Status FrameBatch::prefill(const std::vector<const Prompt*>& prompts) {
  if (static_cast<int>(prompts.size()) != B_) return make_error(ErrorCode::kInternal, "frame batch: one prompt per slot");
  cudaStream_t s = stream_.get();
  const nn::Qwen3Dims& td = m_->talker().dims();
  const KvCacheRef kv{talker_kv_.as<float>(), B_, cap_, td.kv_heads * td.head_dim};
  CHORUS_TRY(ev_[0].record(s));
  for (int b0 = 0; b0 < B_;) {
    int b1 = b0;  // streams b0..b1−1 form one chunk
    int64_t rows = 0;
    while (b1 < B_ && (b1 == b0 || rows + prompts[b1]->prefill_rows <= talker_rows_)) rows += prompts[b1++]->prefill_rows;
    std::vector<float> x;
    x.reserve(static_cast<size_t>(rows * H_));
    std::vector<int32_t> seq, pos, last;
    for (int b = b0; b < b1; ++b) {
      const Prompt& p = *prompts[b];
      x.insert(x.end(), p.prefill.begin(), p.prefill.end());
      for (int64_t t = 0; t < p.prefill_rows; ++t) {
        seq.push_back(b);
        pos.push_back(static_cast<int32_t>(t));
      }
      last.push_back(static_cast<int32_t>(seq.size() - 1));
    }
    CHORUS_TRY(stream_.synchronize());  // the previous chunk may still read these buffers
    CHORUS_TRY(upload(talker_h_, x));
    CHORUS_TRY(upload(prefill_seq_, seq));
    CHORUS_TRY(upload(prefill_pos_, pos));
    CHORUS_TRY(upload(last_row_, last));
    const cuda::RowMap map{prefill_seq_.as<int32_t>(), prefill_pos_.as<int32_t>(), rows, false};
    CHORUS_TRY(m_->talker().forward(talker_h_.as<float>(), talker_out_.as<float>(), map, kv, talker_scratch_, ws_, s));
    CHORUS_TRY(gather_rows(talker_out_.as<float>(), last_row_.as<int32_t>(), H_, b1 - b0, z_.as<float>() + b0 * H_, s));
    b0 = b1;
  }
  CHORUS_TRY(sample_talker(s));
  CHORUS_TRY(ev_[1].record(s));
  CHORUS_TRY(pipe_.publish_and_wait(s));
  CHORUS_ASSIGN(timing_.prefill_ms, ev_[1].elapsed_ms_since(ev_[0]));
  return ok_status();
}

Status FrameBatch::enqueue_code_predictor(cudaStream_t s) {
  const DeviceModel& m = *m_;
  const nn::Qwen3Dims& cd = m.code_predictor().dims();
  const KvCacheRef kv{cp_kv_.as<float>(), B_, G_, cd.kv_heads * cd.head_dim};
  float* xt = xt_.as<float>();
  float* h = m.has_projection() ? xc_.as<float>() : xt;
  int32_t* codes = codes_dev();
  cuda::SampleArgs sa;
  sa.logits = logits_cp_.as<float>();
  sa.ld = CV_;
  sa.vocab = static_cast<int32_t>(CV_);
  sa.rows = B_;
  sa.params = params_cp_.as<cuda::DeviceSampler>();
  sa.frame = frames_.as<int32_t>();
  sa.out_stride = G_;
  sa.error = errors_dev();
  sa.scratch_w = scratch_w_.as<double>();
  sa.scratch_ids = scratch_ids_.as<int32_t>();
  for (int k = 0; k + 1 < G_; ++k) {
    // Pass k: rows [z, CE(c0)] at positions 0, 1 (k = 0), else CPE_k(c_k) at position k + 1.
    const int64_t rows = k == 0 ? 2 * B_ : B_;
    // Pass k >= 1 finds its input row CPE_k(c_k) already written by the sampler of c_k: in xt, or
    // with a projection in h, taken from the table projected at load (so no matrix product here).
    if (k == 0) CHORUS_TRY(cp_first_inputs(z_.as<float>(), m.codec_embedding().bf16(), H_, codes, G_, B_, xt, s));
    if (m.has_projection() && k == 0) {
      cuda::LinearArgs p;
      p.x = xt;
      p.ldx = H_;
      p.M = rows;
      p.out[0] = {m.projection().matrix(), m.projection_bias().f32(), h, C_};
      CHORUS_TRY(cuda::linear(p, &ws_, s));
    }
    const cuda::RowMap map = k == 0 ? cuda::RowMap{cp_first_seq_.as<int32_t>(), cp_first_pos_.as<int32_t>(), rows, false}
                                    : cuda::RowMap{iota_.as<int32_t>(), cp_pos_.as<int32_t>() + k * B_, rows, true};
    // The final norm runs inside the head's linear, on each stream's last row.
    CHORUS_TRY(m.code_predictor().forward(h, nullptr, map, kv, cp_scratch_, ws_, s));
    cuda::LinearArgs head;
    head.x = k == 0 ? h + C_ : h;
    head.ldx = k == 0 ? 2 * C_ : C_;
    head.M = B_;
    head.norm_weight = m.code_predictor().final_norm();
    head.norm_eps = m.code_predictor().norm_eps();
    head.out[0] = {m.cp_head(k).matrix(), nullptr, logits_cp_.as<float>(), CV_};
    // The next pass's stack, or after the last pass the talker's.
    if (k + 2 < G_)
      m.code_predictor().prefetch_attention(0, head.prefetch);
    else
      m.talker().prefetch_attention(0, head.prefetch);
    CHORUS_TRY(cuda::linear(head, &ws_, s));
    sa.codebook = static_cast<uint32_t>(k + 1);
    sa.out = codes + k + 1;
    const bool next_pass = k + 2 < G_;
    const float* projected = next_pass ? m.cp_projected_embedding(k + 1) : nullptr;
    sa.embed_table = next_pass && !projected ? m.cp_embedding(k + 1).bf16() : nullptr;
    sa.embed_table_f32 = projected;
    sa.embed_out = !next_pass ? nullptr : projected ? h : xt;
    sa.embed_dim = projected ? C_ : H_;
    CHORUS_TRY(cuda::sample(sa, s));
  }
  // The frame's codes are saved on the device by the kernel that advances the frame counters (so the
  // seam to the talker stays kernel to kernel).
  return advance_frames(frames_.as<int32_t>(), prompt_rows_.as<int32_t>(), static_cast<int32_t>(cap_),
                        talker_pos_.as<int32_t>(), B_, codes, G_, frame_codes_dev(), s);
}

Status FrameBatch::enqueue_talker(cudaStream_t s) {
  const DeviceModel& m = *m_;
  const nn::Qwen3Dims& td = m.talker().dims();
  const KvCacheRef kv{talker_kv_.as<float>(), B_, cap_, td.kv_heads * td.head_dim};
  const TextRows text{text_rows_.as<float>(), text_off_.as<int32_t>(), text_count_.as<int32_t>(), pad_.as<float>()};
  CHORUS_TRY(talker_inputs(m.embedding_tables(), H_, codes_dev(), G_, B_, text, frames_.as<int32_t>(),
                           talker_h_.as<float>(), s));
  const cuda::RowMap map{iota_.as<int32_t>(), talker_pos_.as<int32_t>(), B_, true};
  CHORUS_TRY(m.talker().forward(talker_h_.as<float>(), z_.as<float>(), map, kv, talker_scratch_, ws_, s));
  return sample_talker(s);
}

Status FrameBatch::run_frame(bool feed, std::optional<bool> then) {
  cudaStream_t s = stream_.get();
  CHORUS_TRY(pipe_.run_frame(s, feed, then, [&] { return enqueue_code_predictor(s); }, [&] { return enqueue_talker(s); }));
  timing_.code_predictor_ms = pipe_.first_half_ms();
  timing_.talker_ms = pipe_.second_half_ms();
  return ok_status();
}

}  // namespace chorus::qwen3_tts::gpu

#endif  // CHORUS_HAVE_CUDA
