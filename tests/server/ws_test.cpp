// GET /v1/audio/speech/stream end to end over loopback with a Beast WebSocket client: text sent in
// random pieces at random times gives audio bit-equal to the HTTP full-text run with the same seed
// (Qwen3-TTS streaming layout; sentence by sentence for the full-text layout and Breeze TTS 2),
// input.cancel stops an utterance and the session takes new text, bad messages are answered with
// the HTTP API's error codes and the session goes on, the API key is checked at the upgrade, and a
// client that vanishes cancels its synthesis.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <random>
#include <tuple>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

#include "engine/synthesizer.h"
#include "server/speech_request.h"
#include "server/text_split.h"
#include "text/sentencepiece_tokenizer.h"
#include "server_fixture.h"
#include "support/test_support.h"

namespace chorus::server::testing {
namespace {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;

// A blocking client; a read gives up after 20 s, so a missing answer fails the test instead of
// hanging it.
class WsClient {
 public:
  // The upgrade's HTTP status: 101 when it was accepted.
  int connect(uint16_t port, const std::string& target = "/v1/audio/speech/stream", const std::string& auth = {},
              int receive_buffer = 0) {
    tcp::socket& s = ws_.next_layer();
    s.open(tcp::v4());
    if (receive_buffer > 0) s.set_option(net::socket_base::receive_buffer_size(receive_buffer));
    s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
    if (!auth.empty())
      ws_.set_option(websocket::stream_base::decorator([auth](websocket::request_type& r) { r.set(beast::http::field::authorization, auth); }));
    websocket::response_type res;
    beast::error_code ec;
    ws_.handshake(res, "127.0.0.1", target, ec);
    return res.result_int();
  }
  void send(const json& j) { send_raw(j.dump()); }
  void send_raw(const std::string& s) {
    ws_.text(true);
    beast::error_code ec;
    ws_.write(net::buffer(s), ec);
    EXPECT_FALSE(ec) << ec.message();
  }
  // One message; nullopt when the connection ended (or a read timed out).
  struct Message {
    bool binary = false;
    std::string data;
    json j;  // text messages
  };
  std::optional<Message> read() {
    beast::flat_buffer b;
    beast::error_code ec;
    bool done = false;
    ws_.async_read(b, [&](beast::error_code e, size_t) {
      ec = e;
      done = true;
    });
    ioc_.restart();
    ioc_.run_for(std::chrono::seconds(20));
    if (!done) {
      ADD_FAILURE() << "no message within 20 s";
      beast::error_code ignored;
      ws_.next_layer().close(ignored);
      ioc_.restart();
      ioc_.run();
      return std::nullopt;
    }
    if (ec) return std::nullopt;
    Message m;
    m.binary = ws_.got_binary();
    m.data = beast::buffers_to_string(b.data());
    if (!m.binary) m.j = json::parse(m.data, nullptr, false);
    return m;
  }
  // Messages up to and including the first text message of type `type` (or an error).
  struct Utterance {
    std::vector<json> events;
    std::string audio;
    int binary_messages = 0;
    bool ok = false;  // `type` came
  };
  Utterance read_until(const std::string& type) {
    Utterance u;
    while (auto m = read()) {
      if (m->binary) {
        u.audio += m->data;
        ++u.binary_messages;
        continue;
      }
      u.events.push_back(m->j);
      if (m->j.value("type", "") == type) {
        u.ok = true;
        break;
      }
      if (m->j.value("type", "") == "error") break;
    }
    return u;
  }
  tcp::socket& socket() { return ws_.next_layer(); }

 private:
  net::io_context ioc_;
  websocket::stream<tcp::socket> ws_{ioc_};
};

class SpeechStream : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_ = new RunningServer(start_server());
  }
  static void TearDownTestSuite() {
    delete s_;
    s_ = nullptr;
  }
  static uint16_t port() { return s_->port(); }
  // A Base (streaming text layout) request cloning from a reference WAV by its x-vector.
  static json base_config(uint64_t seed) {
    return {{"model", "tiny_base"},  {"ref_audio", "data:audio/wav;base64," + encode_base64(sine_wav(1.0))},
            {"x_vector_only_mode", true}, {"seed", seed}, {"max_new_tokens", 24}, {"response_format", "pcm"}};
  }
  static std::string http_pcm(json body, const std::string& text) {
    body["input"] = text;
    auto r = http_request(port(), "POST", "/v1/audio/speech", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.body;
  }
  static RunningServer* s_;
};
RunningServer* SpeechStream::s_ = nullptr;

// The PCM (16-bit, as the server's "pcm" format) of each sentence run alone through the
// Synthesizer, sentence i as take i of the seed (rng stream i), as the HTTP path seeds its segment
// i: what a stream spoken sentence by sentence must equal.
std::string sentence_takes_pcm(engine::Synthesizer& synth, const std::vector<std::string>& sentences,
                               const std::string& speaker, uint64_t seed, int64_t max_frames) {
  std::string pcm;
  for (size_t i = 0; i < sentences.size(); ++i) {
    engine::SynthesisRequest r;
    r.text = sentences[i];
    r.speaker = speaker;
    r.seed = seed;
    r.max_frames = max_frames;
    r.rng_stream = static_cast<uint32_t>(i);
    const std::vector<int16_t> take = synthesizer_pcm16(synth, r);
    pcm.append(reinterpret_cast<const char*>(take.data()), take.size() * sizeof(int16_t));
  }
  return pcm;
}

// Cuts `text` into pieces of 1..6 bytes at random, inside UTF-8 characters too unless
// `whole_chars` (a JSON string holds whole characters only).
std::vector<std::string> random_pieces(const std::string& text, std::mt19937& rng, bool whole_chars = true) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t n = std::min(std::uniform_int_distribution<size_t>(1, 6)(rng), text.size() - i);
    while (whole_chars && i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

// Speaks `text` over a fresh session in random pieces with random pauses; the audio bytes.
std::string speak_in_pieces(uint16_t port, const json& config, const std::string& text, std::mt19937& rng, json* done = nullptr) {
  WsClient c;
  EXPECT_EQ(c.connect(port), 101);
  json cfg = config;
  cfg["type"] = "session.config";
  c.send(cfg);
  for (const auto& p : random_pieces(text, rng)) {
    c.send({{"type", "input.text"}, {"text", p}});
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 15)(rng)));
  }
  c.send({{"type", "input.done"}});
  auto u = c.read_until("session.done");
  EXPECT_TRUE(u.ok) << (u.events.empty() ? "no events" : u.events.back().dump());
  EXPECT_GE(u.events.size(), 3u);
  if (u.events.size() >= 3) {
    EXPECT_EQ(u.events[0]["type"], "audio.start");
    EXPECT_EQ(u.events[0]["format"], config.value("response_format", "pcm"));
    EXPECT_EQ(u.events[0]["sample_rate"], 24000);
    EXPECT_EQ(u.events[u.events.size() - 2]["type"], "audio.done");
    if (done) *done = u.events[u.events.size() - 2];
  }
  return u.audio;
}

TEST_F(SpeechStream, TextInRandomPiecesGivesTheFullTextAudio) {
  ASSERT_NE(s_->http, nullptr);
  const std::string text = "Hello there, caf\xC3\xA9 friends. How are you today?";
  const std::string want = http_pcm(base_config(11), text);
  ASSERT_GT(want.size(), 0u);
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 4; ++trial) {
    json done;
    const std::string got = speak_in_pieces(port(), base_config(11), text, rng, &done);
    EXPECT_EQ(got.size(), want.size()) << "trial " << trial;
    EXPECT_TRUE(got == want) << "trial " << trial;
    EXPECT_GT(done["usage"]["output_tokens"].get<int64_t>(), 0);
  }
  // Another seed gives other audio: the comparison is not vacuous.
  EXPECT_NE(speak_in_pieces(port(), base_config(12), text, rng), want);
}

TEST_F(SpeechStream, NonStreamingModeFalseFeedsACustomVoiceModelTextInPieces) {
  // tiny_cv defaults to the full-text layout; non_streaming_mode false asks for the streaming one,
  // so its text goes in token by token over the WebSocket and equals the HTTP request of the same
  // fields in one piece.
  const std::string text = "Hello there, friends. How are you today?";
  json cfg = {{"model", "tiny_cv"}, {"voice", "ryan"}, {"seed", 3}, {"max_new_tokens", 20},
              {"response_format", "pcm"}, {"non_streaming_mode", false}};
  const std::string want = http_pcm(cfg, text);
  ASSERT_GT(want.size(), 0u);
  std::mt19937 rng(77);
  for (int trial = 0; trial < 2; ++trial) EXPECT_TRUE(speak_in_pieces(port(), cfg, text, rng) == want) << "trial " << trial;
  // The field reaches the model: the full-text layout of the same request is other audio.
  json full = cfg;
  full["non_streaming_mode"] = true;
  EXPECT_NE(http_pcm(full, text), want);
}

TEST_F(SpeechStream, FullTextLayoutIsSpokenSentenceBySentenceAsOneStream) {
  // tiny_cv's default is the full-text layout: complete sentences are spoken one after another,
  // each seeded as the HTTP path seeds its segments.
  const std::string text = "Hello there. How are you today? Fine";
  const auto sentences = split_sentences(text, 40);
  ASSERT_EQ(sentences, (std::vector<std::string>{"Hello there.", "How are you today?", "Fine"}));
  json cfg = {{"model", "tiny_cv"}, {"voice", "ryan"}, {"seed", 5}, {"max_new_tokens", 5}, {"response_format", "pcm"}};
  // Sentence i is take i of the seed (rng stream i), as the HTTP path seeds its segment i: compared
  // with the Synthesizer's own run of each sentence.
  engine::Synthesizer synth(tiny_model("custom_voice"));
  const std::string want = sentence_takes_pcm(synth, sentences, "ryan", 5, 5);
  ASSERT_GT(want.size(), 0u);
  std::mt19937 rng(99);
  for (int trial = 0; trial < 3; ++trial) EXPECT_TRUE(speak_in_pieces(port(), cfg, text, rng) == want) << "trial " << trial;
  cfg["seed"] = 6;
  EXPECT_NE(speak_in_pieces(port(), cfg, text, rng), want);
}

TEST_F(SpeechStream, CancelStopsTheUtteranceAndTheSessionTakesNewText) {
  WsClient c;
  ASSERT_EQ(c.connect(port()), 101);
  json cfg = base_config(3);
  cfg["type"] = "session.config";
  cfg["max_new_tokens"] = 4000;
  c.send(cfg);
  // No input.done: the request speaks what it has, then waits for more text.
  c.send({{"type", "input.text"}, {"text", "This sentence is not finished yet and"}});
  auto first = c.read();
  ASSERT_TRUE(first && !first->binary);
  EXPECT_EQ(first->j["type"], "audio.start");
  auto audio = c.read();
  ASSERT_TRUE(audio);
  ASSERT_TRUE(audio->binary) << audio->data;
  c.send({{"type", "input.cancel"}});
  auto u = c.read_until("audio.done");
  ASSERT_TRUE(u.ok);
  EXPECT_EQ(u.events.back().value("cancelled", false), true);
  // Nothing of the cancelled utterance follows: the next message is the new utterance's start.
  c.send({{"type", "input.text"}, {"text", "Now a new one."}});
  c.send({{"type", "input.done"}});
  auto next = c.read();
  ASSERT_TRUE(next);
  ASSERT_FALSE(next->binary) << "audio after input.cancel";
  EXPECT_EQ(next->j["type"], "audio.start");
  auto rest = c.read_until("session.done");
  EXPECT_TRUE(rest.ok);
  EXPECT_GT(rest.audio.size(), 0u);
  // The new utterance is a whole run of its own text.
  json body = base_config(3);
  body["max_new_tokens"] = 4000;
  EXPECT_TRUE(rest.audio == http_pcm(body, "Now a new one."));
}

TEST_F(SpeechStream, AnUtteranceThatStopsEarlyIgnoresTheRestOfItsText) {
  WsClient c;
  ASSERT_EQ(c.connect(port()), 101);
  json cfg = base_config(8);
  cfg["type"] = "session.config";
  cfg["max_new_tokens"] = 3;
  c.send(cfg);
  c.send({{"type", "input.text"}, {"text", "A sentence far longer than three frames of speech"}});
  auto u = c.read_until("audio.done");  // the frame limit ends it before input.done
  ASSERT_TRUE(u.ok);
  EXPECT_EQ(u.events.front()["type"], "audio.start");
  EXPECT_EQ(u.events.back()["usage"]["output_tokens"], 3);
  EXPECT_EQ(u.audio.size(), 3u * 1920 * 2);
  c.send({{"type", "input.text"}, {"text", " and the rest of it."}});
  c.send({{"type", "input.done"}});
  auto next = c.read();
  ASSERT_TRUE(next && !next->binary);
  EXPECT_EQ(next->j["type"], "session.done") << next->data;
}

TEST_F(SpeechStream, BadMessagesAreAnsweredWithErrorsAndTheSessionGoesOn) {
  WsClient c;
  ASSERT_EQ(c.connect(port()), 101);
  auto expect_error = [&](const std::string& code, const std::string& param, int status = 400) {
    auto m = c.read();
    ASSERT_TRUE(m && !m->binary);
    EXPECT_EQ(m->j["type"], "error") << m->data;
    EXPECT_EQ(m->j["status"], status) << m->data;
    EXPECT_EQ(m->j["error"]["code"], code.empty() ? json() : json(code)) << m->data;
    EXPECT_EQ(m->j["error"]["param"], param.empty() ? json() : json(param)) << m->data;
    EXPECT_FALSE(m->j["message"].get<std::string>().empty());
  };
  c.send_raw("{not json");
  expect_error("invalid_json", "");
  c.send({{"type", "input.sing"}});
  expect_error("unknown_message_type", "type");
  c.send({{"text", "no type"}});
  expect_error("invalid_message", "type");
  c.send({{"type", "input.text"}, {"text", "Too early."}});
  expect_error("session_not_configured", "");
  c.send({{"type", "session.config"}, {"model", "tiny_cv"}, {"voice", "ryan"}, {"temperature", "hot"}});
  expect_error("", "temperature");
  c.send({{"type", "session.config"}, {"model", "tiny_cv"}, {"voice", "ryan"}, {"colour", 1}});
  expect_error("unknown_parameter", "colour");
  c.send({{"type", "session.config"}, {"model", "nope"}, {"voice", "ryan"}});
  expect_error("model_not_found", "model", 404);
  c.send({{"type", "session.config"}, {"model", "tiny_cv"}, {"voice", "ryan"}, {"response_format", "aac"}});
  expect_error("unsupported_format", "response_format");
  c.send({{"type", "input.text"}, {"text", 7}});
  expect_error("", "text");
  // A good configuration after all that speaks.
  c.send({{"type", "session.config"}, {"model", "tiny_cv"}, {"voice", "ryan"}, {"seed", 1}, {"max_new_tokens", 3}});
  c.send({{"type", "input.text"}, {"text", "Hi."}});
  c.send({{"type", "input.done"}});
  auto u = c.read_until("session.done");
  EXPECT_TRUE(u.ok);
  EXPECT_GT(u.audio.size(), 0u);
  // session.close ends the connection.
  c.send({{"type", "session.close"}});
  EXPECT_FALSE(c.read().has_value());
  EXPECT_EQ(http_request(port(), "GET", "/health").status, 200);
  // Plain HTTP on the endpoint is told to upgrade.
  auto r = http_request(port(), "GET", "/v1/audio/speech/stream");
  EXPECT_EQ(r.status, 426);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "upgrade_required");
}

TEST_F(SpeechStream, AClientVanishingCancelsItsSynthesis) {
  {
    WsClient c;
    ASSERT_EQ(c.connect(port()), 101);
    json cfg = base_config(4);
    cfg["type"] = "session.config";
    cfg["max_new_tokens"] = 4000;
    c.send(cfg);
    c.send({{"type", "input.text"}, {"text", "A long one that waits for more text"}});
    auto m = c.read();
    ASSERT_TRUE(m);
    beast::error_code ec;
    c.socket().close(ec);  // no close handshake: gone
  }
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

TEST_F(SpeechStream, ModelsListTheirModesAndThePlaygroundIsServedFromTheBinary) {
  auto m = json::parse(http_request(port(), "GET", "/v1/models").body);
  ASSERT_EQ(m["data"].size(), 2u);
  const json& cv = m["data"][0];
  const json& base = m["data"][1];
  EXPECT_EQ(cv["task_types"], json::array({"CustomVoice"}));
  EXPECT_NE(std::find(cv["voices"].begin(), cv["voices"].end(), "ryan"), cv["voices"].end());
  EXPECT_EQ(cv["clones_voices"], false);
  EXPECT_EQ(base["task_types"], json::array({"Base"}));
  EXPECT_EQ(base["clones_voices"], true);
  EXPECT_EQ(base["sample_rate"], 24000);
  // The page and its files, byte for byte as in the source tree.
  // tests/data → the source tree (taken apart lexically: tests/data need not exist).
  const std::string src = std::filesystem::path(CHORUS_TEST_DATA_DIR).parent_path().parent_path().string() + "/src/server/playground/";
  for (const auto& [target, file, type] : {std::tuple{"/", "index.html", "text/html; charset=utf-8"},
                                           std::tuple{"/playground.js", "playground.js", "text/javascript; charset=utf-8"},
                                           std::tuple{"/playground.css", "playground.css", "text/css; charset=utf-8"}}) {
    auto r = http_request(port(), "GET", target);
    EXPECT_EQ(r.status, 200) << target;
    EXPECT_EQ(r.headers["content-type"], type) << target;
    std::ifstream in(src + file, std::ios::binary);
    const std::string want((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(want.empty()) << src + file;
    EXPECT_TRUE(r.body == want) << target;
  }
  EXPECT_EQ(http_request(port(), "GET", "/playground.exe").status, 404);
}

TEST(SpeechStreamSlowReader, AReaderTooFarBehindIsDisconnected) {
  ServiceOptions o;
  o.max_stream_backlog_bytes = 64 << 10;
  auto s = start_server(o);
  ASSERT_NE(s.http, nullptr);
  WsClient c;
  ASSERT_EQ(c.connect(s.port(), "/v1/audio/speech/stream", {}, 4096), 101);
  std::string text;
  for (int i = 0; i < 12; ++i) text += "A sentence that goes on for a long while without a pause. ";
  c.send({{"type", "session.config"}, {"model", "tiny_cv"}, {"voice", "ryan"}, {"seed", 1}, {"max_new_tokens", 400},
          {"response_format", "pcm"}, {"input", text}});
  c.send({{"type", "input.done"}});
  // Read nothing until the server has given up on this reader (or, wrongly, finished): on a busy
  // machine the audio takes longer to pile up than any fixed wait.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (int i = 0; i < 900; ++i) {
    if (metric(http_request(s.port(), "GET", "/metrics").body, "chorus_active_streams") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  bool slow = false, finished = false;
  while (auto m = c.read()) {
    if (m->binary) continue;
    if (m->j["type"] == "error") slow = m->j["error"]["code"] == "slow_reader";
    if (m->j["type"] == "session.done") {
      finished = true;
      break;
    }
  }
  EXPECT_TRUE(slow);
  EXPECT_FALSE(finished);
  EXPECT_EQ(metric(http_request(s.port(), "GET", "/metrics").body, "chorus_active_streams"), 0);
}

TEST(SpeechStreamAuth, TheApiKeyIsCheckedAtTheUpgrade) {
  ServiceOptions o;
  o.api_key = "sekrit";
  auto s = start_server(o);
  ASSERT_NE(s.http, nullptr);
  {
    WsClient c;
    EXPECT_EQ(c.connect(s.port()), 401);
  }
  {
    WsClient c;
    EXPECT_EQ(c.connect(s.port(), "/v1/audio/speech/stream", "Bearer wrong"), 401);
  }
  {
    WsClient c;
    EXPECT_EQ(c.connect(s.port(), "/v1/audio/speech/stream", "Bearer sekrit"), 101);
  }
  {
    WsClient c;  // browsers cannot set headers on a WebSocket
    EXPECT_EQ(c.connect(s.port(), "/v1/audio/speech/stream?api_key=sekrit"), 101);
  }
  // The playground page itself is open; what it calls is not.
  EXPECT_EQ(http_request(s.port(), "GET", "/").status, 200);
}

// The tiny Breeze TTS 2 checkpoint with a SentencePiece tokenizer trained here (the reference copy
// has none), so it takes text.
std::string tiny_breeze_with_tokenizer() {
  const std::string dir = test::scratch_dir("ws_tiny_breeze");
  std::filesystem::copy(test::reference_path("breeze_tts2/models/tiny_breeze"), dir,
                        std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing);
  std::vector<std::string> corpus;
  for (int i = 0; i < 40; ++i)
    corpus.push_back("One two three four five six seven eight nine ten, sentence number " + std::to_string(i) + ".");
  text::SentencePieceTrainOptions o;
  o.vocab_size = 300;  // below the checkpoint's speaker tags (500..)
  auto spm = text::train_sentencepiece(corpus, o);
  EXPECT_TRUE(spm.ok()) << (spm.ok() ? "" : spm.error().to_string());
  std::ofstream(dir + "/tokenizer.model", std::ios::binary) << (spm.ok() ? *spm : std::string());
  return dir;
}

TEST(SpeechStreamBreeze, SentencesAreSpokenOneByOneIntoOneStream) {
  auto model = engine::load(tiny_breeze_with_tokenizer());
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  ServiceOptions o;
  auto svc = Service::create({{"tiny_breeze", *model}}, o);
  ASSERT_TRUE(svc.ok());
  Service* p = svc->get();
  HttpServer http({}, [p](Request&& req, Responder r) { p->handle(std::move(req), std::move(r)); },
                  [](int status, const std::string& m) { return ApiError{status, m, "invalid_request_error", {}, {}}.to_json(); });
  ASSERT_TRUE(http.listen("127.0.0.1", 0).ok());
  http.start();
  const std::string text = "One two three. Four five six! Seven";
  json cfg = {{"model", "tiny_breeze"}, {"voice", "S1"}, {"seed", 9}, {"max_new_tokens", 4}, {"response_format", "pcm"}};
  engine::Synthesizer synth(*model);
  const auto sentences = split_sentences(text, o.max_segment_chars);
  ASSERT_EQ(sentences.size(), 3u);
  const std::string want = sentence_takes_pcm(synth, sentences, "S1", 9, 4);
  ASSERT_GT(want.size(), 0u);
  std::mt19937 rng(5);
  for (int trial = 0; trial < 2; ++trial) EXPECT_TRUE(speak_in_pieces(http.port(), cfg, text, rng) == want) << "trial " << trial;
  http.stop();
  svc->reset();  // before the server (http_server.h)
}

TEST(TakeSegments, PiecesGiveTheSameSegmentsAsTheWholeText) {
  const std::string text =
      "First sentence here. A second one, with a clause; and more words than forty characters in it! Third? "
      "\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82Pi is 3.14 and e is 2.72. no end";
  const auto whole = split_sentences(text, 40);
  // Written by hand: sentence ends, a long sentence cut at its clause mark, a CJK full stop.
  const std::vector<std::string> want = {"First sentence here.", "A second one, with a clause;",
                                         "and more words than forty characters in", "it!", "Third?",
                                         "\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82", "Pi is 3.14 and e is 2.72.", "no end"};
  EXPECT_EQ(whole, want);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::string pending;
    std::vector<std::string> got;
    for (const auto& p : random_pieces(text, rng, false)) {
      pending += p;
      for (auto& s : take_segments(pending, 40, false)) got.push_back(std::move(s));
    }
    for (auto& s : take_segments(pending, 40, true)) got.push_back(std::move(s));
    EXPECT_EQ(got, whole) << "trial " << trial;
  }
  // Nothing is taken before a sentence is known to be over.
  std::string pending = "Not over yet.";
  EXPECT_TRUE(take_segments(pending, 40, false).empty());
  pending += " Next";
  EXPECT_EQ(take_segments(pending, 40, false), std::vector<std::string>{"Not over yet."});
  EXPECT_EQ(pending, "Next");
}

}  // namespace
}  // namespace chorus::server::testing
