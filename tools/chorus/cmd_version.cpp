#include <cstdio>

#include "command.h"
#include "engine/build_info.h"

namespace {

chorus::cli::Runner setup_version(CLI::App& sub) {
  return [] {
    std::printf("%s\n", chorus::build_info().c_str());
    return 0;
  };
}

}  // namespace

CHORUS_COMMAND("version", "Print the chorus version and the backends compiled in", setup_version);
