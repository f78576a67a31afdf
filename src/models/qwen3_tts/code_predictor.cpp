#include "models/qwen3_tts/code_predictor.h"

#include "runtime/cpu/kernels.h"

namespace chorus::qwen3_tts {

using cpu::MatrixRef;

namespace {
Result<Tensor> need(const Weights& w, const std::string& name, bool as_f32 = false) {
  if (!w.has(name)) return make_error(ErrorCode::kNotFound, "missing tensor " + name);
  return as_f32 ? w.f32(name) : w.raw(name);
}
}  // namespace

Result<CodePredictor> CodePredictor::load(const Weights& root, const Config& c, cpu::WeightFormat format,
                                          ThreadPool* pool) {
  CodePredictor p;
  p.cfg_ = c.code_predictor;
  p.input_width_ = c.talker.dims.hidden;
  const Weights w = root.sub("talker.code_predictor.");
  CHORUS_ASSIGN(p.stack_, nn::Qwen3Stack::load(w.sub("model."), c.code_predictor.dims, true, format, pool));
  for (int64_t k = 0; k + 1 < p.cfg_.num_code_groups; ++k) {
    CHORUS_ASSIGN(Tensor e, need(w, "model.codec_embedding." + std::to_string(k) + ".weight"));
    CHORUS_ASSIGN(Tensor h, need(w, "lm_head." + std::to_string(k) + ".weight"));
    p.embeddings_.push_back(std::move(e));
    p.heads_.push_back(std::move(h));
  }
  if (p.input_width_ != p.cfg_.dims.hidden) {
    CHORUS_ASSIGN(p.proj_w_, need(w, "small_to_mtp_projection.weight"));
    CHORUS_ASSIGN(p.proj_b_, need(w, "small_to_mtp_projection.bias", true));
  }
  return p;
}

Status CodePredictor::add_code_embedding(int64_t codebook, int32_t code, float* out) const {
  if (codebook < 1 || codebook >= groups())
    return make_error(ErrorCode::kInternal, "code predictor: no embedding for codebook " + std::to_string(codebook));
  if (code < 0 || code >= vocab())
    return make_error(ErrorCode::kInvalidArgument, "code " + std::to_string(code) + " of codebook " +
                                                       std::to_string(codebook) + " is outside 0.." +
                                                       std::to_string(vocab() - 1));
  std::vector<float> row(static_cast<size_t>(input_width_));
  cpu::embedding(MatrixRef::of(embeddings_[static_cast<size_t>(codebook - 1)]), &code, 1, row.data());
  for (int64_t i = 0; i < input_width_; ++i) out[i] += row[i];
  return ok_status();
}

Status CodePredictor::forward(std::span<const nn::SequenceRows> seqs, const float* x, std::span<const int64_t> heads,
                              float* logits, ThreadPool* pool, const nn::LayerTap* tap) const {
  if (heads.size() != seqs.size()) return make_error(ErrorCode::kInternal, "code predictor: one head per sequence");
  for (int64_t k : heads)
    if (k < 0 || k >= static_cast<int64_t>(heads_.size()))
      return make_error(ErrorCode::kInternal, "code predictor: no lm_head " + std::to_string(k));
  const int64_t C = stack_.dims().hidden;
  int64_t R = 0;
  for (const auto& s : seqs) R += s.rows;
  std::vector<float> h(static_cast<size_t>(R * C));
  if (has_projection()) {
    cpu::linear(x, R, MatrixRef::of(proj_w_), proj_b_.f32(), h.data(), pool);
  } else {
    std::copy(x, x + R * C, h.data());
  }
  CHORUS_TRY(stack_.forward(seqs, h.data(), h.data(), pool, nn::Rounding::kNone, tap));
  // Gather each sequence's last row, then one matrix product per run of sequences sharing a head
  // (in a batched walk they all do), so a head's weights are read once per step.
  const size_t S = seqs.size();
  std::vector<float> last(S * C);
  for (size_t s = 0, end = 0; s < S; ++s) {
    end += static_cast<size_t>(seqs[s].rows);
    std::copy(h.data() + (end - 1) * C, h.data() + end * C, last.data() + s * C);
  }
  for (size_t s0 = 0; s0 < S;) {
    size_t s1 = s0 + 1;
    while (s1 < S && heads[s1] == heads[s0]) ++s1;
    cpu::linear(last.data() + s0 * C, static_cast<int64_t>(s1 - s0), MatrixRef::of(heads_[static_cast<size_t>(heads[s0])]),
                nullptr, logits + s0 * vocab(), pool);
    s0 = s1;
  }
  return ok_status();
}

Status CodePredictor::walk(std::span<FrameWalk> walks, ThreadPool* pool) const {
  const size_t S = walks.size();
  if (S == 0) return ok_status();
  const int64_t W = input_width_, V = vocab();
  std::vector<nn::SequenceRows> seqs(S);
  std::vector<int64_t> heads(S);
  std::vector<float> x(2 * S * W), logits(S * V);
  for (size_t i = 0; i < S; ++i) {
    if (!walks[i].cache || !walks[i].first_rows || !walks[i].codes)
      return make_error(ErrorCode::kInternal, "code predictor: incomplete walk");
    walks[i].cache->truncate(0);  // every frame starts on an empty cache
    std::copy(walks[i].first_rows, walks[i].first_rows + 2 * W, x.data() + 2 * i * W);
    seqs[i] = {walks[i].cache, 0, 2};
  }
  for (int64_t k = 0; k + 1 < groups(); ++k) {  // head k predicts codebook k + 1 from the row at position k + 1
    if (k > 0) {
      std::fill(x.begin(), x.begin() + static_cast<int64_t>(S) * W, 0.0f);
      for (size_t i = 0; i < S; ++i) {
        CHORUS_TRY(add_code_embedding(k, walks[i].codes[k], x.data() + i * W));
        seqs[i] = {walks[i].cache, k + 1, 1};
      }
    }
    std::fill(heads.begin(), heads.end(), k);
    CHORUS_TRY(forward(seqs, x.data(), heads, logits.data(), pool));
    for (size_t i = 0; i < S; ++i) {
      float* l = logits.data() + i * V;
      if (walks[i].logits) std::copy(l, l + V, walks[i].logits + k * V);
      sampling::DrawAddress at = walks[i].address;
      at.codebook = static_cast<uint32_t>(k + 1);
      CHORUS_ASSIGN(walks[i].codes[k + 1], sampling::sample({l, static_cast<size_t>(V)}, {}, walks[i].params, at));
    }
  }
  return ok_status();
}

}  // namespace chorus::qwen3_tts
