#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "runtime/cpu/quant.h"
#include "server/playground.h"
#include "server/request_head.h"

namespace chorus::server {

namespace http = boost::beast::http;

Result<std::unique_ptr<Service>> Service::create(std::vector<std::pair<std::string, std::shared_ptr<const engine::Model>>> models,
                                                 ServiceOptions options) {
  std::unique_ptr<Service> s(new Service());
  s->options_ = std::move(options);
  s->workers_ = std::make_unique<boost::asio::thread_pool>(1);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int encode_threads = s->options_.encode_threads > 0 ? s->options_.encode_threads : std::clamp(cores / 4, 1, 8);
  s->encoders_ = std::make_unique<boost::asio::thread_pool>(static_cast<size_t>(encode_threads));
  CHORUS_ASSIGN(s->voices_, VoiceStore::open(s->options_.voices_dir));
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (auto& [id, m] : models) {
    if (s->find_model(id)) return make_error(ErrorCode::kInvalidArgument, "two models are named '" + id + "'");
    auto lm = std::make_unique<LoadedModel>();
    lm->id = id;
    lm->model = m;
    engine::SynthesizerOptions so = s->options_.synthesizer;
    prometheus::Histogram* steps = &s->metrics_.step_seconds(id);
    so.on_step = [steps](const engine::StepRecord& r) { steps->Observe(r.seconds); };
    lm->synth = std::make_unique<engine::Synthesizer>(m, so);
    lm->created = now;
    s->models_.push_back(std::move(lm));
  }
  return s;
}

Service::~Service() {
  // The synthesizers first (their requests end and post their last work), then the worker, then
  // the encoders (the worker's ends post to them).
  models_.clear();
  workers_->join();
  encoders_->join();
}

void Service::post_work(std::function<void()> f) { boost::asio::post(*workers_, std::move(f)); }

void Service::post_serial(const std::shared_ptr<SerialQueue>& q, std::function<void()> f) {
  {
    std::lock_guard<std::mutex> lock(q->mu);
    q->items.push_back(std::move(f));
    if (q->running) return;  // the queue's drain takes it in turn
    q->running = true;
  }
  drain_serial(q);
}

void Service::run_or_post_serial(const std::shared_ptr<SerialQueue>& q, std::function<void()> f) {
  // Items wait only while a drain runs; f runs with q's mutex held, so nothing posted after it can
  // start before it ends.
  std::lock_guard<std::mutex> lock(q->mu);
  if (!q->running) return f();
  q->items.push_back(std::move(f));
}

// One task on the encoding threads runs q's items one after another until none is left.
void Service::drain_serial(const std::shared_ptr<SerialQueue>& q) {
  boost::asio::post(*encoders_, [q] {
    for (;;) {
      std::function<void()> next;
      {
        std::lock_guard<std::mutex> lock(q->mu);
        if (q->items.empty()) {
          q->running = false;
          return;
        }
        next = std::move(q->items.front());
        q->items.pop_front();
      }
      next();
    }
  });
}

LoadedModel* Service::find_model(const std::string& id) {
  for (auto& m : models_)
    if (m->id == id) return m.get();
  return nullptr;
}

void Service::reply(Responder& r, const std::string& endpoint, int status, std::string body, const char* content_type,
                    const std::string& retry_after) {
  Response res{static_cast<http::status>(status), 11};
  res.set(http::field::content_type, content_type);
  res.set(http::field::server, "chorus");
  if (!retry_after.empty()) res.set(http::field::retry_after, retry_after);
  res.body() = std::move(body);
  metrics_.request(endpoint, status);
  r.respond(std::move(res));
}

void Service::reply_error(Responder& r, const std::string& endpoint, const ApiError& e, const std::string& retry_after) {
  reply(r, endpoint, e.status, e.to_json(), "application/json", retry_after);
}

void Service::handle(Request&& req, Responder r) {
  const Route rt = route(req.method(), req.target());
  const char* label = endpoint_label(rt.endpoint);
  // Liveness, readiness, metrics and the playground page stay open (probes and scrapers carry no
  // key; the page asks for it itself).
  if (!is_open(rt.endpoint)) {
    if (auto e = check_api_key(rt, req[http::field::authorization], options_.api_key)) return reply_error(r, "auth", *e);
    if (draining_) return reply_error(r, "draining", ApiError{503, "the server is draining; retry on another replica", "server_error", {}, "draining"});
  }
  if (rt.refusal) return reply_error(r, label, *rt.refusal);

  switch (rt.endpoint) {
    case Endpoint::kHealth:
      return reply(r, label, 200, R"({"status":"ok"})");
    case Endpoint::kReady:
      if (draining_) return reply_error(r, label, ApiError{503, "the server is draining", "server_error", {}, "draining"});
      return reply(r, label, 200, R"({"status":"ready"})");
    case Endpoint::kMetrics: {
      int queued = 0, running = 0;
      int64_t kv_used = 0, kv_available = 0, kv_reserved = 0;
      for (auto& m : models_) {
        auto l = m->synth->load();
        queued += l.queued;
        running += l.running;
        if (const auto kv = m->synth->model().generator().kv_pages()) {
          kv_used += kv->total - kv->free;
          kv_available += kv->available();
          kv_reserved += kv->promised;
        }
      }
      metrics_.set_queued(queued, running);
      metrics_.set_kv_pages(kv_used, kv_available, kv_reserved);
      return reply(r, label, 200, metrics_.render(), "text/plain; version=0.0.4");
    }
    case Endpoint::kPlayground:
      return reply(r, label, 200, std::string(rt.asset->body), rt.asset->content_type);
    case Endpoint::kModels: {
      nlohmann::json data = nlohmann::json::array();
      for (auto& m : models_) {
        const engine::ModelInfo& info = m->model->info();
        // What a client needs to offer the right fields: the modes (task types), presets, languages.
        nlohmann::json modes = nlohmann::json::array();
        if (!info.speakers.empty()) modes.push_back("CustomVoice");
        if (info.variant == "voice_design") modes.push_back("VoiceDesign");
        if (m->model->clones_voices()) modes.push_back("Base");
        data.push_back({{"id", m->id}, {"object", "model"}, {"created", m->created}, {"owned_by", "chorus"},
                        {"family", info.family}, {"variant", info.variant}, {"sample_rate", info.sample_rate},
                        {"task_types", modes}, {"voices", info.speakers}, {"languages", info.languages},
                        {"clones_voices", m->model->clones_voices()},
                        {"weights", cpu::weight_format_name(m->model->weights())}});
      }
      return reply(r, label, 200, nlohmann::json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    case Endpoint::kSpeechStream:
      return handle_speech_stream(std::move(req), std::move(r));
    case Endpoint::kSpeech:
      return handle_speech(std::move(req), std::move(r));
    case Endpoint::kVoices:
    case Endpoint::kVoice:
      return handle_voices(std::move(req), std::move(r), rt.voice_id);
    case Endpoint::kUnknown:
      break;
  }
  // route() refuses every unknown path.
  return reply_error(r, label, not_found("no such endpoint: " + rt.path, {}, "unknown_url"));
}

}  // namespace chorus::server
