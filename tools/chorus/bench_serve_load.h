// What the two serving benchmarks share (in process through the Synthesizer, bench_serve.cpp; over
// HTTP against a running server, bench_serve_http.cpp): the open-loop arrival plan, what a
// simulated client records, the statistics made from it, their printout and JSON, and the rate
// sweep. Both drive the same plan for the same seed, so their numbers compare directly.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_serve.h"
#include "core/error.h"

namespace chorus::cli::serve_bench {

using Clock = std::chrono::steady_clock;
inline double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Utterance seconds: {A, B} for "A-B" (uniform), else the lengths of a file, one a line.
Result<std::vector<double>> read_lengths(const std::string& spec);

// One request of the plan: when it is sent (seconds after the start) and what it asks for.
struct Arrival {
  double at_s = 0;
  std::string text;
  std::string speaker;  // empty: none
  int64_t frames = 0;   // exactly this many (EOS suppressed)
  uint64_t seed = 0;
  float cfg_scale = 1.0f;  // classifier-free guidance (1: none)
  std::string instruct;    // what guidance steers by (a voice description); empty: none
};

// Poisson arrivals at `rate` per second for `duration` seconds, lengths drawn from `lengths`,
// speakers round a list (may be empty), request seeds derived from `seed`.
std::vector<Arrival> plan_arrivals(double rate, double duration, const std::vector<double>& lengths,
                                   const std::vector<std::string>& speakers, double frame_rate, uint64_t seed);

// Guides `share` (0 to 1) of the arrivals with `scale` by a voice description (guidance needs an
// instruction to steer by), spread evenly: arrival i is guided when ⌊(i + 1)·share⌋ > ⌊i·share⌋,
// so any run of them holds its share to within one request. Returns how many it guided.
int64_t guide_arrivals(std::vector<Arrival>& plan, float scale, double share);

// What one simulated client saw.
struct Timing {
  double sent_s = 0;             // seconds after the run's start that the request was sent
  std::vector<double> frame_at;  // seconds after the request started, one per frame received
  double first_audio_s = 0;
  bool refused = false;  // queue full (kResourceExhausted / 429)
  bool failed = false;
  std::string error;     // when failed
};

struct Point {
  double rate = 0, duration = 0, settle = 0, audio_s_per_s = 0, mean_streams = 0;
  double ttfa_p50 = 0, ttfa_p90 = 0, ttfa_p99 = 0;
  double gap_p99_ms = 0, gap_max_ms = 0, underrun_pct = 0, late_frames_pct = 0, rss_mib = 0;
  // In process only: the scheduler's mean step and its parts (0 through HTTP).
  double step_ms = 0, generate_ms = 0, decode_ms = 0, release_ms = 0;
  bool step_means_measured = false;  // those four from the measured steps' records, not the run's counters
  // In process only: the steps' own durations, and the slow ones (over twice the median): how many,
  // and how many of those took newcomers' prompts or captured frame graphs.
  double step_p50_ms = 0, step_p99_ms = 0, step_max_ms = 0;
  int64_t slow_steps = 0, slow_with_joins = 0, slow_with_captures = 0;
  int max_streams = 0;
  int64_t requests = 0, refused = 0, failed = 0, verified = 0, verify_mismatches = 0;
  int64_t guided = 0;  // requests with classifier-free guidance
};

// A sample of the streams in progress, `at_s` seconds after the run's start.
struct Running {
  double at_s = 0;
  int streams = 0;
};

// The statistics of one run: `wall` seconds from the first arrival's clock to the last end,
// `running` the sampled counts of streams in progress. Playback of a request starts when its
// first frame arrives; frame k is late (an underrun) when it arrives after start + k frames.
// With `settle` > 0 the requests sent in the first `settle` seconds only load the system: the
// request statistics are those of the later ones, and audio made and streams in progress are
// those of the `duration` seconds after `settle` (the steady state); else of the whole run.
Point summarize(const std::vector<const Timing*>& timings, double frame_rate, double rate, double duration,
                double settle, double wall, const std::vector<Running>& running);

// One scheduler step as the in-process bench saw it (engine::StepRecord, reduced).
struct StepSample {
  double at_s = 0;  // its start, seconds after the run's start
  double seconds = 0;
  double generate_s = 0, decode_s = 0, release_s = 0;
  bool joins = false, captures = false;
};
// Fills the step fields of `p` (step_p50_ms ... slow_with_captures) from the point's steps: those
// of the measured seconds when p.settle > 0 (as summarize), else all; and the mean step and its
// parts (step_ms ... release_ms) over the same steps, so that with --settle they describe the
// steady state rather than the whole run's ramp and drain (step_means_measured says so).
void summarize_steps(Point& p, const std::vector<StepSample>& steps);

void print_point(const Point& p);
nlohmann::json to_json(const Point& p);
// No refusal, failure or underrun, and p99 TTFA within the bound.
bool good(const Point& p, const ServeBenchOptions& o);

// Runs one point (--rate) or the sweep (--sweep) with `run_point(rate, seed)`, adding each point
// to out["points"] (and out["sweep_rate"]).
Status run_points(const ServeBenchOptions& o, uint64_t seed, const std::function<Result<Point>(double, uint64_t)>& run_point,
                  nlohmann::json& out);

// What is wrong with --cfg-scale / --cfg-share (empty: nothing).
std::string guidance_problem(const ServeBenchOptions& o);

// Writes `out` to o.json if set.
Status write_json(const ServeBenchOptions& o, const nlohmann::json& out);

}  // namespace chorus::cli::serve_bench
