#ifdef CHORUS_HAVE_CUDA

#include "models/breeze_tts/frame_batch_cuda.h"

#include <algorithm>
#include <limits>


namespace chorus::breeze_tts::gpu {

namespace {

int32_t expected_mode(size_t branches) { return branches == 1 ? 0 : branches == 2 ? 1 : 2; }

// A stream's slot settings without its prompt rows (the caller adds one per branch).
frame_core::gpu::SlotSetup slot_setup(const StreamSetup& st) {
  return {.prompt_rows = {},
          .min_frames = std::clamp<int64_t>(st.min_frames, 0, 1 << 30),
          .backbone = st.backbone,
          .depth = st.depth,
          .depth_penalty = false,
          .seed = st.seed,
          .rng_stream = st.rng_stream};
}

}  // namespace

using frame_core::gpu::upload;
using nn::gpu::KvCacheRef;

Result<std::unique_ptr<FrameBatch>> FrameBatch::create(std::shared_ptr<const DeviceModel> model,
                                                       std::span<const StreamSetup> streams) {
  if (!model || streams.empty()) return make_error(ErrorCode::kInternal, "breeze frame batch: no model or no streams");
  std::unique_ptr<FrameBatch> fb(new FrameBatch());
  FrameBatch& f = *fb;
  f.m_ = std::move(model);
  const DeviceModel& m = *f.m_;
  const size_t NB = streams[0].branches.size();
  const int64_t H = m.hidden();
  f.D_ = m.depth_hidden();
  f.C_ = m.classes();
  f.V_ = m.vocab();
  f.bf16_ = streams[0].act == Activations::kBF16;
  int64_t cap = 0;
  std::vector<frame_core::gpu::SlotSetup> slots;
  for (const StreamSetup& st : streams) {
    if (st.branches.empty() || st.branches.size() > 3 || st.branches.size() != NB)
      return make_error(ErrorCode::kUnsupported, "breeze cuda: every stream of a batch needs the same guidance branches");
    if (st.guide.mode != expected_mode(st.branches.size()))
      return make_error(ErrorCode::kInternal, "breeze frame batch: guidance mode does not match the branches");
    if (st.max_frames < 1) return make_error(ErrorCode::kInternal, "breeze frame batch: max_frames must be >= 1");
    if (st.act != streams[0].act)
      return make_error(ErrorCode::kUnsupported, "breeze cuda: every stream of a batch needs the same activation precision");
    frame_core::gpu::SlotSetup slot = slot_setup(st);
    for (const Tensor* t : st.branches) {
      if (!t || t->rank() != 2 || t->dim(1) != H || t->dim(0) < 1 || t->dtype() != DType::kF32)
        return make_error(ErrorCode::kInternal, "breeze frame batch: prompt rows of another model");
      if (t->dim(0) > std::numeric_limits<int32_t>::max() / 4 || st.max_frames > std::numeric_limits<int32_t>::max() / 4)
        return make_error(ErrorCode::kOutOfRange, "breeze frame batch: context too long");
      cap = std::max(cap, t->dim(0) + st.max_frames);
      slot.prompt_rows.push_back(t->dim(0));
    }
    slots.push_back(std::move(slot));
  }
  CHORUS_TRY(f.init(f.recipe(), slots, cap));
  CHORUS_TRY(f.alloc_own());
  std::vector<Guide> guides;
  for (const StreamSetup& st : streams) guides.push_back(st.guide);
  CHORUS_TRY(upload(f.guides_, guides));
  return fb;
}

frame_core::gpu::FrameRecipe FrameBatch::recipe() const {
  const DeviceModel& m = *m_;
  frame_core::gpu::FrameRecipe r;
  r.backbone = &m.backbone();
  r.depth = &m.depth();
  r.backbone_head = m.lm_head().matrix();
  r.codebooks = m.codebooks();
  r.depth_hidden = D_;
  r.depth_vocab = V_;
  r.allowed_below = m.config().codec_codebook_size;
  r.eos = static_cast<int32_t>(m.config().backbone_eos());
  r.depth_pos_first = 0;  // step k >= 2 writes position k
  r.bf16 = bf16_;
  return r;
}

Status FrameBatch::alloc_own() {
  const size_t F = sizeof(float);
  const int64_t S = S_, Q = Q_, G = G_, D = D_, H = H_;
  const auto n = [](int64_t v) { return static_cast<size_t>(v); };
  CHORUS_TRY(alloc(guided_b_, n(S * C_) * F));
  CHORUS_TRY(alloc(din_, n(2 * Q * H) * F));
  CHORUS_TRY(alloc(dx_, n(2 * Q * D) * F));
  CHORUS_TRY(alloc(dout_, n(2 * Q * D) * F));
  CHORUS_TRY(alloc(logits_d_, n((G - 1) * Q * V_) * F));
  CHORUS_TRY(alloc(guided_d_, n(S * V_) * F));
  return alloc(guides_, n(S) * sizeof(Guide));
}

Result<std::unique_ptr<FrameBatch>> FrameBatch::create_pool(std::shared_ptr<const DeviceModel> model, int slots,
                                                            Activations act, int64_t positions,
                                                            std::shared_ptr<nn::gpu::KvPagePool> pages,
                                                            bool every_row_tensor) {
  if (!model || slots < 1) return make_error(ErrorCode::kInternal, "breeze frame pool: no model or no slots");
  if (positions < 2 || positions > std::numeric_limits<int32_t>::max() / 4)
    return make_error(ErrorCode::kOutOfRange, "breeze frame pool: too many positions");
  std::unique_ptr<FrameBatch> fb(new FrameBatch());
  FrameBatch& f = *fb;
  f.m_ = std::move(model);
  f.D_ = f.m_->depth_hidden();
  f.C_ = f.m_->classes();
  f.V_ = f.m_->vocab();
  f.bf16_ = act == Activations::kBF16;
  f.pool_ = true;
  frame_core::gpu::FrameRecipe r = f.recipe();
  r.every_row_tensor = every_row_tensor;
  CHORUS_TRY(f.init_pool(r, slots, positions, std::move(pages)));
  CHORUS_TRY(f.alloc_own());
  return fb;
}

Status FrameBatch::admit(std::span<const int> slots, std::span<const StreamSetup> streams) {
  if (!pool_) return make_error(ErrorCode::kInternal, "breeze frame batch: not a pool");
  if (slots.size() != streams.size()) return make_error(ErrorCode::kInternal, "breeze frame pool: one stream per slot");
  std::vector<int> branch_slots;
  std::vector<frame_core::gpu::SlotSetup> setups;
  std::vector<frame_core::gpu::SeqRows> seqs;
  bool guided = guided_;
  for (size_t i = 0; i < slots.size(); ++i) {
    const StreamSetup& st = streams[i];
    const int nb = static_cast<int>(st.branches.size());
    if (nb < 1 || nb > 3 || st.guide.mode != expected_mode(st.branches.size()) || (st.act == Activations::kBF16) != bf16_)
      return make_error(ErrorCode::kInternal, "breeze frame pool: a stream of another guidance or precision");
    for (int j = 0; j < nb; ++j) {
      const Tensor* t = st.branches[static_cast<size_t>(j)];
      if (!t || t->rank() != 2 || t->dim(1) != H_ || t->dim(0) < 1 || t->dtype() != DType::kF32 ||
          t->dim(0) + st.max_frames > cap_)
        return make_error(ErrorCode::kInternal, "breeze frame pool: prompt rows that do not fit the slot");
      frame_core::gpu::SlotSetup slot = slot_setup(st);
      slot.prompt_rows.push_back(t->dim(0));
      setups.push_back(std::move(slot));
      seqs.push_back({t->f32(), t->dim(0)});
      branch_slots.push_back(slots[i] + j);
      Guide g = st.guide;
      g.branch = j;
      if (slots[i] + j >= S_) return make_error(ErrorCode::kInternal, "breeze frame pool: branches past the last slot");
      CHORUS_CUDA_TRY(cudaMemcpy(guides_.as<Guide>() + slots[i] + j, &g, sizeof(Guide), cudaMemcpyHostToDevice));
    }
    guided = guided || nb > 1;
  }
  if (guided != guided_) {
    guided_ = guided;
    set_graph_variant(1);  // frames with the guidance launches
  }
  return admit_slots(branch_slots, setups, seqs);
}

Result<float*> FrameBatch::combine_backbone(float* logits, cudaStream_t s) {
  // No stream with guidance: it would only copy the logits, so the sampler reads them directly.
  if (!guides()) return logits;
  CHORUS_TRY(guide_logits(logits, C_, guides_.as<Guide>(), n_, NB_, C_, guided_b_.as<float>(), C_, s));
  return guided_b_.as<float>();
}

Status FrameBatch::prefill(std::span<const StreamSetup> streams) {
  if (static_cast<int>(streams.size()) != S_) return make_error(ErrorCode::kInternal, "breeze frame batch: one setup per slot");
  std::vector<frame_core::gpu::SeqRows> seqs;  // sequence q's prompt rows
  for (const StreamSetup& st : streams) {
    if (static_cast<int>(st.branches.size()) != NB_) return make_error(ErrorCode::kInternal, "breeze frame batch: branches changed");
    for (const Tensor* t : st.branches) {
      if (!t || t->rank() != 2 || t->dim(1) != H_ || t->dtype() != DType::kF32)
        return make_error(ErrorCode::kInternal, "breeze frame batch: prompt rows of another model");
      seqs.push_back({t->f32(), t->dim(0)});
    }
  }
  return prefill_sequences(seqs);
}

Status FrameBatch::enqueue_depth(cudaStream_t s) {
  const DeviceModel& m = *m_;
  const KvCacheRef kv = depth_kv();
  const AudioTable table = m.table();
  int32_t* codes = codes_dev();
  float* din = din_.as<float>();
  float* dx = dx_.as<float>();
  float* out = dout_.as<float>();
  cuda::SampleArgs sa = depth_sampler(guided_d_.as<float>(), V_);
  sa.allowed_below = m.config().codec_codebook_size;
  // One branch per slot (a pool, or a fixed batch without guidance): the sampler's rows are the
  // depth rows, so step k's sampler writes step k + 1's projected input row
  // (DeviceModel::projected_depth_rows). Without guidance, which would only copy the logits, the
  // sampler reads the heads' logits.
  const bool single = NB_ == 1;
  const bool guide = guides();
  for (int k = 1; k < G_; ++k) {
    // Step k: rows [h, E_0(c0)] at positions 0, 1 (k = 1), else E_{k−1}(c_{k−1}) at position k.
    const int64_t rows = k == 1 ? 2 * this->rows() : this->rows();
    if (k == 1) {
      CHORUS_TRY(depth_first_rows(z_.as<float>(), table, codes, G_, n_, NB_, din, s));
    } else if (!single) {
      CHORUS_TRY(depth_code_rows(table, codes, G_, k, n_, NB_, din, s));
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
    const cuda::RowMap map = k == 1 ? first_step_map() : step_map(k);
    // One row (a single stream without guidance, past step 1): the final norm runs in the head's
    // launch (one launch less per step).
    const bool norm_in_head = rows == 1;
    // dx holds bf16 values in the bf16 mode (the projector's rounded outputs, or the sampler's
    // rounded row), so the stack does not round them again.
    CHORUS_TRY(m.depth().forward(dx, norm_in_head ? nullptr : out, map, kv, depth_scratch_, ws_, s, bf16_,
                                 /*input_rounded=*/true));
    float* logits = logits_d_.as<float>() + static_cast<int64_t>(k - 1) * Q_ * V_;
    cuda::LinearArgs head = depth_head(out, k == 1, m.head(k - 1).matrix(), logits, k + 1 >= G_);
    if (norm_in_head) {
      head.x = dx;
      head.norm_weight = m.depth().final_norm();
      head.norm_eps = m.depth().norm_eps();
      head.bf16 = bf16_;          // the norm as the stack's final norm rounds it
      head.round_outputs = false;  // the logits in f32, as before
    }
    CHORUS_TRY(cuda::linear(head, &ws_, s));
    if (guide) CHORUS_TRY(guide_logits(logits, V_, guides_.as<Guide>(), n_, NB_, V_, guided_d_.as<float>(), V_, s));
    sa.logits = guide ? guided_d_.as<float>() : logits;
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
                           bb_pos_.as<int32_t>(), n_, NB_, codes, G_, frame_codes_dev(), s);
}

Status FrameBatch::backbone_inputs(cudaStream_t s) {
  return frame_rows(m_->table(), codes_dev(), G_, n_, NB_, bb_h_.as<float>(), s);
}

FrameBatch::~FrameBatch() {
  if (stream_.get()) cudaStreamSynchronize(stream_.get());  // this class's buffers go first
}

Result<std::vector<float>> FrameBatch::download(const cuda::DeviceBuffer& b, int64_t floats) const {
  CHORUS_TRY(stream_.synchronize());
  std::vector<float> v(static_cast<size_t>(floats));
  CHORUS_CUDA_TRY(cudaMemcpy(v.data(), b.data(), v.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return v;
}

Result<std::vector<float>> FrameBatch::backbone_logits() const { return download(logits_b_, Q_ * C_); }

Result<std::vector<float>> FrameBatch::backbone_hidden() const { return download(z_, Q_ * H_); }

Result<std::vector<float>> FrameBatch::depth_logits() const { return download(logits_d_, (G_ - 1) * Q_ * V_); }

}  // namespace chorus::breeze_tts::gpu

#endif  // CHORUS_HAVE_CUDA
