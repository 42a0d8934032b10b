#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include "core/error.h"

namespace zaya {

RunLock::RunLock(const std::string& run_dir) {
  const std::string path = run_dir + "/.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot create the run lock").file(path);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0)
    throw Error("another zaya process is training in this run directory").file(run_dir);
}

RunLock::~RunLock() {
  ::close(fd_);
}

}  // namespace zaya
