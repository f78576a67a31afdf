#include "nn/kv_pages.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

namespace chorus::nn {

Status KvPageAllocator::grow(int64_t n) {
  if (n < 0 || total() + n > std::numeric_limits<int32_t>::max())
    return make_error(ErrorCode::kOutOfRange, "kv pages: cannot grow by " + std::to_string(n));
  const int64_t first = total();
  held_.resize(static_cast<size_t>(first + n), 0);
  // The new ids go under the free ones (taken last), lower ids above higher ones.
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int64_t id = first + n - 1; id >= first; --id) ids.push_back(static_cast<int32_t>(id));
  free_.insert(free_.begin(), ids.begin(), ids.end());
  return ok_status();
}

bool KvPageAllocator::reserve(int64_t n) {
  if (n < 0 || n > available()) return false;
  promised_ += n;
  return true;
}

Status KvPageAllocator::unreserve(int64_t n) {
  if (n < 0 || n > promised_)
    return make_error(ErrorCode::kInternal, "kv pages: returning " + std::to_string(n) + " reserved pages of " +
                                                std::to_string(promised_));
  promised_ -= n;
  return ok_status();
}

Result<int32_t> KvPageAllocator::take() {
  if (promised_ <= 0) return make_error(ErrorCode::kInternal, "kv pages: a sequence outgrew its reservation");
  if (free_.empty()) return make_error(ErrorCode::kInternal, "kv pages: reserved pages but none free");
  const int32_t id = free_.back();
  free_.pop_back();
  held_[static_cast<size_t>(id)] = 1;
  --promised_;
  return id;
}

Status KvPageAllocator::give_back(int32_t id) {
  if (!held(id)) return make_error(ErrorCode::kInternal, "kv pages: page " + std::to_string(id) + " is not held");
  held_[static_cast<size_t>(id)] = 0;
  free_.push_back(id);
  return ok_status();
}

}  // namespace chorus::nn

namespace chorus::nn {

Result<KvPageTable> KvPageTable::create(int slots, int branches, int64_t capacity) {
  if (slots < 1 || branches < 1 || capacity < 1 || capacity % kKvPagePositions != 0)
    return make_error(ErrorCode::kInternal, "kv page table: slots, branches and a capacity of whole pages needed");
  KvPageTable t;
  t.S_ = slots;
  t.NB_ = branches;
  t.cap_ = capacity;
  t.pps_ = capacity >> kKvPageShift;
  const size_t Q = static_cast<size_t>(slots) * static_cast<size_t>(branches);
  t.page_.assign(Q * static_cast<size_t>(t.pps_), -1);
  t.dirty_.assign(t.page_.size(), 0);
  t.count_.assign(Q, 0);
  t.rows_.assign(Q, 0);
  t.frames_.assign(static_cast<size_t>(slots), 0);
  t.reserve_.assign(static_cast<size_t>(slots), 0);
  t.admitted_.assign(static_cast<size_t>(slots), 0);
  return t;
}

int64_t KvPageTable::held_pages() const {
  int64_t n = 0;
  for (int64_t c : count_) n += c;
  return n;
}

int64_t KvPageTable::slot_pages(int slot) const {
  if (slot < 0 || slot >= S_) return 0;
  int64_t n = 0;
  for (int j = 0; j < NB_; ++j) n += count_[static_cast<size_t>(int64_t{slot} * NB_ + j)];
  return n;
}

bool KvPageTable::idle() const {
  for (int s = 0; s < S_; ++s)
    if (admitted_[static_cast<size_t>(s)] || reserve_[static_cast<size_t>(s)] != 0) return false;
  return true;
}

void KvPageTable::set(int64_t entry, int32_t id) {
  page_[static_cast<size_t>(entry)] = id;
  if (!dirty_[static_cast<size_t>(entry)]) {
    dirty_[static_cast<size_t>(entry)] = 1;
    changed_.push_back(entry);
  }
}

Status KvPageTable::hold(int slot, int64_t pages) {
  if (slot < 0 || slot >= S_ || pages < 0) return make_error(ErrorCode::kInternal, "kv page table: no such slot");
  if (admitted_[static_cast<size_t>(slot)] || reserve_[static_cast<size_t>(slot)] != 0)
    return make_error(ErrorCode::kInternal, "kv page table: the slot is not free");
  reserve_[static_cast<size_t>(slot)] = pages;
  return ok_status();
}

Status KvPageTable::cover(KvPageAllocator& a, int slot, int64_t seq, int64_t positions) {
  const int64_t need = kv_pages_for(std::min(positions, cap_));
  int64_t& count = count_[static_cast<size_t>(seq)];
  int64_t& left = reserve_[static_cast<size_t>(slot)];
  while (count < need) {
    if (left <= 0)
      return make_error(ErrorCode::kInternal, "kv page table: slot " + std::to_string(slot) +
                                                  " outgrew its reservation (the admission rule was broken)");
    CHORUS_ASSIGN(const int32_t id, a.take());
    --left;
    set(seq * pps_ + count, id);
    ++count;
  }
  return ok_status();
}

Status KvPageTable::admit(KvPageAllocator& a, int slot, std::span<const int64_t> prompt_rows) {
  if (slot < 0 || slot >= S_ || static_cast<int>(prompt_rows.size()) != NB_)
    return make_error(ErrorCode::kInternal, "kv page table: one prompt length per branch of a slot");
  if (admitted_[static_cast<size_t>(slot)]) return make_error(ErrorCode::kInternal, "kv page table: slot already admitted");
  admitted_[static_cast<size_t>(slot)] = 1;
  frames_[static_cast<size_t>(slot)] = 0;
  for (int j = 0; j < NB_; ++j) {
    const int64_t q = int64_t{slot} * NB_ + j;
    if (prompt_rows[static_cast<size_t>(j)] < 1 || prompt_rows[static_cast<size_t>(j)] > cap_)
      return make_error(ErrorCode::kInternal, "kv page table: a prompt that does not fit the capacity");
    rows_[static_cast<size_t>(q)] = prompt_rows[static_cast<size_t>(j)];
    CHORUS_TRY(cover(a, slot, q, prompt_rows[static_cast<size_t>(j)]));
  }
  return ok_status();
}

Status KvPageTable::before_launch(KvPageAllocator& a, int launches, std::span<const int32_t> parked) {
  if (launches < 0) return make_error(ErrorCode::kInternal, "kv page table: negative launches");
  if (!parked.empty() && launches != 1)
    return make_error(ErrorCode::kInternal, "kv page table: parked slots in more than one launch");
  std::vector<uint8_t> park(static_cast<size_t>(S_), 0);
  for (const int32_t p : parked) {
    if (p < 0 || p >= S_) return make_error(ErrorCode::kInternal, "kv page table: a parked slot out of range");
    park[static_cast<size_t>(p)] = 1;
  }
  for (int s = 0; s < S_; ++s) {
    if (!admitted_[static_cast<size_t>(s)]) continue;
    if (park[static_cast<size_t>(s)]) {
      // Its frame writes the row its next frame will write again, position rows + frames: mapped
      // now (inside the reservation, since that frame is still to come), the count unchanged.
      for (int j = 0; j < NB_; ++j) {
        const int64_t q = int64_t{s} * NB_ + j;
        CHORUS_TRY(cover(a, s, q, rows_[static_cast<size_t>(q)] + frames_[static_cast<size_t>(s)] + 1));
      }
      continue;
    }
    const int64_t frames = frames_[static_cast<size_t>(s)] + launches;
    for (int j = 0; j < NB_; ++j) {
      const int64_t q = int64_t{s} * NB_ + j;
      CHORUS_TRY(cover(a, s, q, rows_[static_cast<size_t>(q)] + frames));
    }
    frames_[static_cast<size_t>(s)] = frames;
  }
  return ok_status();
}

Status KvPageTable::release(KvPageAllocator& a, int slot, int64_t launched) {
  if (slot < 0 || slot >= S_) return make_error(ErrorCode::kInternal, "kv page table: no such slot");
  for (int j = 0; j < NB_; ++j) {
    const int64_t q = int64_t{slot} * NB_ + j;
    for (int64_t i = 0; i < count_[static_cast<size_t>(q)]; ++i) {
      retiring_.emplace_back(launched, page_[static_cast<size_t>(q * pps_ + i)]);
      set(q * pps_ + i, -1);
    }
    count_[static_cast<size_t>(q)] = 0;
  }
  admitted_[static_cast<size_t>(slot)] = 0;
  const int64_t left = reserve_[static_cast<size_t>(slot)];
  reserve_[static_cast<size_t>(slot)] = 0;
  return a.unreserve(left);
}

Status KvPageTable::move(int from, int to) {
  if (from < 0 || from >= S_ || to < 0 || to >= S_ || from == to)
    return make_error(ErrorCode::kInternal, "kv page table: no such slots to move between");
  const auto f = static_cast<size_t>(from), t = static_cast<size_t>(to);
  if (!admitted_[f]) return make_error(ErrorCode::kInternal, "kv page table: moving a slot that holds no stream");
  if (admitted_[t] || reserve_[t] != 0) return make_error(ErrorCode::kInternal, "kv page table: moving onto a held slot");
  for (int j = 0; j < NB_; ++j) {
    const int64_t qf = int64_t{from} * NB_ + j, qt = int64_t{to} * NB_ + j;
    for (int64_t i = 0; i < pps_; ++i) {
      const int32_t id = page_[static_cast<size_t>(qf * pps_ + i)];
      if (id != page_[static_cast<size_t>(qt * pps_ + i)]) set(qt * pps_ + i, id);
      if (id >= 0) set(qf * pps_ + i, -1);
    }
    count_[static_cast<size_t>(qt)] = std::exchange(count_[static_cast<size_t>(qf)], 0);
    rows_[static_cast<size_t>(qt)] = std::exchange(rows_[static_cast<size_t>(qf)], 0);
  }
  frames_[t] = std::exchange(frames_[f], 0);
  reserve_[t] = std::exchange(reserve_[f], 0);
  admitted_[t] = 1;
  admitted_[f] = 0;
  return ok_status();
}

Status KvPageTable::reclaim(KvPageAllocator& a, int64_t done) {
  Status st = ok_status();
  std::erase_if(retiring_, [&](const std::pair<int64_t, int32_t>& r) {
    if (r.first > done) return false;
    Status g = a.give_back(r.second);
    if (!g.ok() && st.ok()) st = std::move(g);
    return true;
  });
  return st;
}

Status KvPageTable::release_all(KvPageAllocator& a) {
  Status st = ok_status();
  for (int s = 0; s < S_; ++s) {
    Status r = release(a, s, 0);
    if (!r.ok() && st.ok()) st = std::move(r);
  }
  Status r = reclaim(a, std::numeric_limits<int64_t>::max());
  return st.ok() ? r : st;
}

std::vector<std::pair<int64_t, int32_t>> KvPageTable::changes() {
  std::vector<std::pair<int64_t, int32_t>> out;
  out.reserve(changed_.size());
  for (int64_t e : changed_) {
    out.emplace_back(e, page_[static_cast<size_t>(e)]);
    dirty_[static_cast<size_t>(e)] = 0;
  }
  changed_.clear();
  return out;
}

}  // namespace chorus::nn
