#pragma once
// The safetensors format (huggingface/safetensors): an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the tensor bytes. Reading maps the file
// and checks every claim of the header against the file before any tensor is touched.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor.h"

namespace zaya {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  size_t begin = 0, end = 0;  // byte range inside the data section
};

class SafetensorsFile {
 public:
  // Throws Error naming the file (and the tensor) when anything in it is malformed.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // In the order of their data.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(std::string_view name) const;
  // Zero-copy view into the mapping. The data may be unaligned; read it with memcpy or convert_to_f32.
  TensorView view(const SafetensorsEntry& entry) const;
  // The entry's data leaves this process's memory until read again (MappedFile::drop_pages).
  void drop_pages(const SafetensorsEntry& entry) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  void parse_header(std::string_view header, size_t data_size);

  MappedFile file_;
  size_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

// Collects views (borrowed: they must outlive write()) and writes them as one safetensors file, atomically.
class SafetensorsWriter {
 public:
  void add(std::string name, const TensorView& view);
  void set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }
  size_t data_bytes() const { return data_bytes_; }
  void write(const std::string& path) const;

 private:
  std::vector<std::pair<std::string, TensorView>> tensors_;
  std::map<std::string, std::string> metadata_;
  size_t data_bytes_ = 0;
};

}  // namespace zaya
