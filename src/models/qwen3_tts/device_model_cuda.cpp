#ifdef CHORUS_HAVE_CUDA

#include "models/qwen3_tts/device_model_cuda.h"

#include <algorithm>
#include <string>
#include <vector>

namespace chorus::qwen3_tts::gpu {

using nn::gpu::load_matrix;
using nn::gpu::load_vector_f32;
using nn::gpu::project_rows;
using nn::gpu::upload_matrix;
using nn::gpu::upload_vector_f32;

Status DeviceModel::project_cp_embeddings() {
  for (int k = 1; k < groups(); ++k) {
    const DeviceTensor& e = cp_embedding(k);
    CHORUS_ASSIGN(cuda::DeviceBuffer out, project_rows(e.matrix(), projection().matrix(), projection_bias().f32(), e.rows));
    bytes_ += out.bytes();
    cp_projected_.push_back(std::move(out));
  }
  return ok_status();
}

Result<std::shared_ptr<const DeviceModel>> upload_model(std::shared_ptr<const Model> model, cpu::WeightFormat weights,
                                                        ThreadPool* pool) {
  if (!model) return make_error(ErrorCode::kInternal, "upload_model: no model");
  std::shared_ptr<DeviceModel> m(new DeviceModel());
  m->keep_ = model;
  m->cpu_ = model.get();
  const Config& c = model->config();
  m->eos_id_ = static_cast<int32_t>(c.talker.codec_eos_id);
  m->allowed_below_ = std::max<int64_t>(0, c.talker.codec_vocab - 1024);
  const Weights root(model->files().main);
  const Weights t = root.sub("talker.");
  const Weights cp = root.sub("talker.code_predictor.");
  const nn::gpu::StackOptions stack{.weights = weights, .pool = pool};
  CHORUS_ASSIGN(m->talker_, DeviceStack::load(t.sub("model."), c.talker.dims, {}, stack));
  CHORUS_ASSIGN(m->cp_, DeviceStack::load(cp.sub("model."), c.code_predictor.dims, {}, stack));
  CHORUS_ASSIGN(m->codec_embedding_, load_matrix(t, "model.codec_embedding.weight"));
  CHORUS_ASSIGN(m->codec_head_, load_matrix(t, "codec_head.weight"));
  std::vector<const uint16_t*> tables{m->codec_embedding_.bf16()};
  for (int64_t k = 0; k + 1 < c.code_predictor.num_code_groups; ++k) {
    CHORUS_ASSIGN(DeviceTensor e, load_matrix(cp, "model.codec_embedding." + std::to_string(k) + ".weight"));
    CHORUS_ASSIGN(DeviceTensor h, load_matrix(cp, "lm_head." + std::to_string(k) + ".weight"));
    tables.push_back(e.bf16());
    m->bytes_ += e.buf.bytes() + h.buf.bytes();
    m->cp_embeddings_.push_back(std::move(e));
    m->cp_heads_.push_back(std::move(h));
  }
  if (c.talker.dims.hidden != c.code_predictor.dims.hidden) {
    CHORUS_ASSIGN(m->proj_w_, load_matrix(cp, "small_to_mtp_projection.weight"));
    CHORUS_ASSIGN(m->proj_b_, load_vector_f32(cp, "small_to_mtp_projection.bias"));
    m->bytes_ += m->proj_w_.buf.bytes() + m->proj_b_.buf.bytes();
    CHORUS_TRY(m->project_cp_embeddings());
  }
  CHORUS_ASSIGN(m->tables_, cuda::DeviceBuffer::alloc(tables.size() * sizeof(const uint16_t*)));
  CHORUS_CUDA_TRY(cudaMemcpy(m->tables_.data(), tables.data(), tables.size() * sizeof(const uint16_t*),
                             cudaMemcpyHostToDevice));
  m->bytes_ += m->talker_.bytes() + m->cp_.bytes() + m->codec_embedding_.buf.bytes() + m->codec_head_.buf.bytes();
  // Every codebook embedding must be as wide as the talker (the frame embedding sums them).
  for (const DeviceTensor& e : m->cp_embeddings_)
    if (e.cols != m->hidden()) return make_error(ErrorCode::kInvalidFormat, "code predictor embedding width differs from the talker's");
  return std::shared_ptr<const DeviceModel>(std::move(m));
}

}  // namespace chorus::qwen3_tts::gpu

#endif  // CHORUS_HAVE_CUDA
