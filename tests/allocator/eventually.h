// For tests of work done on another thread (the allocator's BackgroundUnmapper).
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace gpumem::testing {

// Polls `done` every millisecond for up to 10 s; its last answer.
inline bool Eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 10000 && !done(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

}  // namespace gpumem::testing
