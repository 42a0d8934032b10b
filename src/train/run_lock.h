#pragma once
// An exclusive lock on RUN/.lock for the life of a run: two processes training into one directory would
// overwrite each other's checkpoints. The kernel drops it when the process dies, however it dies.

#include <string>

namespace zaya {

class RunLock {
 public:
  explicit RunLock(const std::string& run_dir);  // throws Error when another process holds it
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace zaya
