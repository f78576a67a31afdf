#include "models/breeze_tts/generation.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "models/breeze_tts/weights.h"

namespace chorus::breeze_tts {

GenerationParams default_generation_params(const Config& c) {
  const GenerationDefaults& g = c.generation;
  GenerationParams p;
  p.backbone.greedy = !g.do_sample;
  p.backbone.temperature = static_cast<float>(g.temperature);
  p.backbone.top_k = static_cast<int32_t>(g.top_k);
  p.backbone.top_p = static_cast<float>(g.top_p);
  p.backbone.repetition_penalty = static_cast<float>(g.repetition_penalty);
  p.depth.greedy = !g.depth_do_sample;
  p.depth.temperature = static_cast<float>(g.depth_temperature);
  p.depth.top_k = static_cast<int32_t>(g.depth_top_k);
  p.depth.top_p = static_cast<float>(g.depth_top_p);
  return p;
}

Result<std::vector<Layout>> branch_layouts(Layout layout, Guidance guidance) {
  switch (guidance) {
    case Guidance::kNone: return std::vector<Layout>{layout};
    case Guidance::kCfg:
      switch (layout) {
        case Layout::kDesign: return std::vector<Layout>{layout, Layout::kPlain};
        case Layout::kDirection: return std::vector<Layout>{layout, Layout::kClone};
        case Layout::kClone:
        case Layout::kPlain: break;
      }
      return make_error(ErrorCode::kInvalidArgument, "cfg_scale needs an instruction to guide by (design or direction)");
    case Guidance::kDual:
      if (layout != Layout::kDirection)
        return make_error(ErrorCode::kInvalidArgument, "dual CFG needs both a reference and an instruction");
      return std::vector<Layout>{Layout::kPlain, Layout::kClone, Layout::kDesign};
  }
  return make_error(ErrorCode::kInvalidArgument, "unknown guidance mode");
}

Result<BreezeModel> BreezeModel::load(const ModelFiles& files, cpu::WeightFormat weights, ThreadPool* pool) {
  CHORUS_ASSIGN(TextEncoder enc, TextEncoder::create(files.config, files.main));
  CHORUS_ASSIGN(TextEncoder enc16, TextEncoder::create(files.config, files.main, Activations::kBF16));
  CHORUS_ASSIGN(Backbone bb, Backbone::load(files.config, files.main, weights, pool));
  CHORUS_ASSIGN(DepthDecoder dd, DepthDecoder::load(files.config, files.main, weights, pool));
  return BreezeModel{files.config,  std::move(enc), std::move(enc16), std::move(bb),
                     std::move(dd), files.main.tensor(kAudioTable)};
}

Result<BreezeGeneration> BreezeGeneration::start(const BreezeModel& m, const PromptParts& parts,
                                                 const GenerationParams& p) {
  CHORUS_TRY(sampling::validate(p.backbone, "backbone sampler"));
  CHORUS_TRY(sampling::validate(p.depth, "depth sampler"));
  CHORUS_ASSIGN(const std::vector<Layout> layouts, branch_layouts(p.layout, p.guidance));
  BreezeGeneration g;
  g.m_ = &m;
  g.p_ = p;
  const auto t0 = std::chrono::steady_clock::now();
  const TextEncoder& encoder = p.act == Activations::kBF16 ? m.encoder_bf16 : m.encoder;
  for (const Layout l : layouts) {
    CHORUS_ASSIGN(const PromptLayout pl, build_layout(m.config, l, parts));
    CHORUS_ASSIGN(const Tensor rows,
                  breeze_tts::prompt_rows(m.config, pl, parts.ref, encoder, m.audio_table, nullptr, p.act));
    g.x_.insert(g.x_.end(), rows.f32(), rows.f32() + rows.numel());
    g.rows_.push_back(rows.dim(0));
    g.caches_.push_back(m.backbone.make_cache());
    g.depth_caches_.push_back(m.depth.make_cache());
  }
  g.prompt_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  g.prompt_rows_ = g.rows_[0];
  const int64_t longest = *std::max_element(g.rows_.begin(), g.rows_.end());
  const GenerationDefaults& d = m.config.generation;
  int64_t limit = p.max_frames > 0 ? p.max_frames : d.max_new_tokens;
  // Every frame but the last is fed back as one more backbone position.
  limit = std::min(limit, std::max<int64_t>(0, d.max_seq_len - longest + 1));
  g.max_frames_ = limit;
  g.finished_ = limit == 0;
  return g;
}

void BreezeGeneration::combine(std::span<const float> b, int64_t n, float* out) const {
  switch (p_.guidance) {
    case Guidance::kNone: std::copy_n(b.data(), n, out); return;
    case Guidance::kCfg: {
      const float s = p_.cfg_scale;
      for (int64_t i = 0; i < n; ++i) out[i] = b[n + i] + s * (b[i] - b[n + i]);  // cond, uncond
      return;
    }
    case Guidance::kDual: {
      const float sr = p_.ref_scale, si = p_.ins_scale;
      for (int64_t i = 0; i < n; ++i)
        out[i] = b[i] + sr * (b[n + i] - b[i]) + si * (b[2 * n + i] - b[i]);  // uncond, ref, ins
      return;
    }
  }
}

Result<bool> BreezeGeneration::step(std::span<int32_t> frame, ThreadPool* pool, GenerationTimes* times) {
  using Clock = std::chrono::steady_clock;
  GenerationTimes local;
  GenerationTimes& t = times ? *times : local;
  auto lap = [last = Clock::now()](double& acc) mutable {
    const auto now = Clock::now();
    acc += std::chrono::duration<double>(now - last).count();
    last = now;
  };
  if (finished_) return false;
  const Config& c = m_->config;
  const int64_t K = c.num_codebooks;
  if (static_cast<int64_t>(frame.size()) != K)
    return make_error(ErrorCode::kInvalidArgument, "frame buffer must hold num_codebooks codes");
  const size_t B = caches_.size();
  std::vector<nn::SequenceRows> seqs;
  for (size_t i = 0; i < B; ++i) seqs.push_back({&caches_[i], caches_[i].length(), rows_[i]});
  int64_t total = 0;
  for (const int64_t r : rows_) total += r;
  const int64_t H = m_->backbone.hidden(), C = m_->backbone.classes();
  std::vector<float> hidden(static_cast<size_t>(total * H)), logits(B * static_cast<size_t>(C)),
      guided(static_cast<size_t>(C));
  const bool prefill = frames_ == 0;
  CHORUS_TRY(m_->backbone.forward(seqs, x_.data(), hidden.data(), logits.data(), pool, p_.act));
  combine(logits, C, guided.data());
  if (prefill) t.prefill_s += prompt_s_;
  lap(prefill ? t.prefill_s : t.backbone_s);

  // Codebook 0: penalty on earlier generated ids, codec codes or EOS only, EOS masked before min_frames.
  const int32_t eos = static_cast<int32_t>(c.backbone_eos());
  sampling::LogitRules rules;
  rules.penalized = history_;
  rules.allowed_below = c.codec_codebook_size;
  rules.also_allowed = {&eos, 1};
  if (frames_ < p_.min_frames) rules.blocked = {&eos, 1};
  const auto addr = [&](int64_t cb) {
    return sampling::DrawAddress{p_.seed, p_.rng_stream, static_cast<uint32_t>(frames_), static_cast<uint32_t>(cb), 0};
  };
  CHORUS_ASSIGN(const int32_t c0, sampling::sample(guided, rules, p_.backbone, addr(0)));
  lap(t.sampling_s);
  if (c0 == eos) {
    finished_ = eos_ = true;
    return false;
  }
  history_.push_back(c0);

  // Codebooks 1..K−1: each branch walks from its own last hidden state, guided at every step.
  std::vector<DepthBranch> br;
  int64_t end = 0;
  for (size_t i = 0; i < B; ++i) {
    end += rows_[i];
    br.push_back({&depth_caches_[i], hidden.data() + (end - 1) * H});
  }
  sampling::SamplerParams depth = p_.depth;
  depth.repetition_penalty = 1.0f;
  const int64_t V = m_->depth.vocab();
  std::vector<float> dguided(static_cast<size_t>(V));
  const DepthPicker pick = [&](int64_t codebook, std::span<const float> l) -> Result<int32_t> {
    combine(l, V, dguided.data());
    sampling::LogitRules r;
    r.allowed_below = c.codec_codebook_size;
    return sampling::sample(dguided, r, depth, addr(codebook));
  };
  frame[0] = c0;
  CHORUS_TRY(m_->depth.walk(br, frame.data(), pick, pool, nullptr, p_.act));
  lap(t.depth_s);

  ++frames_;
  if (frames_ >= max_frames_) {
    finished_ = true;
    return true;
  }
  // The frame's row (sum of its codebook rows) is every branch's next input.
  x_.assign(B * static_cast<size_t>(H), 0.0f);
  for (size_t i = 0; i < B; ++i) {
    frame_row(c, m_->audio_table, frame.data(), x_.data() + i * H, p_.act);
    rows_[i] = 1;
  }
  return true;
}

size_t BreezeGeneration::state_bytes() const {
  size_t n = x_.size() * sizeof(float) + history_.size() * sizeof(int32_t);
  for (const auto& k : caches_) n += k.bytes();
  for (const auto& k : depth_caches_) n += k.bytes();
  return n;
}

}  // namespace chorus::breeze_tts
