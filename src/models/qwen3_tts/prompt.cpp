#include "models/qwen3_tts/prompt.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

namespace chorus::qwen3_tts {

namespace {

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

template <class Map>
std::string key_list(const Map& m) {
  std::string s;
  for (const auto& [k, v] : m) s += (s.empty() ? "" : ", ") + k;
  return s;
}

Error bad(const std::string& msg) { return make_error(ErrorCode::kInvalidArgument, msg); }

// Appends rows to a [rows, hidden] matrix, each the sum of a text-track and a codec-track vector.
class RowWriter {
 public:
  RowWriter(std::vector<float>* out, int64_t hidden) : out_(out), H_(static_cast<size_t>(hidden)) {}
  void add(const float* text, const float* codec) {
    const size_t at = out_->size();
    out_->resize(at + H_, 0.0f);
    float* r = out_->data() + at;
    for (size_t i = 0; i < H_; ++i) r[i] = (text ? text[i] : 0.0f) + (codec ? codec[i] : 0.0f);
  }
  int64_t rows() const { return static_cast<int64_t>(out_->size() / H_); }

 private:
  std::vector<float>* out_;
  size_t H_;
};

// `wrapping` ids surround at least `min_inner` own ids; <|im_end|> sits `im_end_from_back` from the end.
Status check_wrapped(const std::vector<int32_t>& ids, const Config& c, const char* what, size_t wrapping,
                     size_t min_inner, size_t im_end_from_back) {
  if (ids.size() < wrapping + min_inner)
    return bad(std::string(what) + " ids are too short (" + std::to_string(ids.size()) + " ids; the official wrapping alone has " +
               std::to_string(wrapping) + ")");
  if (ids[0] != c.im_start_id || ids[ids.size() - im_end_from_back] != c.im_end_id)
    return bad(std::string(what) + " ids are not wrapped as the official wrapper wraps them (expected <|im_start|> (" +
               std::to_string(c.im_start_id) + ") first and <|im_end|> (" + std::to_string(c.im_end_id) + ") " +
               std::to_string(im_end_from_back) + " from the end)");
  return ok_status();
}

// Checks which inputs the model's variant takes; *icl: in-context voice cloning.
Status check_mode(const Config& c, const PromptInputs& in, bool* icl) {
  const bool has_refs = !in.ref_codes.empty() || !in.ref_text_ids.empty();
  *icl = false;
  switch (c.variant) {
    case Variant::kCustomVoice:
      if (in.speaker.empty()) return bad("a CustomVoice model needs a speaker (one of: " + key_list(c.talker.speaker_ids) + ")");
      if (!in.speaker_embedding.empty() || has_refs)
        return bad("a CustomVoice model takes a preset speaker, not a speaker embedding or reference codes");
      if (!in.instruct_ids.empty() && c.size_label == "0b6")
        return bad("the 0.6B CustomVoice model does not follow instructions (the official API drops them)");
      return ok_status();
    case Variant::kVoiceDesign:
      if (!in.speaker.empty() || !in.speaker_embedding.empty() || has_refs)
        return bad("a VoiceDesign model takes a voice description (instruction), not a speaker or reference");
      return ok_status();
    case Variant::kBase:
      if (!in.speaker.empty()) return bad("a Base model has no preset speakers: give a speaker embedding (x-vector)");
      if (!in.instruct_ids.empty()) return bad("a Base (voice clone) model takes no instruction");
      if (in.speaker_embedding.empty()) return bad("a Base (voice clone) model needs a speaker embedding (x-vector)");
      if (!in.xvector_only) {
        if (in.ref_codes.empty() || in.ref_text_ids.empty())
          return bad("voice cloning with in-context learning needs reference codes and reference text "
                     "(or x-vector-only mode)");
        *icl = true;
      }
      return ok_status();
  }
  return bad("unknown model variant");
}

}  // namespace

Result<Prompt> build_prompt(const Model& m, const PromptInputs& in) {
  const Config& c = m.config();
  const TalkerConfig& tc = c.talker;
  const Talker& talker = m.talker();
  const int64_t H = m.hidden();
  ThreadPool* pool = m.pool();

  bool icl = false;
  CHORUS_TRY(check_mode(c, in, &icl));
  CHORUS_TRY(check_wrapped(in.text_ids, c, "text", 8, 1, 5));
  if (in.text_ids[in.text_ids.size() - 3] != c.im_start_id)
    return bad("text ids must end with <|im_end|> \\n <|im_start|> assistant \\n as the official wrapper writes them");
  if (!in.instruct_ids.empty()) CHORUS_TRY(check_wrapped(in.instruct_ids, c, "instruction", 5, 0, 2));
  if (icl) CHORUS_TRY(check_wrapped(in.ref_text_ids, c, "reference text", 5, 0, 2));

  // Language id (none for "auto"), with the dialect speakers' override.
  const std::string lang = lower(in.language.empty() ? "auto" : in.language);
  std::optional<int64_t> lang_id;
  if (lang != "auto") {
    auto it = tc.language_ids.find(lang);
    if (it == tc.language_ids.end()) return bad("unknown language '" + in.language + "' (auto, " + key_list(tc.language_ids) + ")");
    lang_id = it->second;
  }
  const std::string speaker = lower(in.speaker);
  std::optional<int32_t> speaker_row;
  if (!speaker.empty()) {
    auto it = tc.speaker_ids.find(speaker);
    if (it == tc.speaker_ids.end()) return bad("unknown speaker '" + in.speaker + "' (" + key_list(tc.speaker_ids) + ")");
    speaker_row = static_cast<int32_t>(it->second);
    auto d = tc.speaker_dialect.find(speaker);
    if (d != tc.speaker_dialect.end() && (lang == "chinese" || lang == "auto")) lang_id = tc.language_ids.at(d->second);
  }
  if (!in.speaker_embedding.empty()) {
    if (static_cast<int64_t>(in.speaker_embedding.size()) != H)
      return bad("the speaker embedding has " + std::to_string(in.speaker_embedding.size()) + " values; this model needs " +
                 std::to_string(H));
    for (float v : in.speaker_embedding)
      if (!std::isfinite(v)) return bad("the speaker embedding has a non-finite value");
  }

  // Codec column K = CE(control prefix) ‖ [S] ‖ CE(pad) ‖ CE(bos).
  std::vector<int32_t> prefix;
  if (lang_id) {
    prefix = {static_cast<int32_t>(tc.codec_think_id), static_cast<int32_t>(tc.codec_think_bos_id),
              static_cast<int32_t>(*lang_id), static_cast<int32_t>(tc.codec_think_eos_id)};
  } else {
    prefix = {static_cast<int32_t>(tc.codec_nothink_id), static_cast<int32_t>(tc.codec_think_bos_id),
              static_cast<int32_t>(tc.codec_think_eos_id)};
  }
  const bool has_speaker = speaker_row.has_value() || !in.speaker_embedding.empty();
  const size_t Lc = prefix.size() + (has_speaker ? 1 : 0) + 2;
  std::vector<float> K(Lc * H);
  CHORUS_TRY(talker.embed_codec(prefix, K.data()));
  size_t at = prefix.size();
  if (speaker_row) CHORUS_TRY(talker.embed_codec({&*speaker_row, 1}, K.data() + at * H));
  if (!in.speaker_embedding.empty()) std::copy(in.speaker_embedding.begin(), in.speaker_embedding.end(), K.data() + at * H);
  at += has_speaker ? 1 : 0;
  const int32_t pad_bos[2] = {static_cast<int32_t>(tc.codec_pad_id), static_cast<int32_t>(tc.codec_bos_id)};
  CHORUS_TRY(talker.embed_codec(pad_bos, K.data() + at * H));
  const float* ce_pad = K.data() + at * H;
  const float* ce_bos = K.data() + (at + 1) * H;

  // TextEmb of the three TTS specials: B (tts_bos), E (tts_eos), PAD (tts_pad).
  const int32_t specials[3] = {static_cast<int32_t>(c.tts_bos_id), static_cast<int32_t>(c.tts_eos_id),
                               static_cast<int32_t>(c.tts_pad_id)};
  std::vector<float> BEP(3 * H);
  CHORUS_TRY(talker.embed_text(specials, BEP.data(), pool));
  const float *B = BEP.data(), *E = BEP.data() + H, *PAD = BEP.data() + 2 * H;

  Prompt p;
  p.hidden = H;
  p.icl = icl;
  p.pad.assign(PAD, PAD + H);
  const std::vector<int32_t>& ids = in.text_ids;
  const std::vector<int32_t> target(ids.begin() + 3, ids.end() - 5);
  p.text_tokens = static_cast<int64_t>(target.size());
  RowWriter pre(&p.prefill, H), trail(&p.trailing, H);

  // Common prefix: [instruction] ‖ role ‖ PAD×(Lc−2) + K[0..Lc−3] ‖ B + K[Lc−2].
  auto add_text_rows = [&](std::span<const int32_t> t, RowWriter& w, const float* codec) -> Status {
    std::vector<float> e(t.size() * H);
    CHORUS_TRY(talker.embed_text(t, e.data(), pool));
    for (size_t i = 0; i < t.size(); ++i) w.add(e.data() + i * H, codec);
    return ok_status();
  };
  if (!in.instruct_ids.empty()) CHORUS_TRY(add_text_rows(in.instruct_ids, pre, nullptr));
  CHORUS_TRY(add_text_rows({ids.data(), 3}, pre, nullptr));
  for (size_t i = 0; i + 2 < Lc; ++i) pre.add(PAD, K.data() + i * H);
  pre.add(B, ce_pad);

  const bool streaming = in.layout == TextLayout::kStreaming ||
                         (in.layout == TextLayout::kModelDefault && c.variant == Variant::kBase);
  p.streaming_text = streaming;
  if (icl) {
    // Text column Tx = TextEmb(ref ‖ target) ‖ E; codec column Cx = CE(bos) ‖ F(ref frames).
    std::vector<int32_t> both(in.ref_text_ids.begin() + 3, in.ref_text_ids.end() - 2);
    both.insert(both.end(), target.begin(), target.end());
    const size_t L1 = both.size() + 1, L2 = in.ref_codes.size() + 1;
    std::vector<float> tx(L1 * H), cx(L2 * H);
    CHORUS_TRY(talker.embed_text(both, tx.data(), pool));
    std::copy(E, E + H, tx.data() + (L1 - 1) * H);
    std::copy(ce_bos, ce_bos + H, cx.data());
    for (size_t j = 0; j + 1 < L2; ++j) {
      if (static_cast<int64_t>(in.ref_codes[j].size()) != m.groups())
        return bad("reference frame " + std::to_string(j) + " has " + std::to_string(in.ref_codes[j].size()) +
                   " codes; this model needs " + std::to_string(m.groups()));
      CHORUS_TRY(m.frame_embedding(in.ref_codes[j], cx.data() + (j + 1) * H));
    }
    if (!streaming) {
      for (size_t i = 0; i < L1; ++i) pre.add(tx.data() + i * H, ce_pad);
      for (size_t j = 0; j < L2; ++j) pre.add(cx.data() + j * H, PAD);
      trail.add(PAD, nullptr);
    } else if (L1 > L2) {
      for (size_t j = 0; j < L2; ++j) pre.add(tx.data() + j * H, cx.data() + j * H);
      for (size_t i = L2; i < L1; ++i) trail.add(tx.data() + i * H, nullptr);
    } else {
      for (size_t j = 0; j < L2; ++j) pre.add(j < L1 ? tx.data() + j * H : PAD, cx.data() + j * H);
      trail.add(PAD, nullptr);
    }
  } else if (!streaming) {
    CHORUS_TRY(add_text_rows(target, pre, ce_pad));
    pre.add(E, ce_pad);
    pre.add(PAD, ce_bos);
    trail.add(PAD, nullptr);
  } else {
    CHORUS_TRY(add_text_rows({target.data(), 1}, pre, ce_bos));
    CHORUS_TRY(add_text_rows({target.data() + 1, target.size() - 1}, trail, nullptr));
    trail.add(E, nullptr);
  }
  p.prefill_rows = pre.rows();
  p.trailing_rows = trail.rows();
  return p;
}

}  // namespace chorus::qwen3_tts
