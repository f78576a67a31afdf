// GET /v1/audio/speech/stream: speech for text that is still being written, over a WebSocket
// (docs/websocket.md). The client configures the session with the fields of POST /v1/audio/speech
// (checked by the same code), then sends text deltas; each utterance (text up to input.done) is one
// audio stream: audio.start, binary frames as they are made, audio.done with its usage, then
// session.done. input.cancel stops the utterance before its next frame and nothing more of it is
// sent; the session stays open for new text.
//
// Where the model can take its text in pieces (Qwen3-TTS in the streaming text layout), one request
// is fed the deltas as they come (Synthesizer::submit_text), so the audio equals the full-text run
// of the same request and seed however the text was cut and timed. Elsewhere (Breeze TTS 2, the
// full-text layout) complete sentences are spoken one after another (text_split.h), seeded as the
// HTTP path seeds its segments, into the same single stream.
#include <chrono>
#include <deque>

#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "audio/stream_encoder.h"
#include "audio/tempo.h"
#include "io/json_util.h"
#include "server/response_audio.h"
#include "server/service.h"
#include "server/text_split.h"
#include "server/websocket.h"

namespace chorus::server {

namespace http = boost::beast::http;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_message(const ApiError& e) {
  return {{"type", "error"},
          {"status", e.status},
          {"message", e.message},
          {"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json() : json(e.param)},
            {"code", e.code.empty() ? json() : json(e.code)}}}};
}

class StreamSession;

// One utterance: the text from its first input.text to input.done, spoken as one audio stream.
// Guarded by the session's mutex, but for its encoding state (below).
struct Utterance {
  engine::SynthesisRequest base;
  bool whole_text = false;  // the model needs whole text: sentences are spoken one by one
  std::shared_ptr<engine::Synthesis> synth;  // the running request (a sentence's, when whole_text)
  std::string pending;                       // whole_text: text not yet cut into sentences
  std::deque<std::string> segments;          // whole_text: sentences waiting their turn
  uint32_t next_take = 0;                    // whole_text: the next segment's rng stream offset
  bool running = false, input_done = false, cancelled = false, ended = false;
  size_t chars = 0;
  // Touched only by the session's ordered work on the encoding threads (StreamSession::encode):
  ResponseAudio encoder;
  std::string encoded;  // the encoder's output not yet sent
  size_t queued = 0;           // samples handed to the encoding and not yet encoded
  Status failed = ok_status();  // the encoder's refusal, if any
  Clock::time_point started;
  double first_audio_s = 0, audio_s = 0;
  int64_t text_tokens = 0, frames = 0;
};

class StreamSession : public std::enable_shared_from_this<StreamSession> {
 public:
  StreamSession(Service* svc, std::shared_ptr<WebSocket> ws) : svc_(svc), ws_(std::move(ws)) {}

  void on_message(std::string message, bool binary) {
    if (binary) return send_error(bad_request("binary messages are not accepted; send JSON text messages", {}, "invalid_message"));
    io::JsonLimits jl;
    jl.max_depth = 8;
    auto parsed = io::parse_json(message, "message", jl);
    if (!parsed.ok()) return send_error(bad_request("the message is not valid JSON: " + parsed.error().message, {}, "invalid_json"));
    const json& j = *parsed;
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
      return send_error(bad_request("a message must be a JSON object with a string 'type'", "type", "invalid_message"));
    const std::string type = j["type"];
    if (type == "session.config") return configure(j);
    if (type == "input.text") return input_text(j);
    if (type == "input.done") return input_done();
    if (type == "input.cancel") return cancel();
    if (type == "session.close") return close_session();
    send_error(bad_request("unknown message type '" + type +
                               "'; expected session.config, input.text, input.done, input.cancel or session.close",
                           "type", "unknown_message_type"));
  }

  // The client is gone: its utterance stops.
  void on_closed() {
    std::shared_ptr<engine::Synthesis> s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      if (current_ && !current_->ended) {
        current_->cancelled = true;
        s = current_->synth;
        end_locked(*current_, true);
      }
    }
    if (s) s->cancel();
  }

 private:
  // Everything the session sends goes out in the order it is made: at once while none of the
  // session's work (out_q_) waits on the encoding threads, else after that work
  // (Service::run_or_post_serial), so a message never overtakes the audio before it. The work
  // sends directly, in its turn.
  void emit(std::function<void()> f) { svc_->run_or_post_serial(out_q_, std::move(f)); }
  void send(const json& j) {
    emit([ws = ws_, s = dump(j)]() mutable { ws->send_text(std::move(s)); });
  }
  void send_error(const ApiError& e) { send(error_message(e)); }
  void close_ws(int code = 1000, std::string reason = {}) {
    emit([ws = ws_, code, reason]() mutable { ws->close(code, std::move(reason)); });
  }

  void configure(const json& j) {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_ && !current_->ended)
      return send_error(ApiError{409, "an utterance is being spoken; send input.cancel or wait for audio.done before session.config",
                                 "invalid_request_error", {}, "utterance_in_progress"});
    json body = j;
    body.erase("type");
    // Raw PCM suits a socket best; the HTTP default (mp3) is for files.
    if (!body.contains("response_format")) body["response_format"] = "pcm";
    SpeechParse parsed = parse_speech_object(body, svc_->options().limits, false, {"type"});
    if (!parsed.params) return send_error(parsed.error);
    if (parsed.params->sse) return send_error(bad_request("stream_format does not apply to the WebSocket", "stream_format"));
    engine::SynthesisRequest q;
    LoadedModel* lm = nullptr;
    if (auto e = svc_->prepare_request(*parsed.params, &lm, q)) return send_error(*e);
    if (parsed.params->speed != 1.0) {
      auto t = audio::TempoStretcher::create(static_cast<int>(lm->model->codec().sample_rate()), parsed.params->speed);
      if (!t.ok()) return send_error(api_error_from(t.error(), "speed"));
    }
    params_ = std::move(parsed.params);
    model_ = lm;
    base_ = std::move(q);
    // Text given with the configuration starts the first utterance.
    if (!params_->input.empty()) append_locked(params_->input);
  }

  void input_text(const json& j) {
    auto it = j.find("text");
    if (it == j.end() || !it->is_string()) return send_error(bad_request("input.text needs a string 'text'", "text"));
    for (const auto& [k, v] : j.items())
      if (k != "type" && k != "text") return send_error(bad_request("input.text takes only 'text' (got '" + k + "')", k, "unknown_parameter"));
    std::lock_guard<std::mutex> lock(mu_);
    append_locked(it->get_ref<const std::string&>());
  }

  void append_locked(const std::string& text) {
    if (!params_) return send_error(bad_request("send session.config before input.text", {}, "session_not_configured"));
    if (text.find('\0') != std::string::npos) return send_error(bad_request("'text' contains a NUL character", "text"));
    if (text.empty()) return;
    // The utterance stopped before its text was done (end of speech, the frame limit): the rest of
    // its text is not spoken, and does not start another utterance.
    if (current_ && current_->ended && !current_->cancelled && !current_->input_done) return;
    if (current_ && !current_->ended && current_->input_done)
      return send_error(ApiError{409, "the previous input is still being spoken; wait for session.done or send input.cancel",
                                 "invalid_request_error", {}, "utterance_in_progress"});
    if (!current_ || current_->ended)
      if (!start_locked()) return;
    Utterance& u = *current_;
    u.chars += utf8_length(text);
    if (u.chars > svc_->options().limits.max_input_chars) {
      send_error(bad_request("the utterance is longer than " + std::to_string(svc_->options().limits.max_input_chars) +
                                 " characters; send input.done sooner",
                             "text", "string_above_max_length"));
      return abort_locked(u);
    }
    if (!u.whole_text) {
      // The feed takes deltas cut anywhere; the scheduler is woken by it.
      if (Status st = u.synth->append_text(text); !st.ok()) {
        send_error(api_error_from(st.error(), "text"));
        return abort_locked(u);
      }
      return;
    }
    u.pending += text;
    for (auto& s : take_segments(u.pending, svc_->options().max_segment_chars, false)) u.segments.push_back(std::move(s));
    submit_next_locked(current_);
  }

  // A new utterance: its encoder, audio.start, and (where the model takes text in pieces) its
  // request. False after sending an error.
  bool start_locked() {
    auto u = std::make_shared<Utterance>();
    u->base = base_;
    u->started = Clock::now();
    const int rate = static_cast<int>(model_->model->codec().sample_rate());
    if (params_->speed != 1.0) {
      auto t = audio::TempoStretcher::create(rate, params_->speed);
      if (!t.ok()) return send_error(api_error_from(t.error(), "speed")), false;
      u->encoder.tempo = std::move(*t);
    }
    Utterance* raw = u.get();
    auto enc = audio::StreamEncoder::create(params_->format, rate, [raw](const uint8_t* d, size_t n) {
      raw->encoded.append(reinterpret_cast<const char*>(d), n);  // in the session's ordered work
      return ok_status();
    });
    if (!enc.ok()) return send_error(api_error_from(enc.error(), "response_format")), false;
    u->encoder.enc = std::move(*enc);
    auto s = model_->synth->submit_text(u->base, chunk_callback(u), options_for(u));
    if (!s.ok() && s.error().code == ErrorCode::kUnsupported) {
      u->whole_text = true;
    } else if (!s.ok()) {
      send_error(svc_->submit_error(s.error()));
      return false;
    } else {
      u->synth = *s;
      u->running = true;
    }
    current_ = u;
    svc_->metrics().stream_started();
    send({{"type", "audio.start"}, {"sample_rate", rate}, {"format", audio::stream_format_name(params_->format)}});
    return true;
  }

  engine::ChunkCallback chunk_callback(const std::shared_ptr<Utterance>& u) {
    std::weak_ptr<StreamSession> weak = shared_from_this();
    return [weak, u](const engine::AudioChunk& c) -> Status {
      auto self = weak.lock();
      if (!self) return make_error(ErrorCode::kCancelled, "the session is gone");
      return self->on_chunk(u, c);
    };
  }

  engine::SynthesisOptions options_for(const std::shared_ptr<Utterance>& u) {
    engine::SynthesisOptions so;
    std::weak_ptr<StreamSession> weak = shared_from_this();
    so.on_done = [weak, u](const Result<engine::SynthesisStats>& r) {
      auto self = weak.lock();
      if (!self) return;
      // Off the scheduler thread: the next sentence's submit() tokenizes.
      self->svc_->post_work([self, u, r] { self->request_done(u, r); });
    };
    return so;
  }

  // On the scheduler thread: a copy of the samples goes to the encoding threads, in order. The
  // backlog counts the samples still to encode as 16-bit PCM.
  Status on_chunk(const std::shared_ptr<Utterance>& up, const engine::AudioChunk& c) {
    std::lock_guard<std::mutex> lock(mu_);
    Utterance& u = *up;
    if (u.cancelled || u.ended || closed_) return make_error(ErrorCode::kCancelled, "the utterance was cancelled");
    if (!u.failed.ok()) return u.failed;
    if (ws_->backlog() + u.queued * sizeof(int16_t) > svc_->options().max_stream_backlog_bytes) {
      send_error(ApiError{400, "the client reads too slowly; the session is closed", "invalid_request_error", {}, "slow_reader"});
      u.cancelled = true;
      end_locked(u, true);
      close_ws(1008, "slow reader");
      return make_error(ErrorCode::kCancelled, "the client reads too slowly");
    }
    if (c.count == 0) return ok_status();
    if (u.first_audio_s == 0) u.first_audio_s = std::chrono::duration<double>(Clock::now() - u.started).count();
    u.queued += c.count;
    svc_->post_serial(out_q_, [self = shared_from_this(), up, s = std::vector<float>(c.samples, c.samples + c.count)] {
      self->encode(*up, s);
    });
    return ok_status();
  }

  // In the session's ordered work: one chunk through the speed change and the encoder, its bytes
  // sent unless the utterance was cancelled or the client left meanwhile.
  void encode(Utterance& u, const std::vector<float>& s) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      u.queued -= s.size();
      if (u.cancelled || closed_ || !u.failed.ok()) return;
    }
    const Status st = u.encoder.write(s.data(), s.size());
    std::lock_guard<std::mutex> lock(mu_);
    if (!st.ok()) u.failed = st;
    send_encoded_locked(u);
  }

  void send_encoded_locked(Utterance& u) {
    if (!u.encoded.empty() && !u.cancelled && !closed_) ws_->send_binary(std::move(u.encoded));
    u.encoded.clear();
  }

  // whole_text: submits the next complete sentence when none is running; ends the utterance when
  // its input is done and everything has been spoken.
  void submit_next_locked(const std::shared_ptr<Utterance>& u) {
    while (!u->running && !u->ended && !u->cancelled) {
      if (u->segments.empty()) {
        if (u->input_done) finish_locked(u);
        return;
      }
      engine::SynthesisRequest r = u->base;
      r.text = std::move(u->segments.front());
      u->segments.pop_front();
      r.rng_stream = u->base.rng_stream + u->next_take++;  // one seed, a new take per segment, as over HTTP
      auto s = model_->synth->submit(r, chunk_callback(u), options_for(u));
      if (!s.ok()) {
        send_error(svc_->submit_error(s.error()));
        return abort_locked(*u);
      }
      u->synth = *s;
      u->running = true;
    }
  }

  void request_done(const std::shared_ptr<Utterance>& u, const Result<engine::SynthesisStats>& r) {
    std::lock_guard<std::mutex> lock(mu_);
    u->running = false;
    if (r.ok()) {
      u->audio_s += r->audio_s;
      u->text_tokens += r->text_tokens;
      u->frames += r->frames;
    }
    if (u->ended || u->cancelled) return;
    // Cancelled from outside (the synthesizer shutting down): nothing more is sent.
    if (r.ok() && r->stop == engine::StopReason::kCancelled) return end_locked(*u, true);
    if (!r.ok()) {
      send_error(ApiError{500, r.error().message, "server_error", {}, {}});
      return abort_locked(*u);
    }
    if (!u->whole_text) return finish_locked(u);
    submit_next_locked(u);
  }

  void input_done() {
    std::shared_ptr<engine::Synthesis> feed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!params_) return send_error(bad_request("send session.config before input.done", {}, "session_not_configured"));
      if (!current_ || current_->ended) {
        // Nothing was said, or the utterance has already ended (its audio.done was sent).
        if (current_) current_->input_done = true;
        send({{"type", "session.done"}});
        if (closing_) close_ws();
        return;
      }
      Utterance& u = *current_;
      if (u.input_done) return;
      u.input_done = true;
      if (u.whole_text) {
        for (auto& s : take_segments(u.pending, svc_->options().max_segment_chars, true)) u.segments.push_back(std::move(s));
        return submit_next_locked(current_);
      }
      feed = u.synth;
    }
    if (Status st = feed->finish_text(); !st.ok()) send_error(api_error_from(st.error(), "text"));
  }

  void cancel() {
    std::shared_ptr<engine::Synthesis> s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!current_ || current_->ended) return;
      Utterance& u = *current_;
      // From here on_chunk sends nothing more of it; the request stops before its next frame.
      u.cancelled = true;
      s = u.synth;
      u.segments.clear();
      send({{"type", "audio.done"}, {"cancelled", true}, {"usage", usage(u)}});
      end_locked(u, true);
    }
    if (s) s->cancel();
  }

  void close_session() {
    bool now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
      now = !current_ || current_->ended;
    }
    if (now) return close_ws();
    input_done();  // what was said is finished first; the socket closes after session.done
  }

  static json usage(const Utterance& u) {
    return {{"input_tokens", u.text_tokens}, {"output_tokens", u.frames}, {"total_tokens", u.text_tokens + u.frames}};
  }

  // The utterance is over: counted once.
  void end_locked(Utterance& u, bool cancelled) {
    if (u.ended) return;
    u.ended = true;
    svc_->metrics().synthesis(u.first_audio_s, u.audio_s, std::chrono::duration<double>(Clock::now() - u.started).count());
    svc_->metrics().stream_ended(cancelled);
  }

  // Stops it after an error (already sent).
  void abort_locked(Utterance& u) {
    u.cancelled = true;
    if (u.synth) u.synth->cancel();
    end_locked(u, true);
  }

  // Everything was spoken: the utterance ends now; after its last chunks (the ordered work), the
  // encoder's tail, audio.done, and session.done when input.done has come (else input.done
  // answers it).
  void finish_locked(const std::shared_ptr<Utterance>& u) {
    end_locked(*u, false);
    svc_->post_serial(out_q_, [self = shared_from_this(), u, answer_done = u->input_done] {
      self->finish_audio(*u, answer_done);
    });
  }

  void finish_audio(Utterance& u, bool answer_done) {
    Status st = ok_status();
    {
      std::lock_guard<std::mutex> lock(mu_);
      st = u.failed;
    }
    if (st.ok()) st = u.encoder.finish();
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || u.cancelled) return;
    send_encoded_locked(u);
    if (!st.ok()) return ws_->send_text(dump(error_message(ApiError{500, st.error().message, "server_error", {}, {}})));
    ws_->send_text(dump({{"type", "audio.done"}, {"usage", usage(u)}}));
    if (!answer_done) return;
    ws_->send_text(dump({{"type", "session.done"}}));
    if (closing_) ws_->close();
  }

  Service* svc_;
  std::shared_ptr<WebSocket> ws_;
  std::mutex mu_;
  std::optional<SpeechParams> params_;
  LoadedModel* model_ = nullptr;
  engine::SynthesisRequest base_;
  std::shared_ptr<Utterance> current_;
  bool closing_ = false, closed_ = false;
  // The session's work on the encoding threads, in order, and with it what it sends (emit).
  std::shared_ptr<SerialQueue> out_q_ = std::make_shared<SerialQueue>();
};

}  // namespace

void Service::handle_speech_stream(Request&& req, Responder r) {
  if (!Responder::is_websocket_upgrade(req)) {
    Response res{http::status::upgrade_required, 11};
    res.set(http::field::content_type, "application/json");
    res.set(http::field::upgrade, "websocket");
    res.set(http::field::connection, "Upgrade");
    res.body() = ApiError{426, "this endpoint speaks WebSocket: connect with a WebSocket client", "invalid_request_error", {}, "upgrade_required"}
                     .to_json();
    metrics_.request("speech_stream", 426);
    return r.respond(std::move(res));
  }
  metrics_.request("speech_stream", 101);
  auto ws = r.upgrade(std::move(req));
  auto session = std::make_shared<StreamSession>(this, ws);
  WebSocketCallbacks cb;
  cb.on_message = [session](std::string m, bool binary) { session->on_message(std::move(m), binary); };
  cb.on_closed = [session] { session->on_closed(); };
  ws->start(std::move(cb));
}

}  // namespace chorus::server
