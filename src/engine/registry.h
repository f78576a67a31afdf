// The model families chorus serves, each with how its generator is loaded per backend. Adding a
// family: a folder under models/ with its stages, its engine adapter (a TtsModel), and one line in
// registry.cpp (ARCHITECTURE.md lists the steps).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "engine/tts_model.h"
#include "models/family.h"

namespace chorus::engine {

struct FamilyLoader {
  Family family;
  // The generator on the CPU (options.pool runs its kernels).
  Result<std::unique_ptr<TtsModel>> (*cpu)(const std::string& dir, const LoadOptions& options);
  // The generator on options.device (a CUDA device); kUnsupported in builds without CUDA.
  Result<std::unique_ptr<TtsModel>> (*cuda)(const std::string& dir, const LoadOptions& options);
};

std::span<const FamilyLoader> family_loaders();

// Whether `device` can run a model loaded with `weights` (kUnsupported: int4 on CUDA, fp8 on the
// CPU), with an error that names the formats the device takes.
Status weights_supported(const Device& device, WeightFormat weights);

}  // namespace chorus::engine
