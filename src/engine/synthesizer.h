// The whole job, text → audio, for every front end (CLI, server, Python, C API): a request goes in,
// PCM chunks come out as frames are made, through the model's generator and codec.
//
// One Synthesizer owns a loaded model's requests. submit() checks a request (a typed error names
// the bad field) and queues it; one scheduler thread admits queued requests first come, first
// served, and advances every running one by one frame per step, all in shared steps: a request
// joins at the next frame boundary and leaves when it stops, without disturbing the others. A
// request's codes and audio do not depend on which others run beside it. Callbacks run on the
// scheduler thread: they must be quick (hand the chunk on) and must not call back into the
// Synthesizer except cancel().
//
//   engine::Synthesizer synth(model);
//   auto stats = synth.synthesize(request, [&](const engine::AudioChunk& c) { play(c); return ok_status(); });
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/model.h"
#include "engine/request.h"
#include "engine/text_feed.h"
#include "engine/tts_model.h"

namespace chorus::engine {

// Frames just made and their audio (24 kHz mono floats, full scale 1.0).
struct AudioChunk {
  int64_t first_frame = 0;  // index of the first frame in the request
  int64_t frames = 0;       // frames covered (0 for the closing chunk of held-back samples)
  const int32_t* codes = nullptr;  // [frames, codebooks]
  int64_t codebooks = 0;
  const float* samples = nullptr;  // none when the request asked for codes only
  size_t count = 0;
};

// Returning an error stops the request (as cancel() does) and wait() returns that error: the
// receiving end is gone, for example.
using ChunkCallback = std::function<Status(const AudioChunk&)>;

struct SynthesisStats {
  StopReason stop = StopReason::kRunning;
  int64_t frames = 0, max_frames = 0, text_tokens = 0, prompt_rows = 0;
  double audio_s = 0;  // frames / frame rate
  // Seconds since submit(): admitted into the running set, first frame, first audio, done.
  double admitted_s = 0, first_frame_s = 0, first_audio_s = 0, total_s = 0;
  StageTimes times;  // of the steps this request took part in (shared with the others in them)
};

struct SynthesisOptions {
  bool audio = true;  // decode the frames (false: codes only)
  codec::DecodeMode decode_mode = codec::DecodeMode::kExact;
  // Voice cloning with reference codes: the official output decodes reference + generated frames and
  // cuts the reference's share, so the reference frames prime the codec first.
  bool prime_codec_with_ref_codes = true;
  // Called once on the scheduler thread when the request has stopped, with what wait() returns
  // (a server chains the next segment from it without a thread waiting per request). Like the
  // chunk callback it must be quick and must not call into the Synthesizer except cancel().
  std::function<void(const Result<SynthesisStats>&)> on_done;
  // Seconds after submit() (0: none). A request without audio by first_audio_deadline_s, or still
  // running at total_deadline_s, ends with kResourceExhausted naming the deadline (the audio made
  // so far has been delivered).
  double first_audio_deadline_s = 0;
  double total_deadline_s = 0;
};

// A submitted request.
class Synthesis {
 public:
  uint64_t id() const { return id_; }
  int64_t max_frames() const { return max_frames_; }  // the request's frame limit
  // Stops the request before its next frame (any thread, any time); its stats say kCancelled.
  void cancel();
  bool done() const;
  // Blocks until the request has stopped: its stats, or the error that ended it.
  Result<SynthesisStats> wait();

  // A request submitted by submit_text() takes its text here, from any thread: deltas split
  // anywhere (even inside a UTF-8 character), then finish_text(). Until then the request speaks
  // what it has and waits for more. Others answer kInvalidArgument; text after finish_text() too.
  bool takes_text() const { return text_feed_ != nullptr; }
  Status append_text(std::string_view delta);
  Status finish_text();

 private:
  friend class Synthesizer;
  std::shared_ptr<TextFeed> text_feed_;
  uint64_t id_ = 0;
  int64_t max_frames_ = 0;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  Result<SynthesisStats> result_ = SynthesisStats{};
};

// One pass of the scheduler that stepped or ended requests, as it went (SynthesizerOptions::on_step):
// what makes a step slow shows here (newcomers' prompts, graph captures, the codec).
struct StepRecord {
  int64_t index = 0;
  std::chrono::steady_clock::time_point start;
  double seconds = 0;     // the whole pass: admission, generation, codec, delivery, ends
  double generate_s = 0;  // the generator's step (prompts of newcomers included)
  double decode_s = 0;    // the codec and the chunk callbacks of the decode completed in this pass
  double release_s = 0;   // ending requests (their codec states and streams freed)
  int streams = 0;        // requests stepped
  int frames = 0;         // frames they got (a newcomer's prompt may take a step without one)
  int ended = 0;          // requests that ended in this pass
  StageTimes stages;      // the generator's account of its step (joined, prompt rows, captures)
};

struct SynthesizerOptions {
  int max_running = 256;   // requests stepped together at most; the rest wait in the queue
  int max_queued = 4096;   // waiting requests at most; submit() refuses more (kResourceExhausted)
  // Audio the waiting requests may ask for at most, counted at each request's frame limit (0: no
  // bound); submit() refuses more (kResourceExhausted).
  double max_queued_audio_s = 0;
  // Whether a step's frames are decoded on a second thread while the next step generates, so that
  // the device may run the codec and the generator at once: kAuto for a codec on the GPU, kOn for
  // any codec, kOff never. A chunk then reaches its callback after the next step's generation
  // instead of before it, in the same order; the codes and the audio do not change. Needs a
  // generator that joins new streams into its running batch (else off). Off by default: on the
  // H200 the two side by side took as long as in turn and first audio came later
  // (docs/PERFORMANCE.md; `chorus bench --serve --codec-overlap` measures it).
  enum class CodecOverlap { kAuto, kOn, kOff };
  CodecOverlap codec_overlap = CodecOverlap::kOff;
  // Called on the scheduler thread after each pass that stepped or ended requests; it must be quick.
  std::function<void(const StepRecord&)> on_step;
};

class Synthesizer {
 public:
  explicit Synthesizer(std::shared_ptr<const Model> model, SynthesizerOptions options = {});
  ~Synthesizer();  // stops every request (kCancelled) and joins the scheduler
  Synthesizer(const Synthesizer&) = delete;
  Synthesizer& operator=(const Synthesizer&) = delete;

  const Model& model() const { return *model_; }
  // Whether the codec's decode of a step overlaps the next step (SynthesizerOptions::codec_overlap).
  bool overlaps_codec() const { return decode_thread_ != nullptr; }
  std::shared_ptr<const Model> shared_model() const { return model_; }

  Result<std::shared_ptr<Synthesis>> submit(const SynthesisRequest& request, ChunkCallback on_chunk,
                                            const SynthesisOptions& options = {});
  // A request whose text arrives while it runs: `request` has no text; give it through the
  // handle's append_text() and finish_text(). The codes (and audio) equal those of submit() with
  // the whole text, however the text is cut and timed; while the next text token has not arrived
  // the request waits, without holding up the others. kUnsupported for models that need the whole
  // text first (Breeze TTS 2, Qwen3-TTS in the full-text layout).
  Result<std::shared_ptr<Synthesis>> submit_text(const SynthesisRequest& request, ChunkCallback on_chunk,
                                                 const SynthesisOptions& options = {});
  // submit() and wait().
  Result<SynthesisStats> synthesize(const SynthesisRequest& request, ChunkCallback on_chunk,
                                    const SynthesisOptions& options = {});

  struct Load {
    int running = 0, queued = 0;
    double queued_audio_s = 0;  // at the waiting requests' frame limits
  };
  Load load() const;
  // Where the scheduler's time went since the start: frame steps of the generator, the codec's
  // decoding (with the chunk callbacks) after each, and giving back the codec and generator state of
  // ended requests (anything there that waits for the device shows in release_s).
  struct Counters {
    int64_t steps = 0;
    double generate_s = 0, decode_s = 0, release_s = 0;
  };
  Counters counters() const;
  // Seconds after which a refused request may be tried again: the time the running requests need to
  // free a place, from the recent pace of the scheduler (at least 1).
  double retry_after_s() const;

 private:
  struct Job;
  struct Waker;
  struct Decode;
  class DecodeThread;
  void run();
  // Codec, stats and queueing of a job whose stream is made.
  Result<std::shared_ptr<Synthesis>> enqueue(std::unique_ptr<Job> job, const SynthesisRequest& request,
                                             const SynthesisOptions& options);
  // Steps the jobs of one set that may be stepped together and are not waiting for input (a failed
  // step ends every job in it); false when none was stepped.
  bool step_group(std::vector<Job*>& group);
  // A step's decode in three parts: the first and last on the scheduler thread (the frames' first
  // halves; the chunks to the callbacks in the group's order, and the jobs that ended with the
  // step finished), the middle on the decode thread when the codec overlaps the steps, else in line
  // (the codec alone: one Codec::decode_streams() call for every stream's new frame).
  std::unique_ptr<Decode> prepare_decode(const std::vector<Job*>& group, std::vector<StepResult>& out);
  void run_decode(Decode& d) const;
  // Waits for the decode in flight, if any, and completes it, ending the jobs of `ending` with their
  // errors once their last chunks are out.
  using Ending = std::vector<std::pair<Job*, Status>>;
  void complete_decode(Ending ending = {});
  // Ends the jobs of the decode of step `step`: a failed decode cancels its job, a finished stream
  // ends it unless it was stepped again since (its last frame is in a later decode).
  void end_stepped(const std::vector<Job*>& group, const std::vector<Status>& decoded, int64_t step);
  // A frame's first half (the first-frame time, before any decoding) and second half (the chunk,
  // with the samples the codec left in j.samples, to the callback).
  void begin_frame(Job& j);
  Status send_frame(Job& j, const StepResult& r);
  void finish(Job& j, Status status);
  // Ends requests past their deadlines: queued ones under mu_, running ones between steps.
  void expire_queued(std::vector<std::unique_ptr<Job>>& expired);

  std::shared_ptr<const Model> model_;
  SynthesizerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stop_ = false;
  bool input_arrived_ = false;   // text came for a request (or one was cancelled) since the last look
  std::shared_ptr<Waker> waker_;  // how text feeds wake the scheduler; outlives it safely
  uint64_t next_id_ = 1;
  int running_count_ = 0;        // admitted and not yet ended
  double queued_audio_s_ = 0;    // Load::queued_audio_s
  double step_s_ = 0;            // a step's recent duration (moving average), for retry_after_s()
  Counters counters_;
  // Owned by the scheduler thread: running jobs, in groups stepped together (one group when the
  // generator joins new streams into a running batch, else one per admission).
  std::vector<std::vector<std::unique_ptr<Job>>> groups_;
  // SynthesizerOptions::codec_overlap: the thread and the decode in flight on it (its jobs are
  // not ended before it completes).
  std::unique_ptr<DecodeThread> decode_thread_;
  std::unique_ptr<Decode> in_flight_;
  int64_t step_index_ = 0;  // step_group calls so far (scheduler thread)
  StepRecord record_;       // of the pass under way (scheduler thread)
  std::thread thread_;
};

}  // namespace chorus::engine
