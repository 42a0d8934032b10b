#include "train/checkpoint_writer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/communicator.h"

namespace zaya {
namespace fs = std::filesystem;
using nlohmann::json;

CheckpointWriter::CheckpointWriter(std::string run_dir, int keep, Communicator& comm)
    : run_dir_(std::move(run_dir)), keep_(keep), comm_(comm) {}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

std::string CheckpointWriter::start(CheckpointSnapshot snapshot) {
  finish();
  step_ = snapshot.state.step;
  temp_dir_ = checkpoint_temp_dir(run_dir_, step_);
  if (comm_.rank() == 0) {
    try {
      fs::remove_all(temp_dir_);
      fs::create_directories(temp_dir_);
    } catch (const fs::filesystem_error& e) {
      error_ = cat(temp_dir_, ": cannot create: ", e.code().message());
    }
  }
  comm_.barrier();  // the directory exists before any rank writes into it
  pending_ = true;
  done_ = false;
  thread_ = std::thread([this, snapshot = std::move(snapshot)] {
    try {
      if (error_.empty()) checksums_ = write_checkpoint_files(snapshot, temp_dir_);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    done_ = true;
  });
  return (fs::path(run_dir_) / "checkpoints" / ("step_" + std::to_string(step_))).string();
}

void CheckpointWriter::poll() {
  if (!pending_) return;
  int64_t busy = done_ ? 0 : 1;
  comm_.all_reduce_max(&busy, 1);
  if (busy == 0) finish();
}

void CheckpointWriter::finish() {
  if (!pending_) return;
  thread_.join();
  pending_ = false;
  // Every rank learns every rank's outcome, so that all throw together or rank 0 publishes.
  json mine = {{"error", error_}, {"files", json::array()}};
  for (const auto& [file, crc] : checksums_) mine["files"].push_back({file, crc});
  error_.clear();
  checksums_.clear();
  FileChecksums all;
  const std::vector<std::string> outcomes = comm_.all_gather_strings(mine.dump());
  for (size_t r = 0; r < outcomes.size(); ++r) {
    const json outcome = json::parse(outcomes[r]);
    const std::string error = outcome.at("error").get<std::string>();
    if (!error.empty()) {
      // The unfinished write is removed (a full disk gets its space back); published checkpoints are not
      // touched.
      std::error_code ignored;
      if (comm_.rank() == 0) fs::remove_all(temp_dir_, ignored);
      throw Error(cat("checkpoint at step ", step_, ": writing failed",
                      outcomes.size() > 1 ? cat(" on rank ", r) : std::string(), ": ", error));
    }
    for (const auto& file : outcome.at("files"))
      all.emplace_back(file[0].get<std::string>(), file[1].get<std::string>());
  }
  if (comm_.rank() == 0) publish_checkpoint(temp_dir_, step_, all, run_dir_, keep_);
  comm_.barrier();  // published before any rank goes on (a resume or an exit must see it)
}

}  // namespace zaya
