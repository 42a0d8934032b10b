#include "unit/test_util.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "optim/optimizer.h"
#include "train/train_step.h"

namespace zaya::test {

std::string fixture(const std::string& relative) {
  return std::string(ZAYA_FIXTURES_DIR) + "/" + relative;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "zaya_test_XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::unique_ptr<TrainStep> one_process_train_step(ZayaModel& model, Optimizer& optimizer,
                                                  BalancingController& balancing, DeviceCommunicator& comm) {
  const ParameterTable& table = model.params().table();
  const auto& assignments = optimizer.assignments();
  return std::make_unique<TrainStep>(
      model, optimizer, balancing,
      ShardedRegion{&comm, plan_optimizer_shards(assignments, 0, table.dense_floats(), 1)},
      ShardedRegion{&comm, plan_optimizer_shards(assignments, table.dense_floats(), table.total_floats(), 1)},
      0);
}

}  // namespace zaya::test
