#pragma once
// Checkpoint writes in the background, coordinated over the ranks: start() (collective) prepares the
// temporary directory and sets every rank writing its own files on a thread of its own while training
// goes on; poll() (collective, once per step) publishes the checkpoint as soon as every rank is done;
// finish() (collective) waits for that. One write is in flight at a time.

#include <atomic>
#include <exception>
#include <string>
#include <thread>

#include "train/checkpoint.h"

namespace zaya {

class Communicator;

class CheckpointWriter {
 public:
  CheckpointWriter(std::string run_dir, int keep, Communicator& comm);
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Finishes the write in flight, then starts this one. Returns the directory it will be published as.
  std::string start(CheckpointSnapshot snapshot);
  void poll();
  // Throws Error (on every rank) when any rank's write failed; nothing is published then.
  void finish();

 private:
  std::string run_dir_;
  int keep_;
  Communicator& comm_;
  bool pending_ = false;  // the same on every rank: start() and finish() are collective
  int64_t step_ = 0;
  std::string temp_dir_;
  std::thread thread_;
  std::atomic<bool> done_{false};
  FileChecksums checksums_;
  std::string error_;
};

}  // namespace zaya
