#include "models/codec/vocoder.h"

namespace chorus::codec::detail {

namespace {
constexpr int64_t kDilations[3] = {1, 3, 9};
}

Vocoder Vocoder::load(const Weights& w, const DecoderConfig& d) {
  Vocoder v;
  const Weights p = w.sub("decoder.");
  v.conv_in_ = CausalConv1d::load(p, "0.conv", d.latent_dim, d.decoder_dim, 7);
  int64_t ch = d.decoder_dim;
  for (size_t b = 0; b < d.upsample_rates.size(); ++b) {
    const Weights blk = p.sub(std::to_string(b + 1) + ".block.");
    const int64_t out = ch / 2, rate = d.upsample_rates[b];
    Block block;
    block.act = SnakeBeta::load(blk, "0");
    block.up = CausalConvTranspose1d::load(blk, "1.conv", ch, out, 2 * rate, rate);
    for (int u = 0; u < 3; ++u) {
      const Weights ru = blk.sub(std::to_string(u + 2) + ".");
      ResidualUnit& unit = block.units[u];
      unit.act1 = SnakeBeta::load(ru, "act1");
      unit.conv1 = CausalConv1d::load(ru, "conv1.conv", out, out, 7, kDilations[u]);
      unit.act2 = SnakeBeta::load(ru, "act2");
      unit.conv2 = CausalConv1d::load(ru, "conv2.conv", out, out, 1);
    }
    v.blocks_.push_back(std::move(block));
    ch = out;
  }
  const size_t nb = d.upsample_rates.size();
  v.act_out_ = SnakeBeta::load(p, std::to_string(nb + 1));
  v.conv_out_ = CausalConv1d::load(p, std::to_string(nb + 2) + ".conv", ch, 1, 7);
  return v;
}

VocoderState Vocoder::new_state() const {
  VocoderState s;
  s.conv_in_hist = conv_in_.initial_history();
  for (const Block& b : blocks_) {
    VocoderState::Block bs;
    bs.up = b.up.initial_history();
    for (int u = 0; u < 3; ++u) bs.unit_hist[u] = b.units[u].conv1.initial_history();
    s.blocks.push_back(std::move(bs));
  }
  s.conv_out_hist = conv_out_.initial_history();
  return s;
}

int64_t Vocoder::upsampling() const {
  int64_t r = 1;
  for (const Block& b : blocks_) r *= b.up.stride;
  return r;
}

void Vocoder::forward(VocoderState& s, const float* x, int64_t n, std::vector<float>& out,
                      VocoderScratch& sc, ThreadPool* pool, const StageTap* tap) const {
  VocoderState* states[] = {&s};
  const int64_t counts[] = {n};
  std::vector<float>* outs[] = {&out};
  forward_batch(states, x, Segments::of(counts), outs, sc, pool, tap);
}

void Vocoder::forward_batch(std::span<VocoderState* const> states, const float* x, const Segments& seg,
                            std::span<std::vector<float>* const> outs, VocoderScratch& sc, ThreadPool* pool,
                            const StageTap* tap) const {
  auto emit = [&](const std::string& name, const Buffer& buf, int64_t ch, int64_t steps) {
    if (tap && *tap) (*tap)(name, buf.data(), ch, steps);
  };
  std::vector<Buffer*> hists;
  auto each = [&](auto member) -> std::span<Buffer* const> {
    hists.clear();
    for (VocoderState* s : states) hists.push_back(member(*s));
    return hists;
  };
  std::vector<TransposeHistory*> up_hists;
  Segments at = seg;
  int64_t ch = conv_in_.cout, steps = seg.total;
  sc.a.resize(static_cast<size_t>(ch * steps));
  conv_in_.forward_batch(each([](VocoderState& s) { return &s.conv_in_hist; }), x, at, sc.a.data(), sc.pad, sc.segments, pool);
  emit("decoder0", sc.a, ch, steps);

  for (size_t bi = 0; bi < blocks_.size(); ++bi) {
    const Block& b = blocks_[bi];
    sc.b.resize(sc.a.size());
    b.act.apply(sc.a.data(), steps, sc.b.data(), pool);
    const int64_t out_ch = b.up.cout;
    up_hists.clear();
    for (VocoderState* s : states) up_hists.push_back(&s->blocks[bi].up);
    const Segments up = at.scaled(b.up.stride);
    sc.a.resize(static_cast<size_t>(out_ch * up.total));
    b.up.forward_batch(up_hists, sc.b.data(), at, sc.a.data(), sc.pad, sc.pad2, sc.segments, pool);
    at = up;
    ch = out_ch;
    steps = up.total;
    sc.b.resize(sc.a.size());
    sc.c.resize(sc.a.size());
    for (int u = 0; u < 3; ++u) {  // a = a + conv2(snake(conv1(snake(a))))
      const ResidualUnit& ru = b.units[u];
      ru.act1.apply(sc.a.data(), steps, sc.b.data(), pool);
      ru.conv1.forward_batch(each([bi, u](VocoderState& s) { return &s.blocks[bi].unit_hist[u]; }), sc.b.data(), at,
                             sc.c.data(), sc.pad, sc.segments, pool);
      ru.act2.apply(sc.c.data(), steps, sc.c.data(), pool);
      Buffer no_history;  // k = 1 (empty: no allocation)
      std::vector<Buffer*> none(states.size(), &no_history);
      ru.conv2.forward_batch(none, sc.c.data(), at, sc.b.data(), sc.pad, sc.segments, pool);
      for (size_t i = 0; i < sc.a.size(); ++i) sc.a[i] = sc.b[i] + sc.a[i];
    }
    emit("decoder" + std::to_string(bi + 1), sc.a, ch, steps);
  }
  sc.b.resize(sc.a.size());
  act_out_.apply(sc.a.data(), steps, sc.b.data(), pool);
  emit("decoder" + std::to_string(blocks_.size() + 1), sc.b, ch, steps);
  sc.c.resize(static_cast<size_t>(steps));
  conv_out_.forward_batch(each([](VocoderState& s) { return &s.conv_out_hist; }), sc.b.data(), at, sc.c.data(),
                          sc.pad, sc.segments, pool);
  emit("decoder" + std::to_string(blocks_.size() + 2), sc.c, 1, steps);
  for (size_t i = 0; i < states.size(); ++i) {
    std::vector<float>& out = *outs[i];
    const size_t first = out.size();
    out.resize(first + static_cast<size_t>(at.n[i]));
    for (int64_t t = 0; t < at.n[i]; ++t) {
      const float v = sc.c[at.at[i] + t];  // NaN stays NaN, as torch.clamp
      out[first + t] = v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v);
    }
  }
}

}  // namespace chorus::codec::detail
