#include "support/test_support.h"

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>
#include <unistd.h>

namespace chorus::test {

std::string shared_dir() {
  if (const char* env = std::getenv("CHORUS_SHARED_DIR")) return env;
  return CHORUS_SHARED_DIR;
}

std::string reference_path(const std::string& rel) { return shared_dir() + "/reference/" + rel; }

std::string test_data_path(const std::string& rel) { return std::string(CHORUS_TEST_DATA_DIR) + "/" + rel; }

std::string scratch_dir(const std::string& name) {
  namespace fs = std::filesystem;
  // One folder per test: ctest runs the tests of one binary as parallel processes, and two tests
  // asking for the same name must not delete each other's files.
  std::string owner = "process_" + std::to_string(::getpid());  // outside a test (suite set-up)
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info())
    owner = std::string(info->test_suite_name()) + "." + info->name();
  for (auto& c : owner)
    if (c == '/') c = '_';  // parameterised test names
  fs::path p = fs::path(CHORUS_BINARY_DIR) / "test_scratch" / owner / name;
  std::error_code ec;
  fs::remove_all(p, ec);
  fs::create_directories(p, ec);
  return p.string();
}

}  // namespace chorus::test
