// select_device, the one door to a device: what "auto" and a named device give with and without a GPU
// backend registered, which GPU a rank takes; and make_device_communicator, the choice of a run's device
// collectives.

#include <gtest/gtest.h>

#include <string>

#include "backend/devices.h"
#include "backend/ops.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"

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
int eight_count() {
  return 8;
}
int64_t fake_memory() {
  return int64_t(80) << 30;
}
int used_device = -1;  // the last GPU the stand-in backend was told to use
void fake_use_device(int index) {
  used_device = index;
}

// A stand-in for NCCL: available or not as the test sets it, and its communicator a host one renamed.
std::string nccl_missing;
std::string fake_collectives_unavailable(int) {
  return nccl_missing;
}
class FakeNccl final : public DeviceCommunicator {
 public:
  explicit FakeNccl(Communicator& host) : host_(host) {}
  Communicator& host() override { return host_; }
  std::string engine() const override { return "fake nccl"; }
  std::unique_ptr<PendingCollective> start_reduce_scatter_sum(const float*, float*,
                                                              std::vector<int64_t>) override {
    return nullptr;
  }
  void all_gather(float*, const std::vector<int64_t>&) override {}
  void all_to_all(const float*, const std::vector<int64_t>&, float*, const std::vector<int64_t>&) override {}

 private:
  Communicator& host_;
};
std::unique_ptr<DeviceCommunicator> fake_make_collectives(Communicator& host) {
  return std::make_unique<FakeNccl>(host);
}

// A stand-in GPU backend: its ops are the CPU's (select_device only hands them on), its language the
// emulator's. Taken away again after each test, so no other test sees a GPU.
class DevicesTest : public ::testing::Test {
 protected:
  void register_fake(int (*count)()) {
    register_gpu_backend({"emulated", &cpu_ops, count, fake_name, fake_memory, fake_use_device, "nccl",
                          fake_collectives_unavailable, fake_make_collectives});
  }
  void TearDown() override { register_gpu_backend({}); }
};

std::string error_of(const std::string& setting) {
  try {
    select_device(setting, "--device");
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

// Each rank of a machine takes its own GPU (the local rank's), and the run's log says which.
TEST_F(DevicesTest, ARankTakesTheGpuOfItsLocalRank) {
  register_fake(eight_count);
  const Device third = select_device("auto", "run.device", 2);
  EXPECT_EQ(used_device, 2);
  EXPECT_EQ(third.index, 2);
  EXPECT_EQ(third.description, "emulated: Fake GPU (GPU 2 of 8)");
  select_device("emulated", "run.device", 9);  // more ranks than GPUs: they share, in turn
  EXPECT_EQ(used_device, 1);
  register_fake(present_count);
  EXPECT_EQ(select_device("auto", "run.device", 1).description, "emulated: Fake GPU");
}

std::string communicator_error(const std::string& setting, const Device& device) {
  const std::unique_ptr<Communicator> host = make_single_process_communicator();
  try {
    make_device_communicator(setting, device, *host, "run.communicator");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(DevicesTest, TheCpuTakesTheHostCollectivesAndRefusesNccl) {
  const Device cpu = select_device("cpu", "run.device");
  const std::unique_ptr<Communicator> host = make_single_process_communicator();
  for (const char* setting : {"auto", "mpi"})
    EXPECT_EQ(make_device_communicator(setting, cpu, *host, "run.communicator")->engine(), "mpi") << setting;
  EXPECT_NE(communicator_error("nccl", cpu).find("field 'run.communicator': nccl moves data between GPUs"),
            std::string::npos);
  EXPECT_NE(communicator_error("gloo", cpu).find("field 'run.communicator': expected \"auto\""),
            std::string::npos);
}

TEST_F(DevicesTest, AGpuTakesNcclWhereItCanAndSaysWhyNotOtherwise) {
  register_fake(present_count);
  const Device gpu = select_device("emulated", "run.device");
  const std::unique_ptr<Communicator> host = make_single_process_communicator();
  std::string note = "stale";
  nccl_missing = "";
  EXPECT_EQ(make_device_communicator("auto", gpu, *host, "run.communicator", &note)->engine(), "fake nccl");
  EXPECT_EQ(note, "");
  EXPECT_EQ(make_device_communicator("nccl", gpu, *host, "run.communicator")->engine(), "fake nccl");
  EXPECT_EQ(make_device_communicator("mpi", gpu, *host, "run.communicator")->engine(),
            "mpi, staged through host memory");

  nccl_missing = "libnccl.so.2 cannot be loaded";
  EXPECT_EQ(make_device_communicator("auto", gpu, *host, "run.communicator", &note)->engine(),
            "mpi, staged through host memory");
  EXPECT_EQ(note, "libnccl.so.2 cannot be loaded");
  const std::string refused = communicator_error("nccl", gpu);
  EXPECT_NE(refused.find("field 'run.communicator': nccl cannot run here: libnccl.so.2 cannot be loaded; "
                         "choose mpi"),
            std::string::npos)
      << refused;
  nccl_missing = "";
}

}  // namespace
}  // namespace zaya
