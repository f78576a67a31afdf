// chorus serve: an OpenAI-compatible speech server (docs/server.md). Loads the models, prints the
// URL, serves until SIGINT/SIGTERM, then drains: new requests get 503, streams in progress finish
// (up to --grace seconds), and the process exits 0.
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include "command.h"
#include <unistd.h>

#include <cstdio>

#include "engine/model.h"
#include "engine/tts_model_cuda.h"
#include "server/http_server.h"
#include "server/service.h"
#include "voice_input.h"

namespace {

using namespace chorus;

struct Options {
  std::vector<std::string> models;
  std::string device = "cpu", host = "127.0.0.1", api_key, voices_dir;
  std::string weights = "bf16";  // every model's decoder layers: bf16, int8, int4 (CPU) or fp8 (CUDA)
  std::string codec_precision = "f32";
  int port = 8000, max_streams = 64, max_queue = 256, threads = 2, grace_s = 30, encode_threads = 0;
  size_t max_input_chars = 4096, max_segment_chars = 300, max_body_mb = 32;
  bool download = false;  // a Hugging Face id missing from the cache is downloaded (as chorus pull)
  bool batch_invariant = false;  // LoadOptions::batch_invariant
};

std::string model_id(const std::string& spec) {
  std::string s = spec;
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  std::string name = std::filesystem::path(s).filename().string();
  return name.empty() ? s : name;
}

int run(const Options& o) {
  auto device = engine::Device::parse(o.device);
  if (!device.ok()) return cli::fail(device.error());
  if (device->is_cuda() && !engine::cuda_built())
    return cli::fail(make_error(ErrorCode::kUnsupported, "--device cuda: this build has no CUDA backend (configure with -DCHORUS_CUDA=ON)"));
  if (o.port < 0 || o.port > 65535) return cli::fail("--port must be in [0, 65535]");
  auto weights = cli::weight_format_option(o.weights);
  if (!weights.ok()) return cli::fail(weights.error());
  auto codec_precision = codec::parse_codec_precision(o.codec_precision);
  if (!codec_precision.ok()) return cli::fail(codec_precision.error());
  std::vector<std::pair<std::string, std::shared_ptr<const engine::Model>>> models;
  for (const auto& spec : o.models) {
    engine::LoadOptions lo;
    lo.device = *device;
    lo.weights = *weights;
    lo.codec_precision = *codec_precision;
    lo.first_pool_slots = o.max_streams;  // one frame pool holds every running stream
    lo.batch_invariant = o.batch_invariant;
    lo.download = o.download;
    lo.download_progress = o.download && isatty(fileno(stderr));
    auto m = engine::load(spec, lo);
    if (!m.ok()) return cli::fail(m.error());
    models.emplace_back(model_id(spec), *m);
  }
  server::ServiceOptions so;
  so.api_key = o.api_key;
  so.voices_dir = o.voices_dir;
  so.limits.max_input_chars = o.max_input_chars;
  so.max_segment_chars = std::max<size_t>(1, o.max_segment_chars);
  so.synthesizer.max_running = o.max_streams;
  so.synthesizer.max_queued = o.max_queue;
  so.encode_threads = o.encode_threads;
  auto service = server::Service::create(std::move(models), so);
  if (!service.ok()) return cli::fail(service.error());
  server::Service& svc = **service;

  server::HttpOptions ho;
  ho.threads = std::max(1, o.threads);
  ho.max_body_bytes = o.max_body_mb << 20;
  server::HttpServer http(
      ho, [&svc](server::Request&& req, server::Responder r) { svc.handle(std::move(req), std::move(r)); },
      [](int status, const std::string& message) {
        return server::ApiError{status, message, "invalid_request_error", {}, {}}.to_json();
      });
  if (auto st = http.listen(o.host, static_cast<uint16_t>(o.port)); !st.ok()) return cli::fail(st.error());
  svc.metrics().count_connections([&http] { return http.connections(); });
  std::signal(SIGPIPE, SIG_IGN);

  // Signals are waited for on a context of their own, so the I/O threads never run the drain.
  boost::asio::io_context signals_ctx;
  boost::asio::signal_set signals(signals_ctx, SIGINT, SIGTERM);
  bool stop = false;
  signals.async_wait([&](const boost::system::error_code& ec, int) { stop = !ec; });
  http.start();
  const std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  std::printf("chorus serve: listening on http://%s:%u\n", host.c_str(), static_cast<unsigned>(http.port()));
  std::printf("chorus serve: playground at http://%s:%u/\n", host.c_str(), static_cast<unsigned>(http.port()));
  std::fflush(stdout);
  signals_ctx.run();
  if (!stop) return 0;

  std::fprintf(stderr, "chorus serve: draining (up to %d s)\n", o.grace_s);
  svc.start_draining();
  http.stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.grace_s);
  while (svc.active_streams() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  http.stop();
  service->reset();  // the requests still running end (their connections were closed by stop())
  std::fprintf(stderr, "chorus serve: stopped\n");
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("--model", o->models, "Checkpoint folder or Hugging Face id; repeat for several (clients name a model by its folder name)")
      ->required();
  sub.add_option("--device", o->device, "cpu, or cuda (CUDA builds)")->capture_default_str();
  sub.add_flag("--download", o->download,
               "Download a Hugging Face --model id missing from the local cache first (as `chorus pull`)");
  sub.add_option("--weights", o->weights,
                 "bf16 (weights as stored, exact), or decoder layers quantised at load: int8, int4 (CPU only), fp8 "
                 "(CUDA only); docs/quantization.md")
      ->capture_default_str();
  sub.add_option("--codec-precision", o->codec_precision,
                 "The GPU codec's matrix products: f32 (3xTF32 tensor-core products, f32-level accuracy) or bf16 (operands "
                 "rounded to bf16 as the official runtime decodes, a sixth of the tensor-core work); CUDA only")
      ->capture_default_str();
  sub.add_option("--host", o->host, "Address to listen on")->capture_default_str();
  sub.add_option("--port", o->port, "Port (0: any free port, printed)")->capture_default_str();
  sub.add_option("--api-key", o->api_key, "Require Authorization: Bearer KEY (not for /health, /ready, /metrics)");
  sub.add_option("--voices-dir", o->voices_dir, "Keep custom voices here (created if missing; empty: in memory)");
  sub.add_option("--max-streams", o->max_streams,
                 "Requests synthesized together per model (CUDA: the slots of its first frame pool, so they all "
                 "step together)")
      ->capture_default_str();
  sub.add_option("--max-queue", o->max_queue, "Requests waiting per model before 429")->capture_default_str();
  sub.add_flag("--batch-invariant", o->batch_invariant,
               "CUDA: a request gets the same codes alone or in any batch (a row-invariant tensor-core kernel "
               "at every row count; slower: 1.3-1.4x the step time at 128+ streams). Without it, steps of up to 8 "
               "rows per layer take the matrix-vector kernels and larger ones cuBLAS, whose roundings differ, "
               "so a draw near a tie may depend on which requests share a step");
  sub.add_option("--threads", o->threads, "HTTP I/O threads")->capture_default_str();
  sub.add_option("--encode-threads", o->encode_threads,
                 "Threads that encode the responses' audio, each stream's chunks in order (0: a quarter of the "
                 "cores, 1 to 8; opus takes ~0.8 ms of a core per stream and 80 ms frame)")
      ->capture_default_str();
  sub.add_option("--grace", o->grace_s, "Seconds running streams may take to finish on SIGTERM")->capture_default_str();
  sub.add_option("--max-input-chars", o->max_input_chars, "Longest `input` accepted")->capture_default_str();
  sub.add_option("--max-segment-chars", o->max_segment_chars, "Long input is spoken in segments of at most this many characters")
      ->capture_default_str();
  sub.add_option("--max-body-mb", o->max_body_mb, "Largest request body (413 above)")->capture_default_str();
  sub.footer("Example:\n  chorus serve --model Qwen3-TTS-12Hz-0.6B-CustomVoice --port 8000\n"
             "  curl -s localhost:8000/v1/audio/speech -H 'Content-Type: application/json' \\\n"
             "    -d '{\"model\":\"Qwen3-TTS-12Hz-0.6B-CustomVoice\",\"input\":\"Hello.\",\"voice\":\"ryan\"}' -o hello.mp3");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("serve", "OpenAI-compatible speech server (POST /v1/audio/speech, voices, metrics)", setup);
