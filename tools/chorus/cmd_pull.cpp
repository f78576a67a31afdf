// chorus pull: downloads a model by its Hugging Face id into the local Hugging Face cache (the
// layout huggingface_hub uses, so either tool finds it), only the files chorus needs.
#include <cstdio>
#include <unistd.h>

#include "command.h"
#include "io/hf_hub.h"

namespace {

struct Options {
  std::string id, endpoint, cache_dir;
  bool quiet = false;
};

int run(const Options& o) {
  chorus::io::HubOptions ho;
  ho.endpoint = o.endpoint;
  ho.cache_dir = o.cache_dir;
  ho.progress = !o.quiet && isatty(fileno(stderr));
  auto dir = chorus::io::hf_hub_download_model(o.id, ho);
  if (!dir.ok()) return chorus::cli::fail(dir.error());
  std::printf("%s\n", dir->c_str());
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("id", o->id, "ORG/NAME[@revision] (a branch, tag or commit; default main)")->required();
  sub.add_option("--endpoint", o->endpoint, "Hub URL (default: $HF_ENDPOINT or https://huggingface.co)");
  sub.add_option("--cache-dir", o->cache_dir, "Cache folder (default: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub)");
  sub.add_flag("-q,--quiet", o->quiet, "No progress bar");
  sub.footer("Prints the snapshot folder. Gated models need HF_TOKEN (or `hf auth login`); HF_HUB_OFFLINE=1 forbids "
             "downloads.\nExample: chorus pull Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice && chorus say --model "
             "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice ...");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("pull", "Download a model by its Hugging Face id into the local Hugging Face cache", setup);
