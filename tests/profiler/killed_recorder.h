// Records into a trace from a child process that exits without closing its recorder, as
// a killed run does: what it recorded is in the file's journal only.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include "profiler/recorder.h"

namespace gpumem::testing {

// True if the child opened the recorder, ran `record` and exited.
template <typename Record>
bool RecordInKilledChild(const RecorderOptions& options, Record record) {
  const pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    auto recorder = Recorder::Open(options);
    if (!recorder.ok()) _exit(1);
    record(recorder->get());
    _exit(0);  // no close
  }
  int status = 0;
  return waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace gpumem::testing
