#include "engine/synthesizer.h"

#include <chrono>

namespace chorus::engine {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

struct Synthesizer::Job {
  std::shared_ptr<Synthesis> handle;
  std::unique_ptr<TtsStream> stream;
  std::unique_ptr<CodecStream> codec;
  ChunkCallback on_chunk;
  std::function<void(const Result<SynthesisStats>&)> on_done;
  SynthesisStats stats;
  Clock::time_point submitted;
  std::vector<float> samples;  // scratch for one chunk
  bool admitted = false;       // counted in running_count_
  bool ended = false;
};

bool Synthesis::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

Result<SynthesisStats> Synthesis::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return result_;
}

Synthesizer::Synthesizer(std::shared_ptr<const Model> model, SynthesizerOptions options)
    : model_(std::move(model)), options_(options) {
  if (options_.max_running < 1) options_.max_running = 1;
  if (options_.max_queued < 0) options_.max_queued = 0;
  thread_ = std::thread([this] { run(); });
}

Synthesizer::~Synthesizer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Synthesizer::Load Synthesizer::load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {running_count_, static_cast<int>(queue_.size())};
}

Result<std::shared_ptr<Synthesis>> Synthesizer::submit(const SynthesisRequest& request, ChunkCallback on_chunk,
                                                       const SynthesisOptions& options) {
  const Clock::time_point submitted = Clock::now();
  auto job = std::make_unique<Job>();
  job->submitted = submitted;
  job->on_chunk = std::move(on_chunk);
  job->on_done = options.on_done;
  // Checked and prepared here, on the caller's thread, so a bad request fails at once and a long
  // prompt's tokenization never holds up the running streams.
  CHORUS_ASSIGN(job->stream, model_->generator().create_stream(request));
  if (options.audio) {
    if (!model_->has_codec())
      return make_error(ErrorCode::kUnsupported, "audio was asked for but the model was loaded without its codec");
    const Codec& codec = model_->codec();
    CHORUS_ASSIGN(job->codec, codec.new_stream(options.decode_mode));
    if (options.prime_codec_with_ref_codes && !request.xvector_only && !request.ref_codes.empty()) {
      std::vector<int32_t> ref;
      for (const auto& f : request.ref_codes) {
        if (static_cast<int64_t>(f.size()) != codec.num_quantizers())
          return make_error(ErrorCode::kInvalidArgument, "reference codes: every frame needs " +
                                                             std::to_string(codec.num_quantizers()) + " codes");
        ref.insert(ref.end(), f.begin(), f.end());
      }
      std::vector<float> discard;
      CHORUS_TRY(job->codec->decode(ref.data(), static_cast<int64_t>(request.ref_codes.size()), discard));
    }
  }
  job->stats.max_frames = job->stream->max_frames();
  job->stats.text_tokens = job->stream->text_tokens();
  job->stats.prompt_rows = job->stream->prompt_rows();
  job->handle = std::make_shared<Synthesis>();
  job->handle->max_frames_ = job->stats.max_frames;
  std::shared_ptr<Synthesis> handle = job->handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return make_error(ErrorCode::kCancelled, "the synthesizer is shutting down");
    if (static_cast<int>(queue_.size()) >= options_.max_queued)
      return make_error(ErrorCode::kResourceExhausted,
                        "too many requests waiting (" + std::to_string(queue_.size()) + "): try again later");
    handle->id_ = next_id_++;
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return handle;
}

Result<SynthesisStats> Synthesizer::synthesize(const SynthesisRequest& request, ChunkCallback on_chunk,
                                               const SynthesisOptions& options) {
  CHORUS_ASSIGN(std::shared_ptr<Synthesis> s, submit(request, std::move(on_chunk), options));
  return s->wait();
}

void Synthesizer::finish(Job& j, Status status) {
  if (j.ended) return;
  j.ended = true;
  if (status.ok() && j.codec && j.stream->stop_reason() != StopReason::kCancelled) {
    j.samples.clear();
    status = j.codec->flush(j.samples);
    if (status.ok() && !j.samples.empty()) {
      AudioChunk c;
      c.first_frame = j.stream->frames();
      c.codebooks = model_->info().codebooks;
      c.samples = j.samples.data();
      c.count = j.samples.size();
      status = j.on_chunk ? j.on_chunk(c) : ok_status();
    }
  }
  j.stats.stop = j.stream->stop_reason();
  j.stats.frames = j.stream->frames();
  j.stats.audio_s = model_->info().frame_rate > 0 ? static_cast<double>(j.stats.frames) / model_->info().frame_rate : 0;
  j.stats.total_s = since(j.submitted);
  j.codec.reset();
  j.stream.reset();
  if (j.admitted) {  // before the waiter wakes, so load() never counts a request that has ended
    std::lock_guard<std::mutex> lock(mu_);
    --running_count_;
  }
  Result<SynthesisStats> result = status.ok() ? Result<SynthesisStats>(j.stats) : Result<SynthesisStats>(status.error());
  {
    std::lock_guard<std::mutex> lock(j.handle->mu_);
    j.handle->result_ = result;
    j.handle->done_ = true;
    j.handle->cv_.notify_all();
  }
  if (j.on_done) j.on_done(result);
}

void Synthesizer::deliver(Job& j, const StepResult& r) {
  if (!r.has_frame || j.ended) return;
  const int64_t frame = j.stream->frames() - 1;
  if (frame == 0) j.stats.first_frame_s = since(j.submitted);
  AudioChunk c;
  c.first_frame = frame;
  c.frames = 1;
  c.codes = r.codes.data();
  c.codebooks = static_cast<int64_t>(r.codes.size());
  if (j.codec) {
    j.samples.clear();
    if (Status st = j.codec->decode(r.codes.data(), 1, j.samples); !st.ok()) return finish(j, st);
    c.samples = j.samples.data();
    c.count = j.samples.size();
    if (c.count > 0 && j.stats.first_audio_s == 0) j.stats.first_audio_s = since(j.submitted);
  }
  if (j.on_chunk) {
    Status st = j.on_chunk(c);
    if (!st.ok()) {
      j.stream->cancel();
      finish(j, st);
    }
  }
}

void Synthesizer::step_group(std::vector<Job*>& group) {
  std::vector<TtsStream*> streams;
  streams.reserve(group.size());
  for (Job* j : group) {
    if (j->handle->cancel_.load() && !j->stream->finished()) j->stream->cancel();
    streams.push_back(j->stream.get());
  }
  std::vector<StepResult> out(streams.size());
  StageTimes t;
  Status st = model_->generator().step(streams, out, &t);
  for (size_t i = 0; i < group.size(); ++i) {
    Job& j = *group[i];
    if (!st.ok()) {
      finish(j, st);
      continue;
    }
    j.stats.times.prefill_s += t.prefill_s;
    j.stats.times.backbone_s += t.backbone_s;
    j.stats.times.depth_s += t.depth_s;
    j.stats.times.sampling_s += t.sampling_s;
    deliver(j, out[i]);
    if (!j.ended && j.stream->finished()) finish(j, ok_status());
  }
}

void Synthesizer::run() {
  const bool joins = model_->generator().joins_running_batch();
  for (;;) {
    std::vector<std::unique_ptr<Job>> admitted;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !groups_.empty(); });
      if (stop_) break;
      while (!queue_.empty() && running_count_ < options_.max_running) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
        admitted.back()->admitted = true;
        ++running_count_;
      }
    }
    for (auto& j : admitted) j->stats.admitted_s = since(j->submitted);
    if (!admitted.empty()) {
      if (joins && !groups_.empty()) {
        for (auto& j : admitted) groups_[0].push_back(std::move(j));
      } else {
        groups_.push_back(std::move(admitted));
      }
    }
    for (auto& g : groups_) {
      std::vector<Job*> group;
      for (auto& j : g) group.push_back(j.get());
      step_group(group);
      std::erase_if(g, [](const std::unique_ptr<Job>& j) { return j->ended; });
    }
    std::erase_if(groups_, [](const std::vector<std::unique_ptr<Job>>& g) { return g.empty(); });
  }
  // Shutting down: everything still running or queued ends as cancelled.
  std::deque<std::unique_ptr<Job>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued.swap(queue_);
  }
  for (auto& g : groups_)
    for (auto& j : g) {
      j->stream->cancel();
      finish(*j, ok_status());
    }
  groups_.clear();
  for (auto& j : queued) {
    j->stream->cancel();
    finish(*j, ok_status());
  }
}

}  // namespace chorus::engine
