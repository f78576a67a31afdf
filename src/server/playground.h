// The playground: a single page (server/playground/*: plain HTML, CSS and JavaScript, no build step,
// nothing fetched from elsewhere) that `chorus serve` answers GET / with. The files are compiled into
// the binary (cmake/embed_files.cmake).
#pragma once

#include <string_view>

namespace chorus::server {

struct PlaygroundAsset {
  std::string_view body;
  const char* content_type;
};

// "/" (the page) and the page's own files by name ("/playground.js"); nullptr for other paths.
const PlaygroundAsset* find_playground_asset(std::string_view path);

}  // namespace chorus::server
