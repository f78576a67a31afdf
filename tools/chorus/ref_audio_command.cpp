#include "ref_audio_command.h"

#include <ctime>

namespace chorus::cli {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void RefAudioCommand::add_to(CLI::App& sub, const std::string& model_help) {
  sub.add_option("--model", model, model_help)->required();
  sub.add_option("--audio", audio, "Reference audio (WAV, FLAC, Ogg, MP3; any rate, any channels; - for stdin)")
      ->required();
  ref.add_to(sub);
  sub.add_option("--threads", threads, "Worker threads (0: CHORUS_THREADS or all cores)")->capture_default_str();
}

std::unique_ptr<ThreadPool> RefAudioCommand::make_pool() const {
  return threads > 0 ? std::make_unique<ThreadPool>(threads) : nullptr;
}

Result<audio::Audio> RefAudioCommand::read_audio(int sample_rate) const {
  audio::ReadOptions ro;
  ro.target_rate = sample_rate;
  ro.limits = ref.limits();
  return audio::read_audio(audio, ro);
}

}  // namespace chorus::cli
