#include "models/breeze_tts/prompt.h"

#include <algorithm>

namespace chorus::breeze_tts {

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kPlain: return "tts_plain";
    case Layout::kClone: return "ref_clone_tata";
    case Layout::kDesign: return "tts_instruction";
    case Layout::kDirection: return "ref_edit_tata";
  }
  return "?";
}

namespace {

Status check_ids(const Config& c, const char* what, std::span<const int32_t> ids, bool required) {
  if (required && ids.empty()) return make_error(ErrorCode::kInvalidArgument, std::string("the ") + what + " is empty");
  for (const int32_t id : ids) {
    if (id < 0 || id >= c.text_vocab)
      return make_error(ErrorCode::kInvalidArgument, std::string(what) + " id " + std::to_string(id) +
                                                         " is outside the text vocabulary [0, " +
                                                         std::to_string(c.text_vocab) + ")");
    // The placeholders mark audio rows; inside text they would shift every row after them.
    if (id == c.ids.audio || id == c.ids.audio_eos)
      return make_error(ErrorCode::kInvalidArgument, std::string(what) + " contains the audio placeholder id " +
                                                         std::to_string(id));
  }
  return ok_status();
}

Status check_codes(const Config& c, const RefCodes& ref) {
  if (ref.frames <= 0) return make_error(ErrorCode::kInvalidArgument, "the reference audio has no frames");
  if (static_cast<int64_t>(ref.codes.size()) != ref.frames * c.num_codebooks)
    return make_error(ErrorCode::kInvalidArgument, "reference codes: " + std::to_string(ref.codes.size()) +
                                                       " values for " + std::to_string(ref.frames) + " frames of " +
                                                       std::to_string(c.num_codebooks) + " codebooks");
  for (size_t i = 0; i < ref.codes.size(); ++i)
    if (ref.codes[i] < 0 || ref.codes[i] >= c.codec_codebook_size)
      return make_error(ErrorCode::kInvalidArgument,
                        "reference code " + std::to_string(ref.codes[i]) + " (frame " +
                            std::to_string(i / static_cast<size_t>(c.num_codebooks)) + ", codebook " +
                            std::to_string(i % static_cast<size_t>(c.num_codebooks)) + ") is outside [0, " +
                            std::to_string(c.codec_codebook_size) + ")");
  return ok_status();
}

void add_text(PromptLayout& l, std::vector<int32_t> seg) {
  l.input_ids.insert(l.input_ids.end(), seg.begin(), seg.end());
  l.row_kind.insert(l.row_kind.end(), seg.size(), RowKind::kText);
  l.text_segments.push_back(std::move(seg));
}

}  // namespace

Result<PromptLayout> build_layout(const Config& c, Layout layout, const PromptParts& p) {
  const bool with_ref = layout == Layout::kClone || layout == Layout::kDirection;
  const bool with_instruct = layout == Layout::kDesign || layout == Layout::kDirection;
  if (p.speaker < 0 || p.speaker >= static_cast<int>(c.ids.speakers.size()))
    return make_error(ErrorCode::kInvalidArgument, "speaker tag [S" + std::to_string(p.speaker) + "] does not exist");
  CHORUS_TRY(check_ids(c, "text", p.text, true));
  if (with_instruct) CHORUS_TRY(check_ids(c, "instruction", p.instruct, true));
  if (with_ref) {
    CHORUS_TRY(check_ids(c, "reference text", p.ref_text, true));
    CHORUS_TRY(check_codes(c, p.ref));
  }
  const auto bos = static_cast<int32_t>(c.ids.bos);
  const auto tag = static_cast<int32_t>(c.ids.speakers[static_cast<size_t>(p.speaker)]);
  PromptLayout l;
  if (with_ref) {
    std::vector<int32_t> seg = {bos, tag};
    seg.insert(seg.end(), p.ref_text.begin(), p.ref_text.end());
    add_text(l, std::move(seg));
    l.input_ids.insert(l.input_ids.end(), static_cast<size_t>(p.ref.frames), static_cast<int32_t>(c.ids.audio));
    l.row_kind.insert(l.row_kind.end(), static_cast<size_t>(p.ref.frames), RowKind::kAudio);
    l.input_ids.push_back(static_cast<int32_t>(c.ids.audio_eos));
    l.row_kind.push_back(RowKind::kAudioEos);
  }
  std::vector<int32_t> seg = {bos, tag};
  if (with_instruct) {
    seg.push_back(static_cast<int32_t>(c.ids.ins_bos));
    seg.insert(seg.end(), p.instruct.begin(), p.instruct.end());
    seg.push_back(static_cast<int32_t>(c.ids.ins_eos));
  }
  seg.insert(seg.end(), p.text.begin(), p.text.end());
  add_text(l, std::move(seg));
  if (l.rows() > c.backbone.dims.max_positions)
    return make_error(ErrorCode::kOutOfRange, "the prompt has " + std::to_string(l.rows()) + " rows, more than the backbone's " +
                                                  std::to_string(c.backbone.dims.max_positions) + " positions");
  return l;
}

void frame_row(const Config& c, const Tensor& table, const int32_t* codes, float* out, Activations act) {
  const int64_t H = c.audio_embed;
  std::fill(out, out + H, 0.0f);
  std::vector<float> row(static_cast<size_t>(H));
  const size_t row_bytes = static_cast<size_t>(H) * dtype_size(table.dtype());
  const auto* base = static_cast<const uint8_t*>(table.data());
  for (int64_t k = 0; k < c.num_codebooks; ++k) {
    const int64_t r = k * c.audio_vocab + codes[k];
    convert_to_f32(table.dtype(), base + static_cast<size_t>(r) * row_bytes, row.data(), static_cast<size_t>(H));
    for (int64_t i = 0; i < H; ++i) out[i] += row[static_cast<size_t>(i)];
  }
  if (act == Activations::kBF16)
    for (int64_t i = 0; i < H; ++i) out[i] = round_to_bf16(out[i]);
}

Result<Tensor> assemble_prompt_rows(const Config& c, const PromptLayout& layout, const RefCodes& ref,
                                    const Tensor& audio_table, Activations act,
                                    const std::function<Result<Tensor>(size_t)>& text_segment) {
  const int64_t H = c.hidden, P = layout.rows();
  if (audio_table.shape() != Shape{c.num_codebooks * c.audio_vocab, c.audio_embed})
    return make_error(ErrorCode::kShapeMismatch, "prompt: the audio table has shape " + shape_to_string(audio_table.shape()));
  Tensor rows = Tensor::zeros(DType::kF32, {P, H});
  float* out = rows.f32();
  size_t seg = 0;
  int64_t frame = 0;
  const std::vector<int32_t> eos_codes(static_cast<size_t>(c.num_codebooks), static_cast<int32_t>(c.ids.codebook_eos));
  for (int64_t r = 0; r < P;) {
    switch (layout.row_kind[static_cast<size_t>(r)]) {
      case RowKind::kText: {
        if (seg >= layout.text_segments.size())
          return make_error(ErrorCode::kInternal, "prompt: more text rows than text segments");
        CHORUS_ASSIGN(const Tensor t, text_segment(seg++));
        const int64_t L = t.dim(0);
        if (r + L > P) return make_error(ErrorCode::kInternal, "prompt: a text segment overruns the layout");
        std::copy(t.f32(), t.f32() + L * H, out + r * H);
        r += L;
        break;
      }
      case RowKind::kAudio:
        if (frame >= ref.frames) return make_error(ErrorCode::kInternal, "prompt: more audio rows than reference frames");
        frame_row(c, audio_table, ref.codes.data() + frame++ * c.num_codebooks, out + r * H, act);
        ++r;
        break;
      case RowKind::kAudioEos:
        frame_row(c, audio_table, eos_codes.data(), out + r * H, act);
        ++r;
        break;
    }
  }
  return rows;
}

Result<Tensor> prompt_rows(const Config& c, const PromptLayout& layout, const RefCodes& ref, const TextEncoder& encoder,
                           const Tensor& audio_table, ThreadPool* pool, Activations act) {
  return assemble_prompt_rows(c, layout, ref, audio_table, act, [&](size_t i) {
    return encoder.encode_projected(layout.text_segments[i], pool);
  });
}

}  // namespace chorus::breeze_tts
