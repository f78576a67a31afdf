// chorus: text-to-speech for codec-language models. Every subcommand lives in its own cmd_*.cpp.
#include <cstdio>
#include <memory>
#include <vector>

#include "command.h"

namespace chorus::cli {
namespace {

struct Entry {
  std::string name, help;
  Setup setup;
};

std::vector<Entry>& registry() {
  static std::vector<Entry> r;
  return r;
}

}  // namespace

CommandRegistrar::CommandRegistrar(const char* name, const char* help, Setup setup) {
  registry().push_back({name, help, std::move(setup)});
}

int fail(const Error& e) { return fail(e.to_string()); }

int fail(const std::string& message) {
  std::fprintf(stderr, "chorus: %s\n", message.c_str());
  return 2;
}

}  // namespace chorus::cli

int main(int argc, char** argv) {
  using namespace chorus::cli;
  CLI::App app{
      "chorus: fast, exact text-to-speech for Qwen3-TTS and Breeze TTS 2 checkpoints.\n"
      "Run 'chorus COMMAND --help' for the options of one command."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "chorus 0.1.0");
  std::vector<std::pair<CLI::App*, Runner>> runners;
  for (auto& e : registry()) {
    CLI::App* sub = app.add_subcommand(e.name, e.help);
    runners.emplace_back(sub, e.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  for (auto& [sub, run] : runners) {
    if (sub->parsed()) {
      try {
        return run();
      } catch (const std::bad_alloc&) {
        return fail("out of memory");
      } catch (const std::exception& ex) {
        return fail(std::string("internal error: ") + ex.what());
      }
    }
  }
  return 2;
}
