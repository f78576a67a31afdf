/* speak: text to a 16-bit WAV file through the chorus C API.
 *
 *   cc speak.c -I include -L build -lchorus -o speak
 *   ./speak MODEL "Hello there." out.wav [speaker] [language]
 *
 * MODEL is a checkpoint folder or a Hugging Face id in the local cache. Audio arrives in chunks
 * while it is made; they are written as they come. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "chorus/chorus.h"

typedef struct {
  FILE* f;
  uint32_t samples;
} wav_out;

static void put_u32(FILE* f, uint32_t v) {
  unsigned char b[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, (v >> 24) & 0xff};
  fwrite(b, 1, 4, f);
}

static void put_u16(FILE* f, uint16_t v) {
  unsigned char b[2] = {v & 0xff, (v >> 8) & 0xff};
  fwrite(b, 1, 2, f);
}

static void write_header(FILE* f, int rate, uint32_t samples) {
  fwrite("RIFF", 1, 4, f);
  put_u32(f, 36 + samples * 2);
  fwrite("WAVEfmt ", 1, 8, f);
  put_u32(f, 16);
  put_u16(f, 1); /* PCM */
  put_u16(f, 1); /* mono */
  put_u32(f, (uint32_t)rate);
  put_u32(f, (uint32_t)rate * 2);
  put_u16(f, 2);
  put_u16(f, 16);
  fwrite("data", 1, 4, f);
  put_u32(f, samples * 2);
}

/* Runs on chorus's scheduler thread for each chunk: convert and write, nothing slow. */
static int on_chunk(const chorus_chunk* c, void* user) {
  wav_out* w = (wav_out*)user;
  for (size_t i = 0; i < c->count; ++i) {
    float x = c->samples[i];
    x = x > 1.0f ? 1.0f : x < -1.0f ? -1.0f : x;
    put_u16(w->f, (uint16_t)(int16_t)(x * 32767.0f + (x >= 0 ? 0.5f : -0.5f)));
  }
  w->samples += (uint32_t)c->count;
  return ferror(w->f) ? 1 : 0; /* nonzero stops the request */
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s MODEL TEXT OUT.wav [SPEAKER] [LANGUAGE]\n", argv[0]);
    return 2;
  }
  chorus_model* model = NULL;
  chorus_load_options lo;
  chorus_load_options_init(&lo);
  if (chorus_load(argv[1], &lo, &model) != CHORUS_OK) {
    fprintf(stderr, "speak: %s\n", chorus_last_error());
    return 1;
  }
  chorus_model_info info;
  memset(&info, 0, sizeof(info));
  info.size = sizeof(info);
  chorus_model_get_info(model, &info);

  wav_out w = {fopen(argv[3], "wb"), 0};
  if (!w.f) {
    perror(argv[3]);
    chorus_model_free(model);
    return 1;
  }
  write_header(w.f, info.sample_rate, 0); /* rewritten with the length at the end */

  chorus_request r;
  chorus_request_init(&r);
  r.text = argv[2];
  if (argc > 4) r.speaker = argv[4];
  if (argc > 5) r.language = argv[5];
  chorus_stats stats;
  memset(&stats, 0, sizeof(stats));
  stats.size = sizeof(stats);
  chorus_status st = chorus_synthesize(model, &r, on_chunk, &w, &stats);
  if (st != CHORUS_OK) fprintf(stderr, "speak: %s: %s\n", chorus_status_name(st), chorus_last_error());
  fseek(w.f, 0, SEEK_SET);
  write_header(w.f, info.sample_rate, w.samples);
  fclose(w.f);
  if (st == CHORUS_OK)
    fprintf(stderr, "speak: %.2f s of audio (%lld frames) -> %s\n", stats.audio_s, (long long)stats.frames, argv[3]);
  chorus_model_free(model);
  return st == CHORUS_OK ? 0 : 1;
}
