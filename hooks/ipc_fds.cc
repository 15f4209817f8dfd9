#include "hooks/ipc_fds.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"

namespace gpumem::hooks::ipc {
namespace {

// Descriptors per message: the kernel takes at most 253 in one SCM_RIGHTS message.
constexpr std::size_t kPagesPerMessage = 250;
constexpr std::size_t kMaxMessage = 16 * 1024;  // 250 sizes of up to 20 digits, and spaces
constexpr int kReceiveTimeoutSeconds = 60;  // either end waiting for the other

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// The address of an abstract socket: no file, gone with the process that listens on it.
socklen_t AbstractAddress(absl::string_view name, sockaddr_un* addr) {
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  const std::size_t n = std::min(name.size(), sizeof(addr->sun_path) - 1);
  std::memcpy(addr->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

absl::Status SendText(int sock, absl::string_view text) {
  if (send(sock, text.data(), text.size(), MSG_NOSIGNAL) < 0) return Errno("send");
  return absl::OkStatus();
}

// A message of one buffer, with `control` as the room for descriptors alongside.
msghdr MessageOf(iovec* iov, std::vector<char>* control) {
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control->data();
  msg.msg_controllen = control->size();
  return msg;
}

// One message: the pages' sizes as text, their descriptors alongside.
absl::Status SendChunk(int sock, absl::Span<const ExportedPage> pages) {
  std::string sizes = absl::StrJoin(pages, " ", [](std::string* out, const ExportedPage& p) {
    absl::StrAppend(out, p.bytes);
  });
  std::vector<char> control(CMSG_SPACE(sizeof(int) * pages.size()));
  iovec iov{sizes.data(), sizes.size()};
  msghdr msg = MessageOf(&iov, &control);
  cmsghdr* header = CMSG_FIRSTHDR(&msg);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int) * pages.size());
  auto* fds = reinterpret_cast<int*>(CMSG_DATA(header));
  for (std::size_t i = 0; i < pages.size(); ++i) fds[i] = pages[i].fd;
  if (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0) return Errno("sendmsg");
  return absl::OkStatus();
}

// Receives one SendChunk message, appending its pages to `out` (which owns them even when
// an error is returned).
absl::Status ReceiveChunk(int sock, std::vector<ExportedPage>* out) {
  std::vector<char> text(kMaxMessage);
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kPagesPerMessage));
  iovec iov{text.data(), text.size()};
  msghdr msg = MessageOf(&iov, &control);
  const ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  if (n < 0) return Errno("receiving pages from the sending process");
  if (n == 0) return absl::UnavailableError("the sending process closed the connection");
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const auto* data = reinterpret_cast<const int*>(CMSG_DATA(c));
    fds.insert(fds.end(), data, data + count);
  }
  const std::vector<absl::string_view> sizes =
      absl::StrSplit(absl::string_view(text.data(), static_cast<std::size_t>(n)), ' ');
  for (std::size_t i = 0; i < fds.size(); ++i) {
    std::size_t bytes = 0;
    if (i < sizes.size() && !absl::SimpleAtoi(sizes[i], &bytes)) bytes = 0;
    out->push_back({fds[i], bytes});
  }
  if ((msg.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) != 0 || sizes.size() != fds.size()) {
    return absl::DataLossError(absl::StrCat("a message of ", sizes.size(), " page sizes came with ",
                                            fds.size(), " descriptors"));
  }
  return absl::OkStatus();
}

// A block of many pages is held as that many descriptors at once, on both sides: let the
// process open as many as its hard limit allows (soft limits of 1,024 are common).
void AllowDescriptors(std::size_t pages) {
  constexpr std::size_t kSpare = 256;
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= pages + kSpare) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

// Serves one receiver: checks it is this user's, reads its token, sends the pages.
void Answer(int conn, const PageSource& source) {
  // One receiver at a time: one that stalls is dropped rather than holding up the rest.
  const timeval timeout{kReceiveTimeoutSeconds, 0};
  setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(conn, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  ucred peer{};
  socklen_t len = sizeof peer;
  if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != getuid()) {
    SendText(conn, "error the receiving process runs as another user").IgnoreError();
    return;
  }
  char token[256];
  const ssize_t n = recv(conn, token, sizeof token, 0);
  if (n <= 0) return;
  AllowDescriptors(kPagesPerMessage * 4);  // the size is not known before exporting
  absl::StatusOr<std::vector<ExportedPage>> pages =
      source(absl::string_view(token, static_cast<std::size_t>(n)));
  if (!pages.ok()) {
    SendText(conn, absl::StrCat("error ", pages.status().message())).IgnoreError();
    return;
  }
  absl::Status sent = SendText(conn, absl::StrCat("ok ", pages->size()));
  const absl::Span<const ExportedPage> all(*pages);
  for (std::size_t i = 0; sent.ok() && i < all.size(); i += kPagesPerMessage) {
    sent = SendChunk(conn, all.subspan(i, kPagesPerMessage));
  }
  ClosePages(*pages);
}

void Serve(int listener, PageSource source) {
  for (;;) {
    const int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    Answer(conn, source);
    close(conn);
  }
}

struct Serving {
  std::mutex mu;  // guards the fields below
  pid_t pid = 0;
  std::string name;
  PageSource source;
};
Serving& TheServer() {
  static Serving* serving = new Serving();  // never destroyed: its thread outlives main
  return *serving;
}

// Reads "ok N" (N pages follow) or "error why" from the sender.
absl::StatusOr<std::size_t> ReadAnswer(int sock) {
  char text[1024];
  const ssize_t n = recv(sock, text, sizeof text, 0);
  if (n < 0) return Errno("waiting for the sending process");
  const absl::string_view answer(text, static_cast<std::size_t>(n));
  std::size_t count = 0;
  if (absl::StartsWith(answer, "ok ") && absl::SimpleAtoi(answer.substr(3), &count)) return count;
  if (absl::StartsWith(answer, "error ")) {
    return absl::NotFoundError(absl::StrCat("the sending process refused: ", answer.substr(6)));
  }
  return absl::DataLossError("the sending process answered something that is not gpumem's");
}

}  // namespace

void ClosePages(const std::vector<ExportedPage>& pages) {
  for (const ExportedPage& page : pages) {
    if (page.fd >= 0) close(page.fd);
  }
}

absl::StatusOr<std::string> ServePages(PageSource source) {
  Serving& serving = TheServer();
  std::lock_guard<std::mutex> lock(serving.mu);
  if (serving.pid == getpid()) return serving.name;
  if (!serving.source) serving.source = std::move(source);
  // The pid names the process; the random part keeps two pid namespaces apart.
  std::random_device random;
  const std::string name = absl::StrFormat("gpumem-ipc-%d-%08x%08x", getpid(), random(), random());
  const int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (listener < 0) return Errno("socket for sending CUDA memory to other processes");
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(name, &addr);
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(listener, 64) != 0) {
    absl::Status failed = Errno("binding the socket that sends CUDA memory to other processes");
    close(listener);
    return failed;
  }
  std::thread(Serve, listener, serving.source).detach();
  serving.pid = getpid();
  serving.name = name;
  return name;
}

absl::StatusOr<std::vector<ExportedPage>> FetchPages(absl::string_view socket_name,
                                                     absl::string_view token) {
  const int sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0) return Errno("socket");
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{sock};
  const timeval timeout{kReceiveTimeoutSeconds, 0};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_un addr;
  const socklen_t len = AbstractAddress(socket_name, &addr);
  if (connect(sock, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Errno(absl::StrCat("cannot reach the process that sent the tensor (", socket_name,
                              "; it must still be running, on this machine)"));
  }
  if (absl::Status s = SendText(sock, token); !s.ok()) return s;
  absl::StatusOr<std::size_t> count = ReadAnswer(sock);
  if (!count.ok()) return count.status();
  AllowDescriptors(*count);
  std::vector<ExportedPage> pages;
  while (pages.size() < *count) {
    if (absl::Status s = ReceiveChunk(sock, &pages); !s.ok()) {
      ClosePages(pages);
      return s;
    }
  }
  if (pages.size() != *count) {
    ClosePages(pages);
    return absl::DataLossError(
        absl::StrCat("the sending process announced ", *count, " pages and sent ", pages.size()));
  }
  return pages;
}

}  // namespace gpumem::hooks::ipc
