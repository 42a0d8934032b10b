// A Megatron indexed dataset: PREFIX.idx (before the separator) and PREFIX.bin (after), checked against each
// other, then every sequence read.
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [index, tokens] = zaya::fuzz::split_input(data, size);
  zaya::fuzz::write_scratch("data.idx", index);
  const std::string bin = zaya::fuzz::write_scratch("data.bin", tokens);
  try {
    const zaya::IndexedDataset dataset(bin.substr(0, bin.size() - 4));
    std::vector<int32_t> out;
    for (int64_t s = 0; s < dataset.sequence_count(); ++s) {
      out.resize(size_t(dataset.sequence_length(s)));
      dataset.read(s, 0, dataset.sequence_length(s), out.data(), 1000);
    }
    for (int64_t d = 0; d <= dataset.document_count(); ++d) (void)dataset.document_start(d);
  } catch (const zaya::Error&) {
  }
  return 0;
}
