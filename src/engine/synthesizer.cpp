#include "engine/synthesizer.h"

#include <algorithm>
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
  int64_t last_step = -1;      // the scheduler's last step_group call that stepped it
  bool ended = false;
  double audio_limit_s = 0;    // at the frame limit
  double first_audio_deadline_s = 0, total_deadline_s = 0;
};

// A step's frames on their way through the codec on the decode thread: the step's jobs in the
// group's order with their results, and the codec's statuses and time.
struct Synthesizer::Decode {
  std::vector<Job*> group;
  std::vector<StepResult> out;
  std::vector<Status> decoded;
  std::vector<size_t> which;  // the jobs with a frame for the codec
  int64_t step = 0;           // the step_group call that made the frames
  double seconds = 0;
};

// One worker running one task at a time for the scheduler, which waits for its end.
class Synthesizer::DecodeThread {
 public:
  DecodeThread() : thread_([this] { loop(); }) {}
  ~DecodeThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = std::move(task);
      busy_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || task_; });
      if (task_) {
        std::function<void()> task = std::move(task_);
        task_ = nullptr;
        lock.unlock();
        task();
        lock.lock();
        busy_ = false;
        cv_.notify_all();
      } else if (stop_) {
        return;
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> task_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;  // last: started once the rest is made
};

// Text feeds hold this, not the Synthesizer, so a feed that outlives it wakes nothing.
struct Synthesizer::Waker {
  std::mutex mu;
  Synthesizer* owner = nullptr;
  void wake() {
    std::lock_guard<std::mutex> lock(mu);
    if (!owner) return;
    {
      std::lock_guard<std::mutex> l(owner->mu_);
      owner->input_arrived_ = true;
    }
    owner->cv_.notify_all();
  }
};

void Synthesis::cancel() {
  cancel_.store(true);
  if (text_feed_) text_feed_->poke();  // it may be waiting for text with the scheduler asleep
}

Status Synthesis::append_text(std::string_view delta) {
  if (!text_feed_) return make_error(ErrorCode::kInvalidArgument, "this request was given its whole text");
  return text_feed_->append(delta);
}

Status Synthesis::finish_text() {
  if (!text_feed_) return make_error(ErrorCode::kInvalidArgument, "this request was given its whole text");
  return text_feed_->finish();
}

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
  waker_ = std::make_shared<Waker>();
  waker_->owner = this;
  const bool gpu_codec = model_->has_codec() && model_->codec().on_gpu();
  const auto overlap = options_.codec_overlap;
  if (model_->has_codec() && model_->generator().joins_running_batch() &&
      (overlap == SynthesizerOptions::CodecOverlap::kOn ||
       (overlap == SynthesizerOptions::CodecOverlap::kAuto && gpu_codec)))
    decode_thread_ = std::make_unique<DecodeThread>();
  thread_ = std::thread([this] { run(); });
}

Synthesizer::~Synthesizer() {
  {
    std::lock_guard<std::mutex> lock(waker_->mu);
    waker_->owner = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Synthesizer::Counters Synthesizer::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

Synthesizer::Load Synthesizer::load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {running_count_, static_cast<int>(queue_.size()), queued_audio_s_};
}

double Synthesizer::retry_after_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  // A place frees when a running request ends; with no history, a second is a fair guess.
  const double frames_per_request = 12.5 * 10.0;
  const double s = step_s_ * frames_per_request * (1.0 + static_cast<double>(queue_.size())) /
                   static_cast<double>(options_.max_running);
  return std::max(1.0, std::min(s, 60.0));
}

void Synthesizer::expire_queued(std::vector<std::unique_ptr<Job>>& expired) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    const Job& j = **it;
    const double waited = since(j.submitted);
    if ((j.first_audio_deadline_s > 0 && waited > j.first_audio_deadline_s) ||
        (j.total_deadline_s > 0 && waited > j.total_deadline_s)) {
      queued_audio_s_ -= j.audio_limit_s;
      expired.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
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
  return enqueue(std::move(job), request, options);
}

Result<std::shared_ptr<Synthesis>> Synthesizer::submit_text(const SynthesisRequest& request, ChunkCallback on_chunk,
                                                            const SynthesisOptions& options) {
  auto job = std::make_unique<Job>();
  job->submitted = Clock::now();
  job->on_chunk = std::move(on_chunk);
  job->on_done = options.on_done;
  std::shared_ptr<TextFeed> feed;
  CHORUS_ASSIGN(job->stream, model_->generator().create_text_stream(request, &feed));
  std::weak_ptr<Waker> waker = waker_;
  feed->set_wake([waker] {
    if (auto w = waker.lock()) w->wake();
  });
  job->handle = std::make_shared<Synthesis>();
  job->handle->text_feed_ = std::move(feed);
  return enqueue(std::move(job), request, options);
}

Result<std::shared_ptr<Synthesis>> Synthesizer::enqueue(std::unique_ptr<Job> job, const SynthesisRequest& request,
                                                        const SynthesisOptions& options) {
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
  if (!job->handle) job->handle = std::make_shared<Synthesis>();
  job->handle->max_frames_ = job->stats.max_frames;
  const double rate = model_->info().frame_rate > 0 ? model_->info().frame_rate : 12.5;
  job->audio_limit_s = static_cast<double>(job->stats.max_frames) / rate;
  job->first_audio_deadline_s = options.first_audio_deadline_s;
  job->total_deadline_s = options.total_deadline_s;
  std::shared_ptr<Synthesis> handle = job->handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return make_error(ErrorCode::kCancelled, "the synthesizer is shutting down");
    if (static_cast<int>(queue_.size()) >= options_.max_queued)
      return make_error(ErrorCode::kResourceExhausted,
                        "too many requests waiting (" + std::to_string(queue_.size()) + "): try again later");
    if (options_.max_queued_audio_s > 0 && queued_audio_s_ + job->audio_limit_s > options_.max_queued_audio_s)
      return make_error(ErrorCode::kResourceExhausted, "too much audio waiting to be made: try again later");
    handle->id_ = next_id_++;
    queued_audio_s_ += job->audio_limit_s;
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
  // Known only at the end for a request whose text arrived while it ran.
  j.stats.max_frames = j.stream->max_frames();
  j.stats.text_tokens = j.stream->text_tokens();
  j.stats.prompt_rows = j.stream->prompt_rows();
  j.stats.audio_s = model_->info().frame_rate > 0 ? static_cast<double>(j.stats.frames) / model_->info().frame_rate : 0;
  j.stats.total_s = since(j.submitted);
  ++record_.ended;
  const auto t0 = Clock::now();
  j.codec.reset();
  j.stream.reset();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double released = since(t0);
    counters_.release_s += released;
    record_.release_s += released;
    if (j.admitted) --running_count_;  // before the waiter wakes, so load() never counts a request that has ended
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

void Synthesizer::begin_frame(Job& j) {
  if (j.stream->frames() == 1) j.stats.first_frame_s = since(j.submitted);
}

Status Synthesizer::send_frame(Job& j, const StepResult& r) {
  AudioChunk c;
  c.first_frame = j.stream->frames() - 1;
  c.frames = 1;
  c.codes = r.codes.data();
  c.codebooks = static_cast<int64_t>(r.codes.size());
  if (j.codec) {
    c.samples = j.samples.data();
    c.count = j.samples.size();
    if (c.count > 0 && j.stats.first_audio_s == 0) j.stats.first_audio_s = since(j.submitted);
  }
  return j.on_chunk ? j.on_chunk(c) : ok_status();
}

std::unique_ptr<Synthesizer::Decode> Synthesizer::prepare_decode(const std::vector<Job*>& group,
                                                                 std::vector<StepResult>& out) {
  auto d = std::make_unique<Decode>();
  // Jobs that ended while this step ran (their previous chunk failed) are left out: they are
  // freed before the decode completes.
  for (size_t i = 0; i < group.size(); ++i) {
    Job& j = *group[i];
    if (j.ended) continue;
    d->group.push_back(&j);
    d->out.push_back(std::move(out[i]));
    if (!d->out.back().has_frame) continue;
    begin_frame(j);
    if (!j.codec) continue;
    j.samples.clear();
    d->which.push_back(d->group.size() - 1);
  }
  d->decoded.assign(d->group.size(), ok_status());
  d->step = step_index_;
  return d;
}

void Synthesizer::run_decode(Decode& d) const {
  const auto t0 = Clock::now();
  std::vector<CodecStream*> streams;
  std::vector<const int32_t*> codes;
  std::vector<std::vector<float>*> samples;
  for (size_t i : d.which) {
    streams.push_back(d.group[i]->codec.get());
    codes.push_back(d.out[i].codes.data());
    samples.push_back(&d.group[i]->samples);
  }
  if (!streams.empty()) {  // every stream's new frame in one call: the codec decodes them together
    const std::vector<int64_t> frames(streams.size(), 1);
    const std::vector<Status> st = model_->codec().decode_streams(streams, codes, frames, samples);
    for (size_t k = 0; k < d.which.size(); ++k) d.decoded[d.which[k]] = st[k];
  }
  d.seconds = since(t0);
}

void Synthesizer::complete_decode(Ending ending) {
  std::unique_ptr<Decode> d;
  if (in_flight_) {
    if (decode_thread_) decode_thread_->wait();
    d = std::move(in_flight_);
    const auto t0 = Clock::now();
    for (size_t i = 0; i < d->group.size(); ++i) {
      Job& j = *d->group[i];
      if (d->out[i].has_frame && !j.ended && d->decoded[i].ok()) d->decoded[i] = send_frame(j, d->out[i]);
    }
    const double decoded = d->seconds + since(t0);
    record_.decode_s += decoded;
    std::lock_guard<std::mutex> lock(mu_);
    counters_.decode_s += decoded;
  }
  // After their last chunks, before the in-flight step's ends (which would end them as finished).
  for (auto& [j, status] : ending) finish(*j, std::move(status));
  if (d) end_stepped(d->group, d->decoded, d->step);
}

void Synthesizer::end_stepped(const std::vector<Job*>& group, const std::vector<Status>& decoded, int64_t step) {
  for (size_t i = 0; i < group.size(); ++i) {
    Job& j = *group[i];
    if (!decoded[i].ok()) {
      j.stream->cancel();
      finish(j, decoded[i]);
    } else if (!j.ended && j.stream->finished() && j.last_step <= step) {
      finish(j, ok_status());
    }
  }
}

bool Synthesizer::step_group(std::vector<Job*>& group) {
  // Jobs are ended only where no decode of theirs is in flight: past deadlines and failed input
  // are collected here and ended after the decode in flight completes.
  ++step_index_;
  Ending ending;
  std::vector<Job*> live;
  std::vector<TtsStream*> streams;
  for (Job* j : group) {
    if (j->ended) continue;
    if (j->handle->cancel_.load() && !j->stream->finished()) j->stream->cancel();
    const double t = since(j->submitted);
    const char* missed = nullptr;
    if (j->first_audio_deadline_s > 0 && j->stats.first_audio_s == 0 && t > j->first_audio_deadline_s)
      missed = "no audio within the first-audio deadline";
    else if (j->total_deadline_s > 0 && t > j->total_deadline_s)
      missed = "not finished within the total deadline";
    if (missed) {
      j->stream->cancel();
      ending.emplace_back(j, make_error(ErrorCode::kResourceExhausted, std::string("deadline: ") + missed + " (" +
                                                                           std::to_string(t) + " s after submission)"));
      continue;
    }
    // A finished stream (cancelled, or its last frame still in the codec) is stepped no more.
    if (j->stream->finished()) continue;
    // Streams waiting for input (text still being written) sit this step out.
    Result<bool> ready = j->stream->ready();
    if (!ready.ok()) {
      j->stream->cancel();
      ending.emplace_back(j, std::move(ready).error());
    } else if (*ready) {
      j->last_step = step_index_;
      live.push_back(j);
      streams.push_back(j->stream.get());
    }
  }
  std::vector<StepResult> out(streams.size());
  StageTimes t;
  Status st = ok_status();
  const auto t0 = std::chrono::steady_clock::now();
  if (!streams.empty()) st = model_->generator().step(streams, out, &t);
  const auto t1 = std::chrono::steady_clock::now();
  const bool ended_any = in_flight_ != nullptr || !ending.empty();
  complete_decode(std::move(ending));
  // Streams that finished without being stepped now (cancelled ones): nothing of theirs is left.
  bool swept = false;
  for (Job* j : group)
    if (!j->ended && j->stream->finished() && j->last_step != step_index_) {
      finish(*j, ok_status());
      swept = true;
    }
  if (live.empty()) return ended_any || swept;
  if (!st.ok()) {
    for (Job* j : live) finish(*j, st);
    return true;
  }
  for (Job* j : live) j->stats.times.add_seconds(t);
  const double generated = std::chrono::duration<double>(t1 - t0).count();
  record_.generate_s += generated;
  record_.streams += static_cast<int>(live.size());
  for (const StepResult& r : out) record_.frames += r.has_frame;
  record_.stages.add(t);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.steps;
    counters_.generate_s += generated;
  }
  in_flight_ = prepare_decode(live, out);
  if (decode_thread_) {
    decode_thread_->start([this, d = in_flight_.get()] { run_decode(*d); });
  } else {
    run_decode(*in_flight_);
    complete_decode();
  }
  return true;
}

void Synthesizer::run() {
  const bool joins = model_->generator().joins_running_batch();
  bool idle = false;  // every running request waits for input: sleep until some arrives
  for (;;) {
    std::vector<std::unique_ptr<Job>> admitted, expired;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto wakes = [&] { return stop_ || !queue_.empty() || input_arrived_ || (!groups_.empty() && !idle); };
      if (idle) {
        // A waiting request's deadline still needs checking when it passes.
        Clock::time_point next = Clock::time_point::max();
        for (const auto& g : groups_)
          for (const auto& j : g) {
            if (j->first_audio_deadline_s > 0 && j->stats.first_audio_s == 0)
              next = std::min(next, j->submitted + std::chrono::duration_cast<Clock::duration>(
                                                       std::chrono::duration<double>(j->first_audio_deadline_s)));
            if (j->total_deadline_s > 0)
              next = std::min(next, j->submitted + std::chrono::duration_cast<Clock::duration>(
                                                       std::chrono::duration<double>(j->total_deadline_s)));
          }
        if (next == Clock::time_point::max()) cv_.wait(lock, wakes);
        else cv_.wait_until(lock, next + std::chrono::milliseconds(1), wakes);
      } else {
        cv_.wait(lock, wakes);
      }
      input_arrived_ = false;
      if (stop_) break;
      expire_queued(expired);
      while (!queue_.empty() && running_count_ < options_.max_running) {
        queued_audio_s_ -= queue_.front()->audio_limit_s;
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
        admitted.back()->admitted = true;
        ++running_count_;
      }
      if (queue_.empty()) queued_audio_s_ = 0;  // no drift from summing doubles
    }
    for (auto& j : expired) {
      j->stream->cancel();
      finish(*j, make_error(ErrorCode::kResourceExhausted, "deadline: the request waited in the queue past its deadline"));
    }
    const Clock::time_point step_start = Clock::now();
    record_ = StepRecord{};
    for (auto& j : admitted) j->stats.admitted_s = since(j->submitted);
    if (!admitted.empty()) {
      if (joins && !groups_.empty()) {
        for (auto& j : admitted) groups_[0].push_back(std::move(j));
      } else {
        groups_.push_back(std::move(admitted));
      }
    }
    bool stepped = false;
    for (auto& g : groups_) {
      std::vector<Job*> group;
      for (auto& j : g) group.push_back(j.get());
      stepped = step_group(group) || stepped;
      std::erase_if(g, [](const std::unique_ptr<Job>& j) { return j->ended; });
    }
    idle = !stepped;
    std::erase_if(groups_, [](const std::vector<std::unique_ptr<Job>>& g) { return g.empty(); });
    const double took = since(step_start);
    if (stepped && options_.on_step) {
      record_.index = step_index_;
      record_.start = step_start;
      record_.seconds = took;
      options_.on_step(record_);
    }
    std::lock_guard<std::mutex> lock(mu_);
    step_s_ = step_s_ == 0 ? took : 0.9 * step_s_ + 0.1 * took;
  }
  // Shutting down: everything still running or queued ends as cancelled.
  complete_decode();
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
