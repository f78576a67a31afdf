#include "bench/engine/codec_batch_bench.h"

#ifndef CHORUS_HAVE_CUDA

namespace chorus::bench {
Result<std::string> codec_batch_bench(const CodecBatchBenchOptions&) {
  return make_error(ErrorCode::kUnsupported, "this build has no CUDA backend");
}
}  // namespace chorus::bench

#else

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "bench/engine/runs_cuda.h"
#include "models/codec/decoder_cuda.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::bench {

namespace {

struct Streams {
  std::vector<codec::CudaDecoderState> states;
  std::vector<std::vector<float>> pcm;
};

Result<Streams> make_streams(const codec::CudaDecoder& dec, int64_t n) {
  Streams s;
  for (int64_t i = 0; i < n; ++i) {
    CHORUS_ASSIGN(auto st, dec.new_state());
    s.states.push_back(std::move(st));
  }
  s.pcm.resize(static_cast<size_t>(n));
  return s;
}

// Steps [from, to) of all streams, one frame each: per stream (decode) or together (decode_batch).
// codes[i] is stream i's [steps, Q].
Status run_steps(const codec::CudaDecoder& dec, Streams& s, const std::vector<std::vector<int32_t>>& codes,
                 int64_t from, int64_t to, bool batched) {
  const int64_t Q = dec.num_quantizers();
  const size_t n = s.states.size();
  std::vector<codec::CudaDecoderState*> states;
  std::vector<std::vector<float>*> outs;
  for (size_t i = 0; i < n; ++i) {
    states.push_back(&s.states[i]);
    outs.push_back(&s.pcm[i]);
  }
  const std::vector<int64_t> ones(n, 1);
  std::vector<const int32_t*> ptrs(n);
  for (int64_t f = from; f < to; ++f) {
    if (batched) {
      for (size_t i = 0; i < n; ++i) ptrs[i] = codes[i].data() + f * Q;
      CHORUS_TRY(dec.decode_batch(states, ptrs, ones, outs));
    } else {
      for (size_t i = 0; i < n; ++i) CHORUS_TRY(dec.decode(s.states[i], codes[i].data() + f * Q, 1, s.pcm[i]));
    }
  }
  return ok_status();
}

// Signal-to-difference ratio of `test` against `ref` in dB (both the same length; +inf when equal).
double snr_db(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& test, double& max_abs) {
  double sig = 0, diff = 0;
  max_abs = 0;
  for (size_t i = 0; i < ref.size() && i < test.size(); ++i)
    for (size_t j = 0; j < ref[i].size() && j < test[i].size(); ++j) {
      const double r = ref[i][j], d = static_cast<double>(test[i][j]) - r;
      sig += r * r;
      diff += d * d;
      max_abs = std::max(max_abs, std::fabs(d));
    }
  return diff == 0 ? INFINITY : 10.0 * std::log10(sig / diff);
}

// FNV-1a over the samples' bits: equal digests across builds or runs say the samples are the same.
uint64_t digest(const std::vector<std::vector<float>>& pcm) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& s : pcm)
    for (float v : s) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      for (int i = 0; i < 4; ++i) h = (h ^ ((bits >> (8 * i)) & 0xffu)) * 0x100000001b3ull;
    }
  return h;
}

}  // namespace

Result<std::string> codec_batch_bench(const CodecBatchBenchOptions& o) {
  if (o.streams.empty() || o.frames < 1 || o.warmup < 0 || o.precisions.empty())
    return make_error(ErrorCode::kInvalidArgument, "bench: --codec-streams needs stream counts, --codec-frames >= 1");
  for (int64_t s : o.streams)
    if (s < 1 || s > 4096) return make_error(ErrorCode::kInvalidArgument, "bench: stream counts must be in [1, 4096]");
  std::string rep;
  CHORUS_ASSIGN(const std::string dev, cuda::device_summary(0));
  std::vector<codec::CudaDecoder> decs;
  for (codec::CodecPrecision p : o.precisions) {
    CHORUS_ASSIGN(codec::CudaDecoder d, codec::load_cuda_codec(o.model, p));
    decs.push_back(std::move(d));
  }
  const codec::CudaDecoder& dec = decs.front();
  const int64_t Q = dec.num_quantizers(), steps = o.warmup + o.frames;
  const double frame_ms = 1000.0 * static_cast<double>(dec.samples_per_frame()) / static_cast<double>(dec.sample_rate());
  appendf(rep, "device           %s\n", dev.c_str());
  appendf(rep, "codec            %s: %.1f MiB of weights, %.2f MiB of state per stream, steps of up to %lld "
               "frames per batched pass\n",
          o.model.c_str(), static_cast<double>(dec.weight_bytes()) / (1 << 20),
          static_cast<double>(dec.state_bytes()) / (1 << 20), static_cast<long long>(codec::CudaDecoder::kBatchFrames));
  appendf(rep, "timing           %lld steps of one new frame per stream (after %lld untimed), wall time incl. the host\n",
          static_cast<long long>(o.frames), static_cast<long long>(o.warmup));
  size_t workspace = 0;
  for (int64_t n : o.streams) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_int_distribution<int32_t> code(0, static_cast<int32_t>(dec.codebook_size() - 1));
    std::vector<std::vector<int32_t>> codes(static_cast<size_t>(n));
    for (auto& c : codes) {
      c.resize(static_cast<size_t>(steps * Q));
      for (auto& v : c) v = code(rng);
    }
    std::vector<std::vector<float>> first;
    for (size_t pi = 0; pi < decs.size(); ++pi) {
      const codec::CudaDecoder& d = decs[pi];
      double ms[2] = {0, 0};
      std::vector<std::vector<float>> pcm[2];
      for (int batched = o.batched_only ? 1 : 0; batched < 2; ++batched) {
        CHORUS_ASSIGN(Streams s, make_streams(d, n));
        const size_t before = cuda::memory_stats().current;
        CHORUS_TRY(run_steps(d, s, codes, 0, o.warmup, batched));
        const auto t0 = Clock::now();
        CHORUS_TRY(run_steps(d, s, codes, o.warmup, steps, batched));
        ms[batched] = ms_since(t0) / static_cast<double>(o.frames);
        if (batched && workspace == 0) workspace = cuda::memory_stats().current - before;
        pcm[batched] = std::move(s.pcm);
      }
      const double per_frame = ms[1] / static_cast<double>(n);
      appendf(rep, "%4lld streams %-4s ", static_cast<long long>(n), codec::codec_precision_name(d.precision()));
      if (!o.batched_only)
        appendf(rep, "per stream %8.2f ms per step (%.3f ms per stream-frame) | ", ms[0], ms[0] / static_cast<double>(n));
      appendf(rep, "batched %8.2f ms per step (%.3f ms per stream-frame)", ms[1], per_frame);
      if (!o.batched_only) appendf(rep, ": %.1fx", ms[0] / ms[1]);
      appendf(rep, "; batched keeps %.0f streams real time", frame_ms / per_frame);
      if (!o.batched_only) appendf(rep, "; samples %s", pcm[0] == pcm[1] ? "identical" : "DIFFER");
      appendf(rep, "; digest %016llx", static_cast<unsigned long long>(digest(pcm[1])));
      if (pi == 0) {
        first = std::move(pcm[1]);
      } else {
        double max_abs = 0;
        const double snr = snr_db(first, pcm[1], max_abs);
        appendf(rep, "; against %s: %.1f dB signal to difference, max |difference| %.2e",
                codec::codec_precision_name(decs.front().precision()), snr, max_abs);
      }
      appendf(rep, "\n");
    }
  }
  appendf(rep, "memory           batch workspace %.2f GiB (made by the first decode_batch), per-stream states %.2f MiB each\n",
          gib(workspace), static_cast<double>(dec.state_bytes()) / (1 << 20));
  return rep;
}

}  // namespace chorus::bench

#endif  // CHORUS_HAVE_CUDA
