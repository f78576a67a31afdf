#include "models/qwen3_tts/model.h"

#include <algorithm>

namespace chorus::qwen3_tts {

Result<std::shared_ptr<const Model>> Model::load(const std::string& dir, ThreadPool* pool, cpu::WeightFormat weights) {
  CHORUS_ASSIGN(ModelFiles files, open_model_files(dir));
  return from_files(std::move(files), pool, weights);
}

Result<std::shared_ptr<const Model>> Model::from_files(ModelFiles files, ThreadPool* pool, cpu::WeightFormat weights) {
  std::shared_ptr<Model> m(new Model());
  m->files_ = std::move(files);
  m->pool_ = pool;
  const Weights root(m->files_.main);
  CHORUS_ASSIGN(m->talker_, Talker::load(root, m->files_.config, weights, pool));
  CHORUS_ASSIGN(m->code_predictor_, CodePredictor::load(root, m->files_.config, weights, pool));
  if (m->code_predictor_.groups() != m->files_.config.talker.num_code_groups)
    return make_error(ErrorCode::kInvalidFormat, m->files_.dir + ": talker and code predictor disagree on num_code_groups");
  return std::shared_ptr<const Model>(std::move(m));
}

Status Model::frame_embedding(std::span<const int32_t> codes, float* out) const {
  if (static_cast<int64_t>(codes.size()) != groups())
    return make_error(ErrorCode::kInvalidArgument, "a frame has " + std::to_string(groups()) + " codes, got " +
                                                       std::to_string(codes.size()));
  if (codes[0] < 0 || codes[0] >= code_predictor_.vocab())
    return make_error(ErrorCode::kInvalidArgument, "code " + std::to_string(codes[0]) + " of codebook 0 is outside 0.." +
                                                       std::to_string(code_predictor_.vocab() - 1));
  std::fill(out, out + hidden(), 0.0f);
  talker_.add_codec_row(codes[0], out);
  for (int64_t k = 1; k < groups(); ++k) CHORUS_TRY(code_predictor_.add_code_embedding(k, codes[k], out));
  return ok_status();
}

}  // namespace chorus::qwen3_tts
