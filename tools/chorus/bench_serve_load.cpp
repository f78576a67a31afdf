#include "bench_serve_load.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

namespace chorus::cli::serve_bench {

namespace {

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::min<double>(static_cast<double>(v.size() - 1), std::ceil(p / 100.0 * static_cast<double>(v.size())) - 1));
  return v[std::max<size_t>(0, i)];
}

// The texts: a paragraph cut to about the length of the utterance (the frame count is set exactly;
// the text only has to be long enough for the prompt to be realistic).
std::string text_for(double seconds, std::mt19937_64& rng) {
  static const char* kWords[] = {"the", "morning", "light", "fell", "across", "quiet", "streets", "while", "people",
                                 "walked", "to", "work", "talking", "about", "plans", "for", "a", "long", "weekend",
                                 "by", "sea", "and", "how", "summer", "had", "gone", "so", "quickly", "this", "year"};
  // At most 36 words (under 300 characters): a server speaks longer input as several segments, and
  // each would be held to the request's exact length (min_new_tokens), multiplying the audio.
  const int words = std::clamp(static_cast<int>(seconds * 2.5), 3, 36);
  std::string t;
  for (int i = 0; i < words; ++i) {
    if (i) t += ' ';
    t += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
  }
  return t + ".";
}

}  // namespace

Result<std::vector<double>> read_lengths(const std::string& spec) {
  double a = 0, b = 0;
  char tail = 0;
  if (std::sscanf(spec.c_str(), "%lf-%lf%c", &a, &b, &tail) == 2) {
    if (!(a > 0 && b >= a && b < 3600)) return make_error(ErrorCode::kInvalidArgument, "--lengths: need 0 < A <= B < 3600");
    return std::vector<double>{a, b};
  }
  std::ifstream f(spec);
  if (!f) return make_error(ErrorCode::kNotFound, "--lengths: " + spec + ": neither A-B nor a readable file");
  std::vector<double> v;
  for (double x; f >> x;) {
    if (!(x > 0 && x < 3600)) return make_error(ErrorCode::kInvalidArgument, "--lengths: " + spec + ": a length outside (0, 3600) s");
    v.push_back(x);
  }
  if (v.empty()) return make_error(ErrorCode::kInvalidArgument, "--lengths: " + spec + ": no lengths");
  return v;
}

std::vector<Arrival> plan_arrivals(double rate, double duration, const std::vector<double>& lengths,
                                   const std::vector<std::string>& speakers, double frame_rate, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<Arrival> plan;
  double at = gap(rng);
  uint64_t n = 0;
  while (at < duration) {
    const double len = lengths.size() == 2 && lengths[0] <= lengths[1]
                           ? std::uniform_real_distribution<double>(lengths[0], lengths[1])(rng)
                           : lengths[rng() % lengths.size()];
    Arrival a;
    a.at_s = at;
    a.text = text_for(len, rng);
    if (!speakers.empty()) a.speaker = speakers[rng() % speakers.size()];
    a.frames = std::max<int64_t>(1, std::llround(len * frame_rate));
    a.seed = seed * 1000003 + n++;
    plan.push_back(std::move(a));
    at += gap(rng);
  }
  return plan;
}

int64_t guide_arrivals(std::vector<Arrival>& plan, float scale, double share) {
  if (scale == 1.0f) return 0;
  int64_t guided = 0;
  for (size_t i = 0; i < plan.size(); ++i)
    if (std::floor(static_cast<double>(i + 1) * share) > std::floor(static_cast<double>(i) * share)) {
      plan[i].cfg_scale = scale;
      plan[i].instruct = "A warm, clear voice, speaking calmly at an even pace.";
      ++guided;
    }
  return guided;
}

Point summarize(const std::vector<const Timing*>& timings, double frame_rate, double rate, double duration,
                double settle, double wall, const std::vector<Running>& running) {
  Point p;
  p.rate = rate;
  p.duration = duration;
  p.settle = settle;
  std::vector<double> ttfa, gaps;
  int64_t frames = 0, late = 0, underrun_reqs = 0;
  const double frame_s = 1.0 / frame_rate;
  // The window of the throughput figures: the measured arrivals' seconds, or the whole run.
  const double from = settle > 0 ? settle : 0, to = settle > 0 ? settle + duration : wall;
  int64_t window_frames = 0;
  for (const Timing* t : timings)
    for (double at : t->frame_at) window_frames += t->sent_s + at >= from && t->sent_s + at <= to;
  for (const Timing* t : timings) {
    if (t->sent_s < settle) continue;
    ++p.requests;
    if (t->refused) { ++p.refused; continue; }
    if (t->failed) { ++p.failed; continue; }
    ttfa.push_back(t->first_audio_s);
    bool under = false;
    for (size_t k = 0; k < t->frame_at.size(); ++k) {
      if (k > 0) gaps.push_back((t->frame_at[k] - t->frame_at[k - 1]) * 1e3);
      if (t->frame_at[k] > t->frame_at[0] + static_cast<double>(k) * frame_s) {
        ++late;
        under = true;
      }
    }
    frames += static_cast<int64_t>(t->frame_at.size());
    underrun_reqs += under;
  }
  const int64_t served = p.requests - p.refused - p.failed;
  p.audio_s_per_s = to > from ? static_cast<double>(window_frames) * frame_s / (to - from) : 0;
  double sum = 0;
  int64_t samples = 0;
  for (const Running& r : running) {
    if (r.at_s < from || r.at_s > to) continue;
    sum += r.streams;
    ++samples;
    p.max_streams = std::max(p.max_streams, r.streams);
  }
  p.mean_streams = samples == 0 ? 0 : sum / static_cast<double>(samples);
  p.ttfa_p50 = pct(ttfa, 50);
  p.ttfa_p90 = pct(ttfa, 90);
  p.ttfa_p99 = pct(ttfa, 99);
  p.gap_p99_ms = pct(gaps, 99);
  p.gap_max_ms = gaps.empty() ? 0 : *std::max_element(gaps.begin(), gaps.end());
  p.underrun_pct = served > 0 ? 100.0 * static_cast<double>(underrun_reqs) / static_cast<double>(served) : 0;
  p.late_frames_pct = frames > 0 ? 100.0 * static_cast<double>(late) / static_cast<double>(frames) : 0;
  return p;
}

void summarize_steps(Point& p, const std::vector<StepSample>& steps) {
  const auto measured = [&p](const StepSample& s) {
    return p.settle <= 0 || (s.at_s >= p.settle && s.at_s <= p.settle + p.duration);
  };
  std::vector<double> ms;
  double step = 0, generate = 0, decode = 0, release = 0;
  for (const StepSample& s : steps)
    if (measured(s)) {
      ms.push_back(s.seconds * 1e3);
      step += s.seconds;
      generate += s.generate_s;
      decode += s.decode_s;
      release += s.release_s;
    }
  if (ms.empty()) return;
  const double n = static_cast<double>(ms.size());
  p.step_ms = step * 1e3 / n;
  p.generate_ms = generate * 1e3 / n;
  p.decode_ms = decode * 1e3 / n;
  p.release_ms = release * 1e3 / n;
  p.step_means_measured = true;
  p.step_p50_ms = pct(ms, 50);
  p.step_p99_ms = pct(ms, 99);
  p.step_max_ms = *std::max_element(ms.begin(), ms.end());
  for (const StepSample& s : steps) {
    if (!measured(s) || s.seconds * 1e3 <= 2 * p.step_p50_ms) continue;
    ++p.slow_steps;
    p.slow_with_joins += s.joins;
    p.slow_with_captures += s.captures;
  }
}

void print_point(const Point& p) {
  if (p.settle > 0) std::printf("(the requests of the first %.0f s only loaded the system)\n", p.settle);
  std::printf("rate %.2f/s: %lld requests (%lld refused, %lld failed), %.1f audio-s/s, streams mean %.1f max %d, "
              "TTFA p50 %.0f / p90 %.0f / p99 %.0f ms, frame gap p99 %.1f / max %.1f ms, underruns %.1f %% of requests "
              "(%.2f %% of frames), peak RSS %.0f MiB%s%s\n",
              p.rate, (long long)p.requests, (long long)p.refused, (long long)p.failed, p.audio_s_per_s, p.mean_streams,
              p.max_streams, p.ttfa_p50 * 1e3, p.ttfa_p90 * 1e3, p.ttfa_p99 * 1e3, p.gap_p99_ms, p.gap_max_ms, p.underrun_pct,
              p.late_frames_pct, p.rss_mib,
              p.guided ? (", " + std::to_string(p.guided) + " guided").c_str() : "",
              p.verified ? (", verified " + std::to_string(p.verified) + " solo: " + std::to_string(p.verify_mismatches) +
                            " mismatches").c_str()
                         : "");
  if (p.step_ms > 0)
    std::printf("  scheduler: %s %.2f ms: generation %.2f ms, codec and delivery %.2f ms, ending requests %.2f ms\n",
                p.step_means_measured ? (p.settle > 0 ? "the measured seconds' mean step" : "the mean step")
                                      : "a step every",
                p.step_ms, p.generate_ms, p.decode_ms, p.release_ms);
  if (p.step_p50_ms > 0)
    std::printf("  steps: p50 %.2f / p99 %.2f / max %.2f ms; %lld over twice the median (%lld with newcomers' "
                "prompts, %lld capturing frame graphs)\n",
                p.step_p50_ms, p.step_p99_ms, p.step_max_ms, (long long)p.slow_steps, (long long)p.slow_with_joins,
                (long long)p.slow_with_captures);
}

nlohmann::json to_json(const Point& p) {
  return {{"rate", p.rate}, {"duration_s", p.duration}, {"settle_s", p.settle}, {"requests", p.requests},
          {"refused", p.refused}, {"failed", p.failed}, {"audio_s_per_s", p.audio_s_per_s},
          {"streams_mean", p.mean_streams}, {"streams_max", p.max_streams}, {"ttfa_p50_s", p.ttfa_p50},
          {"ttfa_p90_s", p.ttfa_p90}, {"ttfa_p99_s", p.ttfa_p99}, {"frame_gap_p99_ms", p.gap_p99_ms},
          {"frame_gap_max_ms", p.gap_max_ms},
          {"underrun_requests_pct", p.underrun_pct},
          {"late_frames_pct", p.late_frames_pct}, {"peak_rss_mib", p.rss_mib}, {"verified", p.verified},
          {"verify_mismatches", p.verify_mismatches}, {"step_ms", p.step_ms}, {"generate_ms", p.generate_ms},
          {"decode_ms", p.decode_ms}, {"release_ms", p.release_ms}, {"step_means_measured", p.step_means_measured},
          {"guided_requests", p.guided},
          {"step_p50_ms", p.step_p50_ms}, {"step_p99_ms", p.step_p99_ms}, {"step_max_ms", p.step_max_ms},
          {"slow_steps", p.slow_steps}, {"slow_steps_with_joins", p.slow_with_joins},
          {"slow_steps_capturing", p.slow_with_captures}};
}

std::string guidance_problem(const ServeBenchOptions& o) {
  if (!std::isfinite(o.cfg_scale) || !(o.cfg_scale > 0.0f) || o.cfg_scale > 50.0f)
    return "bench --serve: --cfg-scale must be in (0, 50]";
  if (!(o.cfg_share >= 0.0 && o.cfg_share <= 1.0)) return "bench --serve: --cfg-share must be in [0, 1]";
  return "";
}

bool good(const Point& p, const ServeBenchOptions& o) {
  return p.refused == 0 && p.failed == 0 && p.underrun_pct == 0 && p.ttfa_p99 <= o.ttfa_bound;
}

Status run_points(const ServeBenchOptions& o, uint64_t seed, const std::function<Result<Point>(double, uint64_t)>& run_point,
                  nlohmann::json& out) {
  if (!o.sweep) {
    CHORUS_ASSIGN(Point p, run_point(o.rate, seed));
    print_point(p);
    out["points"].push_back(to_json(p));
    return ok_status();
  }
  // Double the rate until a point fails, then bisect between the last good and the first bad.
  double lo_rate = 0, hi_rate = 0, rate = o.rate;
  for (int i = 0; i < 12 && hi_rate == 0; ++i, rate *= 2) {
    CHORUS_ASSIGN(Point p, run_point(rate, seed + static_cast<uint64_t>(i)));
    print_point(p);
    out["points"].push_back(to_json(p));
    if (good(p, o)) lo_rate = rate;
    else hi_rate = rate;
  }
  for (int i = 0; i < 4 && hi_rate > 0 && lo_rate > 0; ++i) {
    const double mid = 0.5 * (lo_rate + hi_rate);
    CHORUS_ASSIGN(Point p, run_point(mid, seed + 100 + static_cast<uint64_t>(i)));
    print_point(p);
    out["points"].push_back(to_json(p));
    (good(p, o) ? lo_rate : hi_rate) = mid;
  }
  std::printf("sweep: highest rate with no underrun and p99 TTFA <= %.0f ms: %.3f requests/s\n", o.ttfa_bound * 1e3, lo_rate);
  out["sweep_rate"] = lo_rate;
  return ok_status();
}

Status write_json(const ServeBenchOptions& o, const nlohmann::json& out) {
  if (o.json.empty()) return ok_status();
  std::ofstream f(o.json);
  f << out.dump(2) << "\n";
  if (!f) return make_error(ErrorCode::kIo, o.json + ": cannot write");
  return ok_status();
}

}  // namespace chorus::cli::serve_bench
