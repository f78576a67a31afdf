/* chorus C API: text-to-speech from C and from any language with a C FFI (Go, Rust, Swift, C#, ...).
 *
 * A small, versioned ABI over the engine: opaque handles, status codes, plain structs.
 *
 *   chorus_model* m = NULL;
 *   chorus_load_options lo; chorus_load_options_init(&lo); lo.device = "cpu";
 *   if (chorus_load("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", &lo, &m) != CHORUS_OK)
 *     fprintf(stderr, "%s\n", chorus_last_error());
 *   chorus_request r; chorus_request_init(&r); r.text = "Hello."; r.speaker = "ryan";
 *   chorus_synthesize(m, &r, on_chunk, user_data, NULL);   // on_chunk gets audio as it is made
 *   chorus_model_free(m);
 *
 * Rules:
 *  - Every function returns a chorus_status (or a handle / value documented as never failing). On
 *    failure, chorus_last_error() gives a one-line message for the calling thread, valid until that
 *    thread's next chorus call. Nothing aborts or throws across this boundary on bad input.
 *  - Structs that callers fill (chorus_load_options, chorus_request) and that chorus fills
 *    (chorus_model_info, chorus_stats) start with `size`: set it with the inline *_init function
 *    (or to sizeof) so a newer library reads and writes only the fields an older caller knows about.
 *  - Strings are UTF-8 and NUL-terminated; strings the library returns are owned by the handle they
 *    come from and live as long as it.
 *  - Handles may be used from any thread. A model serves every thread at once: requests submitted
 *    together are batched (continuous batching), and each one's audio does not depend on the others.
 *  - Chunk callbacks run on the model's scheduler thread: keep them quick (copy the samples and
 *    return), and call nothing of this API from them except chorus_cancel().
 */
#ifndef CHORUS_CHORUS_H_
#define CHORUS_CHORUS_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define CHORUS_EXPORT __declspec(dllexport)
#else
#define CHORUS_EXPORT __attribute__((visibility("default")))
#endif

/* Bumped when a function or struct field is added (never removed or changed). */
#define CHORUS_API_VERSION 2

typedef enum chorus_status {
  CHORUS_OK = 0,
  CHORUS_INVALID_ARGUMENT = 1,   /* a bad option, request field or parameter value */
  CHORUS_NOT_FOUND = 2,          /* a file, model, speaker... that does not exist */
  CHORUS_IO = 3,                 /* the operating system refused a read or write */
  CHORUS_INVALID_FORMAT = 4,     /* a file exists but its content is malformed */
  CHORUS_SHAPE_MISMATCH = 5,     /* a tensor disagrees with its config */
  CHORUS_UNSUPPORTED = 6,        /* valid but not handled (e.g. CUDA in a CPU-only build) */
  CHORUS_OUT_OF_RANGE = 7,       /* a number outside its allowed range */
  CHORUS_RESOURCE_EXHAUSTED = 8, /* a size cap, queue or memory limit was hit */
  CHORUS_CANCELLED = 9,          /* the request was cancelled */
  CHORUS_INTERNAL = 10           /* a bug in chorus; the message says where */
} chorus_status;

typedef struct chorus_model chorus_model;         /* a loaded model and its request scheduler */
typedef struct chorus_voice chorus_voice;         /* a cloned voice (x-vector, reference codes, transcript) */
typedef struct chorus_synthesis chorus_synthesis; /* a submitted request */

/* The API version the library implements (CHORUS_API_VERSION it was built with). */
CHORUS_EXPORT int chorus_api_version(void);
/* One line: version, backends compiled in, CPU features. Never NULL. */
CHORUS_EXPORT const char* chorus_build_info(void);
/* The message of the calling thread's last failed call ("" when none). */
CHORUS_EXPORT const char* chorus_last_error(void);
/* "ok", "invalid argument", ... Never NULL. */
CHORUS_EXPORT const char* chorus_status_name(chorus_status status);

/* ---- Models ---- */

typedef struct chorus_load_options {
  size_t size;
  const char* device;  /* "cpu" (default), "cuda" or "cuda:N" */
  const char* weights; /* NULL, "" or "bf16": the checkpoint's weights as stored (exact); "int8",
                          "int4" (CPU only) or "fp8" (CUDA only): the decoder layers quantised at
                          load (docs/quantization.md) */
  int threads;         /* CPU worker threads; 0: CHORUS_THREADS or every core */
  int codec;           /* nonzero (default): load the codec, so requests give audio */
  int download;        /* nonzero: a Hugging Face id missing from the cache is downloaded into it
                          (HF_ENDPOINT, HF_TOKEN; HF_HUB_OFFLINE forbids it); 0 (default): never */
} chorus_load_options;

/* Inline, so `size` is the caller's sizeof: a library newer than the header never writes past the
 * caller's struct. */
static inline void chorus_load_options_init(chorus_load_options* o) {
  if (!o) return;
  memset(o, 0, sizeof(*o));
  o->size = sizeof(*o);
  o->device = "cpu";
  o->codec = 1;
}

/* `spec`: a checkpoint folder, or a Hugging Face id "Org/Name[@revision]" in the local Hugging
 * Face cache (or downloaded, with options->download). `options` may be NULL (defaults). On
 * success *out is a new handle. */
CHORUS_EXPORT chorus_status chorus_load(const char* spec, const chorus_load_options* options, chorus_model** out);
/* Cancels the model's running requests; handles of its syntheses stay valid until freed. NULL is fine. */
CHORUS_EXPORT void chorus_model_free(chorus_model* model);

typedef struct chorus_model_info {
  size_t size;
  const char* family;    /* "qwen3-tts", "breeze-tts" */
  const char* variant;   /* "custom_voice", "voice_design", "base", ... */
  const char* dir;       /* the checkpoint folder it was loaded from */
  const char* device;    /* "cpu", "cuda:0" */
  int64_t codebooks;     /* codes per frame */
  double frame_rate;     /* frames per second of audio */
  int sample_rate;       /* of the audio chunks (24000) */
  int clones_voices;     /* nonzero: chorus_voice_create_* works with this model */
  int has_codec;         /* nonzero: requests give audio */
  const char* weights;   /* "bf16", "int8", "int4", "fp8" (chorus_load_options.weights); API version 2 */
  const char* speakers;  /* preset speakers (CustomVoice), comma-separated; "" when none; version 2 */
  const char* languages; /* languages besides "auto", comma-separated; version 2 */
} chorus_model_info;

/* Fills `info` (set info->size first, e.g. with sizeof). */
CHORUS_EXPORT chorus_status chorus_model_get_info(const chorus_model* model, chorus_model_info* info);

/* ---- Voices (voice cloning: Qwen3-TTS Base, Breeze TTS 2) ---- */

/* From an audio file (WAV, FLAC, Ogg, MP3). `ref_text`, the transcript, may be NULL or "": the
 * voice then clones from the speaker embedding alone. */
CHORUS_EXPORT chorus_status chorus_voice_create_from_file(const chorus_model* model, const char* path,
                                                          const char* ref_text, chorus_voice** out);
/* From a whole audio file held in memory. */
CHORUS_EXPORT chorus_status chorus_voice_create_from_bytes(const chorus_model* model, const void* data, size_t size,
                                                           const char* ref_text, chorus_voice** out);
/* From mono float samples (full scale 1.0) at `sample_rate` Hz. */
CHORUS_EXPORT chorus_status chorus_voice_create_from_samples(const chorus_model* model, const float* samples,
                                                             size_t count, int sample_rate, const char* ref_text,
                                                             chorus_voice** out);
/* Voice files (NAME.voice, as `chorus voice create` writes them). */
CHORUS_EXPORT chorus_status chorus_voice_save(const chorus_voice* voice, const char* path);
CHORUS_EXPORT chorus_status chorus_voice_load(const char* path, chorus_voice** out);
/* The transcript ("" when none), owned by the voice. */
CHORUS_EXPORT const char* chorus_voice_ref_text(const chorus_voice* voice);
/* Seconds of reference audio the voice was made from (0 if unknown). */
CHORUS_EXPORT double chorus_voice_ref_seconds(const chorus_voice* voice);
/* The speaker embedding (x-vector; none for Breeze TTS 2 voices), owned by the voice. */
CHORUS_EXPORT size_t chorus_voice_x_vector(const chorus_voice* voice, const float** data);
/* The reference codes, [frames][codebooks] row-major, owned by the voice; 0 frames when none. */
CHORUS_EXPORT int64_t chorus_voice_ref_codes(const chorus_voice* voice, const int32_t** codes, int64_t* codebooks);
CHORUS_EXPORT void chorus_voice_free(chorus_voice* voice);

/* ---- Requests ---- */

/* Numeric request fields set to CHORUS_DEFAULT (or any negative value) take the checkpoint's
 * default (generation_config.json). */
#define CHORUS_DEFAULT (-1)

typedef enum chorus_text_layout {
  CHORUS_TEXT_MODEL_DEFAULT = 0, /* the official API's default for the model and mode */
  CHORUS_TEXT_STREAMING = 1,     /* text fed one token per frame */
  CHORUS_TEXT_FULL = 2           /* the whole text in the prompt */
} chorus_text_layout;

typedef struct chorus_request {
  size_t size;
  const char* text;          /* required */
  const char* instructions;  /* style instruction or voice description; NULL: none */
  const char* speaker;       /* preset speaker (CustomVoice); NULL: none */
  const char* language;      /* "auto" (NULL) or a language the model lists */
  const chorus_voice* voice; /* voice clone; NULL: none */
  const char* ref_text;      /* transcript of the voice's reference; NULL: the voice's own */
  int xvector_only;          /* clone from the speaker embedding alone */
  int text_layout;           /* a chorus_text_layout */
  uint64_t seed;             /* the same seed gives the same audio */
  uint32_t rng_stream;       /* another take with the same seed */
  /* Codebook 0 sampling. Giving temperature, top_k or top_p asks for sampling. The code predictor
   * (the other codebooks) follows these unless its subtalker_* field is set. */
  int greedy;               /* 1: argmax, 0: sample, CHORUS_DEFAULT */
  float temperature;        /* 0: greedy */
  int32_t top_k;            /* 0: off */
  float top_p;              /* 1: off */
  float repetition_penalty; /* codebook 0 only */
  int subtalker_greedy;
  float subtalker_temperature;
  int32_t subtalker_top_k;
  float subtalker_top_p;
  int64_t max_frames;       /* 0 or CHORUS_DEFAULT: the checkpoint's limit */
  int64_t min_frames;       /* CHORUS_DEFAULT: the official 2 */
  float cfg_scale;          /* Breeze TTS 2 guidance; CHORUS_DEFAULT: the model's */
  int codes_only;           /* nonzero: frames only, no audio decoded */
} chorus_request;

/* Inline, as chorus_load_options_init: every numeric field CHORUS_DEFAULT, strings NULL. */
static inline void chorus_request_init(chorus_request* r) {
  if (!r) return;
  memset(r, 0, sizeof(*r));
  r->size = sizeof(*r);
  r->greedy = r->subtalker_greedy = CHORUS_DEFAULT;
  r->temperature = r->top_p = r->repetition_penalty = (float)CHORUS_DEFAULT;
  r->subtalker_temperature = r->subtalker_top_p = (float)CHORUS_DEFAULT;
  r->top_k = r->subtalker_top_k = CHORUS_DEFAULT;
  r->max_frames = 0;
  r->min_frames = CHORUS_DEFAULT;
  r->cfg_scale = (float)CHORUS_DEFAULT;
}

typedef struct chorus_chunk {
  size_t size;
  int64_t first_frame;   /* index of the first frame in the request */
  int64_t frames;        /* frames covered (0 for the closing chunk of held-back samples) */
  const int32_t* codes;  /* [frames][codebooks] */
  int64_t codebooks;
  const float* samples;  /* mono, at the model's sample rate; NULL with codes_only */
  size_t count;          /* samples */
} chorus_chunk;

/* Called with each chunk as it is made; the pointers are valid during the call only. Return 0 to
 * go on, nonzero to stop the request (it then ends with CHORUS_CANCELLED). */
typedef int (*chorus_chunk_fn)(const chorus_chunk* chunk, void* user_data);

typedef enum chorus_stop_reason {
  CHORUS_STOP_RUNNING = 0,
  CHORUS_STOP_EOS = 1,        /* the model ended the utterance */
  CHORUS_STOP_MAX_FRAMES = 2, /* the frame limit was reached */
  CHORUS_STOP_CANCELLED = 3
} chorus_stop_reason;

typedef struct chorus_stats {
  size_t size;
  int stop_reason;        /* a chorus_stop_reason */
  int64_t frames, max_frames, text_tokens;
  double audio_s;         /* seconds of audio made */
  double first_audio_s;   /* from submission to the first audio */
  double total_s;         /* from submission to the end */
} chorus_stats;

/* Synthesizes and returns when the request has ended; `on_chunk` may be NULL, `stats` may be NULL
 * (or set stats->size first). A request cancelled by its callback returns CHORUS_CANCELLED. */
CHORUS_EXPORT chorus_status chorus_synthesize(chorus_model* model, const chorus_request* request, chorus_chunk_fn on_chunk,
                                              void* user_data, chorus_stats* stats);

/* Asynchronous: checks and queues the request (errors in it are returned here) and returns at
 * once; chunks arrive on the scheduler thread. `user_data` must stay valid until chorus_wait()
 * returned or the handle is freed. */
CHORUS_EXPORT chorus_status chorus_submit(chorus_model* model, const chorus_request* request, chorus_chunk_fn on_chunk,
                                          void* user_data, chorus_synthesis** out);
/* Stops the request before its next frame. Any thread, any time, also from its callback. */
CHORUS_EXPORT void chorus_cancel(chorus_synthesis* synthesis);
/* Nonzero once the request has ended (chorus_wait() will not block). */
CHORUS_EXPORT int chorus_done(const chorus_synthesis* synthesis);
/* Blocks until the request has ended; its status (CHORUS_CANCELLED after chorus_cancel) and stats. */
CHORUS_EXPORT chorus_status chorus_wait(chorus_synthesis* synthesis, chorus_stats* stats);
/* Cancels the request if it still runs, waits for it to end, and frees the handle. NULL is fine. */
CHORUS_EXPORT void chorus_synthesis_free(chorus_synthesis* synthesis);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_CHORUS_H_ */
