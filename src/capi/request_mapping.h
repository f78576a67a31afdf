// chorus_request (the C ABI's plain struct) → engine::SynthesisRequest, with the sampler options
// read the way `chorus say` reads its flags, so the same settings and seed give the same audio
// from the CLI, the C API and Python.
#pragma once

#include <string>

#include "chorus/chorus.h"
#include "core/error.h"
#include "engine/model.h"
#include "engine/request.h"

namespace chorus::capi {

// `voice` (may be null) is applied with `model.apply_voice`; `label` names it in errors.
Status to_engine_request(const chorus_request& in, const engine::Model& model, const voice::Voice* voice,
                         const std::string& label, engine::SynthesisRequest* out);

}  // namespace chorus::capi
