// Counts heap allocations made by this test binary, so tests can check that a loader's memory stays
// within the file size plus a small constant. Replaces the global operator new/delete; in builds
// without sanitizers it also sees aligned_alloc (which AlignedBuffer, and so tensor data, uses).
#pragma once

#include <cstddef>

namespace chorus::test {

// True when aligned_alloc is counted (not under ASan, whose allocator must not be bypassed).
bool counts_aligned_alloc();

// Measures from construction: peak() is the highest number of bytes live at once from operator new
// plus every byte aligned_alloc handed out (frees of those are not seen, so that part only grows).
class AllocationScope {
 public:
  AllocationScope();
  size_t peak() const;

 private:
  size_t base_;
};

}  // namespace chorus::test
