#ifdef CHORUS_HAVE_CUDA

#include "models/breeze_tts/frame_batch_cuda.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "models/qwen3_tts/frame_kernels_cuda.h"

namespace chorus::breeze_tts::gpu {

namespace {

using qwen3_tts::gpu::KvCacheRef;
using qwen3_tts::gpu::StackScratch;

// Prompts are prefilled in groups of sequences of at most this many rows (one longer prompt alone).
constexpr int64_t kPrefillChunkRows = 1024;

cuda::DeviceSampler device_params(const sampling::SamplerParams& p, const StreamSetup& st, bool penalty) {
  cuda::DeviceSampler d;
  d.greedy = p.greedy ? 1 : 0;
  d.temperature = p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.repetition_penalty = penalty ? p.repetition_penalty : 1.0f;
  d.seed_lo = static_cast<uint32_t>(st.seed);
  d.seed_hi = static_cast<uint32_t>(st.seed >> 32);
  d.rng_stream = st.rng_stream;
  return d;
}

template <class T>
Status upload(const cuda::DeviceBuffer& dst, const std::vector<T>& v) {
  if (v.empty()) return ok_status();
  if (dst.bytes() < v.size() * sizeof(T)) return make_error(ErrorCode::kInternal, "breeze frame batch: upload overflows");
  return cuda::check(cudaMemcpy(dst.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
}

int32_t expected_mode(size_t branches) { return branches == 1 ? 0 : branches == 2 ? 1 : 2; }

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
  if (!model || streams.empty()) return make_error(ErrorCode::kInternal, "breeze frame batch: no model or no streams");
  std::unique_ptr<FrameBatch> fb(new FrameBatch());
  FrameBatch& f = *fb;
  f.m_ = std::move(model);
  const DeviceModel& m = *f.m_;
  f.S_ = static_cast<int>(streams.size());
  f.NB_ = static_cast<int>(streams[0].branches.size());
  f.Q_ = f.S_ * f.NB_;
  f.G_ = m.codebooks();
  f.H_ = m.hidden();
  f.D_ = m.depth_hidden();
  f.C_ = m.classes();
  f.V_ = m.vocab();
  f.bf16_ = streams[0].act == Activations::kBF16;
  const int64_t S = f.S_, Q = f.Q_, G = f.G_, H = f.H_, D = f.D_;
  int64_t total_prompt = 0, longest = 0;
  for (const StreamSetup& st : streams) {
    if (st.branches.empty() || st.branches.size() > 3 || static_cast<int>(st.branches.size()) != f.NB_)
      return make_error(ErrorCode::kUnsupported, "breeze cuda: every stream of a batch needs the same guidance branches");
    if (st.guide.mode != expected_mode(st.branches.size()))
      return make_error(ErrorCode::kInternal, "breeze frame batch: guidance mode does not match the branches");
    if (st.max_frames < 1) return make_error(ErrorCode::kInternal, "breeze frame batch: max_frames must be >= 1");
    if (st.act != streams[0].act)
      return make_error(ErrorCode::kUnsupported, "breeze cuda: every stream of a batch needs the same activation precision");
    for (const Tensor* t : st.branches) {
      if (!t || t->rank() != 2 || t->dim(1) != H || t->dim(0) < 1 || t->dtype() != DType::kF32)
        return make_error(ErrorCode::kInternal, "breeze frame batch: prompt rows of another model");
      if (t->dim(0) > std::numeric_limits<int32_t>::max() / 4 || st.max_frames > std::numeric_limits<int32_t>::max() / 4)
        return make_error(ErrorCode::kOutOfRange, "breeze frame batch: context too long");
      f.cap_ = std::max(f.cap_, t->dim(0) + st.max_frames);
      total_prompt += t->dim(0);
      longest = std::max(longest, t->dim(0));
    }
  }
  f.bb_rows_ = std::max({Q, std::min(total_prompt, std::max(kPrefillChunkRows, longest))});
  const nn::Qwen3Dims& bd = m.backbone().dims();
  const nn::Qwen3Dims& dd = m.depth().dims();
  CHORUS_TRY(cuda::attention_reserve(f.cap_, bd.head_dim));
  CHORUS_TRY(cuda::attention_reserve(G, dd.head_dim));

  CHORUS_ASSIGN(f.stream_, cuda::Stream::create());
  for (auto& e : f.ev_) {
    CHORUS_ASSIGN(e, cuda::Event::create());
  }
  const int64_t ws_rows = std::max(f.bb_rows_, 2 * Q);
  const int64_t ws_k = std::max({m.backbone().max_linear_k(), m.depth().max_linear_k(), H, D});
  const int64_t ws_n = std::max({m.backbone().max_linear_n_total(), m.depth().max_linear_n_total(), f.C_, f.V_, D});
  CHORUS_ASSIGN(f.ws_, cuda::LinearWorkspace::create(ws_rows, ws_k, ws_n));
  f.bytes_ += f.ws_.bytes();
  CHORUS_ASSIGN(f.bb_scratch_, StackScratch::create(bd, f.bb_rows_, m.backbone().fused_mlp()));
  CHORUS_ASSIGN(f.depth_scratch_, StackScratch::create(dd, 2 * Q, m.depth().fused_mlp()));
  f.bytes_ += f.bb_scratch_.bytes() + f.depth_scratch_.bytes();

  const size_t F = sizeof(float), I = sizeof(int32_t);
  const auto n = [](int64_t v) { return static_cast<size_t>(v); };
  CHORUS_TRY(f.alloc(f.bb_kv_, n(KvCacheRef::floats(bd.layers, Q, f.cap_, bd.kv_heads * bd.head_dim)) * F));
  CHORUS_TRY(f.alloc(f.depth_kv_, n(KvCacheRef::floats(dd.layers, Q, G, dd.kv_heads * dd.head_dim)) * F));
  CHORUS_TRY(f.alloc(f.bb_h_, n(f.bb_rows_ * H) * F));
  CHORUS_TRY(f.alloc(f.bb_out_, n(f.bb_rows_ * H) * F));
  CHORUS_TRY(f.alloc(f.z_, n(Q * H) * F));
  CHORUS_TRY(f.alloc(f.logits_b_, n(Q * f.C_) * F));
  CHORUS_TRY(f.alloc(f.guided_b_, n(S * f.C_) * F));
  CHORUS_TRY(f.alloc(f.din_, n(2 * Q * H) * F));
  CHORUS_TRY(f.alloc(f.dx_, n(2 * Q * D) * F));
  CHORUS_TRY(f.alloc(f.dout_, n(2 * Q * D) * F));
  CHORUS_TRY(f.alloc(f.logits_d_, n((G - 1) * Q * f.V_) * F));
  CHORUS_TRY(f.alloc(f.guided_d_, n(S * f.V_) * F));
  const int64_t vmax = std::max(f.C_, f.V_);
  CHORUS_TRY(f.alloc(f.scratch_w_, n(S * vmax) * sizeof(double)));
  CHORUS_TRY(f.alloc(f.scratch_ids_, n(2 * S * vmax) * I));
  CHORUS_TRY(f.alloc(f.report_, n(2 * S * G + S) * I));
  CHORUS_ASSIGN(f.pipe_, cuda::FramePipeline::create(f.report_.data(), n(2 * S * G + S) * I));
  CHORUS_TRY(f.alloc(f.frames_, n(S) * I));
  CHORUS_TRY(f.alloc(f.prompt_rows_, n(Q) * I));
  CHORUS_TRY(f.alloc(f.bb_pos_, n(Q) * I));
  CHORUS_TRY(f.alloc(f.min_frames_, n(S) * I));
  CHORUS_TRY(f.alloc(f.history_, n(S * f.C_)));
  CHORUS_TRY(f.alloc(f.guides_, n(S) * sizeof(Guide)));
  CHORUS_TRY(f.alloc(f.params_b_, n(S) * sizeof(cuda::DeviceSampler)));
  CHORUS_TRY(f.alloc(f.params_d_, n(S) * sizeof(cuda::DeviceSampler)));
  CHORUS_TRY(f.alloc(f.iota_, n(Q) * I));
  CHORUS_TRY(f.alloc(f.first_seq_, n(2 * Q) * I));
  CHORUS_TRY(f.alloc(f.first_pos_, n(2 * Q) * I));
  CHORUS_TRY(f.alloc(f.depth_pos_, n(G * Q) * I));
  CHORUS_TRY(f.alloc(f.prefill_seq_, n(f.bb_rows_) * I));
  CHORUS_TRY(f.alloc(f.prefill_pos_, n(f.bb_rows_) * I));
  CHORUS_TRY(f.alloc(f.last_row_, n(Q) * I));

  std::vector<int32_t> prompt_rows, min_frames, iota(static_cast<size_t>(Q)), first_seq, first_pos, depth_pos;
  std::vector<cuda::DeviceSampler> pb, pd;
  std::vector<Guide> guides;
  std::iota(iota.begin(), iota.end(), 0);
  for (const StreamSetup& st : streams) {
    for (const Tensor* t : st.branches) prompt_rows.push_back(static_cast<int32_t>(t->dim(0)));
    min_frames.push_back(static_cast<int32_t>(std::clamp<int64_t>(st.min_frames, 0, 1 << 30)));
    pb.push_back(device_params(st.backbone, st, true));
    pd.push_back(device_params(st.depth, st, false));
    guides.push_back(st.guide);
  }
  for (int32_t q = 0; q < Q; ++q) {
    first_seq.insert(first_seq.end(), {q, q});
    first_pos.insert(first_pos.end(), {0, 1});
  }
  for (int64_t k = 0; k < G; ++k)
    for (int64_t q = 0; q < Q; ++q) depth_pos.push_back(static_cast<int32_t>(k));
  CHORUS_TRY(upload(f.prompt_rows_, prompt_rows));
  CHORUS_TRY(upload(f.min_frames_, min_frames));
  CHORUS_TRY(upload(f.params_b_, pb));
  CHORUS_TRY(upload(f.params_d_, pd));
  CHORUS_TRY(upload(f.guides_, guides));
  CHORUS_TRY(upload(f.iota_, iota));
  CHORUS_TRY(upload(f.first_seq_, first_seq));
  CHORUS_TRY(upload(f.first_pos_, first_pos));
  CHORUS_TRY(upload(f.depth_pos_, depth_pos));
  return fb;
}

Status FrameBatch::sample_backbone(cudaStream_t s) {
  const DeviceModel& m = *m_;
  cuda::LinearArgs head;
  head.x = z_.as<float>();
  head.ldx = H_;
  head.M = Q_;
  head.out[0] = {m.lm_head().matrix(), nullptr, logits_b_.as<float>(), C_};
  m.depth().prefetch_attention(0, head.prefetch);  // the next frame's first depth step
  CHORUS_TRY(cuda::linear(head, &ws_, s));
  // One branch per stream: guidance would only copy the logits, so the sampler reads them directly.
  if (NB_ > 1)
    CHORUS_TRY(guide_logits(logits_b_.as<float>(), C_, guides_.as<Guide>(), S_, NB_, C_, guided_b_.as<float>(), C_, s));
  const int32_t eos = static_cast<int32_t>(m.config().backbone_eos());
  cuda::SampleArgs a;
  a.logits = NB_ > 1 ? guided_b_.as<float>() : logits_b_.as<float>();
  a.ld = C_;
  a.vocab = static_cast<int32_t>(C_);
  a.rows = S_;
  a.params = params_b_.as<cuda::DeviceSampler>();
  a.frame = frames_.as<int32_t>();
  a.codebook = 0;
  a.penalized = history_.as<uint8_t>();
  a.allowed_below = m.config().codec_codebook_size;
  a.also_allowed = eos;
  a.blocked_id = eos;
  a.block_until_frame = min_frames_.as<int32_t>();
  a.out = codes_dev();
  a.out_stride = G_;
  a.mark_chosen = history_.as<uint8_t>();
  a.error = errors_dev();
  a.scratch_w = scratch_w_.as<double>();
  a.scratch_ids = scratch_ids_.as<int32_t>();
  return cuda::sample(a, s);
}

Status FrameBatch::prefill(std::span<const StreamSetup> streams) {
  if (static_cast<int>(streams.size()) != S_) return make_error(ErrorCode::kInternal, "breeze frame batch: one setup per slot");
  std::vector<const Tensor*> seqs;  // sequence q's prompt rows
  for (const StreamSetup& st : streams) {
    if (static_cast<int>(st.branches.size()) != NB_) return make_error(ErrorCode::kInternal, "breeze frame batch: branches changed");
    seqs.insert(seqs.end(), st.branches.begin(), st.branches.end());
  }
  cudaStream_t s = stream_.get();
  const nn::Qwen3Dims& bd = m_->backbone().dims();
  const KvCacheRef kv{bb_kv_.as<float>(), Q_, cap_, bd.kv_heads * bd.head_dim};
  CHORUS_TRY(ev_[0].record(s));
  for (int q0 = 0; q0 < Q_;) {
    int q1 = q0;  // sequences q0..q1−1 form one chunk
    int64_t rows = 0;
    while (q1 < Q_ && (q1 == q0 || rows + seqs[q1]->dim(0) <= bb_rows_)) rows += seqs[q1++]->dim(0);
    std::vector<float> x;
    x.reserve(static_cast<size_t>(rows * H_));
    std::vector<int32_t> seq, pos, last;
    for (int q = q0; q < q1; ++q) {
      const Tensor& p = *seqs[q];
      x.insert(x.end(), p.f32(), p.f32() + p.numel());
      for (int64_t t = 0; t < p.dim(0); ++t) {
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
    CHORUS_TRY(m_->backbone().forward(bb_h_.as<float>(), bb_out_.as<float>(), map, kv, bb_scratch_, ws_, s, bf16_));
    CHORUS_TRY(qwen3_tts::gpu::gather_rows(bb_out_.as<float>(), last_row_.as<int32_t>(), H_, q1 - q0,
                                           z_.as<float>() + q0 * H_, s));
    q0 = q1;
  }
  CHORUS_TRY(sample_backbone(s));
  CHORUS_TRY(ev_[1].record(s));
  CHORUS_TRY(pipe_.publish_and_wait(s));
  CHORUS_ASSIGN(timing_.prefill_ms, ev_[1].elapsed_ms_since(ev_[0]));
  return ok_status();
}

Status FrameBatch::enqueue_depth(cudaStream_t s) {
  const DeviceModel& m = *m_;
  const nn::Qwen3Dims& dd = m.depth().dims();
  const KvCacheRef kv{depth_kv_.as<float>(), Q_, G_, dd.kv_heads * dd.head_dim};
  const AudioTable table = m.table();
  int32_t* codes = codes_dev();
  float* din = din_.as<float>();
  float* dx = dx_.as<float>();
  float* out = dout_.as<float>();
  cuda::SampleArgs sa;
  sa.logits = guided_d_.as<float>();
  sa.ld = V_;
  sa.vocab = static_cast<int32_t>(V_);
  sa.rows = S_;
  sa.params = params_d_.as<cuda::DeviceSampler>();
  sa.frame = frames_.as<int32_t>();
  sa.allowed_below = m.config().codec_codebook_size;
  sa.out_stride = G_;
  sa.error = errors_dev();
  sa.scratch_w = scratch_w_.as<double>();
  sa.scratch_ids = scratch_ids_.as<int32_t>();
  // One branch per stream (no guidance): the sampler's rows are the depth rows, so step k's sampler
  // writes step k + 1's projected input row (DeviceModel::projected_depth_rows) and guidance, which
  // would only copy the logits, is skipped.
  const bool single = NB_ == 1;
  for (int k = 1; k < G_; ++k) {
    // Step k: rows [h, E_0(c0)] at positions 0, 1 (k = 1), else E_{k−1}(c_{k−1}) at position k.
    const int64_t rows = k == 1 ? 2 * Q_ : Q_;
    if (k == 1) {
      CHORUS_TRY(depth_first_rows(z_.as<float>(), table, codes, G_, S_, NB_, din, s));
    } else if (!single) {
      CHORUS_TRY(depth_code_rows(table, codes, G_, k, S_, NB_, din, s));
    }
    if (k == 1 || !single) {
      cuda::LinearArgs p;
      p.x = din;
      p.ldx = H_;
      p.M = rows;
      p.out[0] = {m.projector().matrix(), nullptr, dx, D_};
      p.bf16 = bf16_;  // the projected rows are stored as bf16 (DepthDecoder::project_*)
      CHORUS_TRY(cuda::linear(p, &ws_, s));
    }
    const cuda::RowMap map = k == 1 ? cuda::RowMap{first_seq_.as<int32_t>(), first_pos_.as<int32_t>(), rows, false}
                                    : cuda::RowMap{iota_.as<int32_t>(), depth_pos_.as<int32_t>() + k * Q_, rows, true};
    // One row (a single stream without guidance, past step 1): the final norm runs in the head's
    // launch (one launch less per step).
    const bool norm_in_head = rows == 1;
    // dx holds bf16 values in the bf16 mode (the projector's rounded outputs, or the sampler's
    // rounded row), so the stack does not round them again.
    CHORUS_TRY(m.depth().forward(dx, norm_in_head ? nullptr : out, map, kv, depth_scratch_, ws_, s, bf16_,
                                 /*input_rounded=*/true));
    float* logits = logits_d_.as<float>() + static_cast<int64_t>(k - 1) * Q_ * V_;
    cuda::LinearArgs head;  // each branch's last row
    head.x = k == 1 ? out + D_ : out;
    head.ldx = k == 1 ? 2 * D_ : D_;
    head.M = Q_;
    head.out[0] = {m.head(k - 1).matrix(), nullptr, logits, V_};
    if (norm_in_head) {
      head.x = dx;
      head.norm_weight = m.depth().final_norm();
      head.norm_eps = m.depth().norm_eps();
      head.bf16 = bf16_;          // the norm as the stack's final norm rounds it
      head.round_outputs = false;  // the logits in f32, as before
    }
    // The next step's stack, or after the last step the backbone's.
    if (k + 1 < G_)
      m.depth().prefetch_attention(0, head.prefetch);
    else
      m.backbone().prefetch_attention(0, head.prefetch);
    CHORUS_TRY(cuda::linear(head, &ws_, s));
    if (!single) CHORUS_TRY(guide_logits(logits, V_, guides_.as<Guide>(), S_, NB_, V_, guided_d_.as<float>(), V_, s));
    sa.logits = single ? logits : guided_d_.as<float>();
    sa.codebook = static_cast<uint32_t>(k);
    sa.out = codes + k;
    const float* next_rows = single && k + 1 < G_ ? m.projected_depth_rows(k) : nullptr;
    sa.embed_table_f32 = next_rows;
    sa.embed_round_bf16 = bf16_;
    sa.embed_out = next_rows ? dx : nullptr;
    sa.embed_dim = D_;
    CHORUS_TRY(cuda::sample(sa, s));
  }
  return advance_positions(frames_.as<int32_t>(), prompt_rows_.as<int32_t>(), static_cast<int32_t>(cap_),
                           bb_pos_.as<int32_t>(), S_, NB_, codes, G_, frame_codes_dev(), s);
}

Status FrameBatch::enqueue_backbone(cudaStream_t s) {
  const DeviceModel& m = *m_;
  const nn::Qwen3Dims& bd = m.backbone().dims();
  const KvCacheRef kv{bb_kv_.as<float>(), Q_, cap_, bd.kv_heads * bd.head_dim};
  CHORUS_TRY(frame_rows(m.table(), codes_dev(), G_, S_, NB_, bb_h_.as<float>(), s));
  const cuda::RowMap map{iota_.as<int32_t>(), bb_pos_.as<int32_t>(), Q_, true};
  CHORUS_TRY(m.backbone().forward(bb_h_.as<float>(), z_.as<float>(), map, kv, bb_scratch_, ws_, s, bf16_));
  return sample_backbone(s);
}

Status FrameBatch::run_frame(bool feed, std::optional<bool> then) {
  cudaStream_t s = stream_.get();
  CHORUS_TRY(pipe_.run_frame(s, feed, then, [&] { return enqueue_depth(s); }, [&] { return enqueue_backbone(s); }));
  timing_.depth_ms = pipe_.first_half_ms();
  timing_.backbone_ms = pipe_.second_half_ms();
  return ok_status();
}

Result<std::vector<float>> FrameBatch::backbone_logits() const {
  CHORUS_TRY(stream_.synchronize());
  std::vector<float> v(static_cast<size_t>(Q_ * C_));
  CHORUS_CUDA_TRY(cudaMemcpy(v.data(), logits_b_.data(), v.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

Result<std::vector<float>> FrameBatch::backbone_hidden() const {
  CHORUS_TRY(stream_.synchronize());
  std::vector<float> v(static_cast<size_t>(Q_ * H_));
  CHORUS_CUDA_TRY(cudaMemcpy(v.data(), z_.data(), v.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

Result<std::vector<float>> FrameBatch::depth_logits() const {
  CHORUS_TRY(stream_.synchronize());
  std::vector<float> v(static_cast<size_t>((G_ - 1) * Q_ * V_));
  CHORUS_CUDA_TRY(cudaMemcpy(v.data(), logits_d_.data(), v.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace chorus::breeze_tts::gpu

#endif  // CHORUS_HAVE_CUDA
