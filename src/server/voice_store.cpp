#include "server/voice_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "io/file_util.h"
#include "io/json_util.h"

namespace chorus::server {

namespace fs = std::filesystem;

namespace {

std::string new_id() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(mu);
  char b[32];
  std::snprintf(b, sizeof b, "voice_%016llx", static_cast<unsigned long long>(rng()));
  return b;
}

Status write_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  CHORUS_TRY(io::write_file(tmp, bytes));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return make_error(ErrorCode::kIo, path + ": cannot rename into place");
  }
  return ok_status();
}

}  // namespace

bool VoiceStore::valid_id(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

Result<std::unique_ptr<VoiceStore>> VoiceStore::open(const std::string& dir) {
  std::unique_ptr<VoiceStore> s(new VoiceStore());
  s->dir_ = dir;
  if (dir.empty()) return s;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) return make_error(ErrorCode::kIo, dir + ": cannot create the voices folder");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file() || e.path().extension() != ".json") continue;
    const std::string id = e.path().stem().string();
    if (!valid_id(id)) continue;
    auto meta = io::read_json_file(e.path().string(), {.max_bytes = 1 << 20, .max_depth = 4});
    auto voice = voice::read_voice_file((fs::path(dir) / (id + ".voice")).string());
    if (!meta.ok() || !meta->is_object() || !voice.ok()) {
      ++s->skipped_;
      continue;
    }
    auto v = std::make_shared<StoredVoice>();
    v->id = id;
    v->name = meta->value("name", std::string());
    v->model = meta->value("model", std::string());
    v->consent = meta->value("consent", std::string());
    v->created_at = meta->value("created_at", int64_t{0});
    v->voice = std::move(*voice);
    s->voices_[id] = std::move(v);
  }
  return s;
}

Result<std::shared_ptr<const StoredVoice>> VoiceStore::add(StoredVoice v) {
  v.id = new_id();
  v.created_at = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  CHORUS_TRY(voice::check_voice(v.voice, "voice " + v.id));
  if (!dir_.empty()) {
    // The voice first: a .json without its .voice is skipped on load, never the reverse.
    CHORUS_TRY(voice::write_voice_file((fs::path(dir_) / (v.id + ".voice")).string(), v.voice));
    io::Json meta = {{"id", v.id}, {"name", v.name}, {"model", v.model}, {"consent", v.consent}, {"created_at", v.created_at}};
    CHORUS_TRY(write_atomic((fs::path(dir_) / (v.id + ".json")).string(),
                            meta.dump(1, ' ', false, io::Json::error_handler_t::replace) + "\n"));
  }
  auto p = std::make_shared<const StoredVoice>(std::move(v));
  std::lock_guard<std::mutex> lock(mu_);
  voices_[p->id] = p;
  return p;
}

std::shared_ptr<const StoredVoice> VoiceStore::get(const std::string& id) const {
  if (!valid_id(id)) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = voices_.find(id);
  return it == voices_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const StoredVoice>> VoiceStore::list() const {
  std::vector<std::shared_ptr<const StoredVoice>> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [_, v] : voices_) out.push_back(v);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a->created_at < b->created_at; });
  return out;
}

Result<bool> VoiceStore::remove(const std::string& id) {
  if (!valid_id(id)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = voices_.find(id);
  if (it == voices_.end()) return false;
  if (!dir_.empty()) {
    std::error_code ec;
    // The metadata first: a lone .voice file is ignored on load.
    fs::remove(fs::path(dir_) / (id + ".json"), ec);
    if (ec) return make_error(ErrorCode::kIo, id + ": cannot delete the voice");
    fs::remove(fs::path(dir_) / (id + ".voice"), ec);
  }
  voices_.erase(it);
  return true;
}

}  // namespace chorus::server
