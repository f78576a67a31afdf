#ifdef CHORUS_HAVE_CUDA

#include "models/qwen3_tts/frame_batch_cuda.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "models/qwen3_tts/frame_kernels_cuda.h"

namespace chorus::qwen3_tts::gpu {

using frame_core::gpu::upload;

namespace {

// A stream's slot settings: its prompt length, minimum length, samplers and random stream.
frame_core::gpu::SlotSetup slot_setup(const Prompt& p, const GenerationSettings& g) {
  return {.prompt_rows = {p.prefill_rows},
          .min_frames = std::min<int64_t>(g.min_frames, 1 << 30),
          .backbone = g.talker,
          .depth = g.code_predictor,
          .seed = g.seed,
          .rng_stream = g.rng_stream};
}

}  // namespace

FrameBatch::~FrameBatch() {
  if (stream_.get()) cudaStreamSynchronize(stream_.get());  // this class's buffers go first
}

Result<std::unique_ptr<FrameBatch>> FrameBatch::create(std::shared_ptr<const DeviceModel> model,
                                                       std::span<const StreamSetup> streams) {
  if (!model || streams.empty()) return make_error(ErrorCode::kInternal, "frame batch: no model or no streams");
  const DeviceModel& m = *model;  // kept alive by f.m_
  std::unique_ptr<FrameBatch> fb(new FrameBatch());
  FrameBatch& f = *fb;
  f.m_ = std::move(model);
  const int64_t H = m.hidden(), B = static_cast<int64_t>(streams.size());
  f.C_ = m.cp_hidden();
  f.CV_ = m.cp_vocab();
  int64_t cap = 0, trailing = 0;
  std::vector<frame_core::gpu::SlotSetup> slots;
  for (const StreamSetup& s : streams) {
    if (!s.prompt || s.prompt->hidden != H || s.prompt->prefill.size() != static_cast<size_t>(s.prompt->prefill_rows * H))
      return make_error(ErrorCode::kInternal, "frame batch: prompt of another model");
    cap = std::max(cap, s.prompt->prefill_rows + s.settings.max_frames);
    trailing += s.prompt->trailing_rows;
    const GenerationSettings& g = s.settings;
    slots.push_back(slot_setup(*s.prompt, g));
  }
  if (cap > std::numeric_limits<int32_t>::max() / 2) return make_error(ErrorCode::kOutOfRange, "frame batch: context too long");
  CHORUS_TRY(f.init(f.recipe(), slots, cap));

  const size_t F = sizeof(float), I = sizeof(int32_t);
  CHORUS_TRY(f.alloc(f.xt_, static_cast<size_t>(2 * B * H) * F));
  if (m.has_projection()) CHORUS_TRY(f.alloc(f.xc_, static_cast<size_t>(2 * B * f.C_) * F));
  CHORUS_TRY(f.alloc(f.logits_cp_, static_cast<size_t>(B * f.CV_) * F));
  CHORUS_TRY(f.alloc(f.text_rows_, static_cast<size_t>(std::max<int64_t>(1, trailing) * H) * F));
  CHORUS_TRY(f.alloc(f.text_off_, B * I));
  CHORUS_TRY(f.alloc(f.text_count_, B * I));
  CHORUS_TRY(f.alloc(f.pad_, static_cast<size_t>(B * H) * F));
  std::vector<int32_t> off, count;
  std::vector<float> text, pad;
  for (const StreamSetup& s : streams) {
    off.push_back(static_cast<int32_t>(text.size() / static_cast<size_t>(H)));
    count.push_back(static_cast<int32_t>(s.prompt->trailing_rows));
    text.insert(text.end(), s.prompt->trailing.begin(), s.prompt->trailing.end());
    pad.insert(pad.end(), s.prompt->pad.begin(), s.prompt->pad.end());
  }
  CHORUS_TRY(upload(f.text_off_, off));
  CHORUS_TRY(upload(f.text_count_, count));
  CHORUS_TRY(upload(f.text_rows_, text));
  CHORUS_TRY(upload(f.pad_, pad));
  return fb;
}

frame_core::gpu::FrameRecipe FrameBatch::recipe() const {
  const DeviceModel& m = *m_;
  return frame_core::gpu::FrameRecipe{.backbone = &m.talker(),
                                      .depth = &m.code_predictor(),
                                      .backbone_head = m.codec_head().matrix(),
                                      .codebooks = m.groups(),
                                      .depth_hidden = C_,
                                      .depth_vocab = CV_,
                                      .allowed_below = m.allowed_below(),
                                      .eos = m.eos_id(),
                                      .depth_pos_first = 1,  // pass k >= 1 writes position k + 1
                                      .bf16 = false};
}

Result<std::unique_ptr<FrameBatch>> FrameBatch::create_pool(std::shared_ptr<const DeviceModel> model, int slots,
                                                            int64_t positions,
                                                            std::shared_ptr<nn::gpu::KvPagePool> pages,
                                                            bool every_row_tensor) {
  if (!model || slots < 1) return make_error(ErrorCode::kInternal, "frame pool: no model or no slots");
  if (positions < 2 || positions * slots > std::numeric_limits<int32_t>::max() / 2)
    return make_error(ErrorCode::kOutOfRange, "frame pool: too many positions");
  std::unique_ptr<FrameBatch> fb(new FrameBatch());
  FrameBatch& f = *fb;
  f.m_ = std::move(model);
  const int64_t H = f.m_->hidden(), S = slots;
  f.C_ = f.m_->cp_hidden();
  f.CV_ = f.m_->cp_vocab();
  frame_core::gpu::FrameRecipe r = f.recipe();
  r.every_row_tensor = every_row_tensor;
  CHORUS_TRY(f.init_pool(r, slots, positions, std::move(pages)));
  f.text_stride_ = positions;
  f.text_count_host_.assign(static_cast<size_t>(S), 0);
  const size_t F = sizeof(float), I = sizeof(int32_t);
  CHORUS_TRY(f.alloc(f.xt_, static_cast<size_t>(2 * S * H) * F));
  if (f.m_->has_projection()) CHORUS_TRY(f.alloc(f.xc_, static_cast<size_t>(2 * S * f.C_) * F));
  CHORUS_TRY(f.alloc(f.logits_cp_, static_cast<size_t>(S * f.CV_) * F));
  CHORUS_TRY(f.alloc(f.text_rows_, static_cast<size_t>(S * positions * H) * F));
  CHORUS_TRY(f.alloc(f.text_off_, S * I));
  CHORUS_TRY(f.alloc(f.text_count_, S * I));
  CHORUS_TRY(f.alloc(f.pad_, static_cast<size_t>(S * H) * F));
  std::vector<int32_t> off(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) off[static_cast<size_t>(s)] = static_cast<int32_t>(s * positions);
  CHORUS_TRY(upload(f.text_off_, off));
  return fb;
}

Status FrameBatch::admit(std::span<const int> slots, std::span<const StreamSetup> streams) {
  if (text_stride_ == 0) return make_error(ErrorCode::kInternal, "frame batch: not a pool");
  if (slots.size() != streams.size()) return make_error(ErrorCode::kInternal, "frame pool: one stream per slot");
  std::vector<frame_core::gpu::SlotSetup> setups;
  std::vector<frame_core::gpu::SeqRows> seqs;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Prompt* p = streams[i].prompt;
    const GenerationSettings& g = streams[i].settings;
    const int slot = slots[i];
    if (!p || p->hidden != H_ || p->prefill.size() != static_cast<size_t>(p->prefill_rows * H_))
      return make_error(ErrorCode::kInternal, "frame pool: prompt of another model");
    if (slot < 0 || slot >= size() || p->prefill_rows + g.max_frames > cap_)
      return make_error(ErrorCode::kInternal, "frame pool: a stream that does not fit its slot");
    // A stream makes fewer frames than its slot has positions, so the rows past them are never read.
    const int64_t rows = std::min(p->trailing_rows, text_stride_);
    CHORUS_CUDA_TRY(cudaMemcpy(text_rows_.as<float>() + slot * text_stride_ * H_, p->trailing.data(),
                               static_cast<size_t>(rows * H_) * sizeof(float), cudaMemcpyHostToDevice));
    const int32_t count = static_cast<int32_t>(rows);
    CHORUS_CUDA_TRY(cudaMemcpy(text_count_.as<int32_t>() + slot, &count, sizeof(count), cudaMemcpyHostToDevice));
    text_count_host_[static_cast<size_t>(slot)] = count;
    CHORUS_CUDA_TRY(cudaMemcpy(pad_.as<float>() + slot * H_, p->pad.data(), static_cast<size_t>(H_) * sizeof(float),
                               cudaMemcpyHostToDevice));
    setups.push_back(slot_setup(*p, g));
    seqs.push_back({p->prefill.data(), p->prefill_rows});
  }
  return admit_slots(slots, setups, seqs);
}

Status FrameBatch::append_text(std::span<const TextAppend> appends) {
  if (text_stride_ == 0) return make_error(ErrorCode::kInternal, "frame batch: not a pool");
  if (appends.empty()) return ok_status();
  CHORUS_TRY(stream_.synchronize());
  for (const TextAppend& a : appends) {
    if (a.slot < 0 || a.slot >= size() || a.count < 0 || (a.count > 0 && !a.rows))
      return make_error(ErrorCode::kInternal, "frame pool: text rows for no slot");
    int32_t& held = text_count_host_[static_cast<size_t>(a.slot)];
    const int64_t n = std::clamp<int64_t>(text_stride_ - held, 0, a.count);
    if (n == 0) continue;
    CHORUS_CUDA_TRY(cudaMemcpy(text_rows_.as<float>() + (a.slot * text_stride_ + held) * H_, a.rows,
                               static_cast<size_t>(n * H_) * sizeof(float), cudaMemcpyHostToDevice));
    held += static_cast<int32_t>(n);
  }
  return upload(text_count_, text_count_host_);
}

void FrameBatch::add_slot_regions(frame_core::gpu::SlotRegions& r) const {
  r.add(pad_.data(), H_ * static_cast<int64_t>(sizeof(float)));
  r.add(text_count_.data(), sizeof(int32_t));
}

Status FrameBatch::move_own_slots(std::span<const std::pair<int, int>> moves, cudaStream_t s) {
  if (text_stride_ == 0) return make_error(ErrorCode::kInternal, "frame batch: not a pool");
  for (const auto& [from, to] : moves) {
    int32_t& count = text_count_host_[static_cast<size_t>(from)];
    const int64_t floats = count * H_;
    CHORUS_CUDA_TRY(cudaMemcpyAsync(text_rows_.as<float>() + to * text_stride_ * H_,
                                    text_rows_.as<float>() + from * text_stride_ * H_,
                                    static_cast<size_t>(floats) * sizeof(float), cudaMemcpyDeviceToDevice, s));
    text_count_host_[static_cast<size_t>(to)] = std::exchange(count, 0);
  }
  return ok_status();
}

Status FrameBatch::prefill(const std::vector<const Prompt*>& prompts) {
  if (static_cast<int>(prompts.size()) != size()) return make_error(ErrorCode::kInternal, "frame batch: one prompt per slot");
  std::vector<frame_core::gpu::SeqRows> seqs;
  for (const Prompt* p : prompts) {
    if (!p || p->prefill.size() != static_cast<size_t>(p->prefill_rows * H_))
      return make_error(ErrorCode::kInternal, "frame batch: prompt of another model");
    seqs.push_back({p->prefill.data(), p->prefill_rows});
  }
  return prefill_sequences(seqs);
}

Status FrameBatch::enqueue_depth(cudaStream_t s) {
  const DeviceModel& m = *m_;
  const KvCacheRef kv = depth_kv();
  float* xt = xt_.as<float>();
  float* h = m.has_projection() ? xc_.as<float>() : xt;
  int32_t* codes = codes_dev();
  cuda::SampleArgs sa = depth_sampler(logits_cp_.as<float>(), CV_);
  for (int k = 0; k + 1 < G_; ++k) {
    // Pass k: rows [z, CE(c0)] at positions 0, 1 (k = 0), else CPE_k(c_k) at position k + 1.
    const int64_t rows = k == 0 ? 2 * B() : B();
    // Pass k >= 1 finds its input row CPE_k(c_k) already written by the sampler of c_k: in xt, or
    // with a projection in h, taken from the table projected at load (so no matrix product here).
    if (k == 0) CHORUS_TRY(cp_first_inputs(z_.as<float>(), m.codec_embedding().bf16(), H_, codes, G_, B(), xt, s));
    if (m.has_projection() && k == 0) {
      cuda::LinearArgs p;
      p.x = xt;
      p.ldx = H_;
      p.M = rows;
      p.out[0] = {m.projection().matrix(), m.projection_bias().f32(), h, C_};
      CHORUS_TRY(cuda::linear(p, &ws_, s));
    }
    const cuda::RowMap map = k == 0 ? first_step_map() : step_map(k);
    // The final norm runs inside the head's linear, on each stream's last row.
    CHORUS_TRY(m.code_predictor().forward(h, nullptr, map, kv, depth_scratch_, ws_, s));
    cuda::LinearArgs head = depth_head(h, k == 0, m.cp_head(k).matrix(), logits_cp_.as<float>(), k + 2 >= G_);
    head.norm_weight = m.code_predictor().final_norm();
    head.norm_eps = m.code_predictor().norm_eps();
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
  return advance_single(s);
}

Status FrameBatch::backbone_inputs(cudaStream_t s) {
  const TextRows text{text_rows_.as<float>(), text_off_.as<int32_t>(), text_count_.as<int32_t>(), pad_.as<float>()};
  return talker_inputs(m_->embedding_tables(), H_, codes_dev(), G_, B(), text, frames_.as<int32_t>(), bb_h_.as<float>(),
                       s);
}

}  // namespace chorus::qwen3_tts::gpu

#endif  // CHORUS_HAVE_CUDA
