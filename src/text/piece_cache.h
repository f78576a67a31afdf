// Remembers the ids of recently seen pre-tokenized pieces: natural text repeats the same words, so
// most pieces skip BPE. A fixed table of one-cache-line slots indexed by a hash of the piece: a new
// piece simply overwrites its slot, so the memory is fixed (4 MiB) and nothing is ever freed. Each
// slot has a try-lock, so threads share the table safely and a busy slot is just a miss.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace chorus::text {

class PieceCache {
 public:
  static constexpr std::size_t kMaxPieceBytes = 22;  // longer pieces are not kept
  static constexpr std::size_t kMaxIds = 8;          // nor pieces of more tokens

  PieceCache();

  // Appends the cached ids of `piece` and returns true, or returns false.
  bool lookup(std::string_view piece, std::vector<std::int32_t>* ids) const;
  void insert(std::string_view piece, const std::int32_t* ids, std::size_t count) const;

 private:
  static constexpr std::size_t kSlotBits = 16;

  struct alignas(64) Slot {
    std::atomic<bool> busy{false};
    std::uint8_t piece_size = 0;  // 0: empty
    std::uint8_t id_count = 0;
    char piece[kMaxPieceBytes];
    std::int32_t ids[kMaxIds];
  };
  static_assert(sizeof(Slot) == 64);

  Slot& slot_for(std::string_view piece) const;

  std::unique_ptr<Slot[]> slots_;
};

}  // namespace chorus::text
