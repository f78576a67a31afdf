#include "server/playground.h"

#include <array>
#include <string>
#include <vector>

namespace chorus::server {

namespace {

struct EmbeddedFile {
  const char* name;
  const char* data;
  size_t size;
};

#include "server/playground_files.inc"

const char* content_type_of(std::string_view name) {
  auto ends = [&](std::string_view ext) { return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext; };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

}  // namespace

const PlaygroundAsset* find_playground_asset(std::string_view path) {
  static const std::vector<std::pair<std::string, PlaygroundAsset>> assets = [] {
    std::vector<std::pair<std::string, PlaygroundAsset>> a;
    for (const EmbeddedFile& f : kEmbeddedFiles) {
      const std::string name = f.name;
      const PlaygroundAsset asset{std::string_view(f.data, f.size), content_type_of(name)};
      a.emplace_back("/" + name, asset);
      if (name == "index.html") a.emplace_back("/", asset);
    }
    return a;
  }();
  for (const auto& [p, a] : assets)
    if (p == path) return &a;
  return nullptr;
}

}  // namespace chorus::server
