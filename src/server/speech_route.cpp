// POST /v1/audio/speech: checks everything before the first byte (errors are then a proper 4xx),
// then streams audio as the Synthesizer makes it: per chunk, the samples are copied on the
// scheduler thread and the speed change and encoding run in order on an encoding thread
// (Service::post_serial: opus costs ~0.8 ms a frame, which hundreds of streams would add to every
// step), bytes handed to the connection. Long input is spoken segment after segment, each one
// submitted when the previous one ends, into one stream.
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "audio/stream_encoder.h"
#include "audio/tempo.h"
#include "server/request_head.h"
#include "server/response_audio.h"
#include "server/service.h"
#include "server/text_split.h"

namespace chorus::server {

namespace http = boost::beast::http;

namespace {

// One speech response in progress. Owned by the callbacks that still refer to it.
struct SpeechJob : std::enable_shared_from_this<SpeechJob> {
  Service* svc = nullptr;
  LoadedModel* model = nullptr;
  SpeechParams params;
  engine::SynthesisRequest base;
  std::vector<std::string> segments;
  size_t segment = 0;
  std::shared_ptr<StreamResponse> out;  // null when the whole body goes at once
  std::optional<Responder> responder;   // for the whole-body answer

  std::mutex mu;
  std::shared_ptr<engine::Synthesis> current;
  bool gone = false, ended = false;
  // Until the handler has set `out` or `responder`, bytes wait and an early end is kept for later.
  bool ready = false;
  std::optional<std::pair<bool, std::string>> pending_end;
  // The encoding, in order on the encoding threads (encoding): encoder and encoded are touched there
  // only; `queued` (samples posted and not yet encoded) and `failed` under mu.
  std::shared_ptr<SerialQueue> encoding = std::make_shared<SerialQueue>();
  ResponseAudio encoder;
  std::string encoded;  // the encoder's output of the chunk in progress
  size_t queued = 0;
  Status failed = ok_status();
  std::string bytes;  // encoded and not yet handed on
  std::string body;   // the whole answer when not streaming
  double first_audio_s = 0, audio_s = 0, total_s = 0;
  int64_t text_tokens = 0, frames = 0;

  engine::SynthesisRequest request_for(size_t i) const {
    engine::SynthesisRequest r = base;
    r.text = segments[i];
    r.rng_stream = base.rng_stream + static_cast<uint32_t>(i);  // one seed, a new take per segment
    return r;
  }

  // Hands encoded bytes on (under mu).
  void flush_bytes() {
    if (bytes.empty() || !ready) return;
    if (!out) {
      body += bytes;
    } else if (params.sse) {
      nlohmann::json e{{"type", "speech.audio.delta"}, {"audio", encode_base64(bytes)}};
      out->send("data: " + e.dump() + "\n\n");
    } else {
      out->send(std::move(bytes));
    }
    bytes.clear();
  }

  // On the scheduler thread: a copy of the samples goes to the encoding. The backlog counts the
  // samples still to encode as 16-bit PCM, so an encoding that falls behind drops the stream too.
  Status on_chunk(const engine::AudioChunk& c) {
    std::lock_guard<std::mutex> lock(mu);
    if (gone) return make_error(ErrorCode::kCancelled, "the client is gone");
    if (!failed.ok()) return failed;
    const size_t backlog = (out ? out->backlog() : 0) + queued * sizeof(int16_t);
    if (backlog > svc->options().max_stream_backlog_bytes)
      return make_error(ErrorCode::kCancelled, out ? "the client reads too slowly" : "the audio encoding falls behind");
    if (c.count == 0) return ok_status();
    queued += c.count;
    svc->post_serial(encoding, [self = shared_from_this(), s = std::vector<float>(c.samples, c.samples + c.count)] {
      self->encode(s);
    });
    return ok_status();
  }

  // On the encoding threads, chunk after chunk.
  void encode(const std::vector<float>& s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queued -= s.size();
      if (gone || ended || !failed.ok()) return;
    }
    const Status st = encoder.write(s.data(), s.size());
    std::lock_guard<std::mutex> lock(mu);
    if (!st.ok()) failed = st;
    bytes += encoded;
    encoded.clear();
    flush_bytes();
  }

  // Submits segment `segment`; on failure the error.
  Status submit_current() {
    auto self = shared_from_this();
    engine::SynthesisOptions so;
    so.on_done = [self](const Result<engine::SynthesisStats>& r) {
      // Not on the scheduler thread: the next segment's submit() tokenizes.
      self->svc->post_work([self, r] { self->segment_done(r); });
    };
    auto s = model->synth->submit(request_for(segment), [self](const engine::AudioChunk& c) { return self->on_chunk(c); }, so);
    if (!s.ok()) return s.error();
    std::lock_guard<std::mutex> lock(mu);
    current = *s;
    if (gone) current->cancel();
    return ok_status();
  }

  void segment_done(const Result<engine::SynthesisStats>& r) {
    bool cancelled = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (r.ok()) {
        if (segment == 0) first_audio_s = r->first_audio_s;
        audio_s += r->audio_s;
        total_s += r->total_s;
        text_tokens += r->text_tokens;
        frames += r->frames;
        cancelled = r->stop == engine::StopReason::kCancelled;
      }
      cancelled = cancelled || gone;
    }
    if (r.ok() && !cancelled && segment + 1 < segments.size()) {
      ++segment;
      if (Status st = submit_current(); st.ok()) return;
      else return end(false, st.error().message);
    }
    if (!r.ok()) return end(false, r.error().message);
    end(cancelled, {});
  }

  // After every chunk posted before it (the encoding's order).
  void end(bool cancelled, const std::string& error) {
    svc->post_serial(encoding, [self = shared_from_this(), cancelled, error] { self->end_now(cancelled, error); });
  }

  void end_now(bool cancelled, const std::string& error) {
    std::lock_guard<std::mutex> lock(mu);
    if (!ready) {
      pending_end.emplace(cancelled, error);
      return;
    }
    if (ended) return;
    ended = true;
    svc->metrics().synthesis(first_audio_s, audio_s, total_s);
    svc->metrics().stream_ended(cancelled || gone);
    if (gone || cancelled) {
      if (out) out->abort();
      return;
    }
    Status st = failed;
    if (error.empty() && st.ok()) {
      st = encoder.finish();
      bytes += encoded;
      encoded.clear();
      flush_bytes();
    }
    const std::string message = !error.empty() ? error : st.ok() ? std::string() : st.error().message;
    if (!out) {
      Responder r = *responder;
      if (!message.empty()) return svc->reply_error(r, "speech", ApiError{500, message, "server_error", {}, {}});
      return svc->reply(r, "speech", 200, std::move(body), audio::stream_format_mime(params.format));
    }
    if (params.sse) {
      nlohmann::json e;
      if (message.empty())
        e = {{"type", "speech.audio.done"},
             {"usage", {{"input_tokens", text_tokens}, {"output_tokens", frames}, {"total_tokens", text_tokens + frames}}}};
      else
        e = {{"type", "error"}, {"error", {{"message", message}, {"type", "server_error"}}}};
      out->send("data: " + e.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n");
      out->finish();
      return;
    }
    // After the headers an error can only show as a truncated body.
    if (!message.empty()) out->abort();
    else out->finish();
  }
};

}  // namespace

std::optional<ApiError> Service::prepare_request(const SpeechParams& p, LoadedModel** model, engine::SynthesisRequest& q) {
  LoadedModel* lm = find_model(p.model);
  if (!lm) return not_found("the model '" + p.model + "' does not exist", "model", "model_not_found");
  *model = lm;
  const engine::Model& m = *lm->model;
  q.language = p.language;
  q.instruct = p.instructions;
  q.xvector_only = p.x_vector_only;
  if (p.non_streaming_mode)
    q.layout = *p.non_streaming_mode ? engine::TextLayout::kFull : engine::TextLayout::kStreaming;
  q.max_frames = p.max_new_tokens;
  if (p.min_new_tokens > 0) {
    q.min_frames = p.min_new_tokens;
    q.length_cap.frames_per_token = 0;  // a length asked for exactly is not capped by the text's
  }
  q.seed = p.seed.value_or(0);
  q.cfg_scale = p.cfg_scale;
  for (auto* s : {&q.sampler, &q.depth_sampler}) {
    s->temperature = p.temperature;
    s->top_k = p.top_k;
    s->top_p = p.top_p;
  }
  q.sampler.repetition_penalty = p.repetition_penalty;

  // The voice: a stored voice id (or name), reference audio in the request, or a preset speaker.
  std::shared_ptr<const StoredVoice> stored;
  if (!p.voice.empty()) {
    stored = voices_->get(p.voice);
    if (!stored)
      for (const auto& v : voices_->list())
        if (v->name == p.voice) stored = v;
  }
  const bool looks_stored = p.voice_is_id || p.voice.rfind("voice_", 0) == 0;
  if (!stored && looks_stored)
    return not_found("no voice '" + p.voice + "'", "voice", "voice_not_found");
  if (stored) {
    if (!p.ref_audio.empty()) return bad_request("give either a stored voice or ref_audio, not both", "ref_audio");
    if (Status st = m.apply_voice(stored->voice, "voice '" + stored->id + "'", q); !st.ok())
      return api_error_from(st.error(), "voice");
  } else if (!p.ref_audio.empty()) {
    engine::ReferenceAudio ref;
    ref.bytes = p.ref_audio;
    ref.label = "ref_audio";
    auto v = m.create_voice(ref, p.ref_text, !p.x_vector_only);
    if (!v.ok()) return api_error_from(v.error(), "ref_audio");
    if (Status st = m.apply_voice(*v, "ref_audio", q); !st.ok()) return api_error_from(st.error(), "ref_audio");
    q.xvector_only = q.xvector_only || p.x_vector_only;
  } else if (!p.voice.empty()) {
    q.speaker = p.voice;
  } else if (p.task_type != "VoiceDesign" && p.instructions.empty()) {
    return bad_request("'voice' is required", "voice");
  }

  return std::nullopt;
}

ApiError Service::submit_error(const Error& err) {
  if (err.code == ErrorCode::kResourceExhausted) {
    metrics_.refusal("queue_full");
    return ApiError{429, err.message, "rate_limit_error", {}, "queue_full"};
  }
  ApiError e = api_error_from(err);
  if (err.message.find("speaker") != std::string::npos) {
    e.param = "voice";
    if (err.message.find("unknown speaker") != std::string::npos) e.status = 404, e.code = "voice_not_found";
  } else if (err.message.find("language") != std::string::npos) {
    e.param = "language";
  }
  return e;
}

void Service::handle_speech(Request&& req, Responder r) {
  if (!is_json_content_type(req[http::field::content_type]))
    return reply_error(r, "speech", ApiError{415, "Content-Type must be application/json", "invalid_request_error", {}, "unsupported_media_type"});
  SpeechParse parsed = parse_speech_body(req.body(), options_.limits);
  if (!parsed.params) return reply_error(r, "speech", parsed.error);
  SpeechParams& p = *parsed.params;
  LoadedModel* lm = nullptr;
  auto job = std::make_shared<SpeechJob>();
  job->svc = this;
  if (auto e = prepare_request(p, &lm, job->base)) return reply_error(r, "speech", *e);
  job->model = lm;
  const engine::Model& m = *lm->model;

  job->params = p;
  job->segments = split_text(p.input, options_.max_segment_chars);
  if (job->segments.empty()) return reply_error(r, "speech", bad_request("'input' must not be empty", "input"));
  if (p.speed != 1.0) {
    auto t = audio::TempoStretcher::create(static_cast<int>(m.codec().sample_rate()), p.speed);
    if (!t.ok()) return reply_error(r, "speech", api_error_from(t.error(), "speed"));
    job->encoder.tempo = std::move(*t);
  }
  // The job owns the encoder, so a plain pointer (a shared one would keep the job, its connection
  // and the encoder alive forever through the cycle).
  auto enc = audio::StreamEncoder::create(p.format, static_cast<int>(m.codec().sample_rate()), [j = job.get()](const uint8_t* d, size_t n) {
    j->encoded.append(reinterpret_cast<const char*>(d), n);  // on the encoding threads only
    return ok_status();
  });
  if (!enc.ok()) return reply_error(r, "speech", api_error_from(enc.error(), "response_format"));
  job->encoder.enc = std::move(*enc);
  job->bytes.swap(job->encoded);  // the format's header, written as the encoder was made

  // Admission: a full queue answers 429 at once; a bad field names it.
  if (Status st = job->submit_current(); !st.ok()) {
    const ApiError e = submit_error(st.error());
    return reply_error(r, "speech", e, e.status == 429 ? "1" : "");
  }
  metrics_.stream_started();
  std::optional<std::pair<bool, std::string>> early_end;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    if (!p.stream && !p.sse) {
      job->responder = r;
    } else {
      Response head{http::status::ok, 11};
      head.set(http::field::content_type, p.sse ? "text/event-stream" : audio::stream_format_mime(p.format));
      head.set(http::field::cache_control, "no-cache");
      head.set(http::field::server, "chorus");
      metrics_.request("speech", 200);
      job->out = r.start_stream(std::move(head));
    }
    job->ready = true;
    job->flush_bytes();
    early_end.swap(job->pending_end);
  }
  if (early_end) job->end(early_end->first, early_end->second);
  if (!job->out) return;
  std::weak_ptr<SpeechJob> weak = job;
  job->out->on_gone([weak] {
    if (auto j = weak.lock()) {
      std::lock_guard<std::mutex> l(j->mu);
      j->gone = true;
      if (j->current) j->current->cancel();
    }
  });
}

}  // namespace chorus::server
