#pragma once
// A read-only memory map of a whole file: the zero-copy path for safetensors weights and token datasets.

#include <cstddef>
#include <string>

namespace zaya {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws Error naming the file
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return static_cast<const unsigned char*>(data_); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();

  void* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace zaya
