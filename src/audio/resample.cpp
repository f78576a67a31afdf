#include "audio/resample.h"

#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace chorus::audio {
namespace {

// Output larger than this (samples) is refused rather than attempted.
constexpr unsigned long long kMaxOutputSamples = 1ull << 31;

Status check_rate(int rate, const char* which) {
  if (rate < kMinSampleRate || rate > kMaxSampleRate) {
    return make_error(ErrorCode::kOutOfRange, std::string("resample: ") + which + " rate " + std::to_string(rate) +
                                                  " Hz outside [" + std::to_string(kMinSampleRate) + ", " +
                                                  std::to_string(kMaxSampleRate) + "]");
  }
  return ok_status();
}

Error soxr_failure(const char* what, soxr_error_t e) {
  return make_error(ErrorCode::kInternal, std::string("resample: ") + what + " failed: " + soxr_strerror(e));
}

}  // namespace

void StreamResampler::SoxrDeleter::operator()(soxr* s) const { soxr_delete(s); }

StreamResampler::StreamResampler(StreamResampler&&) noexcept = default;
StreamResampler& StreamResampler::operator=(StreamResampler&&) noexcept = default;
StreamResampler::~StreamResampler() = default;

Result<StreamResampler> StreamResampler::create(int from_rate, int to_rate) {
  CHORUS_TRY(check_rate(from_rate, "input"));
  CHORUS_TRY(check_rate(to_rate, "output"));
  if (from_rate == to_rate) return StreamResampler(from_rate, to_rate, nullptr);
  soxr_error_t err = nullptr;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  const soxr_runtime_spec_t runtime = soxr_runtime_spec(1);  // callers own the threading
  soxr_t s = soxr_create(from_rate, to_rate, 1, &err, &io, &quality, &runtime);
  if (err || !s) {
    if (s) soxr_delete(s);
    return soxr_failure("soxr_create", err ? err : "no resampler");
  }
  return StreamResampler(from_rate, to_rate, s);
}

Status StreamResampler::process(const float* in, size_t n, std::vector<float>& out) {
  if (n == 0) return ok_status();
  if (!in) return make_error(ErrorCode::kInvalidArgument, "resample: null input");
  if (passthrough()) {
    out.insert(out.end(), in, in + n);
    return ok_status();
  }
  const double ratio = static_cast<double>(to_rate_) / from_rate_;
  size_t consumed = 0;
  int idle_rounds = 0;
  while (consumed < n) {
    const size_t left = n - consumed;
    const size_t room = static_cast<size_t>(std::ceil(static_cast<double>(left) * ratio)) + 64;
    const size_t old = out.size();
    out.resize(old + room);
    size_t idone = 0, odone = 0;
    const soxr_error_t err = soxr_process(soxr_.get(), in + consumed, left, &idone, out.data() + old, room, &odone);
    out.resize(old + odone);
    if (err) return soxr_failure("soxr_process", err);
    consumed += idone;
    // soxr always makes progress when given output room; this only guards against a library bug.
    idle_rounds = (idone == 0 && odone == 0) ? idle_rounds + 1 : 0;
    if (idle_rounds > 2) return make_error(ErrorCode::kInternal, "resample: soxr made no progress");
  }
  return ok_status();
}

Status StreamResampler::flush(std::vector<float>& out) {
  if (passthrough()) return ok_status();
  constexpr size_t kChunk = 4096;
  for (int round = 0; round < 1 << 20; ++round) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    size_t odone = 0;
    const soxr_error_t err = soxr_process(soxr_.get(), nullptr, 0, nullptr, out.data() + old, kChunk, &odone);
    out.resize(old + odone);
    if (err) return soxr_failure("soxr_process (flush)", err);
    if (odone == 0) {
      const soxr_error_t clear_err = soxr_clear(soxr_.get());
      if (clear_err) return soxr_failure("soxr_clear", clear_err);
      return ok_status();
    }
  }
  return make_error(ErrorCode::kInternal, "resample: soxr flush did not terminate");
}

Result<std::vector<float>> resample(const float* in, size_t n, int from_rate, int to_rate) {
  CHORUS_TRY(check_rate(from_rate, "input"));
  CHORUS_TRY(check_rate(to_rate, "output"));
  if (n > 0 && !in) return make_error(ErrorCode::kInvalidArgument, "resample: null input");
  // round(n * to / from) in 128-bit integers: n * to cannot overflow there.
  const unsigned __int128 scaled = static_cast<unsigned __int128>(n) * static_cast<unsigned>(to_rate);
  const unsigned __int128 want128 = (scaled + static_cast<unsigned>(from_rate) / 2) / static_cast<unsigned>(from_rate);
  if (want128 > kMaxOutputSamples) {
    return make_error(ErrorCode::kResourceExhausted,
                      "resample: output of " + std::to_string(n) + " samples at " + std::to_string(to_rate) +
                          " Hz would exceed " + std::to_string(kMaxOutputSamples) + " samples");
  }
  const size_t want = static_cast<size_t>(want128);
  if (from_rate == to_rate) return std::vector<float>(in, in + n);

  CHORUS_ASSIGN(StreamResampler rs, StreamResampler::create(from_rate, to_rate));
  std::vector<float> out;
  out.reserve(want + 64);
  CHORUS_TRY(rs.process(in, n, out));
  CHORUS_TRY(rs.flush(out));
  out.resize(want, 0.0f);  // soxr's tail may differ from the rounded length by a sample
  return out;
}

}  // namespace chorus::audio
