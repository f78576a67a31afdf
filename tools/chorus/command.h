// Subcommands register themselves here (one file per command), so the CLI's main() never changes
// when a command is added. A command's setup adds its options to a CLI11 sub-app and returns the
// function that runs it; that function returns the process exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "core/error.h"

namespace chorus::cli {

using Runner = std::function<int()>;
using Setup = std::function<Runner(CLI::App& sub)>;

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* help, Setup setup);
};

// Prints "chorus: <error>" to stderr and returns exit code 2 (bad input, missing file, ...).
int fail(const Error& e);
int fail(const std::string& message);

}  // namespace chorus::cli

#define CHORUS_COMMAND(name, help, setup_fn) \
  static ::chorus::cli::CommandRegistrar CHORUS_CONCAT(chorus_cmd_, __LINE__)(name, help, setup_fn)
