#ifdef CHORUS_HAVE_CUDA

#include "models/frame_core/frame_core_cuda.h"

#include <algorithm>
#include <numeric>
#include <type_traits>
#include <utility>

#include "models/frame_core/frame_kernels_cuda.h"

namespace chorus::frame_core::gpu {

namespace {

// Prompts are prefilled in groups of sequences of at most this many rows (one longer prompt alone),
// which bounds the prefill activations.
constexpr int64_t kPrefillChunkRows = 1024;

cuda::DeviceSampler device_params(const sampling::SamplerParams& p, const SlotSetup& slot, bool penalty) {
  cuda::DeviceSampler d;
  d.greedy = p.greedy ? 1 : 0;
  d.temperature = p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.repetition_penalty = penalty ? p.repetition_penalty : 1.0f;
  d.seed_lo = static_cast<uint32_t>(slot.seed);
  d.seed_hi = static_cast<uint32_t>(slot.seed >> 32);
  d.rng_stream = slot.rng_stream;
  return d;
}

}  // namespace

FrameCore::~FrameCore() {
  if (stream_.get()) cudaStreamSynchronize(stream_.get());  // no kernel may outlive the buffers
}

Status FrameCore::alloc(cuda::DeviceBuffer& b, size_t bytes) {
  CHORUS_ASSIGN(b, cuda::DeviceBuffer::alloc(std::max<size_t>(bytes, 16)));
  bytes_ += b.bytes();
  return ok_status();
}

Status FrameCore::init(const FrameRecipe& r, std::span<const SlotSetup> slots, int64_t capacity) {
  if (slots.empty()) return make_error(ErrorCode::kInternal, "frame batch: no streams");
  const int NB = static_cast<int>(slots[0].prompt_rows.size());
  int64_t total_prompt = 0, longest = 0;
  std::vector<int32_t> prompt_rows, min_frames;
  std::vector<cuda::DeviceSampler> pb, pd;
  for (const SlotSetup& slot : slots) {
    if (static_cast<int>(slot.prompt_rows.size()) != NB)
      return make_error(ErrorCode::kInternal, "frame batch: every slot needs the same branches");
    for (int64_t rows : slot.prompt_rows) {
      total_prompt += rows;
      longest = std::max(longest, rows);
      prompt_rows.push_back(static_cast<int32_t>(rows));
    }
    min_frames.push_back(static_cast<int32_t>(slot.min_frames));
    pb.push_back(device_params(slot.backbone, slot, true));
    pd.push_back(device_params(slot.depth, slot, slot.depth_penalty));
  }
  const int64_t Q = static_cast<int64_t>(slots.size()) * NB;
  CHORUS_TRY(allocate(r, static_cast<int>(slots.size()), NB, capacity,
                      std::max(Q, std::min(total_prompt, std::max(kPrefillChunkRows, longest)))));
  CHORUS_TRY(upload(prompt_rows_, prompt_rows));
  CHORUS_TRY(upload(min_frames_, min_frames));
  CHORUS_TRY(upload(params_b_, pb));
  CHORUS_TRY(upload(params_d_, pd));
  return ok_status();
}

Status FrameCore::init_pool(const FrameRecipe& r, int slots, int64_t capacity,
                            std::shared_ptr<nn::gpu::KvPagePool> pages) {
  if (slots < 1 || capacity < 2) return make_error(ErrorCode::kInternal, "frame pool: no slots");
  if (pages) {
    if (!r.backbone || pages->page_floats() != KvCacheRef::page_floats(r.backbone->dims().layers, r.backbone->kv_width()))
      return make_error(ErrorCode::kInternal, "frame pool: a page pool of another backbone");
    CHORUS_ASSIGN(kv_, KvPaging::create(std::move(pages), slots, 1, capacity));
    bytes_ += kv_->bytes();
  }
  CHORUS_TRY(allocate(r, slots, 1, capacity, std::max<int64_t>({int64_t{slots}, kPrefillChunkRows, capacity})));
  // Free slots compute too (up to the active count): their buffers start zeroed (DeviceBuffer::alloc)
  // and their samplers greedy, so their values stay finite.
  std::vector<cuda::DeviceSampler> greedy(static_cast<size_t>(slots));
  for (cuda::DeviceSampler& d : greedy) d.greedy = 1;
  CHORUS_TRY(upload(params_b_, greedy));
  CHORUS_TRY(upload(params_d_, greedy));
  n_ = 0;
  return ok_status();
}

void FrameCore::set_active_slots(int n) {
  n_ = std::clamp(n, 0, S_);
  pipe_.set_graph_key(n_ + variant_ * (S_ + 1));
}

void FrameCore::set_graph_variant(int v) {
  variant_ = v;
  set_active_slots(n_);
}

Status FrameCore::allocate(const FrameRecipe& r, int S_in, int NB, int64_t capacity, int64_t prefill_rows) {
  if (!r.backbone || !r.depth || S_in < 1) return make_error(ErrorCode::kInternal, "frame batch: no model or no streams");
  r_ = r;
  S_ = S_in;
  n_ = S_;
  NB_ = NB;
  Q_ = S_ * NB_;
  G_ = r.codebooks;
  H_ = r.backbone->dims().hidden;
  BV_ = r.backbone_head.rows;
  cap_ = capacity;
  bb_rows_ = prefill_rows;
  pipe_.set_graph_key(n_);
  const int64_t S = S_, Q = Q_, G = G_, H = H_, D = r.depth_hidden, DV = r.depth_vocab;
  std::vector<int32_t> iota(static_cast<size_t>(Q)), first_seq, first_pos, depth_pos;
  const nn::Qwen3Dims& bd = r.backbone->dims();
  const nn::Qwen3Dims& dd = r.depth->dims();
  CHORUS_TRY(cuda::attention_reserve(cap_, bd.head_dim));
  CHORUS_TRY(cuda::attention_reserve(G, dd.head_dim));

  CHORUS_ASSIGN(stream_, cuda::Stream::create());
  for (auto& e : ev_) {
    CHORUS_ASSIGN(e, cuda::Event::create());
  }
  const int64_t ws_rows = std::max(bb_rows_, 2 * Q);
  const int64_t ws_k = std::max({r.backbone->max_linear_k(), r.depth->max_linear_k(), H, D});
  const int64_t ws_n = std::max({r.backbone->max_linear_n_total(), r.depth->max_linear_n_total(), BV_, DV, D});
  const int64_t ws_dequant = std::max(r.backbone->max_dequant(), r.depth->max_dequant());
  CHORUS_ASSIGN(ws_, cuda::LinearWorkspace::create(ws_rows, ws_k, ws_n, ws_dequant, r.every_row_tensor));
  bytes_ += ws_.bytes();
  CHORUS_ASSIGN(bb_scratch_, StackScratch::create(bd, bb_rows_, r.backbone->fused_mlp()));
  CHORUS_ASSIGN(depth_scratch_, StackScratch::create(dd, 2 * Q, r.depth->fused_mlp()));
  bytes_ += bb_scratch_.bytes() + depth_scratch_.bytes();

  const size_t F = sizeof(float), I = sizeof(int32_t);
  const auto n = [](int64_t v) { return static_cast<size_t>(v); };
  if (!kv_) CHORUS_TRY(alloc(bb_kv_, n(KvCacheRef::floats(bd.layers, Q, cap_, bd.kv_heads * bd.head_dim)) * F));
  CHORUS_TRY(alloc(depth_kv_, n(KvCacheRef::floats(dd.layers, Q, G, dd.kv_heads * dd.head_dim)) * F));
  CHORUS_TRY(alloc(bb_h_, n(bb_rows_ * H) * F));
  CHORUS_TRY(alloc(bb_out_, n(bb_rows_ * H) * F));
  CHORUS_TRY(alloc(z_, n(Q * H) * F));
  CHORUS_TRY(alloc(logits_b_, n(Q * BV_) * F));
  const int64_t vmax = std::max(BV_, DV);
  CHORUS_TRY(alloc(scratch_w_, n(S * vmax) * sizeof(double)));
  CHORUS_TRY(alloc(scratch_ids_, n(2 * S * vmax) * I));
  CHORUS_TRY(alloc(report_, n(2 * S * G + S) * I));
  CHORUS_ASSIGN(pipe_, cuda::FramePipeline::create(report_.data(), n(2 * S * G + S) * I));
  pipe_.set_graph_key(n_);
  CHORUS_TRY(alloc(frames_, n(S) * I));
  CHORUS_TRY(alloc(prompt_rows_, n(Q) * I));
  CHORUS_TRY(alloc(bb_pos_, n(Q) * I));
  CHORUS_TRY(alloc(min_frames_, n(S) * I));
  CHORUS_TRY(alloc(history_, n(S * BV_)));
  CHORUS_TRY(alloc(params_b_, n(S) * sizeof(cuda::DeviceSampler)));
  CHORUS_TRY(alloc(params_d_, n(S) * sizeof(cuda::DeviceSampler)));
  CHORUS_TRY(alloc(iota_, n(Q) * I));
  CHORUS_TRY(alloc(first_seq_, n(2 * Q) * I));
  CHORUS_TRY(alloc(first_pos_, n(2 * Q) * I));
  CHORUS_TRY(alloc(depth_pos_, n(G * Q) * I));
  CHORUS_TRY(alloc(prefill_seq_, n(bb_rows_) * I));
  CHORUS_TRY(alloc(prefill_pos_, n(bb_rows_) * I));
  CHORUS_TRY(alloc(last_row_, n(std::max(Q, bb_rows_)) * I));

  std::iota(iota.begin(), iota.end(), 0);
  for (int32_t q = 0; q < Q; ++q) {
    first_seq.insert(first_seq.end(), {q, q});
    first_pos.insert(first_pos.end(), {0, 1});
  }
  for (int64_t k = 0; k < G; ++k)
    for (int64_t q = 0; q < Q; ++q) depth_pos.push_back(static_cast<int32_t>(k + r.depth_pos_first));
  CHORUS_TRY(upload(iota_, iota));
  CHORUS_TRY(upload(first_seq_, first_seq));
  CHORUS_TRY(upload(first_pos_, first_pos));
  CHORUS_TRY(upload(depth_pos_, depth_pos));
  return ok_status();
}

Result<float*> FrameCore::backbone_logits(int rows, cudaStream_t s) {
  cuda::LinearArgs head;
  head.x = z_.as<float>();
  head.ldx = H_;
  head.M = rows;
  head.out[0] = {r_.backbone_head, nullptr, logits_b_.as<float>(), BV_};
  r_.depth->prefetch_attention(0, head.prefetch);  // the next frame's first depth step
  CHORUS_TRY(cuda::linear(head, &ws_, s));
  return combine_backbone(logits_b_.as<float>(), s);
}

cuda::SampleArgs FrameCore::backbone_sampler(float* logits) const {
  cuda::SampleArgs a;
  a.logits = logits;
  a.ld = BV_;
  a.vocab = static_cast<int32_t>(BV_);
  a.rows = n_;
  a.params = params_b_.as<cuda::DeviceSampler>();
  a.frame = frames_.as<int32_t>();
  a.codebook = 0;
  a.penalized = history_.as<uint8_t>();
  a.allowed_below = r_.allowed_below;
  a.also_allowed = r_.eos;
  a.blocked_id = r_.eos;
  a.block_until_frame = min_frames_.as<int32_t>();
  a.out = codes_dev();
  a.out_stride = G_;
  a.mark_chosen = history_.as<uint8_t>();
  a.error = errors_dev();
  a.scratch_w = scratch_w_.as<double>();
  a.scratch_ids = scratch_ids_.as<int32_t>();
  return a;
}

Status FrameCore::sample_backbone(cudaStream_t s) {
  CHORUS_ASSIGN(float* logits, backbone_logits(rows(), s));
  return cuda::sample(backbone_sampler(logits), s);
}

Status FrameCore::admit_slots(std::span<const int> slots, std::span<const SlotSetup> setups,
                              std::span<const SeqRows> seqs) {
  if (slots.empty()) return ok_status();
  if (setups.size() != slots.size() || seqs.size() != slots.size() * static_cast<size_t>(NB_))
    return make_error(ErrorCode::kInternal, "frame pool: one setup per slot and one prompt per sequence");
  if (pipe_.frame_ahead()) return make_error(ErrorCode::kInternal, "frame pool: a frame is in flight");
  CHORUS_TRY(std::exchange(kv_error_, ok_status()));
  cudaStream_t s = stream_.get();
  CHORUS_TRY(stream_.synchronize());
  if (kv_) CHORUS_TRY(kv_->reclaim(pipe_.waited()));
  const auto put = [](const cuda::DeviceBuffer& b, int64_t index, const auto& v) {
    using T = std::decay_t<decltype(v)>;
    return cuda::check(cudaMemcpy(b.as<uint8_t>() + index * static_cast<int64_t>(sizeof(T)), &v, sizeof(T),
                                  cudaMemcpyHostToDevice),
                       "cudaMemcpy");
  };
  int top = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int slot = slots[i];
    const SlotSetup& setup = setups[i];
    if (slot < 0 || slot >= n_) return make_error(ErrorCode::kInternal, "frame pool: slot outside the active ones");
    if (static_cast<int>(setup.prompt_rows.size()) != NB_)
      return make_error(ErrorCode::kInternal, "frame pool: every slot needs the same branches");
    top = std::max(top, slot + 1);
    for (int j = 0; j < NB_; ++j) {
      const SeqRows& p = seqs[i * NB_ + j];
      if (p.rows < 1 || p.rows != setup.prompt_rows[j] || p.rows > bb_rows_ || p.rows >= cap_)
        return make_error(ErrorCode::kInternal, "frame pool: a prompt that does not fit the slot");
      CHORUS_TRY(put(prompt_rows_, slot * NB_ + j, static_cast<int32_t>(p.rows)));
    }
    CHORUS_TRY(put(min_frames_, slot, static_cast<int32_t>(setup.min_frames)));
    CHORUS_TRY(put(params_b_, slot, device_params(setup.backbone, setup, true)));
    CHORUS_TRY(put(params_d_, slot, device_params(setup.depth, setup, setup.depth_penalty)));
    CHORUS_TRY(put(frames_, slot, int32_t{0}));
    CHORUS_TRY(put(report_, 2 * S_ * G_ + slot, int32_t{0}));  // the error flag
    CHORUS_CUDA_TRY(cudaMemset(history_.as<uint8_t>() + slot * BV_, 0, static_cast<size_t>(BV_)));
    if (kv_) CHORUS_TRY(kv_->admit(slot, setup.prompt_rows));  // pages for the prompt
  }
  if (kv_) CHORUS_TRY(kv_->flush(s));

  std::vector<int> seq_index;  // the sequence q of each prompt
  for (size_t k = 0; k < seqs.size(); ++k) seq_index.push_back(slots[k / NB_] * NB_ + static_cast<int>(k % NB_));
  CHORUS_TRY(ev_[0].record(s));
  CHORUS_TRY(prefill_prompts(seq_index, seqs, s));
  // Codebook 0 of the new slots alone: the running slots' codes and penalty histories stay as they are.
  CHORUS_ASSIGN(float* logits, backbone_logits(top * NB_, s));
  for (const int slot : slots) {
    cuda::SampleArgs a = backbone_sampler(logits + static_cast<int64_t>(slot) * BV_);
    a.rows = 1;
    a.params += slot;
    a.frame += slot;
    a.penalized += static_cast<int64_t>(slot) * BV_;
    a.mark_chosen += static_cast<int64_t>(slot) * BV_;
    a.block_until_frame += slot;
    a.out += static_cast<int64_t>(slot) * G_;
    a.error += slot;
    CHORUS_TRY(cuda::sample(a, s));
  }
  CHORUS_TRY(ev_[1].record(s));
  CHORUS_TRY(pipe_.publish_and_wait(s));
  CHORUS_ASSIGN(times_.prefill_ms, ev_[1].elapsed_ms_since(ev_[0]));
  return ok_status();
}

KvCacheRef FrameCore::backbone_kv() const {
  const nn::Qwen3Dims& bd = r_.backbone->dims();
  KvCacheRef kv{bb_kv_.as<float>(), Q_, cap_, bd.kv_heads * bd.head_dim};
  if (kv_) kv.pages = kv_->table();
  return kv;
}

Status FrameCore::hold_pages(int slot, int64_t pages) {
  if (!kv_) return make_error(ErrorCode::kInternal, "frame pool: pages for a pool that is not paged");
  return kv_->hold(slot, pages);
}

void FrameCore::release_slot(int slot) {
  if (!kv_) return;
  Status st = kv_->release(slot, pipe_.launched());
  // With no frame in flight nothing can write the pages any more (this pool's next launch first
  // points the slot's entries at the scratch page). A pool left without streams waits for its
  // frame in flight (whose results nobody reads) now, so no pages linger in an idle pool.
  if (st.ok()) st = kv_->idle() ? settle() : kv_->reclaim(pipe_.waited());
  if (!st.ok() && kv_error_.ok()) kv_error_ = std::move(st);
}

Status FrameCore::prefill_prompts(std::span<const int> seq_index, std::span<const SeqRows> seqs, cudaStream_t s) {
  const KvCacheRef kv = backbone_kv();
  for (size_t a = 0; a < seqs.size();) {
    size_t b = a;  // prompts a..b−1 form one chunk
    int64_t rows = 0;
    while (b < seqs.size() && (b == a || rows + seqs[b].rows <= bb_rows_)) rows += seqs[b++].rows;
    std::vector<float> x;
    x.reserve(static_cast<size_t>(rows * H_));
    std::vector<int32_t> seq, pos, last;
    for (size_t k = a; k < b; ++k) {
      x.insert(x.end(), seqs[k].data, seqs[k].data + seqs[k].rows * H_);
      for (int64_t t = 0; t < seqs[k].rows; ++t) {
        seq.push_back(seq_index[k]);
        pos.push_back(static_cast<int32_t>(t));
      }
      last.push_back(static_cast<int32_t>(seq.size() - 1));
    }
    CHORUS_TRY(stream_.synchronize());  // the previous chunk may still read these buffers
    CHORUS_TRY(upload(bb_h_, x));
    CHORUS_TRY(upload(prefill_seq_, seq));
    CHORUS_TRY(upload(prefill_pos_, pos));
    CHORUS_TRY(upload(last_row_, last));
    const cuda::RowMap map{prefill_seq_.as<int32_t>(), prefill_pos_.as<int32_t>(), rows, false};
    CHORUS_TRY(r_.backbone->forward(bb_h_.as<float>(), bb_out_.as<float>(), map, kv, bb_scratch_, ws_, s, r_.bf16));
    for (size_t k = a; k < b; ++k)
      CHORUS_TRY(gather_rows(bb_out_.as<float>(), last_row_.as<int32_t>() + (k - a), H_, 1,
                             z_.as<float>() + static_cast<int64_t>(seq_index[k]) * H_, s));
    a = b;
  }
  return ok_status();
}

Status FrameCore::prefill_sequences(std::span<const SeqRows> seqs) {
  if (static_cast<int>(seqs.size()) != Q_) return make_error(ErrorCode::kInternal, "frame batch: one prompt per sequence");
  cudaStream_t s = stream_.get();
  std::vector<int> seq_index(static_cast<size_t>(Q_));
  std::iota(seq_index.begin(), seq_index.end(), 0);
  CHORUS_TRY(ev_[0].record(s));
  CHORUS_TRY(prefill_prompts(seq_index, seqs, s));
  CHORUS_TRY(sample_backbone(s));
  CHORUS_TRY(ev_[1].record(s));
  CHORUS_TRY(pipe_.publish_and_wait(s));
  CHORUS_ASSIGN(times_.prefill_ms, ev_[1].elapsed_ms_since(ev_[0]));
  return ok_status();
}

KvCacheRef FrameCore::depth_kv() const {
  const nn::Qwen3Dims& dd = r_.depth->dims();
  return KvCacheRef{depth_kv_.as<float>(), Q_, G_, dd.kv_heads * dd.head_dim};
}

cuda::RowMap FrameCore::first_step_map() const {
  return cuda::RowMap{first_seq_.as<int32_t>(), first_pos_.as<int32_t>(), 2 * rows(), false};
}

cuda::RowMap FrameCore::step_map(int index) const {
  return cuda::RowMap{iota_.as<int32_t>(), depth_pos_.as<int32_t>() + index * Q_, rows(), true};
}

cuda::SampleArgs FrameCore::depth_sampler(float* logits, int64_t ld) const {
  cuda::SampleArgs sa;
  sa.logits = logits;
  sa.ld = ld;
  sa.vocab = static_cast<int32_t>(r_.depth_vocab);
  sa.rows = n_;
  sa.params = params_d_.as<cuda::DeviceSampler>();
  sa.frame = frames_.as<int32_t>();
  sa.out_stride = G_;
  sa.error = errors_dev();
  sa.scratch_w = scratch_w_.as<double>();
  sa.scratch_ids = scratch_ids_.as<int32_t>();
  return sa;
}

cuda::LinearArgs FrameCore::depth_head(const float* out, bool first, const cuda::DeviceMatrix& head, float* logits,
                                       bool last) const {
  const int64_t D = r_.depth_hidden;
  cuda::LinearArgs a;  // each sequence's last row
  a.x = first ? out + D : out;
  a.ldx = first ? 2 * D : D;
  a.M = rows();
  a.out[0] = {head, nullptr, logits, r_.depth_vocab};
  // The next step's stack, or after the last step the backbone's.
  if (!last)
    r_.depth->prefetch_attention(0, a.prefetch);
  else
    r_.backbone->prefetch_attention(0, a.prefetch);
  return a;
}

Status FrameCore::advance_single(cudaStream_t s) {
  return advance_frames(frames_.as<int32_t>(), prompt_rows_.as<int32_t>(), static_cast<int32_t>(cap_),
                        bb_pos_.as<int32_t>(), n_, codes_dev(), G_, frame_codes_dev(), s);
}

Status FrameCore::enqueue_backbone(cudaStream_t s) {
  const KvCacheRef kv = backbone_kv();
  CHORUS_TRY(backbone_inputs(s));
  const cuda::RowMap map{iota_.as<int32_t>(), bb_pos_.as<int32_t>(), rows(), true};
  CHORUS_TRY(r_.backbone->forward(bb_h_.as<float>(), z_.as<float>(), map, kv, bb_scratch_, ws_, s, r_.bf16));
  return sample_backbone(s);
}

Status FrameCore::slot_status(int s) const {
  const int32_t flag = error(s);
  if (flag == cuda::kSampleNonFinite) return make_error(ErrorCode::kInternal, "sampler: the model produced a non-finite logit");
  if (flag == cuda::kSampleAllMasked) return make_error(ErrorCode::kInternal, "sampler: every id is masked");
  return ok_status();
}

Status FrameCore::set_parked_slots(std::span<const int> slots) {
  for (const int slot : slots)
    if (slot < 0 || slot >= S_) return make_error(ErrorCode::kInternal, "frame batch: a parked slot out of range");
  parked_.assign(slots.begin(), slots.end());
  return ok_status();
}

Result<SlotRegions> FrameCore::slot_regions(bool whole) const {
  SlotRegions r;
  const int64_t F = sizeof(float), I = sizeof(int32_t);
  bool fits = r.add(z_.data(), NB_ * H_ * F);                    // the backbone's last output rows: the next depth walk's input
  fits = fits && r.add(report_.as<uint8_t>() + S_ * G_ * I, G_ * I);  // codes: codebook 0 of the next frame
  fits = fits && r.add(report_.as<uint8_t>() + 2 * S_ * G_ * I, I);  // the error flag
  fits = fits && r.add(frames_.data(), I);                        // the frame counter: positions and random draws
  fits = fits && r.add(bb_pos_.data(), NB_ * I);                  // the backbone position of the row fed next
  fits = fits && r.add(history_.data(), BV_);                     // codebook 0's penalty history
  if (whole) {
    fits = fits && r.add(prompt_rows_.data(), NB_ * I);
    fits = fits && r.add(min_frames_.data(), I);
    fits = fits && r.add(params_b_.data(), sizeof(cuda::DeviceSampler));
    fits = fits && r.add(params_d_.data(), sizeof(cuda::DeviceSampler));
    add_slot_regions(r);
    fits = fits && r.count < SlotRegions::kMax;  // a full list may have dropped a region
  }
  if (!fits) return make_error(ErrorCode::kInternal, "frame batch: too many per-slot regions");
  return r;
}

Status FrameCore::copy_parked(bool restore, cudaStream_t s) {
  CHORUS_ASSIGN(const SlotRegions r, slot_regions(false));
  if (!park_stash_.data()) CHORUS_TRY(alloc(park_stash_, static_cast<size_t>(S_ * r.total())));
  return copy_slot_state(r, parked_.data(), static_cast<int>(parked_.size()), park_stash_.as<uint8_t>(), restore, s);
}

Status FrameCore::move_slots(std::span<const std::pair<int, int>> moves) {
  if (moves.empty()) return ok_status();
  if (!kv_ || NB_ != 1) return make_error(ErrorCode::kInternal, "frame pool: slots move only in a paged pool");
  if (pipe_.frame_ahead() || !parked_.empty())
    return make_error(ErrorCode::kInternal, "frame pool: slots moved with a frame in flight or a slot parked");
  std::vector<int32_t> from, to;
  for (const auto& [f, t] : moves) {
    if (f < 0 || f >= S_ || t < 0 || t >= S_) return make_error(ErrorCode::kInternal, "frame pool: no such slot to move");
    CHORUS_TRY(kv_->move(f, t));
    from.push_back(f);
    to.push_back(t);
  }
  cudaStream_t s = stream_.get();
  CHORUS_TRY(kv_->flush(s));
  CHORUS_ASSIGN(const SlotRegions r, slot_regions(true));
  CHORUS_TRY(move_slot_state(r, from.data(), to.data(), static_cast<int>(from.size()), s));
  return move_own_slots(moves, s);
}

Status FrameCore::pages_for_launches(int launches, cudaStream_t s) {
  if (!kv_) return ok_status();
  // Pages for the positions the next `launches` frames write, in the table before they run.
  // Parked slots do not advance.
  CHORUS_TRY(std::exchange(kv_error_, ok_status()));
  CHORUS_TRY(kv_->before_launch(launches, parked_));
  return kv_->flush(s);
}

Status FrameCore::run_frame(bool feed, std::optional<bool> then) {
  cudaStream_t s = stream_.get();
  const bool park = !parked_.empty();
  if (park && (then || pipe_.frame_ahead()))
    return make_error(ErrorCode::kInternal, "frame batch: a parked slot in a frame launched ahead");
  // The frame unless it was launched ahead, and the one launched ahead now.
  CHORUS_TRY(pages_for_launches((pipe_.frame_ahead() ? 0 : 1) + (then ? 1 : 0), s));
  if (park) CHORUS_TRY(copy_parked(false, s));
  CHORUS_TRY(pipe_.run_frame(s, feed, then, [&] { return enqueue_depth(s); }, [&] { return enqueue_backbone(s); }));
  if (park) CHORUS_TRY(copy_parked(true, s));
  if (kv_) CHORUS_TRY(kv_->reclaim(pipe_.waited()));
  times_.depth_ms = pipe_.first_half_ms();
  times_.backbone_ms = pipe_.second_half_ms();
  return ok_status();
}

Status FrameCore::launch_frame_ahead(bool feed) {
  if (pipe_.frame_ahead() || !parked_.empty())
    return make_error(ErrorCode::kInternal, "frame batch: a frame launched ahead with one in flight or a slot parked");
  cudaStream_t s = stream_.get();
  CHORUS_TRY(pages_for_launches(1, s));
  return pipe_.launch_ahead(s, feed, [&] { return enqueue_depth(s); }, [&] { return enqueue_backbone(s); });
}

}  // namespace chorus::frame_core::gpu

#endif  // CHORUS_HAVE_CUDA
