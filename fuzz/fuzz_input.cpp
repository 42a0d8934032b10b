#include "fuzz_input.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

namespace zaya::fuzz {

namespace {

const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string pattern = "/tmp/zaya_fuzz_XXXXXX";
    if (!mkdtemp(pattern.data())) std::abort();
    return pattern;
  }();
  return dir;
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
