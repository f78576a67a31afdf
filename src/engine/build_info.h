#pragma once

#include <string>

namespace chorus {

// One line describing this build: version, compiled backends, and the CPU features in use.
std::string build_info();

}  // namespace chorus
