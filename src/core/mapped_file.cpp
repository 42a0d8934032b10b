#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace zaya {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(cat("cannot open: ", std::strerror(errno))).file(path);
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw Error("not a regular file").file(path);
  }
  size_ = size_t(info.st_size);
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data_ == MAP_FAILED) {
      data_ = nullptr;
      const int saved = errno;
      ::close(fd);
      throw Error(cat("cannot map: ", std::strerror(saved))).file(path);
    }
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

void MappedFile::drop_pages(size_t offset, size_t count) const {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const size_t first = (offset + page - 1) / page * page, end = std::min(offset + count, size_) / page * page;
  // Advice only: a mapping that keeps its pages is still correct, so a failure is not an error.
  if (data_ && first < end) ::madvise(static_cast<char*>(data_) + first, end - first, MADV_DONTNEED);
}

void MappedFile::release() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace zaya
