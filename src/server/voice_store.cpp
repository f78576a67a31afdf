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

// One stored voice read from `dir`; nullptr when its files are missing or do not parse.
std::shared_ptr<const StoredVoice> VoiceStore::load(const std::string& id) const {
  auto meta = io::read_json_file((fs::path(dir_) / (id + ".json")).string(), {.max_bytes = 1 << 20, .max_depth = 4});
  if (!meta.ok() || !meta->is_object()) return nullptr;
  auto voice = voice::read_voice_file((fs::path(dir_) / (id + ".voice")).string());
  if (!voice.ok()) return nullptr;
  auto v = std::make_shared<StoredVoice>();
  v->id = id;
  v->name = meta->value("name", std::string());
  v->model = meta->value("model", std::string());
  v->consent = meta->value("consent", std::string());
  v->created_at = meta->value("created_at", int64_t{0});
  v->voice = std::move(*voice);
  return v;
}

bool VoiceStore::on_disk(const std::string& id) const {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir_) / (id + ".json"), ec);
}

void VoiceStore::rescan() const {
  std::error_code ec;
  std::map<std::string, bool> seen;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    if (!e.is_regular_file() || e.path().extension() != ".json") continue;
    const std::string id = e.path().stem().string();
    if (valid_id(id)) seen[id] = true;
  }
  if (ec) return;  // an unreadable folder keeps what is known
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = voices_.begin(); it != voices_.end();) it = seen.count(it->first) ? std::next(it) : voices_.erase(it);
  size_t skipped = 0;
  for (const auto& [id, _] : seen) {
    if (voices_.count(id)) continue;
    if (auto v = load(id)) voices_[id] = std::move(v);
    else ++skipped;
  }
  skipped_ = skipped;
}

Result<std::unique_ptr<VoiceStore>> VoiceStore::open(const std::string& dir) {
  std::unique_ptr<VoiceStore> s(new VoiceStore());
  s->dir_ = dir;
  if (dir.empty()) return s;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) return make_error(ErrorCode::kIo, dir + ": cannot create the voices folder");
  s->rescan();
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
  if (!dir_.empty()) {
    // The folder is the truth (other replicas may share it): a voice another process deleted is
    // gone here too, one it made is read on first use. Voices never change once written.
    if (!on_disk(id)) {
      std::lock_guard<std::mutex> lock(mu_);
      voices_.erase(id);
      return nullptr;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = voices_.find(id); it != voices_.end()) return it->second;
    }
    auto v = load(id);
    if (!v) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    return voices_.emplace(id, std::move(v)).first->second;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = voices_.find(id);
  return it == voices_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<const StoredVoice>> VoiceStore::list() const {
  if (!dir_.empty()) rescan();
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
  if (!dir_.empty()) {
    if (!on_disk(id)) {  // unknown, or deleted by another process sharing the folder
      if (it != voices_.end()) voices_.erase(it);
      return false;
    }
    std::error_code ec;
    // The metadata first: a lone .voice file is ignored on load.
    fs::remove(fs::path(dir_) / (id + ".json"), ec);
    if (ec) return make_error(ErrorCode::kIo, id + ": cannot delete the voice");
    fs::remove(fs::path(dir_) / (id + ".voice"), ec);
  } else if (it == voices_.end()) {
    return false;
  }
  if (it != voices_.end()) voices_.erase(it);
  return true;
}

}  // namespace chorus::server
