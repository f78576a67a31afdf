// Where a model lives: a folder path, or a Hugging Face repository id ("Qwen/Qwen3-TTS-12Hz-0.6B-Base",
// optionally "@revision") resolved to its snapshot in the local Hugging Face cache, as the Python
// tools leave it. Nothing is downloaded: chorus never touches the network.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"

namespace chorus::io {

// An existing directory is returned unchanged. Otherwise `spec` must be "owner/name[@revision]"
// (letters, digits, '-', '_', '.'; no ".." parts) present in the cache: the snapshot named by
// refs/<revision> (default "main"), or snapshots/<revision> when it is a commit, or the only
// snapshot when there are no refs. kNotFound names the folders searched and how to download.
Result<std::string> resolve_model_dir(const std::string& spec);

// The hub cache folder: $HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub or
// ~/.cache/huggingface/hub (the first variable that is set).
std::string hf_hub_cache_dir();

}  // namespace chorus::io
