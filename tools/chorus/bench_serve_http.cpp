// chorus bench --serve --url: the open-loop load of bench_serve.cpp sent over HTTP to a running
// `chorus serve`. Each arrival is one streamed PCM request (EOS suppressed through min_new_tokens,
// so it makes exactly its frames) on its own connection and thread, so a slow response never
// delays the next arrival. Time to first audio runs from the request's start (connect) to its first
// audio byte; a frame counts as arrived when all of its bytes have. Streams in progress and memory
// are the server's own, sampled from /metrics.
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "bench_serve.h"
#include "bench_serve_load.h"
#include "command.h"

namespace chorus::cli {

namespace {

using namespace serve_bench;
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

// The API's PCM is 24 kHz s16le mono and every model's codec makes 12.5 frames a second.
constexpr double kFrameRate = 12.5;
constexpr size_t kBytesPerFrame = 24000 / 25 * 2 * 2;  // 1920 samples of 2 bytes

struct Url {
  std::string host, port, path;  // path: the prefix before /v1/..., without a trailing '/'
};

Result<Url> parse_url(const std::string& u) {
  const std::string scheme = "http://";
  if (u.rfind(scheme, 0) != 0) return make_error(ErrorCode::kInvalidArgument, "--url must start with http:// (got '" + u + "')");
  std::string rest = u.substr(scheme.size());
  Url out;
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  out.path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!out.path.empty() && out.path.back() == '/') out.path.pop_back();
  if (!authority.empty() && authority.front() == '[') {  // [v6 address]:port
    const size_t close = authority.find(']');
    if (close == std::string::npos) return make_error(ErrorCode::kInvalidArgument, "--url: unclosed '[' in '" + u + "'");
    out.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size() && authority[close + 1] == ':') out.port = authority.substr(close + 2);
  } else {
    const size_t colon = authority.rfind(':');
    out.host = authority.substr(0, colon);
    if (colon != std::string::npos) out.port = authority.substr(colon + 1);
  }
  if (out.port.empty()) out.port = "80";
  if (out.host.empty()) return make_error(ErrorCode::kInvalidArgument, "--url: no host in '" + u + "'");
  return out;
}

struct Target {
  Url url;
  tcp::resolver::results_type endpoints;
};

void set_timeouts(tcp::socket& s, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// A whole GET on a fresh connection: status and body, or an error.
Result<std::pair<int, std::string>> get(const Target& t, const std::string& path) {
  net::io_context ioc;
  tcp::socket s(ioc);
  beast::error_code ec;
  net::connect(s, t.endpoints, ec);
  if (ec) return make_error(ErrorCode::kIo, "cannot connect to " + t.url.host + ":" + t.url.port + ": " + ec.message());
  set_timeouts(s, 10);
  http::request<http::empty_body> req{http::verb::get, t.url.path + path, 11};
  req.set(http::field::host, t.url.host);
  req.keep_alive(false);
  http::write(s, req, ec);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  if (!ec) http::read(s, buf, res, ec);
  if (ec) return make_error(ErrorCode::kIo, "GET " + path + ": " + ec.message());
  return std::make_pair(static_cast<int>(res.result_int()), std::move(res.body()));
}

// The value of a metric line "name value" in the Prometheus text format; nullopt when absent.
std::optional<double> metric(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while ((pos = text.find(name, pos)) != std::string::npos) {
    const bool line_start = pos == 0 || text[pos - 1] == '\n';
    const size_t after = pos + name.size();
    if (line_start && after < text.size() && text[after] == ' ') return std::strtod(text.c_str() + after + 1, nullptr);
    pos = after;
  }
  return std::nullopt;
}

void run_request(const Target& target, const std::string& model, const std::string& voice, const Arrival& a, Timing& t) {
  const Clock::time_point start = Clock::now();
  auto fail_with = [&t](std::string e) {
    t.failed = true;
    t.error = std::move(e);
  };
  net::io_context ioc;
  tcp::socket s(ioc);
  beast::error_code ec;
  net::connect(s, target.endpoints, ec);
  if (ec) return fail_with("connect: " + ec.message());
  set_timeouts(s, 120);
  nlohmann::json body = {{"model", model}, {"input", a.text}, {"voice", voice}, {"response_format", "pcm"},
                         {"max_new_tokens", a.frames}, {"min_new_tokens", a.frames}, {"seed", a.seed}};
  if (a.cfg_scale != 1.0f) body["cfg_scale"] = a.cfg_scale;
  if (!a.instruct.empty()) body["instructions"] = a.instruct;
  http::request<http::string_body> req{http::verb::post, target.url.path + "/v1/audio/speech", 11};
  req.set(http::field::host, target.url.host);
  req.set(http::field::content_type, "application/json");
  req.keep_alive(false);
  req.body() = body.dump();
  req.prepare_payload();
  http::write(s, req, ec);
  if (ec) return fail_with("send: " + ec.message());
  beast::flat_buffer buf;
  http::response_parser<http::buffer_body> p;
  p.body_limit(boost::none);
  http::read_header(s, buf, p, ec);
  if (ec) return fail_with("response head: " + ec.message());
  const int status = static_cast<int>(p.get().result_int());
  if (status == 429) {
    t.refused = true;
    return;
  }
  if (status != 200) return fail_with("HTTP " + std::to_string(status));
  char chunk[16384];
  size_t total = 0, next_frame_end = kBytesPerFrame;
  while (!p.is_done()) {
    p.get().body().data = chunk;
    p.get().body().size = sizeof chunk;
    http::read_some(s, buf, p, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) return fail_with("body after " + std::to_string(total) + " bytes: " + ec.message());
    const size_t n = sizeof chunk - p.get().body().size;
    if (n == 0) continue;
    const double at = secs(Clock::now() - start);
    if (total == 0) t.first_audio_s = at;
    total += n;
    for (; total >= next_frame_end; next_frame_end += kBytesPerFrame) t.frame_at.push_back(at);
  }
  const size_t want = static_cast<size_t>(a.frames) * kBytesPerFrame;
  if (total != want) fail_with("PCM body of " + std::to_string(total) + " bytes, " + std::to_string(want) + " expected");
}

Result<Point> run_point(const Target& target, const ServeBenchOptions& o, const std::string& model, double rate,
                        const std::vector<double>& lengths, uint64_t seed) {
  std::vector<Arrival> plan = plan_arrivals(rate, o.settle + o.duration, lengths, {o.voice}, kFrameRate, seed);
  const int64_t guided = guide_arrivals(plan, o.cfg_scale, o.cfg_share);
  std::vector<Timing> timings(plan.size());
  std::atomic<bool> sampling{true};
  std::vector<Running> running;
  double rss_max = 0;
  const Clock::time_point t0 = Clock::now();
  std::thread sampler([&] {
    while (sampling.load()) {
      auto m = get(target, "/metrics");
      if (m.ok() && m->first == 200) {
        if (auto r = metric(m->second, "chorus_synthesizer_requests{state=\"running\"}"))
          running.push_back({secs(Clock::now() - t0), static_cast<int>(*r)});
        if (auto r = metric(m->second, "chorus_resident_memory_bytes")) rss_max = std::max(rss_max, *r);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  // Detached client threads, counted: a long run must not keep every finished thread until the end.
  std::mutex mu;
  std::condition_variable cv;
  size_t running_clients = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(plan[i].at_s)));
    {
      std::lock_guard<std::mutex> lock(mu);
      ++running_clients;
    }
    timings[i].sent_s = secs(Clock::now() - t0);
    std::thread([&, i] {
      run_request(target, model, o.voice, plan[i], timings[i]);
      std::lock_guard<std::mutex> lock(mu);
      if (--running_clients == 0) cv.notify_all();
    }).detach();
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return running_clients == 0; });
  }
  const double wall = secs(Clock::now() - t0);
  sampling = false;
  sampler.join();
  std::vector<const Timing*> tp;
  int shown = 0;
  for (const Timing& t : timings) {
    tp.push_back(&t);
    if (t.failed && shown++ < 5) std::fprintf(stderr, "bench --serve --url: a request failed: %s\n", t.error.c_str());
  }
  Point p = summarize(tp, kFrameRate, rate, o.duration, o.settle, wall, running);
  p.guided = guided;
  p.rss_mib = rss_max / (1 << 20);
  return p;
}

}  // namespace

int run_serve_bench_http(const ServeBenchOptions& o, const std::string& model_arg, uint64_t seed) {
  if (!(o.rate > 0) || !(o.duration > 0)) return fail("bench --serve: --rate and --duration must be > 0");
  if (o.verify > 0) return fail("bench --serve --url: --verify needs the codes, which only the in-process benchmark sees");
  if (o.voice.empty()) return fail("bench --serve --url: give the voice of the requests with --voice");
  if (const std::string e = guidance_problem(o); !e.empty()) return fail(e);
  auto lengths = read_lengths(o.lengths);
  if (!lengths.ok()) return fail(lengths.error());
  auto url = parse_url(o.url);
  if (!url.ok()) return fail(url.error());
  Target target{*url, {}};
  {
    net::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::error_code ec;
    target.endpoints = resolver.resolve(url->host, url->port, ec);
    if (ec) return fail("--url: cannot resolve " + url->host + ": " + ec.message());
  }
  // The model is named as the server names it: a folder given here stands for its last component.
  std::string model = model_arg;
  while (model.size() > 1 && model.back() == '/') model.pop_back();
  if (const size_t slash = model.rfind('/'); slash != std::string::npos) model = model.substr(slash + 1);
  auto models = get(target, "/v1/models");
  if (!models.ok()) return fail(models.error());
  if (models->first != 200) return fail("GET /v1/models answered " + std::to_string(models->first));
  const auto listed = nlohmann::json::parse(models->second, nullptr, false);
  bool found = false;
  if (listed.is_object() && listed.contains("data") && listed["data"].is_array())
    for (const auto& m : listed["data"])
      if (m.is_object() && m.value("id", "") == model) found = true;
  if (!found) return fail("the server at " + o.url + " has no model '" + model + "'");

  std::printf("model  %s at %s; voice %s; lengths %s s\n", model.c_str(), o.url.c_str(), o.voice.c_str(), o.lengths.c_str());
  nlohmann::json out = {{"model", model},           {"device", "http"},         {"url", o.url},
                        {"lengths", o.lengths},     {"cfg_scale", o.cfg_scale}, {"cfg_share", o.cfg_share},
                        {"points", nlohmann::json::array()}};
  Status st = run_points(o, seed, [&](double rate, uint64_t s) { return run_point(target, o, model, rate, *lengths, s); }, out);
  if (st.ok()) st = write_json(o, out);
  if (!st.ok()) return fail(st.error());
  return 0;
}

}  // namespace chorus::cli
