#ifdef CHORUS_HAVE_CUDA

#include "models/breeze_tts/device_model_cuda.h"

#include <algorithm>
#include <cstring>

#include "models/breeze_tts/rope.h"
#include "models/breeze_tts/weights.h"
#include "io/weight_table.h"

namespace chorus::breeze_tts::gpu {

namespace {

// Head `index` of the [heads, in, out] codebooks_head as an [out, in] matrix (rows = output features).
Result<DeviceTensor> upload_head(const Tensor& heads, int64_t index) {
  const int64_t in = heads.dim(1), out = heads.dim(2);
  const size_t es = dtype_size(heads.dtype());
  Tensor t = Tensor::zeros(heads.dtype(), {out, in});
  const auto* src = static_cast<const uint8_t*>(heads.data()) + static_cast<size_t>(index * in * out) * es;
  auto* dst = static_cast<uint8_t*>(t.mutable_data());
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o)
      std::memcpy(dst + static_cast<size_t>(o * in + i) * es, src + static_cast<size_t>(i * out + o) * es, es);
  return nn::gpu::upload_matrix(t);
}

}  // namespace

Result<std::shared_ptr<const DeviceModel>> DeviceModel::upload(const Config& c, const io::Checkpoint& main,
                                                               cpu::WeightFormat weights, ThreadPool* pool) {
  // The same checks as the CPU stages, so a device model never binds a tensor of the wrong shape.
  WeightTable table;
  declare_backbone_weights(c, table);
  declare_depth_weights(c, table);
  CHORUS_TRY(table.check(main, main.label()));
  if (c.audio_embed != c.backbone.dims.hidden || c.depth.backbone_hidden != c.backbone.dims.hidden)
    return make_error(ErrorCode::kUnsupported, "breeze gpu: the audio table and backbone widths must match");
  std::shared_ptr<DeviceModel> m(new DeviceModel());
  m->config_ = c;
  // Both stacks' layers are too large for the persistent kernel, so a decode step's MLPs run as one
  // launch each (measured on the H200: backbone −0.20 ms and depth decoder −0.90 ms per frame, for
  // 0.66 GiB of transposed down projections). Quantised stacks run two launches (the one-launch
  // MLP reads bf16).
  const nn::gpu::StackOptions options{.one_launch_mlp = true, .weights = weights, .pool = pool};
  CHORUS_ASSIGN(m->backbone_, DeviceStack::load(Weights(main, kBackbonePrefix), c.backbone.dims, {}, options));
  const std::vector<float> inv = depth_rope_inv_freq(c.depth);
  CHORUS_ASSIGN(m->depth_, DeviceStack::load(Weights(main, kDepthPrefix), c.depth.dims, inv, options));
  CHORUS_ASSIGN(m->lm_head_, nn::gpu::upload_matrix(main.tensor(kLmHead)));
  CHORUS_ASSIGN(m->projector_, nn::gpu::upload_matrix(main.tensor(kDepthProjector)));
  CHORUS_ASSIGN(m->table_, nn::gpu::upload_matrix(main.tensor(kAudioTable)));
  const Tensor heads = main.tensor(kCodebooksHead);
  for (int64_t k = 0; k + 1 < c.num_codebooks; ++k) {
    CHORUS_ASSIGN(DeviceTensor h, upload_head(heads, k));
    m->bytes_ += h.buf.bytes();
    m->heads_.push_back(std::move(h));
  }
  m->bytes_ += m->backbone_.bytes() + m->depth_.bytes() + m->lm_head_.buf.bytes() + m->projector_.buf.bytes() +
               m->table_.buf.bytes();
  if (m->lm_head_.rows != c.lm_head_rows() || m->table_.rows != c.num_codebooks * c.audio_vocab)
    return make_error(ErrorCode::kInternal, "breeze gpu: lm_head or audio table of an unexpected shape");
  for (int k = 1; k + 1 < m->codebooks(); ++k) {
    const int64_t V = c.audio_vocab, W = c.audio_embed;
    const cuda::DeviceMatrix slice{m->table_.bf16() + k * V * W, V, W};
    const int64_t ids = std::max(V, m->heads_[static_cast<size_t>(k - 1)].rows);  // the sampler's vocabulary
    CHORUS_ASSIGN(cuda::DeviceBuffer rows, nn::gpu::project_rows(slice, m->projector_.matrix(), nullptr, ids));
    m->bytes_ += rows.bytes();
    m->projected_.push_back(std::move(rows));
  }
  return std::shared_ptr<const DeviceModel>(std::move(m));
}

}  // namespace chorus::breeze_tts::gpu

#endif  // CHORUS_HAVE_CUDA
