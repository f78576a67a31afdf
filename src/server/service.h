// The speech API on top of the HTTP server: routing, authentication, draining, and the endpoints
//   POST /v1/audio/speech            speech (speech_route.cpp)
//   GET /v1/audio/speech/stream      speech for text still being written, WebSocket (speech_stream_route.cpp)
//   GET /                            the playground page (playground.h)
//   GET/POST /v1/audio/voices, GET/DELETE /v1/audio/voices/{id}   custom voices (voices_route.cpp)
//   GET /v1/models, /health, /ready, /metrics
// One Synthesizer per loaded model batches all of that model's requests.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/synthesizer.h"
#include "server/api_error.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/speech_request.h"
#include "server/voice_store.h"

namespace boost::asio {
class thread_pool;
}

namespace chorus::server {

struct ServiceOptions {
  std::string api_key;      // empty: no authentication
  std::string voices_dir;   // empty: voices in memory only
  SpeechLimits limits;
  size_t max_segment_chars = 300;  // long input is split into segments of at most this many characters
  engine::SynthesizerOptions synthesizer;
  size_t max_stream_backlog_bytes = 8u << 20;  // a reader this far behind is dropped
  // Threads that encode the responses' audio (0: a quarter of the cores, 1 to 8). Encoding is
  // per stream and frame (opus ~0.8 ms a frame on one core), so it stays off the scheduler thread.
  int encode_threads = 0;
};

// Work of one response that must run in order (its chunks' encoding, then its end) on the
// encoding threads: Service::post_serial.
struct SerialQueue {
  std::mutex mu;
  std::deque<std::function<void()>> items;
  bool running = false;
};

struct LoadedModel {
  std::string id;  // the name clients use in `model`
  std::shared_ptr<const engine::Model> model;
  std::unique_ptr<engine::Synthesizer> synth;
  int64_t created = 0;
};

class Service {
 public:
  static Result<std::unique_ptr<Service>> create(std::vector<std::pair<std::string, std::shared_ptr<const engine::Model>>> models,
                                                 ServiceOptions options);
  ~Service();

  void handle(Request&& req, Responder r);
  // 503 for new requests from now on; streams in progress go on.
  void start_draining() { draining_ = true; }
  bool draining() const { return draining_; }
  int active_streams() const { return metrics_.active_streams(); }
  Metrics& metrics() { return metrics_; }
  const ServiceOptions& options() const { return options_; }
  LoadedModel* find_model(const std::string& id);
  VoiceStore& voices() { return *voices_; }
  // Runs `f` on the service's worker thread (work that must leave the scheduler thread).
  void post_work(std::function<void()> f);
  // Runs `f` on an encoding thread after everything posted to `q` before it.
  void post_serial(const std::shared_ptr<SerialQueue>& q, std::function<void()> f);
  // Runs `f` at once on the calling thread when nothing posted to `q` waits or runs, else as
  // post_serial: either way after what was posted before it and before what is posted after.
  void run_or_post_serial(const std::shared_ptr<SerialQueue>& q, std::function<void()> f);

  // The engine request for checked parameters: the model, sampler fields and the voice (a stored
  // voice, reference audio or a preset); an error names the field to blame.
  std::optional<ApiError> prepare_request(const SpeechParams& p, LoadedModel** model, engine::SynthesisRequest& q);
  // The answer to a request the Synthesizer refused (a full queue is 429, a bad speaker 404, ...).
  ApiError submit_error(const Error& e);

  // Responses with the JSON envelope (error.h) and counted in the metrics.
  void reply(Responder& r, const std::string& endpoint, int status, std::string body,
             const char* content_type = "application/json", const std::string& retry_after = {});
  void reply_error(Responder& r, const std::string& endpoint, const ApiError& e, const std::string& retry_after = {});

 private:
  Service() = default;
  void handle_speech(Request&& req, Responder r);
  void handle_speech_stream(Request&& req, Responder r);
  void handle_voices(Request&& req, Responder r, const std::string& id);
  void drain_serial(const std::shared_ptr<SerialQueue>& q);

  ServiceOptions options_;
  std::vector<std::unique_ptr<LoadedModel>> models_;
  std::unique_ptr<VoiceStore> voices_;
  Metrics metrics_;
  std::atomic<bool> draining_{false};
  std::unique_ptr<boost::asio::thread_pool> workers_;
  std::unique_ptr<boost::asio::thread_pool> encoders_;
};

}  // namespace chorus::server
