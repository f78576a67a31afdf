// The host side of the paged KV cache: the page allocator's accounting (reservations, double and
// foreign frees refused) and the page tables of a frame pool, checked against an independent model
// of which positions each frame writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "nn/kv_pages.h"

namespace chorus::nn {
namespace {

constexpr int64_t P = kKvPagePositions;

TEST(KvPages, PagesForPositionsRoundUp) {
  EXPECT_EQ(kv_pages_for(0), 0);
  EXPECT_EQ(kv_pages_for(1), 1);
  EXPECT_EQ(kv_pages_for(P - 1), 1);
  EXPECT_EQ(kv_pages_for(P), 1);
  EXPECT_EQ(kv_pages_for(P + 1), 2);
  EXPECT_EQ(kv_pages_for(10 * P), 10);
  EXPECT_EQ(kv_pages_for(10 * P + 1), 11);
}

TEST(KvPages, ReservationsBoundWhatCanBeTaken) {
  KvPageAllocator a;
  ASSERT_TRUE(a.grow(10).ok());
  EXPECT_EQ(a.total(), 10);
  EXPECT_EQ(a.free(), 10);
  EXPECT_EQ(a.available(), 10);
  EXPECT_FALSE(a.take().ok()) << "a page without a reservation";
  EXPECT_FALSE(a.reserve(11));
  EXPECT_EQ(a.promised(), 0) << "a refused reservation changes nothing";
  ASSERT_TRUE(a.reserve(4));
  ASSERT_TRUE(a.reserve(6));
  EXPECT_EQ(a.available(), 0);
  EXPECT_FALSE(a.reserve(1));
  std::set<int32_t> ids;
  for (int i = 0; i < 10; ++i) {
    auto id = a.take();
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    EXPECT_GE(*id, 0);
    EXPECT_LT(*id, 10);
    EXPECT_TRUE(a.held(*id));
    ids.insert(*id);
    EXPECT_GE(a.free(), a.promised());
  }
  EXPECT_EQ(ids.size(), 10u) << "every page handed out once";
  EXPECT_FALSE(a.take().ok());
  EXPECT_EQ(a.free(), 0);
  for (int32_t id : ids) ASSERT_TRUE(a.give_back(id).ok());
  EXPECT_EQ(a.free(), 10);
  EXPECT_EQ(a.promised(), 0);
}

TEST(KvPages, DoubleAndForeignFreesAreRefused) {
  KvPageAllocator a;
  ASSERT_TRUE(a.grow(3).ok());
  ASSERT_TRUE(a.reserve(2));
  auto id = a.take();
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(a.give_back(*id).ok());
  EXPECT_FALSE(a.give_back(*id).ok()) << "given back twice";
  EXPECT_EQ(a.free(), 3) << "a refused free changes nothing";
  const int32_t never = *id == 0 ? 1 : 0;
  EXPECT_FALSE(a.give_back(never).ok()) << "never taken";
  EXPECT_FALSE(a.give_back(3).ok()) << "no such page";
  EXPECT_FALSE(a.give_back(-1).ok());
  EXPECT_FALSE(a.unreserve(2).ok()) << "more than is reserved";
  EXPECT_TRUE(a.unreserve(1).ok());
  EXPECT_EQ(a.promised(), 0);
  EXPECT_EQ(a.free(), 3);
}

TEST(KvPages, GrowingKeepsPagesHeld) {
  KvPageAllocator a;
  ASSERT_TRUE(a.grow(2).ok());
  ASSERT_TRUE(a.reserve(2));
  auto x = a.take();
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(a.grow(3).ok());
  EXPECT_EQ(a.total(), 5);
  EXPECT_EQ(a.free(), 4);
  EXPECT_TRUE(a.held(*x));
  EXPECT_EQ(a.available(), 3);
  EXPECT_FALSE(a.grow(-1).ok());
}

// An independent model of one pool: slot s admitted at launch count L0 with prompt rows R writes,
// in the k-th frame launched after its admission, position min(R + k − 1, cap − 1). Every position
// a launched frame writes must be mapped, each page to one sequence only.
struct ModelSlot {
  bool live = false;
  std::vector<int64_t> rows;
  int64_t max_frames = 0, frames = 0;
};

TEST(KvPageTable, EveryWrittenPositionHasAPageOfItsOwnAndAllReturn) {
  constexpr int S = 6, NB = 2;
  constexpr int64_t cap = 8 * P;
  KvPageAllocator a;
  ASSERT_TRUE(a.grow(40).ok());
  auto t = KvPageTable::create(S, NB, cap);
  ASSERT_TRUE(t.ok()) << t.error().to_string();
  std::mt19937 rng(7);
  std::vector<ModelSlot> m(S);
  int64_t launched = 0, waited = 0, admitted = 0, waits = 0, max_held = 0;
  std::vector<int32_t> device(static_cast<size_t>(t->entries()), -1);  // the mirror the device keeps
  const auto apply = [&] {
    for (const auto& [e, id] : t->changes()) device[static_cast<size_t>(e)] = id;
  };
  for (int step = 0; step < 3000; ++step) {
    // Joins: a reservation of the stream's worst case (the engine's rule), or a wait.
    for (int s = 0; s < S; ++s) {
      if (m[s].live || rng() % 3 != 0) continue;
      ModelSlot ms;
      ms.live = true;
      for (int j = 0; j < NB; ++j) ms.rows.push_back(1 + static_cast<int64_t>(rng() % (3 * P)));
      ms.max_frames = 1 + static_cast<int64_t>(rng() % (4 * P));
      int64_t need = 0;
      for (int64_t r : ms.rows) need += kv_pages_for(r + ms.max_frames + 1);
      if (!a.reserve(need)) {
        ++waits;
        continue;
      }
      ASSERT_TRUE(t->hold(s, need).ok());
      ASSERT_TRUE(t->reclaim(a, waited).ok());
      ASSERT_TRUE(t->admit(a, s, ms.rows).ok());
      m[s] = ms;
      ++admitted;
    }
    // Launch one or two frames (a frame launched ahead), then wait for one.
    const int launches = launched - waited >= 1 ? (rng() % 2) : 1 + static_cast<int>(rng() % 2);
    const Status st = t->before_launch(a, launches);
    ASSERT_TRUE(st.ok()) << st.error().to_string();
    apply();
    std::map<int32_t, int64_t> owner;  // page → the sequence that maps it
    for (int s = 0; s < S; ++s) {
      if (!m[s].live) continue;
      m[s].frames += launches;
      for (int j = 0; j < NB; ++j) {
        const int64_t q = int64_t{s} * NB + j;
        const int64_t last = std::min(m[s].rows[j] + m[s].frames - 1, cap - 1);
        for (int64_t p = 0; p <= last; ++p) {
          const int32_t id = device[static_cast<size_t>(q * t->pages_per_sequence() + p / P)];
          ASSERT_GE(id, 0) << "position " << p << " of sequence " << q << " has no page";
          ASSERT_TRUE(a.held(id));
          auto [it, fresh] = owner.emplace(id, q);
          ASSERT_TRUE(fresh || it->second == q) << "page " << id << " mapped by two sequences";
        }
      }
    }
    launched += launches;
    if (launched > waited) ++waited;
    max_held = std::max(max_held, t->held_pages());
    // Streams end after their last frame, or earlier (EOS, cancel).
    for (int s = 0; s < S; ++s) {
      if (!m[s].live) continue;
      if (m[s].frames >= m[s].max_frames + (launched > waited ? 1 : 0) || rng() % 40 == 0) {
        ASSERT_TRUE(t->release(a, s, launched).ok());
        m[s].live = false;
      }
    }
    ASSERT_TRUE(t->reclaim(a, waited).ok());
    EXPECT_GE(a.free(), a.promised());
  }
  for (int s = 0; s < S; ++s) {
    if (m[s].live) {
      ASSERT_TRUE(t->release(a, s, launched).ok());
    }
  }
  ASSERT_TRUE(t->reclaim(a, launched).ok());
  apply();
  EXPECT_EQ(a.free(), a.total()) << "every page came back";
  EXPECT_EQ(a.promised(), 0) << "every reservation came back";
  EXPECT_EQ(t->held_pages(), 0);
  EXPECT_EQ(t->retiring_pages(), 0);
  EXPECT_EQ(std::count(device.begin(), device.end(), -1), static_cast<long>(device.size()));
  // Not vacuous: many streams, some waited for pages, and pages were really shared over time.
  EXPECT_GT(admitted, 200);
  EXPECT_GT(waits, 0);
  EXPECT_GT(max_held, 20);
}

TEST(KvPageTable, RetiredPagesWaitForTheFramesInFlight) {
  KvPageAllocator a;
  ASSERT_TRUE(a.grow(4).ok());
  auto t = KvPageTable::create(2, 1, 4 * P);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(a.reserve(2));
  ASSERT_TRUE(t->hold(0, 2).ok());
  const std::vector<int64_t> rows = {P + 1};
  ASSERT_TRUE(t->admit(a, 0, rows).ok());
  EXPECT_EQ(t->held_pages(), 2);
  EXPECT_EQ(a.free(), 2);
  // Leaves after 5 launches, of which 4 were waited for: the fifth may still write its pages.
  ASSERT_TRUE(t->release(a, 0, 5).ok());
  EXPECT_EQ(t->retiring_pages(), 2);
  ASSERT_TRUE(t->reclaim(a, 4).ok());
  EXPECT_EQ(a.free(), 2) << "returned while a frame may still write them";
  ASSERT_TRUE(t->reclaim(a, 5).ok());
  EXPECT_EQ(a.free(), 4);
  EXPECT_EQ(t->retiring_pages(), 0);
}

TEST(KvPageTable, OutgrowingTheReservationIsAnError) {
  KvPageAllocator a;
  ASSERT_TRUE(a.grow(8).ok());
  auto t = KvPageTable::create(1, 1, 8 * P);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(a.reserve(2));
  ASSERT_TRUE(t->hold(0, 2).ok());
  const std::vector<int64_t> rows = {P};
  ASSERT_TRUE(t->admit(a, 0, rows).ok());
  EXPECT_TRUE(t->before_launch(a, P).ok()) << "positions up to 2P - 1: two pages";
  EXPECT_FALSE(t->before_launch(a, 1).ok()) << "a third page was never reserved";
  EXPECT_FALSE(t->hold(0, 1).ok()) << "an occupied slot";
  ASSERT_TRUE(t->release(a, 0, 0).ok());
  ASSERT_TRUE(t->reclaim(a, 0).ok());
  EXPECT_EQ(a.free(), 8);
  EXPECT_EQ(a.promised(), 0);
}

// A parked slot's frame is undone: it writes one row, at the position its next real frame writes
// (mapped for it), and does not advance, however many frames it sits out.
TEST(KvPageTable, AParkedSlotTakesOnlyThePageItsNextFrameWrites) {
  KvPageAllocator a;
  ASSERT_TRUE(a.grow(8).ok());
  auto t = KvPageTable::create(2, 1, 8 * P);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(a.reserve(2));
  ASSERT_TRUE(t->hold(0, 2).ok());
  const std::vector<int64_t> rows = {P};  // a full page of prompt: the next frame writes position P
  ASSERT_TRUE(t->admit(a, 0, rows).ok());
  EXPECT_EQ(t->slot_pages(0), 1);
  const std::vector<int32_t> parked = {0};
  for (int k = 0; k < 3 * P; ++k) ASSERT_TRUE(t->before_launch(a, 1, parked).ok()) << "parked launch " << k;
  EXPECT_EQ(t->slot_pages(0), 2) << "the page of position P, no more";
  EXPECT_GE(t->page(0, 1), 0);
  EXPECT_EQ(t->reserved(0), 0);
  // Still room for P real frames (positions P .. 2P − 1) and not one more.
  EXPECT_TRUE(t->before_launch(a, P).ok());
  EXPECT_FALSE(t->before_launch(a, 1).ok()) << "position 2P: a third page was never reserved";
  // Parked slots only in single launches, and only real slots.
  EXPECT_FALSE(t->before_launch(a, 2, parked).ok());
  const std::vector<int32_t> bad = {2};
  EXPECT_FALSE(t->before_launch(a, 1, bad).ok());
  ASSERT_TRUE(t->release(a, 0, 0).ok());
  ASSERT_TRUE(t->reclaim(a, 0).ok());
  EXPECT_EQ(a.free(), 8);
  EXPECT_EQ(a.promised(), 0);
}

// A stream moved to a lower free slot takes its pages, reservation and frame count along: its
// entries show the same pages under the new slot (and only there), it grows from its own
// reservation as before, and everything returns when it leaves.
TEST(KvPageTable, AMovedSlotKeepsItsPagesAndItsReservation) {
  KvPageAllocator a;
  ASSERT_TRUE(a.grow(8).ok());
  auto t = KvPageTable::create(4, 2, 4 * P);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(a.reserve(6));
  ASSERT_TRUE(t->hold(3, 6).ok());
  const std::vector<int64_t> rows = {P, 2};
  ASSERT_TRUE(t->admit(a, 3, rows).ok());
  ASSERT_TRUE(t->before_launch(a, 3).ok());  // branch 0 writes position P + 2: a second page
  (void)t->changes();
  const std::vector<int32_t> pages = {t->page(6, 0), t->page(6, 1), t->page(7, 0)};
  EXPECT_FALSE(t->move(3, 3).ok());
  EXPECT_FALSE(t->move(0, 1).ok()) << "slot 0 holds no stream";
  ASSERT_TRUE(t->move(3, 1).ok());
  EXPECT_FALSE(t->occupied(3));
  EXPECT_TRUE(t->occupied(1));
  EXPECT_EQ(t->slot_pages(1), 3);
  EXPECT_EQ(t->slot_pages(3), 0);
  EXPECT_EQ(t->reserved(1), 3);
  EXPECT_EQ(t->reserved(3), 0);
  EXPECT_EQ((std::vector<int32_t>{t->page(2, 0), t->page(2, 1), t->page(3, 0)}), pages);
  for (int64_t q : {6, 7})
    for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(t->page(q, i), -1) << "sequence " << q << " page " << i;
  // The device table learns both sides: the new entries and the old ones cleared.
  std::map<int64_t, int32_t> changed;
  for (const auto& [e, id] : t->changes()) changed[e] = id;
  EXPECT_EQ(changed.size(), 6u);
  EXPECT_EQ(changed[2 * 4 + 1], pages[1]);
  EXPECT_EQ(changed[6 * 4 + 1], -1);
  EXPECT_EQ(a.free() - a.promised(), 8 - 6);
  EXPECT_FALSE(t->move(1, 1).ok());
  ASSERT_TRUE(a.reserve(1));
  ASSERT_TRUE(t->hold(0, 1).ok());
  EXPECT_FALSE(t->move(1, 0).ok()) << "slot 0 holds a reservation";
  ASSERT_TRUE(t->release(a, 0, 0).ok());
  // P − 1 frames in all: branch 1 (2 prompt rows) crosses into its second page, branch 0 stays in two.
  ASSERT_TRUE(t->before_launch(a, P - 4).ok());
  EXPECT_EQ(t->slot_pages(1), 4);
  ASSERT_TRUE(t->release(a, 1, 0).ok());
  ASSERT_TRUE(t->reclaim(a, 0).ok());
  EXPECT_EQ(a.free(), 8);
  EXPECT_EQ(a.promised(), 0);
}

TEST(KvPageTable, CapacityMustBeWholePages) {
  EXPECT_FALSE(KvPageTable::create(1, 1, P + 1).ok());
  EXPECT_FALSE(KvPageTable::create(0, 1, P).ok());
  EXPECT_TRUE(KvPageTable::create(1, 1, P).ok());
}

}  // namespace
}  // namespace chorus::nn
