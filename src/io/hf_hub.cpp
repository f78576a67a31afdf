#include "io/hf_hub.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>

#include "io/file_util.h"
#include "io/json_util.h"
#include "io/model_dir.h"

namespace chorus::io {

namespace fs = std::filesystem;

namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// Percent-encodes one path segment (file paths keep their '/').
std::string url_encode(const std::string& s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Response {
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names; the last response's (after redirects)
  std::string body;
};

struct Transfer {
  Response* resp = nullptr;
  FILE* sink = nullptr;       // body to this file, or into resp->body
  size_t body_cap = 8 << 20;  // for bodies held in memory
  bool overflow = false;
  // Progress line.
  bool progress = false;
  std::string label;
  uint64_t offset = 0, total = 0;
  double last_draw = -1;
};

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    t->resp->headers.clear();  // a new response (after a redirect): keep only its headers
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string::npos) t->resp->headers[lower(trim(line.substr(0, colon)))] = trim(line.substr(colon + 1));
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  if (t->sink) return std::fwrite(data, 1, bytes, t->sink);
  if (t->resp->body.size() + bytes > t->body_cap) {
    t->overflow = true;
    return 0;
  }
  t->resp->body.append(data, bytes);
  return bytes;
}

int on_progress(void* user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (!t->progress) return 0;
  const uint64_t done = t->offset + static_cast<uint64_t>(dlnow);
  const uint64_t total = t->total ? t->total : t->offset + static_cast<uint64_t>(dltotal);
  const double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 0.0;
  if (pct - t->last_draw < 0.5 && done != total) return 0;
  t->last_draw = pct;
  const int width = 24, filled = static_cast<int>(pct / 100.0 * width);
  std::fprintf(stderr, "\r%-40.40s [%.*s%*s] %5.1f%% %8.1f MB", t->label.c_str(), filled,
               "########################", width - filled, "", pct, static_cast<double>(done) / 1e6);
  return 0;
}

struct Request {
  std::string url;
  bool head = false;
  bool follow = true;
  std::string token;
  uint64_t range_from = 0;  // > 0: ask for the bytes from here on
  long connect_timeout_s = 30;
};

// One HTTP exchange. Transport failures (refused, reset, cut mid-body) are kIo naming the URL.
Status perform(const Request& rq, Transfer& t) {
  curl_init_once();
  std::unique_ptr<CURL, void (*)(CURL*)> c(curl_easy_init(), curl_easy_cleanup);
  if (!c) return make_error(ErrorCode::kInternal, "curl_easy_init failed");
  curl_slist* hdrs = nullptr;
  hdrs = curl_slist_append(hdrs, "User-Agent: chorus/0.1; hf_hub-compatible");
  // curl keeps custom Authorization headers off redirects to other hosts (the CDN).
  if (!rq.token.empty()) hdrs = curl_slist_append(hdrs, ("Authorization: Bearer " + rq.token).c_str());
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> hdr_guard(hdrs, curl_slist_free_all);
  CURL* h = c.get();
  curl_easy_setopt(h, CURLOPT_URL, rq.url.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, rq.follow ? 1L : 0L);
  curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, rq.connect_timeout_s);
  // A stalled transfer (under 1 kB/s for 60 s) fails and is retried from where it stopped.
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  if (t.progress) {
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, &t);
  }
  if (rq.head) curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  const std::string range = std::to_string(rq.range_from) + "-";
  if (rq.range_from > 0) curl_easy_setopt(h, CURLOPT_RANGE, range.c_str());
  const CURLcode rc = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &t.resp->status);
  if (t.overflow) return make_error(ErrorCode::kResourceExhausted, rq.url + ": response larger than expected");
  if (rc != CURLE_OK) return make_error(ErrorCode::kIo, rq.url + ": " + curl_easy_strerror(rc));
  return ok_status();
}

Error http_error(const Response& r, const std::string& what, const std::string& repo) {
  if (r.status == 401 || r.status == 403)
    return make_error(ErrorCode::kUnsupported,
                      what + ": HTTP " + std::to_string(r.status) + ": " + repo +
                          " is gated or private and this request has no access: accept its terms on the Hub and "
                          "set HF_TOKEN (or log in with `hf auth login`)");
  if (r.status == 404) return make_error(ErrorCode::kNotFound, what + ": HTTP 404 (no such repository, revision or file)");
  return make_error(ErrorCode::kIo, what + ": HTTP " + std::to_string(r.status));
}

std::string hub_token(const HubOptions& o) {
  if (!o.token.empty()) return o.token;
  if (std::string t = env_or_empty("HF_TOKEN"); !t.empty()) return t;
  const std::string home = env_or_empty("HF_HOME");
  const fs::path file = !home.empty() ? fs::path(home) / "token"
                                      : fs::path(env_or_empty("HOME")) / ".cache" / "huggingface" / "token";
  auto text = read_file_capped(file.string(), 4096);
  return text.ok() ? trim(*text) : std::string();
}

// The blob name huggingface_hub uses: the ETag without quotes or a weak marker.
std::string clean_etag(std::string e) {
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

bool is_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

Result<std::string> sha256_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) return make_error(ErrorCode::kIo, path + ": cannot open to check its checksum");
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    return make_error(ErrorCode::kInternal, "sha256: EVP init failed");
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) EVP_DigestUpdate(ctx.get(), buf.data(), n);
  if (std::ferror(f.get())) return make_error(ErrorCode::kIo, path + ": read error while checking its checksum");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

// Writes `text` to `path` through a temporary file and a rename.
Status write_atomic(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), std::fclose);
    if (!f || std::fwrite(text.data(), 1, text.size(), f.get()) != text.size())
      return make_error(ErrorCode::kIo, tmp.string() + ": cannot write");
  }
  fs::rename(tmp, path, ec);
  if (ec) return make_error(ErrorCode::kIo, path.string() + ": " + ec.message());
  return ok_status();
}

// snapshots/<commit>/<file> → ../../blobs/<etag> (one more ../ per sub-folder), replaced atomically.
Status link_snapshot(const fs::path& repo, const std::string& commit, const std::string& file, const std::string& etag) {
  const fs::path link = repo / "snapshots" / commit / file;
  std::error_code ec;
  fs::create_directories(link.parent_path(), ec);
  if (ec) return make_error(ErrorCode::kIo, link.parent_path().string() + ": " + ec.message());
  std::string up = "../../";
  for (char c : file)
    if (c == '/') up += "../";
  const fs::path tmp = link.string() + ".tmp" + std::to_string(::getpid());
  fs::remove(tmp, ec);
  fs::create_symlink(fs::path(up + "blobs/" + etag), tmp, ec);
  if (ec) return make_error(ErrorCode::kIo, tmp.string() + ": cannot create a symlink: " + ec.message());
  fs::rename(tmp, link, ec);
  if (ec) return make_error(ErrorCode::kIo, link.string() + ": " + ec.message());
  return ok_status();
}

// An exclusive lock on .locks/models--ORG--NAME/<etag>.lock (where huggingface_hub takes its own),
// so two processes fetching one blob do not write the same .incomplete file.
class BlobLock {
 public:
  static Result<BlobLock> take(const fs::path& path) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return make_error(ErrorCode::kIo, path.string() + ": cannot open the lock file");
    if (::flock(fd, LOCK_EX) != 0) {
      ::close(fd);
      return make_error(ErrorCode::kIo, path.string() + ": cannot lock");
    }
    return BlobLock(fd);
  }
  BlobLock(BlobLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  BlobLock& operator=(BlobLock&&) = delete;
  ~BlobLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }

 private:
  explicit BlobLock(int fd) : fd_(fd) {}
  int fd_;
};

struct FileMeta {
  std::string etag, commit;
  uint64_t size = 0;  // 0: unknown
};

Result<FileMeta> head_file(const std::string& url, const std::string& token, const HubOptions& o,
                           const std::string& repo, const std::string& file) {
  Response r;
  Transfer t;
  t.resp = &r;
  Request rq{url, true, false, token, 0, o.connect_timeout_s};
  Status st = ok_status();
  for (int attempt = 0; attempt < std::max(1, o.attempts); ++attempt) {
    r = Response{};
    st = perform(rq, t);
    if (st.ok()) break;
  }
  CHORUS_TRY(st);
  if (r.status != 200 && !(r.status >= 301 && r.status <= 308)) return http_error(r, repo + ": " + file, repo);
  FileMeta m;
  // LFS files: X-Linked-Etag is the sha256 (the redirect's own ETag is the CDN's).
  auto get = [&](const char* k) { auto it = r.headers.find(k); return it == r.headers.end() ? std::string() : it->second; };
  m.etag = clean_etag(!get("x-linked-etag").empty() ? get("x-linked-etag") : get("etag"));
  m.commit = get("x-repo-commit");
  const std::string size = !get("x-linked-size").empty() ? get("x-linked-size") : get("content-length");
  if (!size.empty()) m.size = std::strtoull(size.c_str(), nullptr, 10);
  if (m.etag.empty() || m.etag.find('/') != std::string::npos || m.etag.find("..") != std::string::npos)
    return make_error(ErrorCode::kInvalidFormat, repo + ": " + file + ": the server sent no usable ETag");
  return m;
}

// Fetches `url` into blobs/<etag>, resuming blobs/<etag>.incomplete, checking size and sha256.
Status fetch_blob(const std::string& url, const std::string& token, const HubOptions& o, const fs::path& blob,
                  const FileMeta& meta, const std::string& label) {
  const fs::path part = blob.string() + ".incomplete";
  std::error_code ec;
  fs::create_directories(blob.parent_path(), ec);
  Status last = ok_status();
  for (int attempt = 0; attempt < std::max(1, o.attempts); ++attempt) {
    uint64_t have = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
    if (meta.size && have > meta.size) {  // longer than the file: start over
      fs::remove(part, ec);
      have = 0;
    }
    if (meta.size && have == meta.size) break;
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(part.c_str(), have ? "ab" : "wb"), std::fclose);
    if (!f) return make_error(ErrorCode::kIo, part.string() + ": cannot write");
    Response r;
    Transfer t;
    t.resp = &r;
    t.sink = f.get();
    t.progress = o.progress;
    t.label = label;
    t.offset = have;
    t.total = meta.size;
    Request rq{url, false, true, token, have, o.connect_timeout_s};
    last = perform(rq, t);
    f.reset();
    if (o.progress) std::fprintf(stderr, "\n");
    if (r.status == 200 && have > 0) {
      // The server ignored the range and sent the whole file after what we had: start over.
      fs::remove(part, ec);
      last = make_error(ErrorCode::kIo, url + ": the server did not resume (no range support)");
      continue;
    }
    if (r.status != 0 && r.status != 200 && r.status != 206 && r.status != 416) {
      fs::remove(part, ec);
      return http_error(r, label, label);
    }
    if (last.ok()) break;
  }
  CHORUS_TRY(last);
  const uint64_t got = fs::file_size(part, ec);
  if (ec) return make_error(ErrorCode::kIo, part.string() + ": " + ec.message());
  if (meta.size && got != meta.size) {
    fs::remove(part, ec);
    return make_error(ErrorCode::kInvalidFormat, label + ": downloaded " + std::to_string(got) + " bytes, the server said " +
                                                     std::to_string(meta.size) + "; removed, try again");
  }
  if (is_sha256(meta.etag)) {
    CHORUS_ASSIGN(const std::string sum, sha256_file(part.string()));
    if (sum != lower(meta.etag)) {
      fs::remove(part, ec);
      return make_error(ErrorCode::kInvalidFormat, label + ": checksum mismatch (sha256 " + sum + ", expected " +
                                                       meta.etag + "); the download was removed");
    }
  }
  fs::rename(part, blob, ec);
  if (ec) return make_error(ErrorCode::kIo, blob.string() + ": " + ec.message());
  return ok_status();
}

}  // namespace

bool hf_hub_offline() {
  const std::string v = lower(env_or_empty("HF_HUB_OFFLINE"));
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

bool hub_file_needed(const std::string& path) {
  auto ends_with = [&](const char* suffix) {
    const std::string s = suffix;
    return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0;
  };
  const size_t slash = path.find('/');
  if (slash != std::string::npos) {
    const std::string dir = path.substr(0, slash);
    if (dir != "speech_tokenizer" && dir != "audio_tokenizer") return false;
    if (path.find('/', slash + 1) != std::string::npos) return false;
    return ends_with(".json") || ends_with(".safetensors") || ends_with(".txt") || ends_with(".model");
  }
  static const char* kTop[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                               "vocab.json", "merges.txt", "special_tokens_map.json", "added_tokens.json",
                               "preprocessor_config.json", "tokenizer.model", "spm.model"};
  for (const char* n : kTop)
    if (path == n) return true;
  return ends_with(".safetensors") || ends_with(".safetensors.index.json");
}

Result<std::string> hf_hub_download_model(const std::string& spec, const HubOptions& o) {
  HubRepoId id;
  if (!parse_hub_repo_id(spec, &id))
    return make_error(ErrorCode::kInvalidArgument, spec + ": not a Hugging Face model id (ORG/NAME[@revision])");
  if (hf_hub_offline())
    return make_error(ErrorCode::kUnsupported, spec + ": HF_HUB_OFFLINE is set, so nothing is downloaded");
  std::string endpoint = !o.endpoint.empty() ? o.endpoint : env_or_empty("HF_ENDPOINT");
  if (endpoint.empty()) endpoint = "https://huggingface.co";
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  const std::string token = hub_token(o);
  const fs::path repo = fs::path(!o.cache_dir.empty() ? o.cache_dir : hf_hub_cache_dir()) / id.cache_folder();

  // The file list and the commit the revision names.
  Response r;
  Transfer t;
  t.resp = &r;
  const std::string api = endpoint + "/api/models/" + id.owner + "/" + id.name + "/revision/" + url_encode(id.revision, false);
  CHORUS_TRY(perform(Request{api, false, true, token, 0, o.connect_timeout_s}, t));
  if (r.status != 200) return http_error(r, spec, id.repo());
  CHORUS_ASSIGN(const Json info, parse_json(r.body, api));
  const std::string commit = info.is_object() && info.contains("sha") && info["sha"].is_string() ? info["sha"].get<std::string>() : "";
  if (!is_commit_hash(commit)) return make_error(ErrorCode::kInvalidFormat, api + ": no commit hash (\"sha\") in the answer");
  std::vector<std::string> files;
  if (info.contains("siblings") && info["siblings"].is_array())
    for (const auto& s : info["siblings"])
      if (s.is_object() && s.contains("rfilename") && s["rfilename"].is_string()) {
        const std::string f = s["rfilename"].get<std::string>();
        if (f.empty() || f[0] == '/' || f.find("..") != std::string::npos || f.find('\\') != std::string::npos) continue;
        if (hub_file_needed(f)) files.push_back(f);
      }
  bool has_config = false;
  for (const auto& f : files) has_config |= f == "config.json";
  if (!has_config) return make_error(ErrorCode::kNotFound, spec + ": the repository has no config.json (not a model chorus can load)");

  for (const std::string& file : files) {
    const fs::path link = repo / "snapshots" / commit / file;
    std::error_code ec;
    if (fs::exists(link, ec)) continue;  // in the cache already (exists() follows the link to its blob)
    const std::string url = endpoint + "/" + id.repo() + "/resolve/" + commit + "/" + url_encode(file, true);
    CHORUS_ASSIGN(const FileMeta meta, head_file(url, token, o, id.repo(), file));
    const fs::path blob = repo / "blobs" / meta.etag;
    if (!fs::exists(blob, ec)) {
      const fs::path cache = repo.parent_path();
      CHORUS_ASSIGN(BlobLock lock, BlobLock::take(cache / ".locks" / id.cache_folder() / (meta.etag + ".lock")));
      if (!fs::exists(blob, ec)) CHORUS_TRY(fetch_blob(url, token, o, blob, meta, id.repo() + ": " + file));
    }
    CHORUS_TRY(link_snapshot(repo, commit, file, meta.etag));
  }
  if (id.revision != commit) CHORUS_TRY(write_atomic(repo / "refs" / id.revision, commit));
  return (repo / "snapshots" / commit).string();
}

}  // namespace chorus::io
