// An in-process `chorus serve` for the server tests: tiny random-weight models written at test time
// (a CustomVoice one with presets and a tokenizer, a Base one for voices), the service on a free
// loopback port, and a small blocking HTTP client.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/synthesizer.h"
#include "server/http_server.h"
#include "server/service.h"

namespace chorus::server::testing {

struct Reply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  int body_reads = 0;  // socket reads that delivered body bytes (a streamed body needs several)
};

// One request on a fresh connection; the reply read to its end.
Reply http_request(uint16_t port, const std::string& method, const std::string& target, const std::string& body = {},
                   const std::string& content_type = "application/json", const std::map<std::string, std::string>& headers = {});
// Raw bytes in, the status code of the first response out (0 when the server closed without one).
int raw_request(uint16_t port, const std::string& bytes, std::string* response = nullptr);

struct RunningServer {
  RunningServer() = default;
  RunningServer(RunningServer&&) = default;
  RunningServer& operator=(RunningServer&&) = default;
  ~RunningServer();  // the HTTP threads stop, then the service goes, then the server (http_server.h)
  std::unique_ptr<Service> service;
  std::unique_ptr<HttpServer> http;
  uint16_t port() const { return http->port(); }
};

// A model folder written once per test binary: "custom_voice" or "base".
const std::string& tiny_model_dir(const std::string& variant);
std::shared_ptr<const engine::Model> tiny_model(const std::string& variant);

RunningServer start_server(ServiceOptions options = {}, HttpOptions http = {});

// What the Synthesizer makes for `r`, converted to s16 here (clip, ×32767, round; NaN → 0): the
// expectation the server's "pcm" output is compared with. A failed run fails the calling test and
// returns what came before the failure.
std::vector<int16_t> synthesizer_pcm16(engine::Synthesizer& synth, const engine::SynthesisRequest& r);

// A mono 16-bit PCM WAV of a sine, built by hand.
std::string sine_wav(double seconds, int rate = 24000);

// The value of an unlabelled metric line "name value" (or "name{labels} value" with `labels`).
double metric(const std::string& text, const std::string& name, const std::string& labels = {});

}  // namespace chorus::server::testing
