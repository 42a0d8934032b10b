#pragma once
// Helpers shared by the unit tests: a scratch directory per test, fixture paths, a one-process step.

#include <memory>
#include <string>

namespace zaya {
class BalancingController;
class Communicator;
class Optimizer;
class TrainStep;
class DeviceCommunicator;
class ZayaModel;
}  // namespace zaya

namespace zaya::test {

// tests/fixtures/<relative>
std::string fixture(const std::string& relative);

// A fresh, empty directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A training step on one process (comm of one rank): the optimizer owns both regions of the layout whole.
std::unique_ptr<TrainStep> one_process_train_step(ZayaModel& model, Optimizer& optimizer,
                                                  BalancingController& balancing, DeviceCommunicator& comm);

void write_bytes(const std::string& path, const std::string& bytes);
std::string read_bytes(const std::string& path);

}  // namespace zaya::test
