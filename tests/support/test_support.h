// Helpers shared by the test binaries: paths of reference material and golden-file access.
#pragma once

#include <string>

namespace chorus::test {

// ../shared (CHORUS_SHARED_DIR at configure time, or $CHORUS_SHARED_DIR at run time).
std::string shared_dir();
// Path under shared/reference/...
std::string reference_path(const std::string& rel);
// tests/data/...
std::string test_data_path(const std::string& rel);
// A fresh empty directory under the build tree for this test's outputs (one per test and name).
std::string scratch_dir(const std::string& name);

}  // namespace chorus::test
