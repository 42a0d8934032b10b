#include "fuzz_input.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

namespace zaya::fuzz {

namespace {

// This process's scratch directory, removed when it exits. In memory where the machine has a memory file
// system: targets write files at every execution, and on a disk those writes were most of a target's time.
class ScratchDir {
 public:
  ScratchDir() {
    path_ = access("/dev/shm", W_OK) == 0 ? "/dev/shm/zaya_fuzz_XXXXXX" : "/tmp/zaya_fuzz_XXXXXX";
    if (!mkdtemp(path_.data())) std::abort();
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

}  // namespace

std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  return path;
}

std::pair<std::string_view, std::string_view> split_input(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kSeparator = "\n----\n";
  const size_t at = all.find(kSeparator);
  if (at == std::string_view::npos) return {all, {}};
  return {all.substr(0, at), all.substr(at + kSeparator.size())};
}

}  // namespace zaya::fuzz
