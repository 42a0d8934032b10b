// compare_tensors A.safetensors B.safetensors TOLERANCE: for every tensor of B, the relative L2 difference
// |a - b| / |b| of A's tensor of the same name. Prints the worst one and exits 1 when it is over TOLERANCE
// (or a tensor is missing or shaped differently), 0 otherwise. For tests that compare two runs' weights.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: compare_tensors A.safetensors B.safetensors TOLERANCE\n");
    return 2;
  }
  try {
    const zaya::SafetensorsFile a(argv[1]), b(argv[2]);
    const double tolerance = std::stod(argv[3]);
    double worst = 0;
    std::string worst_name;
    for (const zaya::SafetensorsEntry& want : b.entries()) {
      const zaya::SafetensorsEntry* got = a.find(want.name);
      if (!got || got->shape.numel() != want.shape.numel()) {
        std::fprintf(stderr, "%s: missing or of another size in %s\n", want.name.c_str(), argv[1]);
        return 1;
      }
      std::vector<float> x(size_t(want.shape.numel())), y(x.size());
      zaya::convert_to_f32(a.view(*got), x.data());
      zaya::convert_to_f32(b.view(want), y.data());
      double difference = 0, norm = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        difference += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
        norm += double(y[i]) * y[i];
      }
      const double relative = norm > 0 ? std::sqrt(difference / norm) : std::sqrt(difference);
      if (!(relative <= worst)) worst = relative, worst_name = want.name;  // NaN counts as worst
    }
    std::printf("worst relative L2 difference %.3g (%s) over %zu tensors\n", worst, worst_name.c_str(),
                b.entries().size());
    return worst <= tolerance ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "compare_tensors: %s\n", e.what());
    return 1;
  }
}
