#include "tools/cli/doctor/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

extern char** environ;

namespace gpumem::cli::doctor {
namespace {

// Reads `fd` until EOF or the deadline; false when the deadline passed first.
bool ReadAll(int fd, int timeout_ms, std::string* out) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r == 0) return false;
    if (r < 0) continue;  // EINTR
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return true;
    out->append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

bool OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (dir.empty()) continue;
    std::string file = std::string(dir) + "/" + name;
    if (access(file.c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::optional<Output> RunCapture(const std::vector<std::string>& argv, int timeout_ms,
                                 bool keep_stderr) {
  if (argv.empty() || (argv[0].find('/') == std::string::npos && !OnPath(argv[0]))) {
    return std::nullopt;
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  if (!keep_stderr) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int spawned = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (spawned != 0) {
    close(pipe_fds[0]);
    return std::nullopt;
  }
  Output out;
  bool finished = ReadAll(pipe_fds[0], timeout_ms, &out.stdout_text);
  close(pipe_fds[0]);
  if (!finished) kill(pid, SIGKILL);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (finished && WIFEXITED(wstatus)) out.exit_code = WEXITSTATUS(wstatus);
  return out;
}

}  // namespace gpumem::cli::doctor
