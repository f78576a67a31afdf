// chorus make-tiny: deterministic random-weight checkpoints in the official layout.
#include <chrono>
#include <cstdio>

#include "command.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/presets.h"
#include "models/family.h"
#include "models/qwen3_tts/checkpoint.h"
#include "models/qwen3_tts/presets.h"

namespace {

struct Options {
  std::string family = "qwen3-tts", variant = "custom_voice", dims = "tiny", out;
  uint64_t seed = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run_breeze(const Options& o) {
  using namespace chorus;
  auto dims = breeze_tts::dims_from_name(o.dims);
  if (!dims.ok()) return cli::fail(dims.error());
  const auto t0 = std::chrono::steady_clock::now();
  if (*dims != breeze_tts::Dims::kTiny)
    std::fprintf(stderr, "make-tiny: writing a real-size random checkpoint to %s (this takes a while)...\n", o.out.c_str());
  if (auto st = breeze_tts::write_random_model(o.out, breeze_tts::preset_config(*dims), o.seed); !st.ok())
    return cli::fail(st.error());
  std::printf("wrote %s (breeze-tts, %s dims, seed %llu) in %.1f s; its weights are random, so its audio is noise\n",
              o.out.c_str(), o.dims.c_str(), static_cast<unsigned long long>(o.seed), seconds_since(t0));
  return 0;
}

int run(const Options& o) {
  using namespace chorus;
  auto fam = family_from_name(o.family);
  if (!fam.ok()) return cli::fail(fam.error());
  if (*fam == Family::kBreezeTts) return run_breeze(o);
  auto variant = qwen3_tts::variant_from_name(o.variant);
  if (!variant) return cli::fail("--variant must be base, custom_voice or voice_design (got \"" + o.variant + "\")");
  auto dims = qwen3_tts::dims_from_name(o.dims);
  if (!dims.ok()) return cli::fail(dims.error());
  const auto config = qwen3_tts::preset_config(*variant, *dims);
  const auto t0 = std::chrono::steady_clock::now();
  if (*dims != qwen3_tts::Dims::kTiny)
    std::fprintf(stderr, "make-tiny: writing a real-size random checkpoint to %s (this takes a while)...\n", o.out.c_str());
  if (auto st = qwen3_tts::write_random_model(o.out, config, o.seed); !st.ok()) return cli::fail(st.error());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s (%s %s, %s dims, seed %llu) in %.1f s; its weights are random, so its audio is noise\n",
              o.out.c_str(), o.family.c_str(), o.variant.c_str(), o.dims.c_str(),
              static_cast<unsigned long long>(o.seed), secs);
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("--family", o->family, "Model family: qwen3-tts or breeze-tts")->capture_default_str();
  sub.add_option("--variant", o->variant, "qwen3-tts: base, custom_voice or voice_design")->capture_default_str();
  sub.add_option("--dims", o->dims,
                 "tiny (the reference test models' size); qwen3-tts: real-0.6b or real-1.7b, breeze-tts: real "
                 "(real architectures, for benchmarks)")->capture_default_str();
  sub.add_option("--seed", o->seed, "Random seed; the same seed always gives the same weights")->capture_default_str();
  sub.add_option("--out", o->out, "Output folder (created)")->required();
  sub.footer("Example: chorus make-tiny --variant base --dims real-0.6b --seed 1 --out /tmp/q06b");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("make-tiny", "Write a random-weight checkpoint in the Hugging Face layout (tests, demos, benchmarks)", setup);
