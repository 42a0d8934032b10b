// select_device, the one door to a device: what "auto" and a named device give with and without a GPU
// backend registered, and the refusal of a GPU for work only the CPU backend has.

#include <gtest/gtest.h>

#include <string>

#include "backend/devices.h"
#include "backend/ops.h"
#include "core/error.h"

namespace zaya {
namespace {

int present_count() {
  return 1;
}
int absent_count() {
  return 0;
}
int failing_count() {
  throw Error("the emulated runtime cannot count this machine's GPUs: driver too old");
}
std::string fake_name() {
  return "Fake GPU";
}
int64_t fake_memory() {
  return int64_t(80) << 30;
}

// A stand-in GPU backend: its ops are the CPU's (select_device only hands them on), its language the
// emulator's. Taken away again after each test, so no other test sees a GPU.
class DevicesTest : public ::testing::Test {
 protected:
  void register_fake(int (*count)()) {
    register_gpu_backend({"emulated", &cpu_ops, count, fake_name, fake_memory});
  }
  void TearDown() override { register_gpu_backend({}); }
};

std::string error_of(const std::string& setting, const char* host_only_work = nullptr) {
  try {
    select_device(setting, "--device", host_only_work);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(DevicesTest, WithoutABackendAutoIsTheCpuAndAGpuIsRefused) {
  EXPECT_EQ(select_device("auto", "--device").name, "cpu");
  EXPECT_EQ(select_device("cpu", "--device").ops, &cpu_ops());
  EXPECT_GT(select_device("cpu", "--device").memory_bytes, int64_t(1) << 28);  // the machine's RAM
  EXPECT_NE(error_of("cuda").find("field '--device': this zaya was built without a GPU backend"),
            std::string::npos)
      << error_of("cuda");
  EXPECT_NE(error_of("tpu").find("expected \"auto\""), std::string::npos) << error_of("tpu");
}

TEST_F(DevicesTest, AutoTakesAPresentGpu) {
  register_fake(present_count);
  const Device device = select_device("auto", "run.device");
  EXPECT_EQ(device.name, "emulated");
  EXPECT_EQ(device.description, "emulated: Fake GPU");
  EXPECT_EQ(device.memory_bytes, int64_t(80) << 30);
  EXPECT_FALSE(device.on_host());
  EXPECT_EQ(select_device("emulated", "run.device").name, "emulated");
  EXPECT_NE(error_of("cuda").find("built with the emulated GPU backend, not cuda"), std::string::npos);
}

TEST_F(DevicesTest, AutoTakesTheCpuWhenNoGpuIsPresent) {
  register_fake(absent_count);
  EXPECT_EQ(select_device("auto", "--device").name, "cpu");
  EXPECT_NE(error_of("emulated").find("no emulated device is present on this machine"), std::string::npos);
}

// A driver that is there but fails is a fault to fix: "auto" must not quietly take the CPU for it.
TEST_F(DevicesTest, AFailingDriverIsReportedNotTakenForNoGpu) {
  register_fake(failing_count);
  const std::string error = error_of("auto");
  EXPECT_NE(error.find("field '--device': the emulated runtime cannot count this machine's GPUs: driver too "
                       "old; choose cpu"),
            std::string::npos)
      << error;
  EXPECT_EQ(select_device("cpu", "--device").name, "cpu");
}

TEST_F(DevicesTest, WorkOnlyTheCpuHasKeepsAutoOnTheCpuAndRefusesANamedGpu) {
  register_fake(present_count);
  EXPECT_EQ(select_device("auto", "--device", "decoding").name, "cpu");
  EXPECT_EQ(select_device("cpu", "--device", "decoding").name, "cpu");
  const std::string refused = error_of("emulated", "decoding");
  EXPECT_NE(refused.find("field '--device': the emulated backend cannot run decoding yet"), std::string::npos)
      << refused;
  EXPECT_EQ(refused.find('\n'), std::string::npos);
}

}  // namespace
}  // namespace zaya
