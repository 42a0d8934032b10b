// A tokenizer.json, then encoding a text with it (the part of the input after the separator, and a fixed
// text with special tokens) and decoding the ids back.
#include "core/error.h"
#include "fuzz_input.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [json, text] = zaya::fuzz::split_input(data, size);
  try {
    const zaya::Tokenizer tokenizer = zaya::Tokenizer::parse(json, "tokenizer.json");
    for (std::string_view sample : {text, std::string_view("Hello  world!\n\t<eos> ünïcödé 123")}) {
      const std::vector<int32_t> ids = tokenizer.encode(sample);
      for (int32_t id : ids) {
        if (id < 0 || id >= tokenizer.vocab_size()) __builtin_trap();
      }
      (void)tokenizer.decode(ids, false);
    }
  } catch (const zaya::Error&) {
  }
  return 0;
}
