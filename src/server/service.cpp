#include "server/service.h"

#include <chrono>
#include <filesystem>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "runtime/cpu/quant.h"
#include "server/playground.h"

namespace chorus::server {

namespace http = boost::beast::http;

namespace {

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char d = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return d == 0 && !b.empty();
}

// The value of `key` in a query string (no percent-decoding beyond what a key needs: none).
std::string query_param(const std::string& query, const std::string& key) {
  size_t i = 0;
  while (i <= query.size()) {
    size_t amp = query.find('&', i);
    if (amp == std::string::npos) amp = query.size();
    const std::string part = query.substr(i, amp - i);
    if (part.rfind(key + "=", 0) == 0) return part.substr(key.size() + 1);
    i = amp + 1;
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Service>> Service::create(std::vector<std::pair<std::string, std::shared_ptr<const engine::Model>>> models,
                                                 ServiceOptions options) {
  std::unique_ptr<Service> s(new Service());
  s->options_ = std::move(options);
  s->workers_ = std::make_unique<boost::asio::thread_pool>(1);
  CHORUS_ASSIGN(s->voices_, VoiceStore::open(s->options_.voices_dir));
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (auto& [id, m] : models) {
    if (s->find_model(id)) return make_error(ErrorCode::kInvalidArgument, "two models are named '" + id + "'");
    auto lm = std::make_unique<LoadedModel>();
    lm->id = id;
    lm->model = m;
    lm->synth = std::make_unique<engine::Synthesizer>(m, s->options_.synthesizer);
    lm->created = now;
    s->models_.push_back(std::move(lm));
  }
  return s;
}

Service::~Service() {
  // The synthesizers first (their requests end and post their last work), then the worker.
  models_.clear();
  workers_->join();
}

void Service::post_work(std::function<void()> f) { boost::asio::post(*workers_, std::move(f)); }

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
  std::string target(req.target());
  const size_t q = target.find('?');
  const std::string path = target.substr(0, q);
  const auto method = req.method();

  // Liveness and metrics stay open (probes and scrapers carry no key).
  if (path == "/health") {
    if (method != http::verb::get && method != http::verb::head)
      return reply_error(r, "health", ApiError{405, "use GET", "invalid_request_error", {}, "method_not_allowed"});
    return reply(r, "health", 200, R"({"status":"ok"})");
  }
  if (path == "/ready") {
    if (draining_) return reply_error(r, "ready", ApiError{503, "the server is draining", "server_error", {}, "draining"});
    return reply(r, "ready", 200, R"({"status":"ready"})");
  }
  if (path == "/metrics") {
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
    return reply(r, "metrics", 200, metrics_.render(), "text/plain; version=0.0.4");
  }

  // The playground page carries no data: it asks for the key itself when the server has one.
  if (const PlaygroundAsset* a = find_playground_asset(path)) {
    if (method != http::verb::get && method != http::verb::head)
      return reply_error(r, "playground", ApiError{405, "use GET", "invalid_request_error", {}, "method_not_allowed"});
    return reply(r, "playground", 200, std::string(a->body), a->content_type);
  }

  if (!options_.api_key.empty()) {
    std::string auth(req[http::field::authorization]);
    // Browsers cannot set headers on a WebSocket: the key may come as ?api_key= there.
    if (auth.empty() && path == "/v1/audio/speech/stream" && q != std::string::npos)
      if (std::string key = query_param(target.substr(q + 1), "api_key"); !key.empty()) auth = "Bearer " + key;
    const std::string want = "Bearer " + options_.api_key;
    if (!constant_time_equal(auth, want))
      return reply_error(r, "auth", ApiError{401, auth.empty() ? "missing API key (Authorization: Bearer ...)" : "invalid API key",
                                             "invalid_request_error", {}, "invalid_api_key"});
  }
  if (draining_) return reply_error(r, "draining", ApiError{503, "the server is draining; retry on another replica", "server_error", {}, "draining"});

  if (path == "/v1/models") {
    if (method != http::verb::get) return reply_error(r, "models", ApiError{405, "use GET", "invalid_request_error", {}, "method_not_allowed"});
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
    return reply(r, "models", 200, nlohmann::json{{"object", "list"}, {"data", data}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  if (path == "/v1/audio/speech/stream") {
    if (method != http::verb::get) return reply_error(r, "speech_stream", ApiError{405, "use GET (a WebSocket upgrade)", "invalid_request_error", {}, "method_not_allowed"});
    return handle_speech_stream(std::move(req), std::move(r));
  }
  if (path == "/v1/audio/speech") {
    if (method != http::verb::post) return reply_error(r, "speech", ApiError{405, "use POST", "invalid_request_error", {}, "method_not_allowed"});
    return handle_speech(std::move(req), std::move(r));
  }
  const std::string voices = "/v1/audio/voices";
  if (path == voices) return handle_voices(std::move(req), std::move(r), {});
  if (path.rfind(voices + "/", 0) == 0) return handle_voices(std::move(req), std::move(r), path.substr(voices.size() + 1));
  return reply_error(r, "unknown", not_found("no such endpoint: " + path, {}, "unknown_url"));
}

}  // namespace chorus::server
