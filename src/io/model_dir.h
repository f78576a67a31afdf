// Where a model lives: a folder path, or a Hugging Face repository id ("Qwen/Qwen3-TTS-12Hz-0.6B-Base",
// optionally "@revision") resolved to its snapshot in the local Hugging Face cache, as the Python
// tools leave it. Nothing is downloaded here (io/hf_hub.h fetches into the same cache).
#pragma once

#include <string>
#include <vector>

#include "core/error.h"

namespace chorus::io {

struct HubRepoId {
  std::string owner, name, revision = "main";
  std::string repo() const { return owner + "/" + name; }
  // models--OWNER--NAME, the repository's folder in the cache.
  std::string cache_folder() const { return "models--" + owner + "--" + name; }
};

// "owner/name[@revision]" (letters, digits, '-', '_', '.'; no ".." parts), or false.
bool parse_hub_repo_id(const std::string& spec, HubRepoId* id);
bool is_commit_hash(const std::string& s);  // 40 lowercase hex digits

// An existing directory is returned unchanged. Otherwise `spec` must be "owner/name[@revision]"
// (letters, digits, '-', '_', '.'; no ".." parts) present in the cache: the snapshot named by
// refs/<revision> (default "main"), or snapshots/<revision> when it is a commit, or the only
// snapshot when there are no refs. kNotFound names the folders searched and how to download.
Result<std::string> resolve_model_dir(const std::string& spec);

// The hub cache folder: $HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub or
// ~/.cache/huggingface/hub (the first variable that is set).
std::string hf_hub_cache_dir();

}  // namespace chorus::io
