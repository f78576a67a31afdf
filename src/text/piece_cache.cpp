#include "text/piece_cache.h"

#include <cstring>

namespace chorus::text {
namespace {

// Pieces are short: mix them eight bytes at a time.
std::uint64_t hash_piece(std::string_view s) {
  std::uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  if (i < s.size()) {
    std::uint64_t w = 0;
    std::memcpy(&w, s.data() + i, s.size() - i);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
  }
  return h * 0x9E3779B97F4A7C15ull;
}

class SlotLock {
 public:
  explicit SlotLock(std::atomic<bool>& busy) : busy_(busy), owns_(!busy.exchange(true, std::memory_order_acquire)) {}
  ~SlotLock() {
    if (owns_) busy_.store(false, std::memory_order_release);
  }
  bool owns() const { return owns_; }

 private:
  std::atomic<bool>& busy_;
  bool owns_;
};

}  // namespace

PieceCache::PieceCache() : slots_(new Slot[std::size_t{1} << kSlotBits]) {}

PieceCache::Slot& PieceCache::slot_for(std::string_view piece) const {
  return slots_[hash_piece(piece) >> (64 - kSlotBits)];
}

bool PieceCache::lookup(std::string_view piece, std::vector<std::int32_t>* ids) const {
  if (piece.size() > kMaxPieceBytes || piece.empty()) return false;
  Slot& slot = slot_for(piece);
  SlotLock lock(slot.busy);
  if (!lock.owns() || slot.piece_size != piece.size() || std::memcmp(slot.piece, piece.data(), piece.size()) != 0)
    return false;
  ids->insert(ids->end(), slot.ids, slot.ids + slot.id_count);
  return true;
}

void PieceCache::insert(std::string_view piece, const std::int32_t* ids, std::size_t count) const {
  if (piece.size() > kMaxPieceBytes || piece.empty() || count > kMaxIds) return;
  Slot& slot = slot_for(piece);
  SlotLock lock(slot.busy);
  if (!lock.owns()) return;
  slot.piece_size = static_cast<std::uint8_t>(piece.size());
  slot.id_count = static_cast<std::uint8_t>(count);
  std::memcpy(slot.piece, piece.data(), piece.size());
  // A piece of bytes the vocabulary lacks has no ids, and ids may then be null (memcpy forbids that).
  if (count > 0) std::memcpy(slot.ids, ids, count * sizeof(std::int32_t));
}

}  // namespace chorus::text
