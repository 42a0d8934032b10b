#pragma once
// Normalizers of tokenizer.json: NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip and Sequence,
// each rewriting text exactly as tokenizers' normalizer of the same name. Internal to src/data.

#include <memory>
#include <string>

#include "tokenizer/pieces.h"

namespace zaya::tok {

class JsonField;

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Rewrites `text` in place; `scratch` is spare storage the normalizer may swap with text.text.
  virtual void normalize(NormalizedText& text, std::string& scratch) const = 0;
};

// nullptr for a null normalizer; Error "not supported: <type>" for a type zaya does not implement.
std::unique_ptr<Normalizer> parse_normalizer(const JsonField& json);

}  // namespace zaya::tok
