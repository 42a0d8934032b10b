#pragma once
// Decoders of tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and Sequence, each
// turning token strings back into text as tokenizers' decoder of the same name. Internal to src/data.

#include <memory>
#include <string>
#include <vector>

namespace zaya::tok {

class JsonField;

class Decoder {
 public:
  virtual ~Decoder() = default;
  // tokenizers' decode_chain: rewrites the list of token strings (a decoder may merge them).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// nullptr for a null decoder; Error "not supported: <type>" for a type zaya does not implement.
std::unique_ptr<Decoder> parse_decoder(const JsonField& json);

}  // namespace zaya::tok
