// Audio output options shared by the commands that write audio (say, decode): sample format and
// output rate, turned into the writer's options.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "audio/writer.h"
#include "core/error.h"

namespace chorus::cli {

struct AudioOutputOptions {
  std::string sample_format = "pcm16";
  int sample_rate = 0;  // 0: the model's rate (24 kHz)

  void add_to(CLI::App& sub) {
    sub.add_option("--sample-format", sample_format, "pcm16 or float (float: WAV and raw only)")->capture_default_str();
    sub.add_option("--sample-rate", sample_rate, "Output rate in Hz, resampled with soxr (0: the model's 24000)")
        ->capture_default_str();
  }

  Result<audio::WriterOptions> writer_options(int input_rate) const {
    audio::WriterOptions wo;
    wo.input_rate = input_rate;
    if (sample_format == "pcm16") wo.sample_format = audio::SampleFormat::kPcm16;
    else if (sample_format == "float") wo.sample_format = audio::SampleFormat::kFloat32;
    else return make_error(ErrorCode::kInvalidArgument, "--sample-format must be pcm16 or float");
    if (sample_rate != 0 && (sample_rate < 8000 || sample_rate > 192000))
      return make_error(ErrorCode::kInvalidArgument, "--sample-rate must be between 8000 and 192000 Hz (or 0)");
    wo.output_rate = sample_rate;
    return wo;
  }
};

}  // namespace chorus::cli
