#include "train/toml_reader.h"

#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include "core/error.h"

namespace zaya {

TomlReader::TomlReader(const toml::table* table, std::string path, const std::string* file)
    : table_(table), path_(std::move(path)), file_(file) {}

void TomlReader::fail(const std::string& key, const std::string& message) const {
  std::string where = *file_;
  const toml::node* node = table_ ? table_->get(key) : nullptr;
  if (node && node->source().path && *node->source().path != *file_) {
    where = *node->source().path;  // a --set override: its own line is not the file's
  } else if (node && node->source().begin.line) {
    where += ":" + std::to_string(node->source().begin.line);
  }
  throw Error(message).file(where).field(dotted(key));
}

const toml::node* TomlReader::get(const char* key) {
  read_.insert(key);
  return table_ ? table_->get(key) : nullptr;
}

bool TomlReader::has(const char* key) const {
  return table_ && table_->contains(key);
}

double TomlReader::number(const char* key, double fallback) {
  const toml::node* node = get(key);
  if (!node) return fallback;
  if (node->is_integer()) return double(node->as_integer()->get());
  if (!node->is_floating_point()) fail(key, "expected a number");
  return finite(key, node->as_floating_point()->get());
}

double TomlReader::finite(const char* key, double value) const {
  // TOML has nan and inf; no setting of a run means either (a NaN learning rate trains on silently).
  if (!std::isfinite(value)) fail(key, cat("expected a finite number, got ", value));
  return value;
}

int64_t TomlReader::integer(const char* key, int64_t fallback) {
  const toml::node* node = get(key);
  if (!node) return fallback;
  if (node->is_integer()) return node->as_integer()->get();
  // 1e9 reads as a float in TOML; accept it when it is a whole number that fits.
  if (node->is_floating_point()) {
    const double value = node->as_floating_point()->get();
    if (std::isfinite(value) && std::abs(value) < 0x1p63 && value == std::trunc(value)) return int64_t(value);
  }
  fail(key, "expected an integer");
}

int TomlReader::integer32(const char* key, int fallback) {
  const int64_t value = integer(key, fallback);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max())
    fail(key, cat(value, " is out of range (at most ", std::numeric_limits<int>::max(), ")"));
  return int(value);
}

bool TomlReader::boolean(const char* key, bool fallback) {
  const toml::node* node = get(key);
  if (!node) return fallback;
  if (!node->is_boolean()) fail(key, "expected true or false");
  return node->as_boolean()->get();
}

std::string TomlReader::string(const char* key, const std::string& fallback) {
  const toml::node* node = get(key);
  if (!node) return fallback;
  if (!node->is_string()) fail(key, "expected a string");
  return node->as_string()->get();
}

std::vector<double> TomlReader::numbers(const char* key, const std::vector<double>& fallback) {
  const toml::node* node = get(key);
  if (!node) return fallback;
  if (!node->is_array()) fail(key, "expected a list of numbers");
  std::vector<double> out;
  for (const toml::node& item : *node->as_array()) {
    if (item.is_floating_point()) {
      out.push_back(finite(key, item.as_floating_point()->get()));
    } else if (item.is_integer()) {
      out.push_back(double(item.as_integer()->get()));
    } else {
      fail(key, "expected a list of numbers");
    }
  }
  return out;
}

std::vector<std::string> TomlReader::strings(const char* key, const std::vector<std::string>& fallback) {
  const toml::node* node = get(key);
  if (!node) return fallback;
  if (node->is_string()) return {node->as_string()->get()};
  if (!node->is_array()) fail(key, "expected a string or a list of strings");
  std::vector<std::string> out;
  for (const toml::node& item : *node->as_array()) {
    if (!item.is_string()) fail(key, "expected a list of strings");
    out.push_back(item.as_string()->get());
  }
  return out;
}

TomlReader TomlReader::table(const char* key) {
  const toml::node* node = get(key);
  if (node && !node->is_table()) fail(key, "expected a table");
  return TomlReader(node ? node->as_table() : nullptr, dotted(key), file_);
}

std::vector<TomlReader> TomlReader::tables(const char* key) {
  const toml::node* node = get(key);
  if (!node) return {};
  if (!node->is_array_of_tables()) fail(key, "expected an array of tables ([[" + dotted(key) + "]])");
  std::vector<TomlReader> out;
  size_t index = 0;
  for (const toml::node& item : *node->as_array()) {
    out.emplace_back(item.as_table(), dotted(key) + "[" + std::to_string(index++) + "]", file_);
  }
  return out;
}

std::vector<std::string> TomlReader::keys() const {
  std::vector<std::string> out;
  if (table_) {
    for (const auto& [key, value] : *table_) out.emplace_back(key.str());
  }
  return out;
}

void TomlReader::finish() const {
  if (!table_) return;
  for (const auto& [key, value] : *table_) {
    if (!read_.count(std::string(key.str()))) fail(std::string(key.str()), "unknown key");
  }
}

namespace {

// The value of an override, as TOML; a bare word that is not TOML is taken as a string. Its source is the
// override ("--set optimizer.lr"), which errors about it name.
toml::table override_value(const std::string& text, const std::string& source) {
  try {
    return toml::parse("value = " + text, source);
  } catch (const toml::parse_error&) {
    std::string quoted;
    for (const char c : text) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    try {
      return toml::parse("value = \"" + quoted + "\"", source);
    } catch (const toml::parse_error& e) {  // a control character
      throw Error(std::string(e.description())).field(source);
    }
  }
}

void flatten(const toml::node& node, const std::string& key, std::map<std::string, std::string>& out) {
  if (const toml::table* table = node.as_table()) {
    for (const auto& [name, child] : *table)
      flatten(child, key.empty() ? std::string(name.str()) : key + "." + std::string(name.str()), out);
  } else if (const toml::array* array = node.as_array(); array && array->is_array_of_tables()) {
    for (size_t i = 0; i < array->size(); ++i) flatten(*array->get(i), cat(key, ".", i), out);
  } else {
    std::ostringstream value;
    node.visit([&](const auto& v) { value << v; });
    out[key] = value.str();
  }
}

}  // namespace

toml::table parse_toml(std::string_view text, const std::string& source,
                       const std::vector<std::string>& overrides) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw Error(std::string(e.description())).file(source + ":" + std::to_string(e.source().begin.line));
  }
  for (const std::string& item : overrides) {
    const size_t equals = item.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw Error("expected section.key=value, got \"" + item + "\"").field("--set");
    }
    const std::string path = item.substr(0, equals);
    toml::table holder = override_value(item.substr(equals + 1), "--set " + path);
    toml::table* table = &root;
    std::istringstream parts(path);
    std::string part, next;
    std::getline(parts, part, '.');
    while (std::getline(parts, next, '.')) {
      toml::node* child = table->get(part);
      if (!child) {
        table->insert(part, toml::table{});
        child = table->get(part);
      }
      // "stages.1.seq_len": a number after an array of tables picks one of them.
      if (child->is_array_of_tables()) {
        toml::array& array = *child->as_array();
        size_t index = 0;
        const bool numeric = !next.empty() && next.size() <= 9 &&  // within stoul's range
                             next.find_first_not_of("0123456789") == std::string::npos;
        if (!numeric || (index = std::stoul(next)) >= array.size()) {
          throw Error(cat("no element ", next, " in ", part)).field("--set " + path);
        }
        child = array.get(index);
        if (!std::getline(parts, next, '.')) throw Error("names a table, not a key").field("--set " + path);
      }
      if (!child->is_table()) throw Error(part + " is not a table").field("--set " + path);
      table = child->as_table();
      part = next;
    }
    table->insert_or_assign(part, std::move(*holder.get("value")));
  }
  return root;
}

std::map<std::string, std::string> flatten_toml(const toml::table& table) {
  std::map<std::string, std::string> out;
  flatten(table, "", out);
  return out;
}

}  // namespace zaya
