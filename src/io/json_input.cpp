#include "io/json_input.h"

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace zaya {

namespace {
struct TooDeep {};
}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& source, const std::string& where,
                          std::string* duplicate_key) {
  using json = nlohmann::json;
  std::set<std::string> keys;
  // The parser itself walks any nesting without recursion; the limit stops it at the first value too deep.
  auto limit = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth >= kMaxJsonDepth &&
        (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start))
      throw TooDeep{};
    if (duplicate_key && depth == 1 && event == json::parse_event_t::key && duplicate_key->empty() &&
        !keys.insert(parsed.get<std::string>()).second)
      *duplicate_key = parsed.get<std::string>();
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limit);
  } catch (const json::exception& e) {
    throw Error(cat(where, "not valid JSON: ", e.what())).file(source);
  } catch (const TooDeep&) {
    throw Error(cat(where, "JSON nested deeper than ", kMaxJsonDepth, " levels")).file(source);
  }
}

namespace {

// What a value is, short enough for a one-line error: a number itself, anything else by its type.
std::string describe(const nlohmann::json& value) {
  return value.is_number() ? value.dump() : std::string(value.type_name());
}

}  // namespace

int64_t json_int64(const nlohmann::json& value, const std::string& source, const std::string& field) {
  if (!value.is_number_integer() ||
      (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX)))
    throw Error("expected an integer within int64's range, got " + describe(value)).file(source).field(field);
  return value.get<int64_t>();
}

std::vector<int64_t> json_int64_array(const nlohmann::json& value, const std::string& source,
                                      const std::string& field) {
  if (!value.is_array())
    throw Error("expected an array of integers, got " + describe(value)).file(source).field(field);
  std::vector<int64_t> out;
  out.reserve(value.size());
  for (const nlohmann::json& element : value) out.push_back(json_int64(element, source, field));
  return out;
}

}  // namespace zaya
