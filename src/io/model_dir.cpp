#include "io/model_dir.h"

#include <cstdlib>
#include <filesystem>
#include <string_view>

#include "io/file_util.h"

namespace chorus::io {

namespace fs = std::filesystem;

namespace {

// One path component of a repository id or revision: no separators, no "." or "..".
bool safe_component(std::string_view s, bool allow_slash_free_extras) {
  if (s.empty() || s == "." || s == ".." || s.size() > 200) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.' || (allow_slash_free_extras && c == '+');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

bool parse_hub_repo_id(const std::string& spec, HubRepoId* id) {
  std::string_view s = spec;
  const size_t at = s.find('@');
  id->revision = "main";
  if (at != std::string_view::npos) {
    id->revision = std::string(s.substr(at + 1));
    s = s.substr(0, at);
    if (!safe_component(id->revision, false)) return false;
  }
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos || s.find('/', slash + 1) != std::string_view::npos) return false;
  id->owner = std::string(s.substr(0, slash));
  id->name = std::string(s.substr(slash + 1));
  return safe_component(id->owner, false) && safe_component(id->name, false);
}

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string hf_hub_cache_dir() {
  if (std::string v = env_or_empty("HF_HUB_CACHE"); !v.empty()) return v;
  if (std::string v = env_or_empty("HF_HOME"); !v.empty()) return (fs::path(v) / "hub").string();
  if (std::string v = env_or_empty("XDG_CACHE_HOME"); !v.empty()) return (fs::path(v) / "huggingface" / "hub").string();
  return (fs::path(env_or_empty("HOME")) / ".cache" / "huggingface" / "hub").string();
}

Result<std::string> resolve_model_dir(const std::string& spec) {
  std::error_code ec;
  if (fs::is_directory(spec, ec)) return spec;
  HubRepoId id;
  if (!parse_hub_repo_id(spec, &id)) return make_error(ErrorCode::kNotFound, spec + ": not a directory");
  const std::string cache = hf_hub_cache_dir();
  const fs::path repo = fs::path(cache) / id.cache_folder();
  const std::string hint = " (download it with `chorus pull " + spec + "`, or pass the folder)";
  if (!fs::is_directory(repo, ec))
    return make_error(ErrorCode::kNotFound, spec + ": neither a directory nor in the Hugging Face cache at " +
                                                repo.string() + hint);
  const fs::path snapshots = repo / "snapshots";
  std::string commit;
  const fs::path ref = repo / "refs" / id.revision;
  if (fs::is_regular_file(ref, ec)) {
    CHORUS_ASSIGN(std::string text, read_file_capped(ref.string(), 256));
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
    if (!is_commit_hash(text))
      return make_error(ErrorCode::kInvalidArgument, ref.string() + ": not a commit hash");
    commit = text;
  } else if (is_commit_hash(id.revision)) {
    commit = id.revision;
  } else if (id.revision == "main") {
    // No refs (a copied cache): accept the snapshot when there is exactly one.
    int found = 0;
    for (const auto& e : fs::directory_iterator(snapshots, ec)) {
      if (!e.is_directory(ec)) continue;
      commit = e.path().filename().string();
      ++found;
    }
    if (found != 1)
      return make_error(ErrorCode::kNotFound, spec + ": " + std::to_string(found) + " snapshots in " +
                                                  snapshots.string() + " and no refs/main to choose one");
  } else {
    return make_error(ErrorCode::kNotFound, spec + ": no revision '" + id.revision + "' in " + repo.string() + hint);
  }
  const fs::path dir = snapshots / commit;
  if (!fs::is_directory(dir, ec))
    return make_error(ErrorCode::kNotFound, spec + ": snapshot " + dir.string() + " is missing" + hint);
  return dir.string();
}

}  // namespace chorus::io
