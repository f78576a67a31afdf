// Where a model runs: the CPU, or one CUDA device.
#pragma once

#include <string>

#include "core/error.h"

namespace chorus::engine {

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;  // CUDA device ordinal

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {Kind::kCuda, index}; }
  bool is_cuda() const { return kind == Kind::kCuda; }
  std::string name() const;  // "cpu", "cuda:0"
  // "cpu", "cuda" (device 0) or "cuda:N"; anything else is kInvalidArgument naming what was given.
  static Result<Device> parse(const std::string& text);
  bool operator==(const Device&) const = default;
};

}  // namespace chorus::engine
