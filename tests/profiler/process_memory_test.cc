// NVML's figures of a device's processes: this process told from the others, NVML's
// "not available" and a list that grows between two calls, failures as "cannot say"; the
// note that carries them in a trace, both ways; when a step end reads them.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "profiler/process_memory.h"
#include "profiler/process_note.h"

namespace gpumem {
namespace {

struct Info {  // nvmlProcessInfo_t
  unsigned int pid;
  unsigned long long used;
  unsigned int gpu_instance;
  unsigned int compute_instance;
};

std::vector<Info> g_listed;
int g_handle_rc = 0;
int g_calls = 0;

int HandleByBusId(const char* bus_id, NvmlCalls::Device* device) {
  EXPECT_STREQ(bus_id, "0000:3b:00.0");
  *device = &g_listed;
  return g_handle_rc;
}

int RunningProcesses(NvmlCalls::Device, unsigned* count, void* infos) {
  ++g_calls;
  if (*count < g_listed.size()) {
    *count = static_cast<unsigned>(g_listed.size());
    return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  }
  std::memcpy(infos, g_listed.data(), g_listed.size() * sizeof(Info));
  *count = static_cast<unsigned>(g_listed.size());
  return 0;
}

NvmlCalls Fake() {
  NvmlCalls calls;
  calls.handle_by_bus_id = &HandleByBusId;
  calls.running_processes = &RunningProcesses;
  return calls;
}
const NvmlCalls kFake = Fake();

class ProcessMemoryTest : public testing::Test {
 protected:
  void SetUp() override {
    g_listed.clear();
    g_handle_rc = 0;
    g_calls = 0;
  }
};

TEST_F(ProcessMemoryTest, ThisProcessApartFromTheOthers) {
  g_listed = {{100, 5000, 0, 0}, {200, 700, 0, 0}, {300, ~0ull, 0, 0}};
  const std::optional<DeviceProcesses> p = ProcessesOnDevice(kFake, "0000:3b:00.0", 100);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->self, 5000u);
  ASSERT_EQ(p->others.size(), 2u);
  EXPECT_EQ(p->others[0].pid, 200u);
  EXPECT_EQ(p->others[1].bytes, 0u);  // "not available" counts as nothing
  EXPECT_EQ(p->others_bytes(), 700u);
}

// Under MIG NVML lists every instance's processes; only this one's share its memory.
TEST_F(ProcessMemoryTest, OtherMigInstancesAreNotOnThisDevice) {
  g_listed = {{100, 5000, 1, 0}, {200, 700, 1, 0}, {300, 900, 2, 0}};
  const std::optional<DeviceProcesses> p = ProcessesOnDevice(kFake, "0000:3b:00.0", 100);
  ASSERT_TRUE(p);
  ASSERT_EQ(p->others.size(), 1u);
  EXPECT_EQ(p->others[0].pid, 200u);
}

TEST_F(ProcessMemoryTest, UnlistedSelfIsUnknownNotZero) {
  g_listed = {{200, 700, 0, 0}};
  const std::optional<DeviceProcesses> p = ProcessesOnDevice(kFake, "0000:3b:00.0", 100);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->self, std::nullopt);  // a PID namespace numbers it otherwise
  EXPECT_EQ(p->others_bytes(), 700u);
}

TEST_F(ProcessMemoryTest, MoreProcessesThanTheFirstArrayHolds) {
  for (unsigned pid = 1; pid <= 40; ++pid) g_listed.push_back({pid, pid * 10ull, 0, 0});
  const std::optional<DeviceProcesses> p = ProcessesOnDevice(kFake, "0000:3b:00.0", 7);
  ASSERT_TRUE(p);
  EXPECT_EQ(g_calls, 2);
  EXPECT_EQ(p->self, 70u);
  EXPECT_EQ(p->others.size(), 39u);
}

TEST_F(ProcessMemoryTest, FailuresCannotSay) {
  g_handle_rc = 13;  // NVML_ERROR_NOT_FOUND
  EXPECT_EQ(ProcessesOnDevice(kFake, "0000:3b:00.0", 1), std::nullopt);
  // No driver and no NVML here (the CPU machines): nothing to read, nothing loaded.
  EXPECT_EQ(SampleProcessMemory(0), std::nullopt);
}

TEST(ProcessNote, RoundTrip) {
  format::ProcessNote note;
  note.step = 12;
  note.processes.self = 13350000000;
  note.processes.others = {{4242, 643825664}, {77, 2}};
  const std::string text = format::ProcessNoteText(note);
  EXPECT_EQ(text,
            "gpumem: device memory by process: step=12 self=13350000000 "
            "others=4242:643825664,77:2");
  const std::optional<format::ProcessNote> back = format::ParseProcessNote(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->step, 12u);
  EXPECT_EQ(back->processes.self, 13350000000u);
  ASSERT_EQ(back->processes.others.size(), 2u);
  EXPECT_EQ(back->processes.others[0].pid, 4242u);
  EXPECT_EQ(back->processes.others[1].bytes, 2u);
}

TEST(ProcessNote, UnknownSelfAndNoOthers) {
  format::ProcessNote note;
  note.step = 3;
  const std::string text = format::ProcessNoteText(note);
  EXPECT_EQ(text, "gpumem: device memory by process: step=3 self=? others=");
  const std::optional<format::ProcessNote> back = format::ParseProcessNote(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->processes.self, std::nullopt);
  EXPECT_TRUE(back->processes.others.empty());
}

TEST(ProcessNote, AnythingElseIsNotANote) {
  for (const char* text : {"Optimizer.step#SGD.step", "gpumem: device memory by process: ",
                           "gpumem: device memory by process: step=x self=1 others=",
                           "gpumem: device memory by process: step=1 self=1 others=5",
                           "gpumem: device memory by process: step=1 self=-1 others=",
                           "gpumem: device memory by process: step=1 self=1 others=1:2 extra"}) {
    EXPECT_EQ(format::ParseProcessNote(text), std::nullopt) << text;
  }
}

TEST(ProcessReadSchedule, ReadsWhereTheDeviceHasItsMostInUse) {
  ProcessReadSchedule schedule;
  EXPECT_TRUE(schedule.Due(0, 1000));
  EXPECT_FALSE(schedule.Due(0, 1000));  // steady
  EXPECT_FALSE(schedule.Due(0, 900));   // freed
  EXPECT_TRUE(schedule.Due(0, 1001));   // a new most
  EXPECT_TRUE(schedule.Due(1, 10));     // each device on its own
  EXPECT_FALSE(schedule.Due(1, 10));
  EXPECT_FALSE(schedule.Due(0, 1001));
}

}  // namespace
}  // namespace gpumem
