#include "models/qwen3_tts/teacher_forcing.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace chorus::qwen3_tts {

namespace {

// Appends each tapped layer's rows to layers[l].
nn::LayerTap collector(std::vector<std::vector<float>>& layers, int64_t width) {
  return [&layers, width](int64_t l, const float* h, int64_t rows) {
    if (static_cast<size_t>(l) >= layers.size()) layers.resize(static_cast<size_t>(l) + 1);
    layers[static_cast<size_t>(l)].insert(layers[static_cast<size_t>(l)].end(), h, h + rows * width);
  };
}

// The ids the talker may emit for codebook 0 (as the stream samples them): below codec_vocab − 1024,
// and EOS.
bool c0_allowed(const TalkerConfig& tc, int64_t id) {
  return id < std::max<int64_t>(0, tc.codec_vocab - 1024) || id == tc.codec_eos_id;
}

double rel_error(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

// Argmax over l[0, n) among the ids allowed(i) accepts.
template <class Allowed>
int64_t argmax(const float* l, int64_t n, const Allowed& allowed) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i)
    if (allowed(i) && (best < 0 || l[i] > l[best])) best = i;
  return best;
}

}  // namespace

Result<ForcedPass> teacher_forced_pass(const Model& m, const Prompt& prompt, std::span<const int32_t> codes,
                                       int64_t frames, bool tap_layers) {
  const int64_t H = m.hidden(), G = m.groups(), V0 = m.config().talker.codec_vocab, V = m.code_predictor().vocab();
  const int64_t W = m.code_predictor().input_width(), C = m.code_predictor().stack().dims().hidden;
  if (frames < 1 || static_cast<int64_t>(codes.size()) < frames * G)
    return make_error(ErrorCode::kInvalidArgument, "teacher forcing: fewer codes than frames x codebooks");
  if (prompt.hidden != H) return make_error(ErrorCode::kInvalidArgument, "teacher forcing: the prompt is for another model");
  ForcedPass p;
  p.frames = frames;
  p.c0_logits.resize(static_cast<size_t>(frames * V0));
  p.cp_logits.resize(static_cast<size_t>(frames * (G - 1) * V));
  const nn::LayerTap talker_tap = collector(p.talker_layers, H), cp_tap = collector(p.cp_layers, C);
  const nn::LayerTap* tt = tap_layers ? &talker_tap : nullptr;
  const nn::LayerTap* ct = tap_layers ? &cp_tap : nullptr;
  ThreadPool* pool = m.pool();

  nn::KvCache talker_cache = m.talker().make_cache(), cp_cache = m.code_predictor().make_cache();
  std::vector<float> z(static_cast<size_t>(H));
  const nn::SequenceRows prefill{&talker_cache, 0, prompt.prefill_rows};
  CHORUS_TRY(m.talker().forward({&prefill, 1}, prompt.prefill.data(), z.data(), p.c0_logits.data(), pool, tt));
  std::vector<float> x(static_cast<size_t>(2 * std::max(W, H)));
  for (int64_t f = 0; f < frames; ++f) {
    const int32_t* frame = codes.data() + f * G;
    // The code predictor: rows [z, CE(c0)] at positions 0, 1, then CPE_k(c_k) at position k + 1.
    cp_cache.truncate(0);
    std::copy(z.begin(), z.end(), x.begin());
    std::fill(x.begin() + H, x.begin() + 2 * H, 0.0f);
    m.talker().add_codec_row(frame[0], x.data() + H);
    for (int64_t k = 0; k + 1 < G; ++k) {
      nn::SequenceRows seq{&cp_cache, 0, 2};
      if (k > 0) {
        std::fill(x.begin(), x.begin() + W, 0.0f);
        CHORUS_TRY(m.code_predictor().add_code_embedding(k, frame[k], x.data()));
        seq = {&cp_cache, k + 1, 1};
      }
      const int64_t head = k;
      CHORUS_TRY(m.code_predictor().forward({&seq, 1}, x.data(), {&head, 1},
                                            p.cp_logits.data() + (f * (G - 1) + k) * V, pool, ct));
    }
    if (f + 1 == frames) break;
    // The talker fed frame f: frame embedding + trailing text row f (or tts_pad).
    CHORUS_TRY(m.frame_embedding({frame, static_cast<size_t>(G)}, x.data()));
    const float* text = f < prompt.trailing_rows ? prompt.trailing.data() + f * H : prompt.pad.data();
    for (int64_t j = 0; j < H; ++j) x[static_cast<size_t>(j)] += text[j];
    const nn::SequenceRows step{&talker_cache, prompt.prefill_rows + f, 1};
    CHORUS_TRY(m.talker().forward({&step, 1}, x.data(), z.data(), p.c0_logits.data() + (f + 1) * V0, pool, tt));
  }
  return p;
}

Result<ForcedComparison> compare_forced(const Config& config, const ForcedPass& ref, const ForcedPass& other) {
  if (ref.frames != other.frames || ref.c0_logits.size() != other.c0_logits.size() ||
      ref.cp_logits.size() != other.cp_logits.size() || ref.talker_layers.size() != other.talker_layers.size() ||
      ref.cp_layers.size() != other.cp_layers.size())
    return make_error(ErrorCode::kInvalidArgument, "compare: passes of different shapes");
  const TalkerConfig& tc = config.talker;
  const int64_t F = ref.frames, V0 = tc.codec_vocab, G = config.talker.num_code_groups;
  const int64_t V = F > 0 ? static_cast<int64_t>(ref.cp_logits.size()) / (F * (G - 1)) : 0;
  ForcedComparison c;
  for (size_t l = 0; l < ref.talker_layers.size(); ++l)
    c.talker_layer_error.push_back(rel_error(ref.talker_layers[l], other.talker_layers[l]));
  for (size_t l = 0; l < ref.cp_layers.size(); ++l)
    c.cp_layer_error.push_back(rel_error(ref.cp_layers[l], other.cp_layers[l]));
  c.c0_logit_error = rel_error(ref.c0_logits, other.c0_logits);
  c.cp_logit_error = rel_error(ref.cp_logits, other.cp_logits);

  const auto allowed = [&](int64_t i) { return c0_allowed(tc, i); };
  int64_t agree0 = 0;
  double kl_sum = 0;
  for (int64_t f = 0; f < F; ++f) {
    const float* a = ref.c0_logits.data() + f * V0;
    const float* b = other.c0_logits.data() + f * V0;
    agree0 += argmax(a, V0, allowed) == argmax(b, V0, allowed);
    // KL(p ‖ q) over the allowed ids, from max-subtracted log-sum-exps in double.
    double ma = -std::numeric_limits<double>::infinity(), mb = ma;
    for (int64_t i = 0; i < V0; ++i)
      if (allowed(i)) {
        ma = std::max(ma, static_cast<double>(a[i]));
        mb = std::max(mb, static_cast<double>(b[i]));
      }
    double sa = 0, sb = 0;
    for (int64_t i = 0; i < V0; ++i)
      if (allowed(i)) {
        sa += std::exp(a[i] - ma);
        sb += std::exp(b[i] - mb);
      }
    const double la = ma + std::log(sa), lb = mb + std::log(sb);
    double kl = 0;
    for (int64_t i = 0; i < V0; ++i)
      if (allowed(i)) {
        const double lp = a[i] - la, lq = b[i] - lb;
        kl += std::exp(lp) * (lp - lq);
      }
    kl = std::max(0.0, kl);  // rounding can leave a tiny negative
    c.ref_c0_top_p += std::exp(ma - la) / static_cast<double>(F);
    kl_sum += kl;
    c.c0_kl_max = std::max(c.c0_kl_max, kl);
  }
  c.c0_kl_mean = F > 0 ? kl_sum / static_cast<double>(F) : 0;
  c.c0_top1 = F > 0 ? static_cast<double>(agree0) / static_cast<double>(F) : 0;

  const auto any = [](int64_t) { return true; };
  c.cp_top1.assign(static_cast<size_t>(G - 1), 0.0);
  for (int64_t f = 0; f < F; ++f)
    for (int64_t k = 0; k + 1 < G; ++k) {
      const size_t off = static_cast<size_t>((f * (G - 1) + k) * V);
      const float* a = ref.cp_logits.data() + off;
      const int64_t top = argmax(a, V, any);
      c.cp_top1[static_cast<size_t>(k)] += top == argmax(other.cp_logits.data() + off, V, any);
      double s = 0;
      for (int64_t i = 0; i < V; ++i) s += std::exp(static_cast<double>(a[i]) - a[top]);
      c.ref_cp_top_p += 1.0 / s / static_cast<double>(F * (G - 1));
    }
  for (double& t : c.cp_top1) {
    t = F > 0 ? t / static_cast<double>(F) : 0;
    c.cp_top1_mean += t / static_cast<double>(G - 1);
  }
  return c;
}

}  // namespace chorus::qwen3_tts
