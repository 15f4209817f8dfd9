// Pages handed to another process over gpumem's socket (hooks/ipc_fds.h): descriptors
// arrive whole and in order, in messages of at most 250, in a forked process as in this
// one; a wrong token, or a sender that is gone, is refused with a reason.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hooks/ipc_fds.h"

namespace gpumem::hooks::ipc {
namespace {

constexpr int kPages = 600;  // three messages

// Page i: a memfd holding i, of i + 1 MiB "bytes".
absl::StatusOr<std::vector<ExportedPage>> Pages(absl::string_view token) {
  if (token != "right-token") return absl::NotFoundError("no block is shared under that token");
  std::vector<ExportedPage> pages;
  for (int i = 0; i < kPages; ++i) {
    const int fd = memfd_create("page", MFD_CLOEXEC);
    if (fd < 0 || pwrite(fd, &i, sizeof i, 0) != sizeof i) return absl::InternalError("memfd");
    pages.push_back({fd, static_cast<std::size_t>(i + 1) << 20});
  }
  return pages;
}

// The number of pages that came whole and in order (kPages when all did).
int PagesInOrder(const std::vector<ExportedPage>& pages) {
  int good = 0;
  for (int i = 0; i < static_cast<int>(pages.size()); ++i) {
    int held = -1;
    if (pread(pages[i].fd, &held, sizeof held, 0) != sizeof held || held != i ||
        pages[i].bytes != (static_cast<std::size_t>(i + 1) << 20)) {
      break;
    }
    ++good;
  }
  return good;
}

TEST(IpcFdsTest, AnotherProcessGetsEveryPageInOrder) {
  absl::StatusOr<std::string> name = ServePages(Pages);
  ASSERT_TRUE(name.ok()) << name.status();
  const pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<std::vector<ExportedPage>> pages = FetchPages(*name, "right-token");
    _exit(pages.ok() && PagesInOrder(*pages) == kPages ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(IpcFdsTest, ThisProcessToo) {
  absl::StatusOr<std::string> name = ServePages(Pages);
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(*ServePages(Pages), *name);  // one server per process
  absl::StatusOr<std::vector<ExportedPage>> pages = FetchPages(*name, "right-token");
  ASSERT_TRUE(pages.ok()) << pages.status();
  EXPECT_EQ(PagesInOrder(*pages), kPages);
  ClosePages(*pages);
}

TEST(IpcFdsTest, AWrongTokenIsRefusedWithTheSendersReason) {
  absl::StatusOr<std::string> name = ServePages(Pages);
  ASSERT_TRUE(name.ok());
  absl::StatusOr<std::vector<ExportedPage>> pages = FetchPages(*name, "stale-token");
  ASSERT_FALSE(pages.ok());
  EXPECT_THAT(std::string(pages.status().message()),
              ::testing::HasSubstr("refused: no block is shared under that token"));
}

TEST(IpcFdsTest, ASenderThatIsGoneIsNamed) {
  absl::StatusOr<std::vector<ExportedPage>> pages = FetchPages("gpumem-ipc-1-gone", "t");
  ASSERT_FALSE(pages.ok());
  EXPECT_THAT(std::string(pages.status().message()),
              ::testing::HasSubstr("cannot reach the process that sent the tensor"));
}

}  // namespace
}  // namespace gpumem::hooks::ipc
