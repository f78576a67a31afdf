// chorus bench --serve: open-loop load on a loaded model through the Synthesizer, as a serving
// deployment sees it. Requests arrive as a seeded Poisson process at --rate per second for
// --duration seconds, with utterance lengths drawn from a mix (EOS suppressed, so a request makes
// exactly its frames); each is played back by a simulated client that starts at first audio at 1x
// speed. Reports audio seconds made per second, concurrent streams, time to first audio, per-frame
// gaps, underruns (a frame arriving after its playback time), memory and refusals; --sweep finds the
// highest rate with no underrun and p99 first audio within --ttfa-bound; --verify N replays N of
// the requests alone and checks their codes are bit-identical; --cfg-scale (with --cfg-share) guides
// all or some of the requests, so that guided and plain streams share the batch. With --url the same load goes over
// HTTP to a running `chorus serve` (bench_serve_http.cpp): streamed PCM, time to first audio from the
// request's start to its first audio byte, refusals as 429s.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "models/codec/codec_config.h"
#include "runtime/cpu/weight_format.h"

namespace chorus::cli {

struct ServeBenchOptions {
  bool serve = false;
  std::string url;          // a running server's base URL: load over HTTP instead of in process
  std::string voice;        // --url: the voice of every request
  double rate = 1.0;        // requests per second
  double duration = 10.0;   // seconds of arrivals measured
  double settle = 0;        // seconds of arrivals before them, not measured (the load's ramp)
  std::string lengths = "5-30";  // utterance seconds: "A-B" uniform, or a file of seconds, one a line
  int max_streams = 256;
  bool batch_invariant = false;  // LoadOptions::batch_invariant
  int max_queue = 4096;
  std::string codec_overlap = "off";  // SynthesizerOptions::codec_overlap: auto, on or off
  double ttfa_bound = 0.3;  // seconds, p99, for --sweep
  bool sweep = false;
  int64_t verify = 0;
  float cfg_scale = 1.0f;   // classifier-free guidance of the guided requests (Breeze TTS 2; 1: none;
                            // the bench's --cfg-scale)
  double cfg_share = 1.0;   // the share of requests guided with cfg_scale, spread evenly over the arrivals
  std::string json;         // write the results as JSON here
  std::string steps;        // in process: write every scheduler step of every point here (CSV)
  void add_to(CLI::App& app);
};

// Runs the benchmark on `model` (a folder or hub id) on `device` with `threads` CPU threads and the
// decoder layers' weights in `weights` and the GPU codec's products in `codec_precision`
// (engine::LoadOptions).
int run_serve_bench(const ServeBenchOptions& o, const std::string& model, const std::string& device, int threads,
                    uint64_t seed, cpu::WeightFormat weights, codec::CodecPrecision codec_precision);
// Runs it against the server at o.url; `model` is the server's name for the model.
int run_serve_bench_http(const ServeBenchOptions& o, const std::string& model, uint64_t seed);

}  // namespace chorus::cli
