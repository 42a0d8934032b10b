// A safetensors file: header parsing, every entry's bounds, reading each tensor's bytes.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      zaya::fuzz::write_scratch("model.safetensors", {reinterpret_cast<const char*>(data), size});
  try {
    const zaya::SafetensorsFile file(path);
    std::vector<char> copy;
    for (const zaya::SafetensorsEntry& entry : file.entries()) {
      const zaya::TensorView view = file.view(entry);
      copy.resize(view.nbytes());
      if (!copy.empty()) std::memcpy(copy.data(), view.data, copy.size());  // every byte in bounds
      if (file.find(entry.name) == nullptr) __builtin_trap();
    }
  } catch (const zaya::Error&) {
  }
  return 0;
}
