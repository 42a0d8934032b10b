// compare_tensors A B TOLERANCE, where A and B are model directories (one model.safetensors or shards and
// their index) or single .safetensors files: for every tensor of B, the relative L2 difference |a - b| / |b|
// of A's tensor of the same name. Prints the worst one and exits 1 when it is over TOLERANCE (or a tensor
// is missing or sized differently), 0 otherwise. Integer tensors (I32: expert choices) are compared as
// the small integers they hold. For tests that compare two runs' weights or passes.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_index.h"

namespace {

// Name -> data, for a directory or a file.
class Tensors {
 public:
  explicit Tensors(const std::string& path) {
    if (std::filesystem::is_directory(path)) {
      set_ = std::make_unique<zaya::WeightSet>(path);
    } else {
      file_ = std::make_unique<zaya::SafetensorsFile>(path);
    }
  }
  std::vector<std::string> names() const {
    if (set_) return set_->names();
    std::vector<std::string> out;
    for (const zaya::SafetensorsEntry& entry : file_->entries()) out.push_back(entry.name);
    return out;
  }
  // Empty when absent.
  std::vector<float> values(const std::string& name) const {
    const zaya::SafetensorsFile* file = file_.get();
    const zaya::SafetensorsEntry* entry = nullptr;
    if (set_) {
      const zaya::WeightSet::Found found = set_->find(name);
      file = found.file;
      entry = found.entry;
    } else {
      entry = file_->find(name);
    }
    if (!file || !entry) return {};
    std::vector<float> out(size_t(entry->shape.numel()));
    if (entry->dtype == zaya::DType::I32) {  // expert choices: small integers, exact as floats
      const auto* values = static_cast<const unsigned char*>(file->view(*entry).data);
      for (size_t i = 0; i < out.size(); ++i) {
        int32_t value;
        std::memcpy(&value, values + 4 * i, 4);
        out[i] = float(value);
      }
    } else {
      zaya::convert_to_f32(file->view(*entry), out.data());
    }
    return out;
  }

 private:
  std::unique_ptr<zaya::WeightSet> set_;
  std::unique_ptr<zaya::SafetensorsFile> file_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_tensors A B TOLERANCE (model directories or .safetensors files)\n");
    return 2;
  }
  try {
    const Tensors a(argv[1]), b(argv[2]);
    const double tolerance = std::stod(argv[3]);
    double worst = 0;
    std::string worst_name;
    const std::vector<std::string> names = b.names();
    for (const std::string& name : names) {
      const std::vector<float> x = a.values(name), y = b.values(name);
      if (x.size() != y.size() || x.empty()) {
        std::fprintf(stderr, "%s: missing or of another size in %s\n", name.c_str(), argv[1]);
        return 1;
      }
      double difference = 0, norm = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        difference += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
        norm += double(y[i]) * y[i];
      }
      const double relative = norm > 0 ? std::sqrt(difference / norm) : std::sqrt(difference);
      if (!(relative <= worst)) worst = relative, worst_name = name;  // NaN counts as worst
    }
    std::printf("worst relative L2 difference %.3g (%s) over %zu tensors\n", worst, worst_name.c_str(),
                names.size());
    return worst <= tolerance ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_tensors: %s\n", e.what());
    return 1;
  }
}
