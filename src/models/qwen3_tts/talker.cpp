#include "models/qwen3_tts/talker.h"

#include <vector>

#include "runtime/cpu/kernels.h"

namespace chorus::qwen3_tts {

using cpu::MatrixRef;

namespace {
Result<Tensor> need(const Weights& w, const std::string& name, bool as_f32 = false) {
  if (!w.has(name)) return make_error(ErrorCode::kNotFound, "missing tensor " + name);
  return as_f32 ? w.f32(name) : w.raw(name);
}
}  // namespace

Result<Talker> Talker::load(const Weights& root, const Config& c, cpu::WeightFormat format, ThreadPool* pool) {
  Talker t;
  t.cfg_ = c.talker;
  const Weights w = root.sub("talker.");
  CHORUS_ASSIGN(t.stack_, nn::Qwen3Stack::load(w.sub("model."), c.talker.dims, true, format, pool));
  CHORUS_ASSIGN(t.codec_embedding_, need(w, "model.codec_embedding.weight"));
  CHORUS_ASSIGN(t.text_embedding_, need(w, "model.text_embedding.weight"));
  CHORUS_ASSIGN(t.codec_head_, need(w, "codec_head.weight"));
  CHORUS_ASSIGN(t.fc1_w_, need(w, "text_projection.linear_fc1.weight"));
  CHORUS_ASSIGN(t.fc1_b_, need(w, "text_projection.linear_fc1.bias", true));
  CHORUS_ASSIGN(t.fc2_w_, need(w, "text_projection.linear_fc2.weight"));
  CHORUS_ASSIGN(t.fc2_b_, need(w, "text_projection.linear_fc2.bias", true));
  return t;
}

Status Talker::embed_text(std::span<const int32_t> ids, float* out, ThreadPool* pool) const {
  const int64_t n = static_cast<int64_t>(ids.size()), th = cfg_.text_hidden;
  for (int32_t id : ids)
    if (id < 0 || id >= cfg_.text_vocab)
      return make_error(ErrorCode::kInvalidArgument, "text token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                                         std::to_string(cfg_.text_vocab - 1) + ")");
  if (n == 0) return ok_status();
  std::vector<float> e(static_cast<size_t>(n * th)), mid(static_cast<size_t>(n * th));
  cpu::embedding(MatrixRef::of(text_embedding_), ids.data(), n, e.data());
  cpu::linear(e.data(), n, MatrixRef::of(fc1_w_), fc1_b_.f32(), mid.data(), pool);
  cpu::silu(mid.data(), n * th);
  cpu::linear(mid.data(), n, MatrixRef::of(fc2_w_), fc2_b_.f32(), out, pool);
  return ok_status();
}

Status Talker::embed_codec(std::span<const int32_t> ids, float* out) const {
  for (int32_t id : ids)
    if (id < 0 || id >= cfg_.codec_vocab)
      return make_error(ErrorCode::kInvalidArgument, "codec id " + std::to_string(id) + " is outside 0.." +
                                                         std::to_string(cfg_.codec_vocab - 1));
  cpu::embedding(MatrixRef::of(codec_embedding_), ids.data(), static_cast<int64_t>(ids.size()), out);
  return ok_status();
}

void Talker::add_codec_row(int32_t id, float* out) const {
  const int64_t H = hidden();
  std::vector<float> row(static_cast<size_t>(H));
  cpu::embedding(MatrixRef::of(codec_embedding_), &id, 1, row.data());
  for (int64_t i = 0; i < H; ++i) out[i] += row[i];
}

Status Talker::forward(std::span<const nn::SequenceRows> seqs, const float* x, float* last_hidden, float* logits,
                       ThreadPool* pool, const nn::LayerTap* tap) const {
  const int64_t H = hidden();
  int64_t R = 0;
  for (const auto& s : seqs) R += s.rows;
  std::vector<float> h(static_cast<size_t>(R * H));
  CHORUS_TRY(stack_.forward(seqs, x, h.data(), pool, nn::Rounding::kNone, tap));
  const int64_t S = static_cast<int64_t>(seqs.size());
  for (int64_t s = 0, end = 0; s < S; ++s) {
    end += seqs[s].rows;
    std::copy(h.data() + (end - 1) * H, h.data() + end * H, last_hidden + s * H);
  }
  // One matrix product for all sequences' last rows (the head is the largest matrix per step).
  cpu::linear(last_hidden, S, MatrixRef::of(codec_head_), nullptr, logits, pool);
  return ok_status();
}

}  // namespace chorus::qwen3_tts
