#include "server_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <sstream>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "models/qwen3_tts/checkpoint.h"
#include "models/qwen3_tts/presets.h"
#include "support/test_support.h"

namespace chorus::server::testing {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

Reply http_request(uint16_t port, const std::string& method, const std::string& target, const std::string& body,
                   const std::string& content_type, const std::map<std::string, std::string>& headers) {
  net::io_context ioc;
  tcp::socket sock(ioc);
  sock.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "127.0.0.1");
  if (!body.empty() || method == "POST") {
    req.set(http::field::content_type, content_type);
    req.body() = body;
    req.prepare_payload();
  }
  for (const auto& [k, v] : headers) req.set(k, v);
  http::write(sock, req);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(512u << 20);
  Reply r;
  beast::error_code ec;
  http::read_header(sock, buf, parser, ec);
  if (ec) return r;
  size_t last = 0;
  while (!parser.is_done()) {
    http::read_some(sock, buf, parser, ec);
    if (ec) break;
    if (parser.get().body().size() > last) {
      ++r.body_reads;
      last = parser.get().body().size();
    }
  }
  auto res = parser.release();
  r.status = res.result_int();
  for (const auto& f : res) {
    std::string k(f.name_string());
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    r.headers[k] = std::string(f.value());
  }
  r.body = std::move(res.body());
  return r;
}

int raw_request(uint16_t port, const std::string& bytes, std::string* response) {
  net::io_context ioc;
  tcp::socket sock(ioc);
  sock.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  beast::error_code ec;
  net::write(sock, net::buffer(bytes), ec);
  sock.shutdown(tcp::socket::shutdown_send, ec);
  std::string got;
  char b[4096];
  for (;;) {
    const size_t n = sock.read_some(net::buffer(b), ec);
    if (ec) break;
    got.append(b, n);
    if (got.size() > (1 << 20)) break;
  }
  if (response) *response = got;
  if (got.rfind("HTTP/1.1 ", 0) != 0 || got.size() < 12) return 0;
  return std::atoi(got.substr(9, 3).c_str());
}

const std::string& tiny_model_dir(const std::string& variant) {
  static std::mutex mu;
  static std::map<std::string, std::string> dirs;
  std::lock_guard<std::mutex> lock(mu);
  auto it = dirs.find(variant);
  if (it != dirs.end()) return it->second;
  const std::string dir = test::scratch_dir("server_tiny_" + variant);
  const auto v = variant == "base" ? qwen3_tts::Variant::kBase : qwen3_tts::Variant::kCustomVoice;
  Status st = qwen3_tts::write_random_model(dir, qwen3_tts::preset_config(v, qwen3_tts::Dims::kTiny), 7);
  if (!st.ok()) std::fprintf(stderr, "tiny model: %s\n", st.error().to_string().c_str());
  return dirs[variant] = dir;
}

std::shared_ptr<const engine::Model> tiny_model(const std::string& variant) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const engine::Model>> models;
  const std::string& dir = tiny_model_dir(variant);
  std::lock_guard<std::mutex> lock(mu);
  auto& m = models[variant];
  if (!m) {
    auto r = engine::load(dir);
    if (r.ok()) m = *r;
    else std::fprintf(stderr, "load: %s\n", r.error().to_string().c_str());
  }
  return m;
}

RunningServer::~RunningServer() {
  if (http) http->stop();
  service.reset();  // what it still runs ends on connections that stop() closed
  http.reset();
}

RunningServer start_server(ServiceOptions options, HttpOptions http_options) {
  RunningServer s;
  auto svc = Service::create({{"tiny_cv", tiny_model("custom_voice")}, {"tiny_base", tiny_model("base")}}, options);
  if (!svc.ok()) {
    std::fprintf(stderr, "service: %s\n", svc.error().to_string().c_str());
    return s;
  }
  s.service = std::move(*svc);
  Service* p = s.service.get();
  s.http = std::make_unique<HttpServer>(
      http_options, [p](Request&& req, Responder r) { p->handle(std::move(req), std::move(r)); },
      [](int status, const std::string& m) { return ApiError{status, m, "invalid_request_error", {}, {}}.to_json(); });
  if (!s.http->listen("127.0.0.1", 0).ok()) return s;
  HttpServer* h = s.http.get();
  p->metrics().count_connections([h] { return h->connections(); });
  s.http->start();
  return s;
}

std::string sine_wav(double seconds, int rate) {
  const uint32_t n = static_cast<uint32_t>(seconds * rate);
  std::string s;
  auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff)); };
  auto u16 = [&](uint16_t v) { s.push_back(static_cast<char>(v & 0xff)); s.push_back(static_cast<char>(v >> 8)); };
  s += "RIFF";
  u32(36 + 2 * n);
  s += "WAVEfmt ";
  u32(16);
  u16(1);
  u16(1);
  u32(static_cast<uint32_t>(rate));
  u32(static_cast<uint32_t>(rate) * 2);
  u16(2);
  u16(16);
  s += "data";
  u32(2 * n);
  for (uint32_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / rate;
    u16(static_cast<uint16_t>(static_cast<int16_t>(std::lround(8000 * std::sin(2 * M_PI * 220 * t) + 3000 * std::sin(2 * M_PI * 530 * t)))));
  }
  return s;
}

std::vector<int16_t> synthesizer_pcm16(engine::Synthesizer& synth, const engine::SynthesisRequest& r) {
  std::vector<int16_t> out;
  auto st = synth.synthesize(r, [&](const engine::AudioChunk& c) {
    for (size_t i = 0; i < c.count; ++i) {
      const float x = c.samples[i];
      out.push_back(std::isfinite(x) ? static_cast<int16_t>(std::lround(std::clamp(x, -1.0f, 1.0f) * 32767.0)) : 0);
    }
    return ok_status();
  });
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  return out;
}

double metric(const std::string& text, const std::string& name, const std::string& labels) {
  std::istringstream in(text);
  std::string line;
  const std::string key = labels.empty() ? name + " " : name + "{" + labels + "} ";
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::atof(line.substr(key.size()).c_str());
  return -1;
}

}  // namespace chorus::server::testing
