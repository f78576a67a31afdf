// Breeze TTS 2 prompts (breeze_tts2.md §5.2): the row layout of each upstream template and the
// backbone's prefill rows built from it.
//
//   plain      (tts_plain)       T:<bos>[Sn]{text}
//   clone      (ref_clone_tata)  T:<bos>[Sn]{ref_text}  A:ref frames  A:audio-EOS  T:<bos>[Sn]{text}
//   design     (tts_instruction) T:<bos>[Sn]<ins_bos>{instruct}<ins_eos>{text}
//   direction  (ref_edit_tata)   clone's first part, then T:<bos>[Sn]<ins_bos>{instruct}<ins_eos>{text}
//
// Each T segment goes through the text encoder on its own (positions from 0) and is projected; each
// reference frame becomes the sum of its 16 codebook rows of the shared audio table; the audio-EOS
// row is the same sum over codebook_eos_token_id in every codebook. The ids are the checkpoint's
// (config.json), so tiny checkpoints with remapped vocabularies work unchanged.
#pragma once

#include <functional>

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "models/breeze_tts/config.h"
#include "models/breeze_tts/text_encoder.h"

namespace chorus::breeze_tts {

enum class Layout { kPlain, kClone, kDesign, kDirection };
const char* layout_name(Layout l);  // upstream template names: tts_plain, ref_clone_tata, ...

// Reference audio as codec codes, row-major [frames, num_codebooks].
struct RefCodes {
  int64_t frames = 0;
  std::vector<int32_t> codes;
};

// The raw ids of each part (no <bos>, speaker tag or instruction markers: the layout adds those).
struct PromptParts {
  std::vector<int32_t> text;
  std::vector<int32_t> instruct;  // design, direction
  std::vector<int32_t> ref_text;  // clone, direction
  RefCodes ref;                   // clone, direction
  int speaker = 0;                // [S0] .. [S9]
};

enum class RowKind : uint8_t { kText = 0, kAudio = 1, kAudioEos = 2 };

struct PromptLayout {
  std::vector<int32_t> input_ids;  // per row: the text id, <|AUDIO|> per frame, <|audio_eos|>
  std::vector<RowKind> row_kind;
  std::vector<std::vector<int32_t>> text_segments;  // in order, each starting with <bos>
  int64_t rows() const { return static_cast<int64_t>(input_ids.size()); }
};

// Checks the parts the layout needs (non-empty text, instruction and reference where used; ids in
// the text vocabulary and not the audio placeholders; codes below the codec codebook size; a known
// speaker) and lays the rows out.
Result<PromptLayout> build_layout(const Config& c, Layout layout, const PromptParts& parts);

// out[hidden] = Σ_k table[k·audio_vocab + codes[k]] over the num_codebooks codebooks, summed in f32
// (bf16 activations: the sum rounded once, as a bf16 reduction stores it). Codes are checked by the
// caller. `table` is the shared audio table [num_codebooks·audio_vocab, hidden].
void frame_row(const Config& c, const Tensor& table, const int32_t* codes, float* out,
               Activations act = Activations::kF32);

// Lays a prompt's rows out as `layout` says: text rows from `text_segment(i)` (segment i of
// layout.text_segments, encoded and projected to [len, hidden]), reference-frame and audio-EOS rows
// through frame_row. Shared by the CPU prompt_rows and the GPU encoder's prompt_rows_cuda.
Result<Tensor> assemble_prompt_rows(const Config& c, const PromptLayout& layout, const RefCodes& ref,
                                    const Tensor& audio_table, Activations act,
                                    const std::function<Result<Tensor>(size_t)>& text_segment);

// The backbone's prefill input [rows, hidden] for a layout built by build_layout from `parts`.
Result<Tensor> prompt_rows(const Config& c, const PromptLayout& layout, const RefCodes& ref, const TextEncoder& encoder,
                           const Tensor& audio_table, ThreadPool* pool = nullptr,
                           Activations act = Activations::kF32);

}  // namespace chorus::breeze_tts
