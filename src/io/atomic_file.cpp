#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace zaya {

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  temp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(cat("cannot create: ", std::strerror(errno))).file(path_);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  const char* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::write(fd_, cursor, bytes);
    if (written < 0) {
      if (errno == EINTR) continue;
      throw Error(cat("write failed: ", std::strerror(errno))).file(path_);
    }
    cursor += written;
    bytes -= size_t(written);
  }
}

void AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0) throw Error(cat("fsync failed: ", std::strerror(errno))).file(path_);
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    throw Error(cat("rename failed: ", std::strerror(errno))).file(path_);
  }
  committed_ = true;
  const std::string parent = std::filesystem::path(path_).parent_path().string();
  sync_directory(parent.empty() ? "." : parent);
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFileWriter writer(path);
  writer.write(contents);
  writer.commit();
}

std::string read_text_file(const std::string& path) {
  std::error_code ignored;
  if (std::filesystem::is_directory(path, ignored)) throw Error("is a directory, expected a file").file(path);
  if (std::filesystem::exists(path, ignored)) {
    if (!std::filesystem::is_regular_file(path, ignored)) throw Error("is not a regular file").file(path);
    if (const uintmax_t size = std::filesystem::file_size(path, ignored); size > kMaxTextFileBytes) {
      throw Error(cat("is ", size, " bytes, more than the ", kMaxTextFileBytes >> 20,
                      " MiB that zaya reads into memory whole"))
          .file(path);
    }
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(cat("cannot open: ", std::strerror(errno))).file(path);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) throw Error("read failed").file(path);
  return contents.str();
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some filesystems do not allow opening directories
  ::fsync(fd);
  ::close(fd);
}

}  // namespace zaya
