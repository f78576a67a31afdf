// What the commands that turn one reference recording into something (embed-speaker, encode) share:
// their options, the worker pool, reading the audio at the model's rate, and CPU-time accounting.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "audio/reader.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "voice_input.h"

namespace chorus::cli {

// CPU seconds used by the whole process (all threads): with wall time it shows the parallelism.
double process_cpu_seconds();

struct RefAudioCommand {
  std::string model, audio;
  RefAudioOptions ref;
  int threads = 0;

  // --model (with `model_help`), --audio, the reference limits and --threads.
  void add_to(CLI::App& sub, const std::string& model_help);
  // A pool of --threads workers, or nullptr for ThreadPool::global().
  std::unique_ptr<ThreadPool> make_pool() const;
  // --audio at `sample_rate` within the limits.
  Result<audio::Audio> read_audio(int sample_rate) const;
};

}  // namespace chorus::cli
