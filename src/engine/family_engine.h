// What the CPU engines of every family share: a TtsModel that clones voices itself, with the
// ModelInfo its load fills.
#pragma once

#include "engine/tts_model.h"
#include "engine/voice_cloner.h"

namespace chorus::engine {

class FamilyEngine : public TtsModel, public VoiceCloner {
 public:
  const ModelInfo& info() const override { return info_; }

 protected:
  ModelInfo info_;
};

}  // namespace chorus::engine
