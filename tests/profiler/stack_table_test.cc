// StackTable's lookups: the per-thread cache in front of the shared table answers only
// for the table and the stack it saw, and the hash the Python walk folds in is the one
// the table uses.
#include "profiler/stack_table.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace gpumem {
namespace {

std::vector<RawFrame> PythonStack(std::uint64_t site, std::size_t depth) {
  std::vector<RawFrame> frames;
  for (std::size_t i = 0; i < depth; ++i) {
    frames.push_back(RawFrame{0x7f0000001000 + 0x100 * i, static_cast<std::uint32_t>(site + i),
                              RawFrame::kPythonLastiTag});
  }
  return frames;
}

TEST(StackTableTest, IncrementalHashIsTheTablesHash) {
  const std::vector<RawFrame> s = PythonStack(7, 30);
  FrameHasher h;
  for (const RawFrame& f : s) h.Add(f);
  EXPECT_EQ(h.Finish(s.size()), HashFrames(s.data(), s.size()));
  std::vector<RawFrame> swapped = s;
  std::swap(swapped[3], swapped[4]);
  EXPECT_NE(HashFrames(swapped.data(), swapped.size()), HashFrames(s.data(), s.size()));
  EXPECT_NE(HashFrames(s.data(), s.size() - 1), HashFrames(s.data(), s.size()));
}

TEST(StackTableTest, FindAnswersOnlyForInternedStacks) {
  StackTable table;
  const std::vector<RawFrame> a = PythonStack(1, 30), b = PythonStack(2, 30);
  EXPECT_EQ(table.Find(a.data(), a.size()), 0u);
  const std::uint32_t id = table.Intern(a.data(), a.size());
  ASSERT_NE(id, 0u);
  EXPECT_EQ(table.Find(a.data(), a.size()), id);
  EXPECT_EQ(table.Find(a.data(), a.size(), HashFrames(a.data(), a.size())), id);
  EXPECT_EQ(table.Find(b.data(), b.size()), 0u);
  EXPECT_EQ(table.Find(a.data(), a.size() - 1), 0u);  // a prefix is another stack
  EXPECT_EQ(table.Intern(a.data(), a.size()), id);
}

// More stacks than the per-thread cache has slots: evicted and colliding entries must
// fall back to the table, never answer with another stack's id.
TEST(StackTableTest, ManyStacksKeepTheirIds) {
  StackTable table;
  constexpr int kStacks = 5000;
  std::vector<std::uint32_t> ids;
  for (int i = 0; i < kStacks; ++i) {
    const std::vector<RawFrame> s = PythonStack(static_cast<std::uint64_t>(i) * 64, 1 + i % 40);
    ids.push_back(table.Intern(s.data(), s.size()));
  }
  for (int round = 0; round < 2; ++round) {
    for (int i = kStacks - 1; i >= 0; --i) {
      const std::vector<RawFrame> s =
          PythonStack(static_cast<std::uint64_t>(i) * 64, 1 + i % 40);
      ASSERT_EQ(table.Find(s.data(), s.size()), ids[i]) << i;
    }
  }
  EXPECT_EQ(table.stack_count(), static_cast<std::size_t>(kStacks));
}

// A table made where a dead one lay must not inherit the dead one's cached ids.
TEST(StackTableTest, ANewTableDoesNotSeeAnOldTablesStacks) {
  const std::vector<RawFrame> a = PythonStack(3, 20), b = PythonStack(4, 20);
  auto first = std::make_unique<StackTable>();
  ASSERT_NE(first->Intern(b.data(), b.size()), 0u);
  const std::uint32_t old_a = first->Intern(a.data(), a.size());
  ASSERT_EQ(first->Find(a.data(), a.size()), old_a);
  first.reset();
  auto second = std::make_unique<StackTable>();
  EXPECT_EQ(second->Find(a.data(), a.size()), 0u);
  EXPECT_EQ(second->Intern(a.data(), a.size()), 1u);  // its own first stack
}

TEST(StackTableTest, ThreadsAgreeOnIds) {
  StackTable table;
  constexpr int kThreads = 4, kStacks = 300;
  std::vector<std::vector<std::uint32_t>> seen(kThreads, std::vector<std::uint32_t>(kStacks));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < kStacks; ++i) {
          const int k = (i * 7 + t * 13) % kStacks;
          const std::vector<RawFrame> s = PythonStack(static_cast<std::uint64_t>(k) * 64, 25);
          const std::uint32_t id = round == 0 ? table.Intern(s.data(), s.size())
                                              : table.Find(s.data(), s.size());
          if (round > 0) {
            ASSERT_EQ(id, seen[t][k]);
          }
          seen[t][k] = id;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(seen[t], seen[0]);
  EXPECT_EQ(table.stack_count(), static_cast<std::size_t>(kStacks));
}

}  // namespace
}  // namespace gpumem
