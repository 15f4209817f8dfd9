// A tensor's block sent to another process through the C ABI (gpumem_ipc_share /
// gpumem_ipc_open / gpumem_ipc_close), on the stand-in driver: both ends in this process,
// which the stand-in allows (its exported pages are readable only here). The same pages
// are mapped again and given back; a freed block, a closed mapping and a handle that is
// not gpumem's are refused with a reason. Two real processes: tests/gpu/compat_cases.py.
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/gpumem.h"
#include "tests/cuda_fake/fake_cuda.h"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

FakeCudaCounters Fake() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto fn = lib ? reinterpret_cast<FakeCudaCountersFn>(dlsym(lib, "fake_cuda_counters")) : nullptr;
  return fn ? fn() : FakeCudaCounters{};
}

std::string LastError() {
  char buf[1024];
  const std::size_t n = gpumem_last_error(buf, sizeof buf);
  return std::string(buf, n);
}

class IpcCApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("GPUMEM_BACKEND", "vmm", 1);
    setenv("GPUMEM_PAGE_SIZE", "2M", 1);  // the stand-in maps 2 MiB pages only
  }
};

TEST_F(IpcCApiTest, ABlockIsMappedAgainFromItsHandleAndGivenBack) {
  void* block = gpumem_alloc(5 * kMiB, 0, nullptr);
  ASSERT_NE(block, nullptr) << LastError();
  char handle[GPUMEM_IPC_HANDLE_MAX];
  std::size_t offset = 99;
  const std::size_t len = gpumem_ipc_share(block, 0, -1, handle, sizeof handle, &offset);
  ASSERT_GT(len, 0u) << LastError();
  EXPECT_LT(offset, 2 * kMiB);
  char again[GPUMEM_IPC_HANDLE_MAX];
  std::size_t offset_again = 0;
  ASSERT_EQ(gpumem_ipc_share(block, 5 * kMiB, 0, again, sizeof again, &offset_again), len);
  EXPECT_EQ(std::string(again, len), std::string(handle, len));  // PyTorch caches by handle
  EXPECT_EQ(offset_again, offset);

  const FakeCudaCounters before = Fake();
  void* base = gpumem_ipc_open(handle, len);
  ASSERT_NE(base, nullptr) << LastError();
  const std::uint64_t pages = Fake().live_mappings - before.live_mappings;
  EXPECT_EQ(pages, (offset + 5 * kMiB + 2 * kMiB - 1) / (2 * kMiB));  // the pages under it
  EXPECT_EQ(Fake().handles_mapped_twice, before.handles_mapped_twice + pages);
  EXPECT_EQ(gpumem_ipc_close(base), 0) << LastError();
  EXPECT_EQ(Fake().live_mappings, before.live_mappings);
  EXPECT_EQ(gpumem_ipc_close(base), -1);
  EXPECT_THAT(LastError(), ::testing::HasSubstr("not an address gpumem mapped"));

  gpumem_free(block, 0, 0, nullptr);
  EXPECT_EQ(gpumem_ipc_open(handle, len), nullptr);
  EXPECT_THAT(LastError(), ::testing::HasSubstr("freed since it was sent"));
  EXPECT_EQ(Fake().released_while_mapped, 0u);
}

// Threads that send the same block at once hand out one handle, and it opens.
TEST_F(IpcCApiTest, ThreadsSharingOneBlockAtOnceGetOneHandle) {
  void* block = gpumem_alloc(3 * kMiB, 0, nullptr);
  ASSERT_NE(block, nullptr) << LastError();
  constexpr int kThreads = 4;
  std::vector<std::string> handles(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      char handle[GPUMEM_IPC_HANDLE_MAX];
      const std::size_t len = gpumem_ipc_share(block, 0, -1, handle, sizeof handle, nullptr);
      handles[t] = std::string(handle, len);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& h : handles) EXPECT_EQ(h, handles[0]);
  ASSERT_FALSE(handles[0].empty());
  void* base = gpumem_ipc_open(handles[0].data(), handles[0].size());
  ASSERT_NE(base, nullptr) << LastError();
  EXPECT_EQ(gpumem_ipc_close(base), 0);
  gpumem_free(block, 0, 0, nullptr);
}

TEST_F(IpcCApiTest, AHandleThatIsNotGpumemsSaysBothEndsNeedGpumem) {
  const std::string native(66, 'c');  // PyTorch's own handles start with a version byte
  EXPECT_EQ(gpumem_ipc_open(native.data(), native.size()), nullptr);
  EXPECT_THAT(LastError(), ::testing::HasSubstr("must run gpumem's allocator too"));
  EXPECT_EQ(gpumem_ipc_open(nullptr, 0), nullptr);
}

TEST_F(IpcCApiTest, MemoryThatIsNoLiveBlockCannotBeShared) {
  char handle[GPUMEM_IPC_HANDLE_MAX];
  int stack_value = 0;
  EXPECT_EQ(gpumem_ipc_share(&stack_value, 0, -1, handle, sizeof handle, nullptr), 0u);
  EXPECT_THAT(LastError(), ::testing::HasSubstr("is not a live block of gpumem's allocator"));
}

}  // namespace
