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
  g.fed_.assign(layouts.size(), 0);
  g.last_hidden_.assign(layouts.size() * static_cast<size_t>(m.backbone.hidden()), 0.0f);
  g.last_logits_.assign(layouts.size() * static_cast<size_t>(m.backbone.classes()), 0.0f);
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

int64_t BreezeGeneration::pending_offset(size_t b) const {
  int64_t rows = 0;
  for (size_t i = 0; i < b; ++i) rows += rows_[i];
  return rows;
}

int64_t BreezeGeneration::prefilled_rows() const {
  if (frames_ > 0) return prompt_rows_;
  return fed_.empty() ? 0 : fed_[0];
}

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

struct GenerationStepper {
  // A branch's rows going into one backbone pass.
  struct Piece {
    BreezeGeneration* g;
    size_t branch;
    int64_t rows;
  };

  // One backbone pass over `pieces`; a branch whose last pending row went in keeps that row's hidden
  // state and logits. Returns the generations whose every branch is now in, in order.
  static Result<std::vector<BreezeGeneration*>> feed(std::span<const Piece> pieces, ThreadPool* pool) {
    std::vector<BreezeGeneration*> complete;
    if (pieces.empty()) return complete;
    const BreezeModel& m = pieces[0].g->model();
    const int64_t H = m.backbone.hidden(), C = m.backbone.classes();
    std::vector<nn::SequenceRows> seqs;
    std::vector<float> x;
    int64_t total = 0;
    for (const Piece& p : pieces) {
      BreezeGeneration& g = *p.g;
      nn::KvCache& cache = g.caches_[p.branch];
      seqs.push_back({&cache, cache.length(), p.rows});
      const auto from = g.x_.begin() + (g.pending_offset(p.branch) + g.fed_[p.branch]) * H;
      x.insert(x.end(), from, from + p.rows * H);
      total += p.rows;
    }
    std::vector<float> hidden(static_cast<size_t>(total * H)), logits(pieces.size() * static_cast<size_t>(C));
    CHORUS_TRY(m.backbone.forward(seqs, x.data(), hidden.data(), logits.data(), pool, pieces[0].g->p_.act));
    int64_t end = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      BreezeGeneration& g = *p.g;
      end += p.rows;
      g.fed_[p.branch] += p.rows;
      if (g.fed_[p.branch] < g.rows_[p.branch]) continue;
      std::copy_n(hidden.data() + (end - 1) * H, H, g.last_hidden_.data() + p.branch * H);
      std::copy_n(logits.data() + i * C, C, g.last_logits_.data() + p.branch * C);
      bool all = true;
      for (size_t b = 0; b < g.branches(); ++b) all = all && g.fed_[b] == g.rows_[b];
      if (all) complete.push_back(&g);
    }
    return complete;
  }

  // Codebook 0 of g's next frame from its branches' logits; false at EOS (g has ended).
  static Result<bool> take_c0(BreezeGeneration& g, int32_t& c0) {
    const Config& c = g.m_->config;
    const int64_t C = g.m_->backbone.classes();
    std::vector<float> guided(static_cast<size_t>(C));
    g.combine(g.last_logits_, C, guided.data());
    // Penalty on earlier generated ids, codec codes or EOS only, EOS masked before min_frames.
    const int32_t eos = static_cast<int32_t>(c.backbone_eos());
    sampling::LogitRules rules;
    rules.penalized = g.history_;
    rules.allowed_below = c.codec_codebook_size;
    rules.also_allowed = {&eos, 1};
    if (g.frames_ < g.p_.min_frames) rules.blocked = {&eos, 1};
    const sampling::DrawAddress at{g.p_.seed, g.p_.rng_stream, static_cast<uint32_t>(g.frames_), 0, 0};
    CHORUS_ASSIGN(c0, sampling::sample(guided, rules, g.p_.backbone, at));
    if (c0 == eos) {
      g.finished_ = g.eos_ = true;
      return false;
    }
    g.history_.push_back(c0);
    return true;
  }

  // Codebooks 1..K−1 of each generation's frame (codes[i][0] = its c0), one walk for all: each
  // branch starts from its own last hidden state, each frame is guided and sampled by its own rules.
  static Status walk(std::span<BreezeGeneration* const> gs, std::vector<std::vector<int32_t>*>& codes, ThreadPool* pool) {
    if (gs.empty()) return ok_status();
    const BreezeModel& m = gs[0]->model();
    const Config& c = m.config;
    const int64_t H = m.backbone.hidden(), V = m.depth.vocab();
    std::vector<std::vector<DepthBranch>> branches(gs.size());
    std::vector<DepthFrame> frames(gs.size());
    std::vector<float> guided(static_cast<size_t>(V));
    for (size_t i = 0; i < gs.size(); ++i) {
      BreezeGeneration& g = *gs[i];
      for (size_t b = 0; b < g.branches(); ++b) branches[i].push_back({&g.depth_caches_[b], g.last_hidden_.data() + b * H});
      frames[i].branches = branches[i];
      frames[i].codes = codes[i]->data();
      frames[i].pick = [&g, &guided, &c, V](int64_t codebook, std::span<const float> l) -> Result<int32_t> {
        g.combine(l, V, guided.data());
        sampling::SamplerParams depth = g.p_.depth;
        depth.repetition_penalty = 1.0f;
        sampling::LogitRules r;
        r.allowed_below = c.codec_codebook_size;
        const sampling::DrawAddress at{g.p_.seed, g.p_.rng_stream, static_cast<uint32_t>(g.frames_),
                                       static_cast<uint32_t>(codebook), 0};
        return sampling::sample(guided, r, depth, at);
      };
    }
    return m.depth.walk(frames, pool, gs[0]->p_.act);
  }

  // The frame just made is every branch's next input (the sum of its codebook rows).
  static void next_input(BreezeGeneration& g, const std::vector<int32_t>& frame) {
    const int64_t H = g.m_->backbone.hidden();
    g.x_.assign(g.branches() * static_cast<size_t>(H), 0.0f);
    for (size_t b = 0; b < g.branches(); ++b) {
      frame_row(g.m_->config, g.m_->audio_table, frame.data(), g.x_.data() + b * H, g.p_.act);
      g.rows_[b] = 1;
      g.fed_[b] = 0;
    }
  }

  // One step of generations that share an activation mode; outs[i] belongs to gs[i].
  static Status step(std::span<BreezeGeneration* const> gs, std::span<StepFrame* const> outs, ThreadPool* pool,
                     GenerationTimes& t, const StepOptions& options) {
    bool speaking = false;
    for (BreezeGeneration* g : gs) speaking = speaking || (!g->finished_ && g->frames_ > 0);
    std::vector<Piece> prompt, frame_rows;
    int64_t budget = speaking ? options.prefill_rows : std::numeric_limits<int64_t>::max();
    for (BreezeGeneration* g : gs) {
      if (g->finished_) continue;
      if (g->frames_ > 0) {
        for (size_t b = 0; b < g->branches(); ++b) frame_rows.push_back({g, b, g->rows_[b]});
        continue;
      }
      for (size_t b = 0; b < g->branches() && budget > 0; ++b) {
        const int64_t n = std::min(g->rows_[b] - g->fed_[b], budget);
        if (n <= 0) continue;
        if (g->prefilled_rows() == 0 && b == 0) t.prefill_s += g->prompt_s_;
        prompt.push_back({g, b, n});
        budget -= n;
      }
    }
    auto t0 = Clock::now();
    CHORUS_ASSIGN(std::vector<BreezeGeneration*> ready, feed(prompt, pool));
    t.prefill_s += seconds_since(t0);
    t0 = Clock::now();
    CHORUS_ASSIGN(const std::vector<BreezeGeneration*> stepped, feed(frame_rows, pool));
    t.backbone_s += seconds_since(t0);
    ready.insert(ready.end(), stepped.begin(), stepped.end());

    t0 = Clock::now();
    std::vector<BreezeGeneration*> walking;
    std::vector<StepFrame*> walking_out;
    std::vector<std::vector<int32_t>*> codes;
    for (BreezeGeneration* g : ready) {
      int32_t c0 = 0;
      CHORUS_ASSIGN(const bool more, take_c0(*g, c0));
      if (!more) continue;
      StepFrame& o = *outs[static_cast<size_t>(std::find(gs.begin(), gs.end(), g) - gs.begin())];
      o.codes.assign(static_cast<size_t>(g->m_->config.num_codebooks), 0);
      o.codes[0] = c0;
      walking.push_back(g);
      walking_out.push_back(&o);
      codes.push_back(&o.codes);
    }
    t.sampling_s += seconds_since(t0);
    t0 = Clock::now();
    CHORUS_TRY(walk(walking, codes, pool));
    t.depth_s += seconds_since(t0);

    for (size_t i = 0; i < walking.size(); ++i) {
      BreezeGeneration& g = *walking[i];
      walking_out[i]->has_frame = true;
      ++g.frames_;
      if (g.frames_ >= g.max_frames_) g.finished_ = true;
      else next_input(g, *codes[i]);
    }
    for (size_t i = 0; i < gs.size(); ++i)
      if (!outs[i]->has_frame) outs[i]->codes.clear();
    return ok_status();
  }
};

Status step_generations(std::span<BreezeGeneration* const> gens, std::span<StepFrame> out, ThreadPool* pool,
                        GenerationTimes* times, const StepOptions& options) {
  if (out.size() != gens.size()) return make_error(ErrorCode::kInternal, "step: one output per generation");
  if (options.prefill_rows < 1) return make_error(ErrorCode::kInvalidArgument, "step: prefill rows per step must be >= 1");
  const BreezeModel* model = nullptr;
  for (BreezeGeneration* g : gens) {
    if (!g) return make_error(ErrorCode::kInternal, "step: null generation");
    if (model && &g->model() != model) return make_error(ErrorCode::kInvalidArgument, "step: generations of different models");
    model = &g->model();
  }
  std::vector<BreezeGeneration*> sorted(gens.begin(), gens.end());
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return make_error(ErrorCode::kInvalidArgument, "step: a generation appears twice in one batch");
  for (StepFrame& o : out) {
    o.has_frame = false;
    o.codes.clear();
  }
  GenerationTimes local;
  GenerationTimes& t = times ? *times : local;
  // The stacks round per pass, so generations of each activation mode step apart.
  for (const Activations act : {Activations::kF32, Activations::kBF16}) {
    std::vector<BreezeGeneration*> gs;
    std::vector<StepFrame*> outs;
    for (size_t i = 0; i < gens.size(); ++i)
      if (gens[i]->activations() == act) {
        gs.push_back(gens[i]);
        outs.push_back(&out[i]);
      }
    if (!gs.empty()) CHORUS_TRY(GenerationStepper::step(gs, outs, pool, t, options));
  }
  return ok_status();
}

Result<bool> BreezeGeneration::step(std::span<int32_t> frame, ThreadPool* pool, GenerationTimes* times) {
  if (finished_) return false;
  if (static_cast<int64_t>(frame.size()) != m_->config.num_codebooks)
    return make_error(ErrorCode::kInvalidArgument, "frame buffer must hold num_codebooks codes");
  BreezeGeneration* self = this;
  StepFrame out;
  CHORUS_TRY(step_generations({&self, 1}, {&out, 1}, pool, times));
  if (!out.has_frame) return false;
  std::copy(out.codes.begin(), out.codes.end(), frame.begin());
  return true;
}

size_t BreezeGeneration::state_bytes() const {
  size_t n = (x_.size() + last_hidden_.size() + last_logits_.size()) * sizeof(float) + history_.size() * sizeof(int32_t);
  for (const auto& k : caches_) n += k.bytes();
  for (const auto& k : depth_caches_) n += k.bytes();
  return n;
}

}  // namespace chorus::breeze_tts
