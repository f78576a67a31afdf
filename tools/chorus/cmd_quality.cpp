// chorus quality: what int8 / int4 weights cost a Qwen3-TTS checkpoint, measured against its bf16
// weights (docs/quantization.md). The bf16 model generates `frames` frames (the checkpoint's
// sampler, seeded); then every model is teacher-forced on those codes and compared decision by
// decision: relative error of each decoder layer's output and of the logits, KL divergence of the
// codebook-0 distributions, and top-1 agreement of every codebook.
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>

#include "bench/engine/requests.h"
#include "command.h"
#include "engine/qwen3_tts_engine.h"
#include "models/qwen3_tts/teacher_forcing.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/quant.h"
#include "voice_input.h"

namespace {

using namespace chorus;
namespace q3 = chorus::qwen3_tts;

struct Options {
  std::string model;
  std::vector<std::string> weights = {"int8", "int4"};
  int64_t frames = 250, text_tokens = 30;
  uint64_t seed = 1;
  int threads = 0;
  bool layers = true;
};

std::string percent(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v < 0.001 ? "%.4f %%" : "%.3f %%", v * 100.0);
  return b;
}

int run(const Options& o) {
  std::vector<cpu::WeightFormat> formats;
  for (const std::string& w : o.weights) {
    auto f = cli::weight_format_option(w);
    if (!f.ok()) return cli::fail(f.error());
    if (*f != cpu::WeightFormat::kBf16) formats.push_back(*f);
  }
  if (o.frames < 2) return cli::fail("quality: --frames must be >= 2");
  std::unique_ptr<ThreadPool> own_pool;
  if (o.threads > 0) own_pool = std::make_unique<ThreadPool>(o.threads);
  ThreadPool* pool = own_pool ? own_pool.get() : &ThreadPool::global();

  auto loaded = engine::Qwen3TtsEngine::load(o.model, pool);
  if (!loaded.ok()) return cli::fail(loaded.error());
  const engine::Qwen3TtsEngine& e = **loaded;
  const q3::Model& ref_model = e.model();

  // The forced codes: what the bf16 model itself samples.
  bench::RequestShape shape;
  shape.text_tokens = o.text_tokens;
  const engine::SynthesisRequest req = bench::qwen3_request(ref_model.config(), shape, o.seed, o.frames);
  auto stream = e.create_stream(req);
  if (!stream.ok()) return cli::fail(stream.error());
  std::vector<int32_t> codes;
  std::vector<engine::StepResult> out(1);
  engine::TtsStream* sp = stream->get();
  while (!sp->finished()) {
    if (auto st = e.step({&sp, 1}, out, nullptr); !st.ok()) return cli::fail(st.error());
    if (out[0].has_frame) codes.insert(codes.end(), out[0].codes.begin(), out[0].codes.end());
  }
  const int64_t frames = static_cast<int64_t>(codes.size()) / ref_model.groups();
  auto inputs = e.prompt_inputs(req);
  if (!inputs.ok()) return cli::fail(inputs.error());
  auto prompt = q3::build_prompt(ref_model, *inputs);
  if (!prompt.ok()) return cli::fail(prompt.error());

  const auto t0 = std::chrono::steady_clock::now();
  auto ref = q3::teacher_forced_pass(ref_model, *prompt, codes, frames, o.layers);
  if (!ref.ok()) return cli::fail(ref.error());
  const double pass_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const auto mib = [](const q3::Model& m) {
    return static_cast<double>(m.talker().stack().projection_bytes() + m.code_predictor().stack().projection_bytes()) /
           (1 << 20);
  };
  std::printf("quality          %s: %lld frames of the bf16 model's own (sampled, seed %llu) codes, teacher-forced\n",
              o.model.c_str(), (long long)frames, (unsigned long long)o.seed);
  std::printf("cpu              %s kernels, %d threads; one pass %.1f s\n", cpu::isa_name(), pool->size(), pass_s);
  std::printf("bf16 (reference) decoder layers %.1f MiB\n", mib(ref_model));
  std::ostringstream layer_lines;
  for (cpu::WeightFormat f : formats) {
    auto m = q3::Model::from_files(ref_model.files(), pool, f);
    if (!m.ok()) return cli::fail(m.error());
    auto pass = q3::teacher_forced_pass(**m, *prompt, codes, frames, o.layers);
    if (!pass.ok()) return cli::fail(pass.error());
    auto c = q3::compare_forced(ref_model.config(), *ref, *pass);
    if (!c.ok()) return cli::fail(c.error());
    double cp_min = 1.0;
    for (double t : c->cp_top1) cp_min = std::min(cp_min, t);
    const char* name = cpu::weight_format_name(f);
    std::printf("%-16s decoder layers %.1f MiB (the bf16 model's top id has mean probability %.3f for codebook 0, "
                "%.3f for the others)\n",
                name, mib(**m), c->ref_c0_top_p, c->ref_cp_top_p);
    std::printf("  codebook 0     logits rel. error %s, KL mean %.3g max %.3g nats, top-1 agreement %s\n",
                percent(c->c0_logit_error).c_str(), c->c0_kl_mean, c->c0_kl_max, percent(c->c0_top1).c_str());
    std::printf("  codebooks 1-%lld logits rel. error %s, top-1 agreement mean %s, worst codebook %s\n",
                (long long)c->cp_top1.size(), percent(c->cp_logit_error).c_str(), percent(c->cp_top1_mean).c_str(),
                percent(cp_min).c_str());
    if (o.layers) {
      layer_lines << name << " talker:        ";
      for (double v : c->talker_layer_error) layer_lines << " " << percent(v).substr(0, percent(v).size() - 2);
      layer_lines << "\n" << name << " code predictor:";
      for (double v : c->cp_layer_error) layer_lines << " " << percent(v).substr(0, percent(v).size() - 2);
      layer_lines << "\n";
    }
  }
  if (o.layers) {
    std::printf("relative error (%%) of each decoder layer's output, then the final norm's:\n%s",
                layer_lines.str().c_str());
  }
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("--model", o->model, "Qwen3-TTS checkpoint folder (e.g. from make-tiny --dims real-0.6b)")->required();
  sub.add_option("--weights", o->weights, "Formats to compare with bf16 (int8, int4)")->delimiter(',')->capture_default_str();
  sub.add_option("--frames", o->frames, "Frames generated, then teacher-forced")->capture_default_str();
  sub.add_option("--text-tokens", o->text_tokens, "Random text tokens in the prompt")->capture_default_str();
  sub.add_option("--seed", o->seed, "Seed of the bf16 model's sampling")->capture_default_str();
  sub.add_option("--threads", o->threads, "Worker threads (0: CHORUS_THREADS or all cores)")->capture_default_str();
  sub.add_flag("!--no-layers", o->layers, "Skip the per-layer errors (less memory)");
  sub.footer("Example: chorus make-tiny --dims real-0.6b --seed 1 --out /tmp/q06 && chorus quality --model /tmp/q06");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("quality", "Measure what int8 / int4 weights cost against bf16 (teacher-forced)", setup);
