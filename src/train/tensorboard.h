#pragma once
// TensorBoard event files written without TensorFlow: TFRecord framing (length, masked CRC-32C, payload,
// masked CRC-32C) around hand-encoded `Event` protocol buffers holding scalar and histogram summaries.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace zaya {

uint32_t crc32c(const void* data, size_t size);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new events.out.tfevents.<time>.<host>.<pid> file in it.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalar(const std::string& tag, int64_t step, double value);
  // A histogram over bucket i = [i - 0.5, i + 0.5) with count counts[i]: one bar per expert.
  void bars(const std::string& tag, int64_t step, const std::vector<int64_t>& counts);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_event(int64_t step, const std::string& summary);

  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace zaya
