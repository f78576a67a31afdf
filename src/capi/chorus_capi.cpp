// The C ABI (include/chorus/chorus.h) over engine::load and engine::Synthesizer. Every entry point
// catches everything: a C++ exception must never unwind into C (or Go, Rust, ...) frames.
#include "chorus/chorus.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "audio/writer.h"
#include "capi/request_mapping.h"
#include "engine/build_info.h"
#include "engine/model.h"
#include "engine/synthesizer.h"
#include "engine/tts_model_cuda.h"
#include "runtime/cpu/quant.h"

using namespace chorus;

// Shared by the model handle and its syntheses, so a synthesis handle stays valid (and its wait()
// returns) after the model handle is freed.
struct ModelState {
  std::unique_ptr<ThreadPool> pool;  // before the model: it must outlive it
  std::shared_ptr<const engine::Model> model;
  std::unique_ptr<engine::Synthesizer> synth;
  std::string family, variant, dir, device;
  std::string speakers, languages;  // comma-separated (chorus_model_info)
};

struct chorus_model {
  std::shared_ptr<ModelState> state;
};

struct chorus_voice {
  voice::Voice voice;
  std::string label;
};

struct chorus_synthesis {
  std::shared_ptr<ModelState> state;
  std::shared_ptr<engine::Synthesis> job;
};

namespace {

thread_local std::string t_last_error;

chorus_status to_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return CHORUS_INVALID_ARGUMENT;
    case ErrorCode::kNotFound: return CHORUS_NOT_FOUND;
    case ErrorCode::kIo: return CHORUS_IO;
    case ErrorCode::kInvalidFormat: return CHORUS_INVALID_FORMAT;
    case ErrorCode::kShapeMismatch: return CHORUS_SHAPE_MISMATCH;
    case ErrorCode::kUnsupported: return CHORUS_UNSUPPORTED;
    case ErrorCode::kOutOfRange: return CHORUS_OUT_OF_RANGE;
    case ErrorCode::kResourceExhausted: return CHORUS_RESOURCE_EXHAUSTED;
    case ErrorCode::kCancelled: return CHORUS_CANCELLED;
    case ErrorCode::kInternal: return CHORUS_INTERNAL;
  }
  return CHORUS_INTERNAL;
}

chorus_status fail(const Error& e) {
  t_last_error = e.to_string();
  return to_status(e.code);
}

chorus_status fail(chorus_status s, const std::string& message) {
  t_last_error = message;
  return s;
}

// Runs `body` (returning chorus_status), turning any escaping exception into a status.
template <class F>
chorus_status guarded(const char* fn, F&& body) {
  try {
    t_last_error.clear();
    return body();
  } catch (const std::bad_alloc&) {
    return fail(CHORUS_RESOURCE_EXHAUSTED, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(CHORUS_INTERNAL, std::string(fn) + ": unexpected exception: " + e.what());
  } catch (...) {
    return fail(CHORUS_INTERNAL, std::string(fn) + ": unexpected exception");
  }
}

// Copies the caller's struct into a full-size one: fields past the caller's `size` keep their
// defaults, so an older caller's smaller struct is read safely.
template <class T>
bool read_sized(const T* in, T* out, const char* what) {
  const size_t given = in->size;
  if (given < sizeof(size_t) || given > 65536) {
    t_last_error = std::string(what) + ".size is not set: call its _init function first";
    return false;
  }
  std::memcpy(static_cast<void*>(out), in, std::min(given, sizeof(T)));
  out->size = sizeof(T);
  return true;
}

template <class T>
void write_sized(const T& full, T* out) {
  const size_t given = out->size;
  const size_t n = std::min(given, sizeof(T));
  if (n <= sizeof(size_t)) return;
  std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t), reinterpret_cast<const char*>(&full) + sizeof(size_t),
              n - sizeof(size_t));
}

void fill_stats(const engine::SynthesisStats& s, chorus_stats* out) {
  if (!out) return;
  chorus_stats full{};
  full.size = sizeof(full);
  full.stop_reason = static_cast<int>(s.stop);
  full.frames = s.frames;
  full.max_frames = s.max_frames;
  full.text_tokens = s.text_tokens;
  full.audio_s = s.audio_s;
  full.first_audio_s = s.first_audio_s;
  full.total_s = s.total_s;
  write_sized(full, out);
}

engine::ChunkCallback wrap_callback(chorus_chunk_fn fn, void* user) {
  if (!fn) return [](const engine::AudioChunk&) { return ok_status(); };
  return [fn, user](const engine::AudioChunk& c) -> Status {
    chorus_chunk cc{};
    cc.size = sizeof(cc);
    cc.first_frame = c.first_frame;
    cc.frames = c.frames;
    cc.codes = c.codes;
    cc.codebooks = c.codebooks;
    cc.samples = c.samples;
    cc.count = c.count;
    if (fn(&cc, user) != 0) return make_error(ErrorCode::kCancelled, "cancelled by the chunk callback");
    return ok_status();
  };
}

chorus_status prepare(chorus_model* model, const chorus_request* request, engine::SynthesisRequest* out,
                      engine::SynthesisOptions* so) {
  if (!model) return fail(CHORUS_INVALID_ARGUMENT, "model is NULL");
  if (!request) return fail(CHORUS_INVALID_ARGUMENT, "request is NULL");
  chorus_request r;
  chorus_request_init(&r);
  if (!read_sized(request, &r, "chorus_request")) return CHORUS_INVALID_ARGUMENT;
  const engine::Model& m = *model->state->model;
  const voice::Voice* voice = r.voice ? &r.voice->voice : nullptr;
  const std::string label = r.voice ? r.voice->label : std::string();
  auto st = capi::to_engine_request(r, m, voice, label, out);
  if (!st.ok()) return fail(st.error());
  so->audio = r.codes_only == 0;
  if (so->audio && !m.has_codec())
    return fail(CHORUS_INVALID_ARGUMENT, "this model was loaded without its codec (codec = 0): set codes_only");
  return CHORUS_OK;
}

chorus_status make_voice(const chorus_model* model, engine::ReferenceAudio ref, const char* ref_text,
                         chorus_voice** out) {
  if (!model) return fail(CHORUS_INVALID_ARGUMENT, "model is NULL");
  if (!out) return fail(CHORUS_INVALID_ARGUMENT, "out is NULL");
  *out = nullptr;
  const std::string text = ref_text ? ref_text : "";
  // Reference codes serve in-context cloning only, which needs the transcript (families that
  // clone from codes alone make them anyway).
  auto v = model->state->model->create_voice(ref, text, !text.empty());
  if (!v.ok()) return fail(v.error());
  auto* h = new chorus_voice{std::move(*v), ref.label.empty() ? ref.path : ref.label};
  if (h->label.empty()) h->label = "voice";
  *out = h;
  return CHORUS_OK;
}

}  // namespace

extern "C" {

int chorus_api_version(void) { return CHORUS_API_VERSION; }

const char* chorus_build_info(void) {
  static const std::string info = [] {
    try {
      return build_info();
    } catch (...) {
      return std::string("chorus");
    }
  }();
  return info.c_str();
}

const char* chorus_last_error(void) { return t_last_error.c_str(); }

const char* chorus_status_name(chorus_status s) {
  switch (s) {
    case CHORUS_OK: return "ok";
    case CHORUS_INVALID_ARGUMENT: return "invalid argument";
    case CHORUS_NOT_FOUND: return "not found";
    case CHORUS_IO: return "i/o error";
    case CHORUS_INVALID_FORMAT: return "invalid format";
    case CHORUS_SHAPE_MISMATCH: return "shape mismatch";
    case CHORUS_UNSUPPORTED: return "unsupported";
    case CHORUS_OUT_OF_RANGE: return "out of range";
    case CHORUS_RESOURCE_EXHAUSTED: return "resource exhausted";
    case CHORUS_CANCELLED: return "cancelled";
    case CHORUS_INTERNAL: return "internal error";
  }
  return "unknown status";
}

chorus_status chorus_load(const char* spec, const chorus_load_options* options, chorus_model** out) {
  return guarded("chorus_load", [&]() -> chorus_status {
    if (!out) return fail(CHORUS_INVALID_ARGUMENT, "chorus_load: out is NULL");
    *out = nullptr;
    if (!spec || !*spec) return fail(CHORUS_INVALID_ARGUMENT, "chorus_load: the model (a folder or Org/Name) is empty");
    chorus_load_options o;
    chorus_load_options_init(&o);
    if (options && !read_sized(options, &o, "chorus_load_options")) return CHORUS_INVALID_ARGUMENT;
    auto device = engine::Device::parse(o.device ? o.device : "cpu");
    if (!device.ok()) return fail(device.error());
    if (device->is_cuda() && !engine::cuda_built())
      return fail(CHORUS_UNSUPPORTED, "device " + device->name() + ": this build of chorus has no CUDA backend");
    const std::string weights_name = o.weights && *o.weights ? o.weights : "bf16";
    const auto weights = cpu::weight_format_from_name(weights_name);
    if (!weights)
      return fail(CHORUS_INVALID_ARGUMENT, "weights \"" + weights_name.substr(0, 32) + "\": expected bf16, int8, int4 or fp8");
    if (o.threads < 0) return fail(CHORUS_OUT_OF_RANGE, "threads must be >= 0 (0: every core)");
    auto state = std::make_shared<ModelState>();
    engine::LoadOptions lo;
    lo.device = *device;
    lo.weights = *weights;
    if (o.threads > 0) state->pool = std::make_unique<ThreadPool>(o.threads);
    lo.pool = state->pool ? state->pool.get() : &ThreadPool::global();
    lo.codec = o.codec != 0;
    lo.download = o.download != 0;
    auto model = engine::load(spec, lo);
    if (!model.ok()) return fail(model.error());
    state->model = std::move(*model);
    state->synth = std::make_unique<engine::Synthesizer>(state->model);
    const engine::ModelInfo& info = state->model->info();
    state->family = info.family;
    state->variant = info.variant;
    state->dir = state->model->dir();
    state->device = device->name();
    for (const std::string& v : info.speakers) state->speakers += (state->speakers.empty() ? "" : ",") + v;
    for (const std::string& v : info.languages) state->languages += (state->languages.empty() ? "" : ",") + v;
    *out = new chorus_model{std::move(state)};
    return CHORUS_OK;
  });
}

void chorus_model_free(chorus_model* model) {
  if (!model) return;
  try {
    // Requests still running are cancelled when the last owner (this handle or a synthesis) lets go.
    delete model;
  } catch (...) {
  }
}

chorus_status chorus_model_get_info(const chorus_model* model, chorus_model_info* info) {
  return guarded("chorus_model_get_info", [&]() -> chorus_status {
    if (!model || !info) return fail(CHORUS_INVALID_ARGUMENT, "chorus_model_get_info: model or info is NULL");
    if (info->size < sizeof(size_t)) return fail(CHORUS_INVALID_ARGUMENT, "chorus_model_info.size is not set");
    const ModelState& s = *model->state;
    const engine::ModelInfo& mi = s.model->info();
    chorus_model_info full{};
    full.size = sizeof(full);
    full.family = s.family.c_str();
    full.variant = s.variant.c_str();
    full.dir = s.dir.c_str();
    full.device = s.device.c_str();
    full.codebooks = mi.codebooks;
    full.frame_rate = mi.frame_rate;
    full.sample_rate = static_cast<int>(s.model->has_codec() ? s.model->codec().sample_rate() : mi.sample_rate);
    full.clones_voices = s.model->clones_voices() ? 1 : 0;
    full.has_codec = s.model->has_codec() ? 1 : 0;
    full.weights = cpu::weight_format_name(s.model->weights());
    full.speakers = s.speakers.c_str();
    full.languages = s.languages.c_str();
    write_sized(full, info);
    return CHORUS_OK;
  });
}

chorus_status chorus_voice_create_from_file(const chorus_model* model, const char* path, const char* ref_text,
                                            chorus_voice** out) {
  return guarded("chorus_voice_create_from_file", [&]() -> chorus_status {
    if (!path || !*path) return fail(CHORUS_INVALID_ARGUMENT, "chorus_voice_create_from_file: path is empty");
    engine::ReferenceAudio ref;
    ref.path = path;
    return make_voice(model, std::move(ref), ref_text, out);
  });
}

chorus_status chorus_voice_create_from_bytes(const chorus_model* model, const void* data, size_t size,
                                             const char* ref_text, chorus_voice** out) {
  return guarded("chorus_voice_create_from_bytes", [&]() -> chorus_status {
    if (!data || size == 0) return fail(CHORUS_INVALID_ARGUMENT, "chorus_voice_create_from_bytes: no audio bytes");
    engine::ReferenceAudio ref;
    ref.bytes.assign(static_cast<const char*>(data), size);
    ref.label = "reference audio";
    return make_voice(model, std::move(ref), ref_text, out);
  });
}

chorus_status chorus_voice_create_from_samples(const chorus_model* model, const float* samples, size_t count,
                                               int sample_rate, const char* ref_text, chorus_voice** out) {
  return guarded("chorus_voice_create_from_samples", [&]() -> chorus_status {
    if (!samples || count == 0) return fail(CHORUS_INVALID_ARGUMENT, "chorus_voice_create_from_samples: no samples");
    if (sample_rate <= 0) return fail(CHORUS_OUT_OF_RANGE, "chorus_voice_create_from_samples: sample_rate must be > 0");
    if (count > (UINT32_MAX - 64) / sizeof(float))
      return fail(CHORUS_RESOURCE_EXHAUSTED, "chorus_voice_create_from_samples: too many samples");
    // As a float WAV in memory, so the samples take the same checks and resampling as a file.
    const uint32_t bytes = static_cast<uint32_t>(count * sizeof(float));
    const auto header = audio::wav_header(sample_rate, audio::SampleFormat::kFloat32, bytes);
    engine::ReferenceAudio ref;
    ref.bytes.reserve(header.size() + bytes);
    ref.bytes.append(reinterpret_cast<const char*>(header.data()), header.size());
    ref.bytes.append(reinterpret_cast<const char*>(samples), bytes);
    ref.label = "reference audio";
    return make_voice(model, std::move(ref), ref_text, out);
  });
}

chorus_status chorus_voice_save(const chorus_voice* voice, const char* path) {
  return guarded("chorus_voice_save", [&]() -> chorus_status {
    if (!voice || !path || !*path) return fail(CHORUS_INVALID_ARGUMENT, "chorus_voice_save: voice or path is missing");
    auto st = voice::write_voice_file(path, voice->voice);
    return st.ok() ? CHORUS_OK : fail(st.error());
  });
}

chorus_status chorus_voice_load(const char* path, chorus_voice** out) {
  return guarded("chorus_voice_load", [&]() -> chorus_status {
    if (!out) return fail(CHORUS_INVALID_ARGUMENT, "chorus_voice_load: out is NULL");
    *out = nullptr;
    if (!path || !*path) return fail(CHORUS_INVALID_ARGUMENT, "chorus_voice_load: path is empty");
    auto v = voice::read_voice_file(path);
    if (!v.ok()) return fail(v.error());
    *out = new chorus_voice{std::move(*v), path};
    return CHORUS_OK;
  });
}

const char* chorus_voice_ref_text(const chorus_voice* voice) { return voice ? voice->voice.ref_text.c_str() : ""; }

double chorus_voice_ref_seconds(const chorus_voice* voice) { return voice ? voice->voice.ref_seconds : 0.0; }

size_t chorus_voice_x_vector(const chorus_voice* voice, const float** data) {
  if (data) *data = voice ? voice->voice.x_vector.data() : nullptr;
  return voice ? voice->voice.x_vector.size() : 0;
}

int64_t chorus_voice_ref_codes(const chorus_voice* voice, const int32_t** codes, int64_t* codebooks) {
  if (codes) *codes = voice ? voice->voice.ref_codes.data() : nullptr;
  if (codebooks) *codebooks = voice ? voice->voice.codebooks : 0;
  return voice ? voice->voice.frames : 0;
}

void chorus_voice_free(chorus_voice* voice) { delete voice; }

chorus_status chorus_synthesize(chorus_model* model, const chorus_request* request, chorus_chunk_fn on_chunk,
                                void* user_data, chorus_stats* stats) {
  return guarded("chorus_synthesize", [&]() -> chorus_status {
    engine::SynthesisRequest r;
    engine::SynthesisOptions so;
    if (chorus_status s = prepare(model, request, &r, &so); s != CHORUS_OK) return s;
    auto result = model->state->synth->synthesize(r, wrap_callback(on_chunk, user_data), so);
    if (!result.ok()) return fail(result.error());
    fill_stats(*result, stats);
    if (result->stop == engine::StopReason::kCancelled) return fail(CHORUS_CANCELLED, "the request was cancelled");
    return CHORUS_OK;
  });
}

chorus_status chorus_submit(chorus_model* model, const chorus_request* request, chorus_chunk_fn on_chunk,
                            void* user_data, chorus_synthesis** out) {
  return guarded("chorus_submit", [&]() -> chorus_status {
    if (!out) return fail(CHORUS_INVALID_ARGUMENT, "chorus_submit: out is NULL");
    *out = nullptr;
    engine::SynthesisRequest r;
    engine::SynthesisOptions so;
    if (chorus_status s = prepare(model, request, &r, &so); s != CHORUS_OK) return s;
    auto job = model->state->synth->submit(r, wrap_callback(on_chunk, user_data), so);
    if (!job.ok()) return fail(job.error());
    *out = new chorus_synthesis{model->state, std::move(*job)};
    return CHORUS_OK;
  });
}

void chorus_cancel(chorus_synthesis* s) {
  if (s && s->job) s->job->cancel();
}

int chorus_done(const chorus_synthesis* s) { return !s || !s->job || s->job->done() ? 1 : 0; }

chorus_status chorus_wait(chorus_synthesis* s, chorus_stats* stats) {
  return guarded("chorus_wait", [&]() -> chorus_status {
    if (!s || !s->job) return fail(CHORUS_INVALID_ARGUMENT, "chorus_wait: synthesis is NULL");
    auto result = s->job->wait();
    if (!result.ok()) return fail(result.error());
    fill_stats(*result, stats);
    if (result->stop == engine::StopReason::kCancelled) return fail(CHORUS_CANCELLED, "the request was cancelled");
    return CHORUS_OK;
  });
}

void chorus_synthesis_free(chorus_synthesis* s) {
  if (!s) return;
  try {
    if (s->job) {
      s->job->cancel();
      (void)s->job->wait();
    }
    delete s;
  } catch (...) {
  }
}

}  // extern "C"
