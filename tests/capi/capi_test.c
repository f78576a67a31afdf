/* The C API (include/chorus/chorus.h) called from C, against libchorus.so: load, model info,
 * synthesis with a chunk callback, same seed same samples, bad input as a status and a message,
 * cancellation (by chorus_cancel and by the callback), codes only, voices made from samples and
 * through a voice file, quantised weights. Arguments: a make-tiny custom_voice folder, a make-tiny
 * base folder, and a scratch folder. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus/chorus.h"

static int g_failures = 0;
static int g_checks = 0;

#define CHECK(cond)                                                                \
  do {                                                                             \
    ++g_checks;                                                                    \
    if (!(cond)) {                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              chorus_last_error());                                                \
      ++g_failures;                                                                \
    }                                                                              \
  } while (0)

/* Gathers every sample of a request. */
typedef struct {
  float* samples;
  size_t count, capacity;
  int chunks;
  int64_t frames;
  int64_t codebooks;
  int stop_after_chunks; /* > 0: ask to stop after this many chunks */
} collector;

static int collect(const chorus_chunk* c, void* user) {
  collector* col = (collector*)user;
  col->chunks++;
  col->frames += c->frames;
  col->codebooks = c->codebooks;
  if (c->count > 0) {
    if (col->count + c->count > col->capacity) {
      size_t cap = col->capacity ? col->capacity * 2 : 4096;
      while (cap < col->count + c->count) cap *= 2;
      col->samples = (float*)realloc(col->samples, cap * sizeof(float));
      col->capacity = cap;
    }
    memcpy(col->samples + col->count, c->samples, c->count * sizeof(float));
    col->count += c->count;
  }
  return col->stop_after_chunks > 0 && col->chunks >= col->stop_after_chunks;
}

static void reset(collector* col) {
  free(col->samples);
  memset(col, 0, sizeof(*col));
}

static chorus_model* load_or_die(const char* dir) {
  chorus_model* m = NULL;
  chorus_load_options lo;
  chorus_load_options_init(&lo);
  lo.threads = 2;
  if (chorus_load(dir, &lo, &m) != CHORUS_OK) {
    fprintf(stderr, "cannot load %s: %s\n", dir, chorus_last_error());
    exit(1);
  }
  return m;
}

static void test_errors_before_loading(void) {
  CHECK(chorus_api_version() == CHORUS_API_VERSION);
  CHECK(strlen(chorus_build_info()) > 0);
  chorus_model* m = (chorus_model*)0x1;
  CHECK(chorus_load("/nonexistent/folder/of/a/model", NULL, &m) == CHORUS_NOT_FOUND);
  CHECK(m == NULL);
  CHECK(strstr(chorus_last_error(), "/nonexistent/folder") != NULL);
  chorus_load_options lo;
  chorus_load_options_init(&lo);
  lo.device = "tpu";
  CHECK(chorus_load("/tmp", &lo, &m) == CHORUS_INVALID_ARGUMENT);
  CHECK(strstr(chorus_last_error(), "tpu") != NULL);
  lo.size = 0; /* not initialised */
  CHECK(chorus_load("/tmp", &lo, &m) == CHORUS_INVALID_ARGUMENT);
  CHECK(chorus_load(NULL, NULL, &m) == CHORUS_INVALID_ARGUMENT);
  CHECK(chorus_load("/tmp", NULL, NULL) == CHORUS_INVALID_ARGUMENT);
  CHECK(strcmp(chorus_status_name(CHORUS_NOT_FOUND), "not found") == 0);
}

static void test_custom_voice(const char* dir) {
  chorus_model* m = load_or_die(dir);
  chorus_model_info info;
  memset(&info, 0, sizeof(info));
  info.size = sizeof(info);
  CHECK(chorus_model_get_info(m, &info) == CHORUS_OK);
  CHECK(strcmp(info.family, "qwen3-tts") == 0);
  CHECK(strcmp(info.variant, "custom_voice") == 0);
  CHECK(info.sample_rate == 24000);
  CHECK(info.frame_rate == 12.5);
  CHECK(info.codebooks == 16);
  CHECK(info.has_codec == 1);
  CHECK(info.clones_voices == 0);

  chorus_request r;
  chorus_request_init(&r);
  r.text = "Hello there.";
  r.speaker = "ryan";
  r.language = "english";
  r.seed = 7;
  r.max_frames = 6;
  r.min_frames = 6; /* random weights: no early EOS, so a known length */
  collector a = {0}, b = {0};
  chorus_stats st;
  memset(&st, 0, sizeof(st));
  st.size = sizeof(st);
  CHECK(chorus_synthesize(m, &r, collect, &a, &st) == CHORUS_OK);
  CHECK(st.frames == 6);
  CHECK(st.stop_reason == CHORUS_STOP_MAX_FRAMES);
  CHECK(a.frames == 6);
  CHECK(a.codebooks == 16);
  CHECK(a.chunks >= 1);
  /* 24 kHz at 12.5 frames per second: 1920 samples a frame. */
  CHECK(a.count == 6 * 1920);
  double energy = 0;
  int finite = 1;
  for (size_t i = 0; i < a.count; ++i) {
    energy += (double)a.samples[i] * a.samples[i];
    if (!isfinite(a.samples[i])) finite = 0;
  }
  CHECK(finite);
  CHECK(energy > 0);

  /* Same seed, same samples; asynchronously this time. */
  chorus_synthesis* s = NULL;
  CHECK(chorus_submit(m, &r, collect, &b, &s) == CHORUS_OK);
  CHECK(chorus_wait(s, &st) == CHORUS_OK);
  CHECK(chorus_done(s) == 1);
  chorus_synthesis_free(s);
  CHECK(b.count == a.count && a.count > 0 && memcmp(a.samples, b.samples, a.count * sizeof(float)) == 0);
  /* Another seed, other samples (the check above is not vacuous). */
  reset(&b);
  r.seed = 8;
  CHECK(chorus_synthesize(m, &r, collect, &b, NULL) == CHORUS_OK);
  CHECK(b.count == a.count && memcmp(a.samples, b.samples, a.count * sizeof(float)) != 0);
  reset(&b);
  r.seed = 7;

  /* Bad input: a status and a message naming the problem, and the model still works. */
  chorus_request bad = r;
  bad.speaker = "nobody_by_this_name";
  CHECK(chorus_synthesize(m, &bad, collect, &b, NULL) != CHORUS_OK);
  CHECK(strstr(chorus_last_error(), "nobody_by_this_name") != NULL);
  bad = r;
  bad.text = "";
  CHECK(chorus_synthesize(m, &bad, NULL, NULL, NULL) == CHORUS_INVALID_ARGUMENT);
  CHECK(strstr(chorus_last_error(), "text") != NULL);
  bad = r;
  bad.top_p = 2.0f;
  CHECK(chorus_synthesize(m, &bad, NULL, NULL, NULL) == CHORUS_OUT_OF_RANGE);
  CHECK(strstr(chorus_last_error(), "top_p") != NULL);
  bad = r;
  bad.temperature = NAN;
  CHECK(chorus_synthesize(m, &bad, NULL, NULL, NULL) == CHORUS_OUT_OF_RANGE);
  bad = r;
  bad.language = "klingon";
  CHECK(chorus_synthesize(m, &bad, NULL, NULL, NULL) != CHORUS_OK);
  CHECK(strstr(chorus_last_error(), "klingon") != NULL);
  bad = r;
  bad.size = 0;
  CHECK(chorus_synthesize(m, &bad, NULL, NULL, NULL) == CHORUS_INVALID_ARGUMENT);
  CHECK(chorus_synthesize(m, NULL, NULL, NULL, NULL) == CHORUS_INVALID_ARGUMENT);
  s = (chorus_synthesis*)0x1;
  CHECK(chorus_submit(m, &bad, NULL, NULL, &s) == CHORUS_INVALID_ARGUMENT && s == NULL);
  chorus_voice* v = NULL;
  float tone[16000];
  for (int i = 0; i < 16000; ++i) tone[i] = 0.3f * sinf(2.0f * 3.14159265f * 220.0f * (float)i / 16000.0f);
  CHECK(chorus_voice_create_from_samples(m, tone, 16000, 16000, NULL, &v) == CHORUS_UNSUPPORTED && v == NULL);
  CHECK(chorus_synthesize(m, &r, collect, &b, NULL) == CHORUS_OK);
  CHECK(b.count == a.count && memcmp(a.samples, b.samples, a.count * sizeof(float)) == 0);
  reset(&b);

  /* ABI growth: a caller built against an older, shorter struct. The library reads only the
   * request fields within its size (the rest take defaults) and writes only the stats fields
   * within its size. */
  {
    chorus_request old = r;
    old.size = offsetof(chorus_request, cfg_scale);
    old.codes_only = 1; /* past the caller's size: must be ignored, so audio still comes */
    chorus_stats small;
    memset(&small, 0, sizeof(small));
    small.size = offsetof(chorus_stats, audio_s);
    small.audio_s = 123.0;
    small.total_s = 456.0;
    CHECK(chorus_synthesize(m, &old, collect, &b, &small) == CHORUS_OK);
    CHECK(b.count == a.count && memcmp(a.samples, b.samples, a.count * sizeof(float)) == 0);
    CHECK(small.frames == 6 && small.audio_s == 123.0 && small.total_s == 456.0);
    reset(&b);
  }

  /* The callback stops the request. */
  b.stop_after_chunks = 1;
  r.max_frames = r.min_frames = 200;
  CHECK(chorus_synthesize(m, &r, collect, &b, &st) == CHORUS_CANCELLED);
  CHECK(b.chunks == 1);
  reset(&b);

  /* chorus_cancel: the request ends early, as cancelled. */
  s = NULL;
  CHECK(chorus_submit(m, &r, collect, &b, &s) == CHORUS_OK);
  chorus_cancel(s);
  CHECK(chorus_wait(s, &st) == CHORUS_CANCELLED);
  CHECK(st.stop_reason == CHORUS_STOP_CANCELLED);
  CHECK(st.frames < 200);
  chorus_synthesis_free(s);
  reset(&b);

  /* Codes only. */
  r.max_frames = r.min_frames = 4;
  r.codes_only = 1;
  CHECK(chorus_synthesize(m, &r, collect, &b, &st) == CHORUS_OK);
  CHECK(b.frames == 4 && b.count == 0);
  reset(&b);

  /* A synthesis outlives the model handle that made it. */
  r.codes_only = 0;
  CHECK(chorus_submit(m, &r, collect, &b, &s) == CHORUS_OK);
  chorus_model_free(m);
  CHECK(chorus_wait(s, &st) == CHORUS_OK);
  CHECK(b.count == 4 * 1920);
  chorus_synthesis_free(s);
  reset(&b);
  reset(&a);
}

static void test_voice(const char* dir, const char* scratch) {
  chorus_model* m = load_or_die(dir);
  float tone[24000];
  for (int i = 0; i < 24000; ++i)
    tone[i] = 0.3f * sinf(2.0f * 3.14159265f * 180.0f * (float)i / 16000.0f) + 0.05f * sinf((float)i * 0.37f);
  chorus_voice* v = NULL;
  CHECK(chorus_voice_create_from_samples(m, tone, 24000, 16000, "A short reference.", &v) == CHORUS_OK);
  CHECK(v != NULL);
  CHECK(strcmp(chorus_voice_ref_text(v), "A short reference.") == 0);
  /* Too short to be a reference. */
  chorus_voice* v2 = NULL;
  CHECK(chorus_voice_create_from_samples(m, tone, 100, 16000, NULL, &v2) != CHORUS_OK && v2 == NULL);
  CHECK(strlen(chorus_last_error()) > 0);

  char path[4096];
  snprintf(path, sizeof(path), "%s/capi_test.voice", scratch);
  CHECK(chorus_voice_save(v, path) == CHORUS_OK);
  CHECK(chorus_voice_load(path, &v2) == CHORUS_OK);
  CHECK(strcmp(chorus_voice_ref_text(v2), "A short reference.") == 0);
  chorus_voice* missing = (chorus_voice*)0x1;
  CHECK(chorus_voice_load("/nonexistent.voice", &missing) != CHORUS_OK && missing == NULL);
  CHECK(strstr(chorus_last_error(), "/nonexistent.voice") != NULL);

  chorus_request r;
  chorus_request_init(&r);
  r.text = "Cloned.";
  r.voice = v;
  r.seed = 3;
  r.max_frames = r.min_frames = 5;
  collector a = {0}, b = {0};
  CHECK(chorus_synthesize(m, &r, collect, &a, NULL) == CHORUS_OK);
  CHECK(a.frames == 5 && a.count > 0);
  r.voice = v2; /* the voice read back from its file gives the same audio */
  CHECK(chorus_synthesize(m, &r, collect, &b, NULL) == CHORUS_OK);
  CHECK(b.count == a.count && a.count > 0 && memcmp(a.samples, b.samples, a.count * sizeof(float)) == 0);
  reset(&a);
  reset(&b);
  chorus_voice_free(v);
  chorus_voice_free(v2);
  chorus_model_free(m);
}

/* chorus_load_options.weights: int8 loads and says so, gives audio of its own (not the bf16
 * model's samples for the same request), an unknown name and CUDA with int8 are refused, and an
 * older caller's shorter chorus_model_info is not written past. */
static void test_weights(const char* dir) {
  chorus_model* m = NULL;
  chorus_load_options lo;
  chorus_load_options_init(&lo);
  lo.threads = 2;
  lo.weights = "int3";
  CHECK(chorus_load(dir, &lo, &m) == CHORUS_INVALID_ARGUMENT && m == NULL);
  CHECK(strstr(chorus_last_error(), "int3") != NULL);
  lo.weights = "int8";
  lo.device = "cuda";
  CHECK(chorus_load(dir, &lo, &m) == CHORUS_UNSUPPORTED && m == NULL);
  lo.device = "cpu";
  CHECK(chorus_load(dir, &lo, &m) == CHORUS_OK && m != NULL);
  if (!m) return;
  chorus_model* exact = load_or_die(dir);
  chorus_model_info info;
  memset(&info, 0, sizeof(info));
  info.size = sizeof(info);
  CHECK(chorus_model_get_info(m, &info) == CHORUS_OK);
  CHECK(info.weights != NULL && strcmp(info.weights, "int8") == 0);
  CHECK(chorus_model_get_info(exact, &info) == CHORUS_OK);
  CHECK(info.weights != NULL && strcmp(info.weights, "bf16") == 0);
  {
    chorus_model_info old;
    memset(&old, 0, sizeof(old));
    old.size = offsetof(chorus_model_info, weights);
    old.weights = "untouched";
    CHECK(chorus_model_get_info(m, &old) == CHORUS_OK);
    CHECK(old.codebooks == 16 && strcmp(old.weights, "untouched") == 0);
  }

  chorus_request r;
  chorus_request_init(&r);
  r.text = "Hello there.";
  r.speaker = "ryan";
  r.language = "english";
  r.seed = 7;
  r.max_frames = 6;
  r.min_frames = 6;
  collector q = {0}, e = {0};
  CHECK(chorus_synthesize(m, &r, collect, &q, NULL) == CHORUS_OK);
  CHECK(chorus_synthesize(exact, &r, collect, &e, NULL) == CHORUS_OK);
  CHECK(q.count == 6 * 1920 && e.count == q.count);
  int finite = 1;
  for (size_t i = 0; i < q.count; ++i)
    if (!isfinite(q.samples[i])) finite = 0;
  CHECK(finite);
  CHECK(q.count > 0 && memcmp(q.samples, e.samples, q.count * sizeof(float)) != 0);
  reset(&q);
  reset(&e);
  chorus_model_free(exact);
  chorus_model_free(m);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s CUSTOM_VOICE_DIR BASE_DIR SCRATCH_DIR\n", argv[0]);
    return 2;
  }
  test_errors_before_loading();
  test_custom_voice(argv[1]);
  test_weights(argv[1]);
  test_voice(argv[2], argv[3]);
  if (g_checks < 50) {
    fprintf(stderr, "only %d checks ran\n", g_checks);
    return 1;
  }
  printf("%d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
