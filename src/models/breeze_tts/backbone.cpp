#include "models/breeze_tts/backbone.h"

#include <vector>

#include "models/breeze_tts/weights.h"
#include "io/weight_table.h"
#include "runtime/cpu/kernels.h"

namespace chorus::breeze_tts {

Result<Backbone> Backbone::load(const Config& c, const io::Checkpoint& ckpt, cpu::WeightFormat format, ThreadPool* pool) {
  WeightTable table;
  declare_backbone_weights(c, table);
  CHORUS_TRY(table.check(ckpt, ckpt.label()));
  Backbone b;
  CHORUS_ASSIGN(b.stack_, nn::Qwen3Stack::load(Weights(ckpt, kBackbonePrefix), c.backbone.dims, true, format, pool));
  b.lm_head_ = ckpt.tensor(kLmHead);
  return b;
}

Status Backbone::forward(std::span<const nn::SequenceRows> seqs, const float* x, float* hidden_out, float* logits,
                         ThreadPool* pool, Activations act) const {
  int64_t rows = 0;
  for (const auto& s : seqs) rows += s.rows;
  const int64_t H = hidden();
  std::vector<float> local;
  float* h = hidden_out;
  if (!h) {
    local.resize(static_cast<size_t>(rows * H));
    h = local.data();
  }
  CHORUS_TRY(stack_.forward(seqs, x, h, pool, act == Activations::kBF16 ? nn::Rounding::kBF16 : nn::Rounding::kNone));
  // Only each sequence's last row needs logits.
  std::vector<float> last(seqs.size() * static_cast<size_t>(H));
  int64_t end = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    end += seqs[s].rows;
    std::copy(h + (end - 1) * H, h + end * H, last.data() + s * static_cast<size_t>(H));
  }
  cpu::linear(last.data(), static_cast<int64_t>(seqs.size()), cpu::MatrixRef::of(lm_head_), nullptr, logits, pool);
  return ok_status();
}

}  // namespace chorus::breeze_tts
