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
  // The pages wholly inside bytes [offset, offset + count) leave this process's memory; the page cache keeps
  // them, and a later read maps them again. A file read once (a model's weights, converted into a store)
  // then costs no resident memory beyond the part being read.
  void drop_pages(size_t offset, size_t count) const;

 private:
  void release();

  void* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace zaya
