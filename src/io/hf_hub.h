// Downloading a model from the Hugging Face Hub into the local Hugging Face cache, in exactly the
// layout huggingface_hub uses, so either tool finds what the other fetched:
//
//   $HF_HUB_CACHE/models--ORG--NAME/blobs/<etag>                   file contents (etag: the LFS sha256 or git blob id)
//   $HF_HUB_CACHE/models--ORG--NAME/snapshots/<commit>/<path>      relative symlinks into blobs/
//   $HF_HUB_CACHE/models--ORG--NAME/refs/<revision>                the commit a branch or tag names
//
// Only the files a chorus model needs are fetched (configs, safetensors, tokenizer files and the
// speech_tokenizer/ or audio_tokenizer/ folder). Downloads resume (HTTP Range) from the
// blobs/<etag>.incomplete file a cut connection leaves; LFS files are checked against their sha256
// and sizes against the server's; a blob appears only complete and checked (atomic rename), so a
// failure never leaves a truncated file under a final name. HF_ENDPOINT, HF_TOKEN (or
// $HF_HOME/token) and HF_HUB_OFFLINE are honoured.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"

namespace chorus::io {

struct HubOptions {
  std::string endpoint;   // "": $HF_ENDPOINT or https://huggingface.co
  std::string token;      // "": $HF_TOKEN, else the file $HF_HOME/token (or ~/.cache/huggingface/token)
  std::string cache_dir;  // "": hf_hub_cache_dir()
  bool progress = false;  // a progress line per file on stderr (callers pass whether it is a terminal)
  int attempts = 4;       // tries per file; each retry resumes where the last one stopped
  long connect_timeout_s = 30;
};

// HF_HUB_OFFLINE set to 1/true/yes/on.
bool hf_hub_offline();

// Whether `path` (a repository file path) is one a chorus model needs.
bool hub_file_needed(const std::string& path);

// Downloads what is missing of "ORG/NAME[@revision]" and returns its snapshot folder. kNotFound
// for an unknown repository, revision or a missing config.json, kUnsupported (with how to log in)
// for a gated or private one without access, kInvalidFormat for a checksum or size mismatch, kIo
// for network failures after the retries; offline (HF_HUB_OFFLINE) it refuses with kUnsupported.
Result<std::string> hf_hub_download_model(const std::string& spec, const HubOptions& options = {});

}  // namespace chorus::io
