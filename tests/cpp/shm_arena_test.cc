// The shared arena (core/transport/shm/arena.h): its allocator, its lifetime beyond the segment,
// and window allreduces that read a rank's part from its arena area instead of its window.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/store/memory_store.h"
#include "core/transport/backends.h"
#include "core/transport/shm/segment.h"
#include "tests/cpp/connect_options.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

using namespace std::chrono_literals;

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

bool allZero(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

TEST(SharedArena, AllocatesZeroedPagesAndCoalescesWhatIsFreed) {
  const size_t area = 16 * kPage;
  shm::Segment seg = shm::Segment::create(2, 4096, 256, area);
  seg.mapArena(seg.fd(), 1);
  shm::SharedArena& arena = *seg.arena();
  EXPECT_EQ(arena.bytesFree(), area);

  auto a = arena.allocate(1);
  auto b = arena.allocate(3 * kPage);
  auto c = arena.allocate(kPage + 1);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(arena.bytesFree(), area - 6 * kPage);  // whole pages
  for (const auto& block : {a, b, c}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block.get()) % kPage, 0u);
  }
  EXPECT_TRUE(arena.contains(b.get(), 3 * kPage));
  EXPECT_FALSE(arena.contains(b.get(), area));
  // Area 1 is this rank's; the area before it (rank 0's) is not.
  EXPECT_EQ(arena.offsetOf(a.get(), 1), static_cast<int64_t>(area));
  EXPECT_FALSE(arena.contains(static_cast<uint8_t*>(a.get()) - 1, 1));

  std::memset(b.get(), 0xab, 3 * kPage);
  b.reset();
  EXPECT_EQ(arena.bytesFree(), area - 3 * kPage);
  // Too large for any free run until the neighbours are freed and coalesce.
  EXPECT_FALSE(arena.allocate(14 * kPage));
  a.reset();
  c.reset();
  EXPECT_EQ(arena.bytesFree(), area);
  auto whole = arena.allocate(area);
  ASSERT_TRUE(whole);
  EXPECT_TRUE(allZero(whole.get(), area));  // the 0xab pages came back as zeros
  EXPECT_FALSE(arena.allocate(1));
}

TEST(SharedArena, ABlockOutlivesTheSegment) {
  shm::Segment seg = shm::Segment::create(1, 4096, 256, 4 * kPage);
  seg.mapArena(seg.fd(), 0);
  auto block = seg.arena()->allocate(kPage);
  ASSERT_TRUE(block);
  seg.release();
  EXPECT_FALSE(seg.arena());
  std::memset(block.get(), 1, kPage);  // still mapped: the block holds the arena
  EXPECT_EQ(static_cast<uint8_t*>(block.get())[kPage - 1], 1);
}

ConnectOptions arenaOptions(int rank, int size) {
  ConnectOptions o = test::loopbackOptions(rank, size, "shm-arena-test");
  o.shmWindowBytes = 256;  // 32 floats per part: pieces straddle parts
  o.shmArenaBytes = 4 * kPage;
  return o;
}

// How a rank lays out its pieces for one allreduce.
enum class Layout { Private, ArenaInOrder, ArenaOutOfOrder };

// Pieces in the arena are read there by the other ranks, pieces elsewhere are staged, and either
// way every rank gets the rank-ordered fold, bit for bit (these values round differently in any
// other order). The whole is larger than a shared payload, so that it goes to the windows.
TEST(ShmArena, PartsInTheArenaAreReadInPlaceWithTheSameResult) {
  const int n = 3;
  const std::vector<size_t> sizes{5, 7, 2100, 1};
  size_t count = 0;
  for (size_t s : sizes) count += s;
  auto value = [](int r, size_t i) {
    float big = 1e8f * static_cast<float>(1 + i % 3);
    return r == 0 ? big : r == 1 ? -big : 1.5f + static_cast<float>(i);
  };
  // Rank 2's first run keeps its pieces private, then puts them in its arena; rank 1 lays them
  // out of order there in the last run, which makes them staged too.
  const std::vector<std::vector<Layout>> runs{
      {Layout::ArenaInOrder, Layout::ArenaInOrder, Layout::Private},
      {Layout::ArenaInOrder, Layout::ArenaInOrder, Layout::ArenaInOrder},
      {Layout::ArenaInOrder, Layout::ArenaOutOfOrder, Layout::ArenaInOrder},
  };
  MemoryStore store;
  std::vector<Connection> conns(n);
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> counts(n);
  test::spawnRanks(n, [&](int rank) {
    conns[rank] = makeTransport("shm")->connect(arenaOptions(rank, n), store);
    Communicator& c = *conns[rank].world;
    auto pool = c.sharedPool();
    if (!pool) throw std::runtime_error("no shared pool over shared memory with windows");
    auto block = pool->allocate(count * sizeof(float));
    std::vector<float> privateData(count);
    for (const auto& run : runs) {
      const Layout layout = run[rank];
      auto* base =
          layout == Layout::Private ? privateData.data() : static_cast<float*>(block.get());
      std::vector<BufferPiece> pieces;
      std::vector<float*> where;
      size_t at = 0;
      for (size_t p = 0; p < sizes.size(); ++p) {
        // Out of order: the pieces in reverse order in memory, so no part is one run.
        size_t offset = at;
        if (layout == Layout::ArenaOutOfOrder) offset = count - at - sizes[p];
        where.push_back(base + offset);
        for (size_t i = 0; i < sizes[p]; ++i) where[p][i] = value(rank, at + i);
        pieces.push_back({where[p], sizes[p] * sizeof(float)});
        at += sizes[p];
      }
      c.allreducePieces(pieces, count, DataType::Float32, ReduceOp::Sum);
      at = 0;
      for (size_t p = 0; p < sizes.size(); at += sizes[p], ++p) {
        for (size_t i = 0; i < sizes[p]; ++i) {
          const float want = value(0, at + i) + value(1, at + i) + value(2, at + i);
          if (where[p][i] != want) {
            throw std::runtime_error("rank " + std::to_string(rank) + " piece " +
                                     std::to_string(p) + " element " + std::to_string(i) + ": " +
                                     std::to_string(where[p][i]) + " != " + std::to_string(want));
          }
        }
      }
      counts[rank].push_back({pool->partsReadInPlace(), pool->partsStaged()});
    }
  });
  // 2,113 floats in parts of 32: 67 parts per run, the last of one float. Out of order, every part
  // but the first lies in one piece, so in one run: only the first is staged.
  using Counts = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(counts[0], (Counts{{67, 0}, {134, 0}, {201, 0}}));
  EXPECT_EQ(counts[1], (Counts{{67, 0}, {134, 0}, {200, 1}}));
  EXPECT_EQ(counts[2], (Counts{{0, 67}, {67, 67}, {134, 67}}));
}

TEST(ShmArena, NoArenaWithoutAWindowOrWhenSetToZero) {
  for (auto [window, arena] : {std::pair<size_t, size_t>{0, 4096}, {256, 0}}) {
    MemoryStore store;
    test::spawnRanks(2, [&](int rank) {
      ConnectOptions o = arenaOptions(rank, 2);
      o.shmWindowBytes = window;
      o.shmArenaBytes = arena;
      Connection c = makeTransport("shm")->connect(o, store);
      if (c.world->sharedPool()) throw std::runtime_error("a pool that nothing would read");
    });
  }
}

}  // namespace
}  // namespace hora
