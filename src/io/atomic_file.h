#pragma once
// Files that appear whole or not at all: data goes to a temporary file beside the target, is fsynced,
// then renamed over the target and the directory is fsynced. A crash leaves the old file (or nothing),
// never a half-written one.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zaya {

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);  // throws Error naming the file
  ~AtomicFileWriter();                          // removes the temporary file unless committed
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void commit();
  // Where the contents are until commit() gives them the path's name (keeping their stamp).
  const std::string& temp_path() const { return temp_path_; }

 private:
  std::string path_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

void write_file_atomic(const std::string& path, std::string_view contents);
// A whole text file (a configuration, tokenizer, index or checkpoint file, a text to encode): a regular file
// of at most kMaxTextFileBytes. Throws Error naming the file.
inline constexpr uintmax_t kMaxTextFileBytes = uintmax_t(1) << 30;
std::string read_text_file(const std::string& path);
// fsync of a directory, so that a rename inside it is durable.
void sync_directory(const std::string& dir);

}  // namespace zaya
