// The speech server end to end over loopback: every endpoint, every format checked by an
// independent decoder or the formats' magic bytes, streaming, SSE framing, voices with persistence
// across a restart, audio equal to the Synthesizer's own output for the same seed, and a client
// leaving mid-stream cancelling its synthesis.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "audio/reader.h"
#include "engine/synthesizer.h"
#include "server/speech_request.h"
#include "server_fixture.h"
#include "support/test_support.h"

namespace chorus::server::testing {
namespace {

using nlohmann::json;

class Server : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServiceOptions o;
    voices_dir_ = test::scratch_dir("server_voices");
    o.voices_dir = voices_dir_;
    o.max_segment_chars = 40;
    s_ = new RunningServer(start_server(o));
  }
  static void TearDownTestSuite() {
    delete s_;
    s_ = nullptr;
  }
  static uint16_t port() { return s_->port(); }
  static Reply speech(const json& body) { return http_request(port(), "POST", "/v1/audio/speech", body.dump()); }
  static json base_request() {
    return {{"model", "tiny_cv"}, {"input", "Hello there."}, {"voice", "ryan"}, {"seed", 5}, {"max_new_tokens", 6}};
  }
  static RunningServer* s_;
  static std::string voices_dir_;
};
RunningServer* Server::s_ = nullptr;
std::string Server::voices_dir_;

// What the Synthesizer makes for the same request, as s16.
std::vector<int16_t> reference_pcm(const std::string& text, const std::string& speaker, uint64_t seed, int64_t frames) {
  engine::Synthesizer synth(tiny_model("custom_voice"));
  engine::SynthesisRequest r;
  r.text = text;
  r.speaker = speaker;
  r.seed = seed;
  r.max_frames = frames;
  return synthesizer_pcm16(synth, r);
}

TEST_F(Server, HealthReadyModels) {
  ASSERT_NE(s_->http, nullptr);
  auto h = http_request(port(), "GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(http_request(port(), "GET", "/ready").status, 200);
  auto m = http_request(port(), "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  auto j = json::parse(m.body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0]["id"], "tiny_cv");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][1]["id"], "tiny_base");
  EXPECT_EQ(j["data"][0]["weights"], "bf16");
}

// The responses' encoding (Service::post_serial): on several encoding threads, the work of one
// queue runs in the order it was posted and never two items at once, while queues run side by
// side; what is posted before the service ends still runs.
TEST(ServerEncoding, SerialWorkRunsInOrderOneAtATimePerQueue) {
  ServiceOptions o;
  o.encode_threads = 4;
  auto svc = Service::create({}, o);
  ASSERT_TRUE(svc.ok());
  constexpr int kQueues = 6, kItems = 400;
  struct Seen {
    std::shared_ptr<SerialQueue> q = std::make_shared<SerialQueue>();
    std::vector<int> order;  // touched only by the queue's items, one at a time
    std::atomic<int> inside{0};
  };
  std::vector<Seen> seen(kQueues);
  std::atomic<int> overlaps{0};
  std::mutex threads_mu;
  std::set<std::thread::id> threads;
  for (int i = 0; i < kItems; ++i)
    for (Seen& s : seen)
      (*svc)->post_serial(s.q, [&s, &overlaps, &threads_mu, &threads, i] {
        if (s.inside.fetch_add(1) != 0) ++overlaps;
        std::this_thread::sleep_for(std::chrono::microseconds(20));  // long enough for others to overlap
        s.order.push_back(i);
        {
          std::lock_guard<std::mutex> lock(threads_mu);
          threads.insert(std::this_thread::get_id());
        }
        s.inside.fetch_sub(1);
      });
  svc->reset();  // joins the encoding threads after their work
  EXPECT_EQ(overlaps.load(), 0);
  for (const Seen& s : seen) {
    ASSERT_EQ(s.order.size(), static_cast<size_t>(kItems));
    for (int i = 0; i < kItems; ++i) ASSERT_EQ(s.order[static_cast<size_t>(i)], i);
  }
  EXPECT_GT(threads.size(), 1u);  // the queues did run on several threads
}

// A model loaded with quantised weights (what `chorus serve --weights int8` does) is served and
// listed as such; its audio is its own, not the bf16 model's.
TEST(ServerWeights, AnInt8ModelIsServedAndListed) {
  engine::LoadOptions lo;
  lo.weights = engine::WeightFormat::kInt8;
  auto m = engine::load(tiny_model_dir("custom_voice"), lo);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  auto svc = Service::create({{"tiny_int8", *m}}, {});
  ASSERT_TRUE(svc.ok());
  Service* p = svc->get();
  HttpServer http({}, [p](Request&& req, Responder r) { p->handle(std::move(req), std::move(r)); },
                  [](int status, const std::string& msg) { return ApiError{status, msg, "invalid_request_error", {}, {}}.to_json(); });
  ASSERT_TRUE(http.listen("127.0.0.1", 0).ok());
  http.start();
  auto models = json::parse(http_request(http.port(), "GET", "/v1/models").body);
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["weights"], "int8");
  const json body = {{"model", "tiny_int8"}, {"input", "Hello there."}, {"voice", "ryan"}, {"seed", 5},
                     {"max_new_tokens", 6}, {"response_format", "pcm"}};
  auto r = http_request(http.port(), "POST", "/v1/audio/speech", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const auto bf16 = reference_pcm("Hello there.", "ryan", 5, 6);
  ASSERT_FALSE(bf16.empty());
  ASSERT_FALSE(r.body.empty());
  ASSERT_EQ(r.body.size() % 2, 0u);
  std::vector<int16_t> got(r.body.size() / 2);
  std::memcpy(got.data(), r.body.data(), r.body.size());
  EXPECT_NE(got, bf16);
  http.stop();
  svc->reset();  // before the server (http_server.h)
}

TEST_F(Server, PcmEqualsTheSynthesizersOutputForTheSameSeed) {
  auto body = base_request();
  body["response_format"] = "pcm";
  auto r = speech(body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "audio/pcm");
  const auto want = reference_pcm("Hello there.", "ryan", 5, 6);
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(r.body.size(), want.size() * 2);
  std::vector<int16_t> got(want.size());
  std::memcpy(got.data(), r.body.data(), r.body.size());
  EXPECT_EQ(got, want);
  // Each of the 6 frames took a scheduler pass of the model, which the step histogram counted.
  const std::string m = http_request(port(), "GET", "/metrics").body;
  EXPECT_GE(metric(m, "chorus_scheduler_step_seconds_count", "model=\"tiny_cv\""), 6);
  EXPECT_GT(metric(m, "chorus_scheduler_step_seconds_sum", "model=\"tiny_cv\""), 0);
  // Another seed gives other audio (the comparison above is not vacuous).
  body["seed"] = 6;
  EXPECT_NE(speech(body).body, r.body);
}

TEST_F(Server, EveryFormatDecodes) {
  const size_t samples = reference_pcm("Hello there.", "ryan", 5, 6).size();
  for (const char* f : {"wav", "flac", "mp3", "opus"}) {
    auto body = base_request();
    body["response_format"] = f;
    auto r = speech(body);
    ASSERT_EQ(r.status, 200) << f << ": " << r.body;
    audio::ReadOptions ro;
    ro.target_rate = 24000;
    ro.limits.min_seconds = 0;
    auto a = audio::decode_audio(r.body, f, ro);
    ASSERT_TRUE(a.ok()) << f << ": " << a.error().to_string();
    EXPECT_NEAR(static_cast<double>(a->samples.size()), static_cast<double>(samples), 0.25 * samples + 1200) << f;
  }
  auto body = base_request();
  body["response_format"] = "mp3";
  EXPECT_EQ(speech(body).headers["content-type"], "audio/mpeg");
  body.erase("response_format");  // mp3 is the default
  auto r = speech(body);
  ASSERT_GE(r.body.size(), 2u);
  EXPECT_EQ(static_cast<uint8_t>(r.body[0]), 0xFF);
}

TEST_F(Server, AacIsRefusedNamingTheSupportedFormats) {
  auto body = base_request();
  body["response_format"] = "aac";
  auto r = speech(body);
  EXPECT_EQ(r.status, 400);
  auto j = json::parse(r.body);
  EXPECT_EQ(j["error"]["param"], "response_format");
  EXPECT_NE(j["error"]["message"].get<std::string>().find("mp3, opus, flac, wav, pcm"), std::string::npos);
}

TEST_F(Server, AudioIsStreamedInChunks) {
  auto body = base_request();
  body["response_format"] = "pcm";
  body["max_new_tokens"] = 40;
  auto r = speech(body);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["transfer-encoding"], "chunked");
  EXPECT_GE(r.body_reads, 2) << "the body arrived in one piece";
}

// Several streamed responses, one after another on one kept-alive connection.
TEST_F(Server, KeepAliveServesStreamAfterStream) {
  namespace net = boost::asio;
  namespace http = boost::beast::http;
  net::io_context ioc;
  net::ip::tcp::socket sock(ioc);
  sock.connect({net::ip::make_address("127.0.0.1"), port()});
  boost::beast::flat_buffer buf;
  std::string first;
  for (int i = 0; i < 3; ++i) {
    http::request<http::string_body> req{http::verb::post, "/v1/audio/speech", 11};
    req.set(http::field::host, "x");
    req.set(http::field::content_type, "application/json");
    auto body = base_request();
    body["response_format"] = "pcm";
    req.body() = body.dump();
    req.prepare_payload();
    http::write(sock, req);
    http::response<http::string_body> res;
    http::read(sock, buf, res);
    ASSERT_EQ(res.result_int(), 200) << i;
    ASSERT_GT(res.body().size(), 0u);
    if (i == 0) first = res.body();
    else EXPECT_EQ(res.body(), first) << i;
  }
}

TEST_F(Server, NonStreamedBodyHasALength) {
  auto body = base_request();
  body["response_format"] = "pcm";
  body["stream"] = false;
  auto r = speech(body);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-length"], std::to_string(r.body.size()));
}

TEST_F(Server, SseEventsCarryTheAudioThenUsage) {
  auto body = base_request();
  body["response_format"] = "pcm";
  body["stream_format"] = "sse";
  auto r = speech(body);
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  std::string audio;
  int deltas = 0, dones = 0;
  size_t pos = 0;
  while (pos < r.body.size()) {
    const size_t end = r.body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos) << "an event is not terminated";
    const std::string ev = r.body.substr(pos, end - pos);
    pos = end + 2;
    ASSERT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    auto j = json::parse(ev.substr(6));
    if (j["type"] == "speech.audio.delta") {
      ASSERT_EQ(dones, 0) << "audio after done";
      ++deltas;
      auto bytes = decode_base64(j["audio"].get<std::string>());
      ASSERT_TRUE(bytes.has_value());
      audio += *bytes;
    } else {
      EXPECT_EQ(j["type"], "speech.audio.done");
      ++dones;
      EXPECT_GT(j["usage"]["input_tokens"].get<int>(), 0);
      EXPECT_EQ(j["usage"]["output_tokens"].get<int>(), 6);
      EXPECT_EQ(j["usage"]["total_tokens"].get<int>(), j["usage"]["input_tokens"].get<int>() + 6);
    }
  }
  EXPECT_GE(deltas, 1);
  EXPECT_EQ(dones, 1);
  const auto want = reference_pcm("Hello there.", "ryan", 5, 6);
  ASSERT_EQ(audio.size(), want.size() * 2);
  EXPECT_EQ(std::memcmp(audio.data(), want.data(), audio.size()), 0);
}

TEST_F(Server, LongInputIsSpokenSegmentBySegmentIntoOneStream) {
  auto body = base_request();
  body["response_format"] = "pcm";
  body["input"] = "First sentence is here. Second one follows it, with a clause. And a third.";
  auto r = speech(body);
  ASSERT_EQ(r.status, 200);
  // Three segments of at most 40 characters, 6 frames each at 24 kHz / 12.5 Hz = 1920 samples.
  const size_t one = reference_pcm("First sentence is here.", "ryan", 5, 6).size();
  EXPECT_EQ(r.body.size(), 3 * one * 2);
}

TEST_F(Server, SpeedChangesTheLength) {
  auto body = base_request();
  body["response_format"] = "pcm";
  body["max_new_tokens"] = 25;
  const size_t normal = speech(body).body.size();
  body["speed"] = 2.0;
  const size_t fast = speech(body).body.size();
  EXPECT_NEAR(static_cast<double>(fast), normal / 2.0, normal * 0.1);
}

TEST_F(Server, UnknownModelAndVoiceAre404) {
  auto body = base_request();
  body["model"] = "nope";
  auto r = speech(body);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "model");
  body = base_request();
  body["voice"] = "nobody";
  r = speech(body);
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "voice");
}

TEST_F(Server, VoicesCreateListGetUseDeleteAndSurviveARestart) {
  const std::string boundary = "chorusTestBoundary42";
  std::string mp;
  auto field = [&](const std::string& name, const std::string& value, const std::string& filename = {}) {
    mp += "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + "\"";
    if (!filename.empty()) mp += "; filename=\"" + filename + "\"\r\nContent-Type: audio/wav";
    mp += "\r\n\r\n" + value + "\r\n";
  };
  field("name", "Narrator");
  field("consent", "I own this voice");
  field("audio_sample", sine_wav(1.5), "ref.wav");
  mp += "--" + boundary + "--\r\n";
  auto c = http_request(port(), "POST", "/v1/audio/voices", mp, "multipart/form-data; boundary=" + boundary);
  ASSERT_EQ(c.status, 200) << c.body;
  auto v = json::parse(c.body);
  const std::string id = v["id"];
  EXPECT_EQ(v["name"], "Narrator");
  EXPECT_EQ(v["model"], "tiny_base");

  auto l = json::parse(http_request(port(), "GET", "/v1/audio/voices").body);
  bool listed = false;
  for (const auto& e : l["data"]) listed = listed || e["id"] == id;
  EXPECT_TRUE(listed);
  EXPECT_EQ(http_request(port(), "GET", "/v1/audio/voices/" + id).status, 200);

  json body = {{"model", "tiny_base"}, {"input", "Hi."}, {"voice", {{"id", id}}}, {"max_new_tokens", 4}, {"response_format", "pcm"}};
  auto s = speech(body);
  EXPECT_EQ(s.status, 200) << s.body;
  EXPECT_GT(s.body.size(), 0u);

  // A second server on the same folder sees the voice.
  {
    ServiceOptions o;
    o.voices_dir = voices_dir_;
    auto svc = Service::create({{"tiny_base", tiny_model("base")}}, o);
    ASSERT_TRUE(svc.ok());
    ASSERT_NE((*svc)->voices().get(id), nullptr);
  }
  EXPECT_EQ(http_request(port(), "DELETE", "/v1/audio/voices/" + id).status, 200);
  EXPECT_EQ(http_request(port(), "GET", "/v1/audio/voices/" + id).status, 404);
  EXPECT_EQ(http_request(port(), "DELETE", "/v1/audio/voices/" + id).status, 404);
  EXPECT_EQ(speech(body).status, 404);
}

TEST_F(Server, AClientLeavingMidStreamCancelsItsSynthesis) {
  namespace net = boost::asio;
  using tcp = net::ip::tcp;
  auto body = base_request();
  body["response_format"] = "pcm";
  body["max_new_tokens"] = 4000;
  body["input"] = "A long one that would run for a long time.";
  const std::string payload = body.dump();
  {
    net::io_context ioc;
    tcp::socket sock(ioc);
    sock.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port()));
    const std::string req = "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                            std::to_string(payload.size()) + "\r\n\r\n" + payload;
    net::write(sock, net::buffer(req));
    char b[256];
    boost::system::error_code ec;
    size_t got = 0;
    while (got < 200 && !ec) got += sock.read_some(net::buffer(b), ec);  // headers and the first audio
    ASSERT_FALSE(ec);
  }  // closed here
  double active = -1, running = -1;
  for (int i = 0; i < 200; ++i) {
    const std::string m = http_request(port(), "GET", "/metrics").body;
    active = metric(m, "chorus_active_streams");
    running = metric(m, "chorus_synthesizer_requests", "state=\"running\"");
    if (active == 0 && running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(active, 0);
  EXPECT_EQ(running, 0);
  EXPECT_GE(metric(http_request(port(), "GET", "/metrics").body, "chorus_streams_cancelled_total"), 1);
}

TEST(ServerAuthAndDrain, ApiKeyAndDraining) {
  ServiceOptions o;
  o.api_key = "sekrit";
  auto s = start_server(o);
  ASSERT_NE(s.http, nullptr);
  json body = {{"model", "tiny_cv"}, {"input", "Hi."}, {"voice", "ryan"}, {"max_new_tokens", 3}, {"response_format", "pcm"}};
  EXPECT_EQ(http_request(s.port(), "POST", "/v1/audio/speech", body.dump()).status, 401);
  EXPECT_EQ(http_request(s.port(), "POST", "/v1/audio/speech", body.dump(), "application/json", {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(http_request(s.port(), "GET", "/v1/models", {}, {}, {{"Authorization", "Bearer sekrit"}}).status, 200);
  EXPECT_EQ(http_request(s.port(), "POST", "/v1/audio/speech", body.dump(), "application/json", {{"Authorization", "Bearer sekrit"}}).status, 200);
  EXPECT_EQ(http_request(s.port(), "GET", "/health").status, 200);  // probes carry no key
  s.service->start_draining();
  EXPECT_EQ(http_request(s.port(), "POST", "/v1/audio/speech", body.dump(), "application/json", {{"Authorization", "Bearer sekrit"}}).status, 503);
  EXPECT_EQ(http_request(s.port(), "GET", "/ready").status, 503);
  EXPECT_EQ(http_request(s.port(), "GET", "/health").status, 200);
}

TEST(ServerQueue, AFullQueueAnswers429AtOnce) {
  ServiceOptions o;
  o.synthesizer.max_running = 1;
  o.synthesizer.max_queued = 0;
  auto s = start_server(o);
  ASSERT_NE(s.http, nullptr);
  json body = {{"model", "tiny_cv"}, {"input", "Hi."}, {"voice", "ryan"}, {"max_new_tokens", 3}, {"response_format", "pcm"}};
  auto r = http_request(s.port(), "POST", "/v1/audio/speech", body.dump());
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.headers["retry-after"], "1");
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "rate_limit_error");
  EXPECT_EQ(http_request(s.port(), "GET", "/health").status, 200);
}

}  // namespace
}  // namespace chorus::server::testing
