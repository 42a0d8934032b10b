#pragma once
// Every JSON document a user hands zaya (config.json, the safetensors index and headers, checkpoint files,
// JSON lines of a corpus) is parsed here, with a limit on its nesting: JSON is copied and printed by
// recursive code, which a document nested many thousands deep would run off the end of the stack. zaya's
// own formats nest 4 deep; real-world ones (tokenizer.json) under 10.

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace zaya {

inline constexpr int kMaxJsonDepth = 64;

// Parses text; throws Error naming `source` (and `where`, e.g. "line 12: ", before the message) when it is
// not valid JSON or nests deeper than kMaxJsonDepth. With duplicate_key, the first top-level key that
// appears twice is stored there (plain parsing keeps the last value silently).
nlohmann::json parse_json(std::string_view text, const std::string& source, const std::string& where = "",
                          std::string* duplicate_key = nullptr);

}  // namespace zaya
