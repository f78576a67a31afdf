#include "support/test_support.h"

#include <cstdlib>
#include <filesystem>

namespace chorus::test {

std::string shared_dir() {
  if (const char* env = std::getenv("CHORUS_SHARED_DIR")) return env;
  return CHORUS_SHARED_DIR;
}

std::string reference_path(const std::string& rel) { return shared_dir() + "/reference/" + rel; }

std::string test_data_path(const std::string& rel) { return std::string(CHORUS_TEST_DATA_DIR) + "/" + rel; }

std::string scratch_dir(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path p = fs::path(CHORUS_BINARY_DIR) / "test_scratch" / name;
  std::error_code ec;
  fs::remove_all(p, ec);
  fs::create_directories(p, ec);
  return p.string();
}

}  // namespace chorus::test
