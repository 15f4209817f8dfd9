// Pages handed from one process to another as file descriptors, over an abstract Unix
// socket (SCM_RIGHTS): how a CUDA tensor sent with torch.multiprocessing reaches the
// receiver. A descriptor cannot travel inside the handle string PyTorch pickles, so the
// sender answers on a socket named in the handle; only a process of the same user that
// presents a block's token gets its pages. Descriptors go over the socket rather than
// through pidfd_getfd, which ptrace rules (Yama) and container seccomp filters refuse.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "allocator/backend.h"

namespace gpumem::hooks::ipc {

// The pages to send a receiver that presents `token`; the server closes them once sent.
using PageSource = std::function<absl::StatusOr<std::vector<ExportedPage>>(absl::string_view token)>;

// Starts the thread that answers receivers (once per process, again in a forked child)
// and returns the socket's name. `source` is kept from the first call on.
absl::StatusOr<std::string> ServePages(PageSource source);

// Asks the process listening at `socket_name` for the pages under `token`. The caller owns
// the descriptors returned.
absl::StatusOr<std::vector<ExportedPage>> FetchPages(absl::string_view socket_name,
                                                     absl::string_view token);

// Closes each page's descriptor.
void ClosePages(const std::vector<ExportedPage>& pages);

}  // namespace gpumem::hooks::ipc
