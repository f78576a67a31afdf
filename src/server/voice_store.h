// Custom voices made through POST /v1/audio/voices: each one encoded once (x-vector, reference
// codes, transcript) and kept as two files under the voices folder, both written atomically
// (temporary file + rename), so a crash never leaves half a voice and voices survive a restart:
//   <id>.voice   the voice file format (models/voice/voice_file.h)
//   <id>.json    name, model, creation time, consent
// Ids are generated ("voice_" + 16 hex digits) and checked on every lookup, so no request can
// name a path. Without a folder the store lives in memory only. With one, the folder is the
// truth: replicas sharing it (a shared volume) see each other's voices and deletions.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "models/voice/voice_file.h"

namespace chorus::server {

struct StoredVoice {
  std::string id;
  std::string name;
  std::string model;    // the model whose encoders made it
  std::string consent;  // as given by the client
  int64_t created_at = 0;  // Unix seconds
  voice::Voice voice;
};

class VoiceStore {
 public:
  // Loads every voice found in `dir` (created if missing); "" keeps voices in memory. Files that do
  // not parse are skipped and counted in skipped() (as of the last scan: open() and list()).
  static Result<std::unique_ptr<VoiceStore>> open(const std::string& dir);

  // Letters, digits, '_' and '-', 1 to 64 of them.
  static bool valid_id(std::string_view id);

  // Gives `v` a new id, persists it and returns it.
  Result<std::shared_ptr<const StoredVoice>> add(StoredVoice v);
  std::shared_ptr<const StoredVoice> get(const std::string& id) const;  // nullptr when unknown
  std::vector<std::shared_ptr<const StoredVoice>> list() const;         // by creation time (rescans the folder)
  // false when unknown.
  Result<bool> remove(const std::string& id);
  size_t skipped() const { return skipped_; }

 private:
  VoiceStore() = default;
  std::shared_ptr<const StoredVoice> load(const std::string& id) const;
  bool on_disk(const std::string& id) const;
  void rescan() const;  // the cache made equal to the folder
  std::string dir_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::shared_ptr<const StoredVoice>> voices_;
  mutable size_t skipped_ = 0;
};

}  // namespace chorus::server
