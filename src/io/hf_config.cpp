#include "io/hf_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_input.h"

namespace zaya {
namespace {

using nlohmann::json;

// Reads typed fields out of the parsed object, removing each one it consumes so that what remains at the
// end is the set of keys to keep verbatim.
class FieldReader {
 public:
  FieldReader(json& object, const std::string& source) : object_(object), source_(source) {}

  Error error(const std::string& key, const std::string& message) const {
    return Error(message).file(source_).field(key);
  }

  void integer(const char* key, int64_t& out) {
    if (auto value = take(key)) out = as_integer(key, *value);
  }
  void optional_integer(const char* key, std::optional<int64_t>& out) {
    if (auto value = take(key))
      out = value->is_null() ? std::nullopt : std::optional(as_integer(key, *value));
  }
  void number(const char* key, double& out) {
    if (auto value = take(key)) {
      if (!value->is_number()) throw error(key, "expected a number, got " + value->dump());
      out = value->get<double>();
    }
  }
  void boolean(const char* key, bool& out) {
    if (auto value = take(key)) {
      if (!value->is_boolean()) throw error(key, "expected true or false, got " + value->dump());
      out = value->get<bool>();
    }
  }
  void string(const char* key, std::string& out) {
    if (auto value = take(key)) {
      if (!value->is_string()) throw error(key, "expected a string, got " + value->dump());
      out = value->get<std::string>();
    }
  }
  std::optional<json> take(const char* key) {
    const auto it = object_.find(key);
    if (it == object_.end()) return std::nullopt;
    json value = *it;
    object_.erase(it);
    return value;
  }

  int64_t as_integer(const std::string& key, const json& value) const {
    if (!value.is_number_integer()) throw error(key, "expected an integer, got " + value.dump());
    return value.get<int64_t>();
  }

 private:
  json& object_;
  const std::string& source_;
};

void read_rope_parameters(FieldReader& fields, ZayaConfig& config) {
  auto value = fields.take("rope_parameters");
  if (!value || value->is_null()) return;
  if (!value->is_object()) throw fields.error("rope_parameters", "expected an object keyed by layer type");
  value->erase("rope_type");  // a stray top-level key some hub configs carry; transformers drops it too
  config.rope_parameters.clear();
  for (const auto& [layer_type, params] : value->items()) {
    const std::string key = "rope_parameters." + layer_type;
    if (!params.is_object()) throw fields.error(key, "expected an object with rope_theta");
    RopeParameters rope;
    for (const auto& [name, item] : params.items()) {
      if (name == "rope_type") {
        if (!item.is_string()) throw fields.error(key + ".rope_type", "expected a string");
        rope.rope_type = item.get<std::string>();
      } else if (name == "rope_theta" || name == "partial_rotary_factor") {
        if (!item.is_number()) throw fields.error(key + "." + name, "expected a number, got " + item.dump());
        (name == "rope_theta" ? rope.rope_theta : rope.partial_rotary_factor) = item.get<double>();
      } else {
        throw fields.error(key + "." + name, "not supported (only default RoPE is)");
      }
    }
    if (!params.contains("rope_theta")) throw fields.error(key + ".rope_theta", "missing");
    config.rope_parameters[layer_type] = rope;
  }
}

}  // namespace

std::map<std::string, RopeParameters> ZayaConfig::default_rope_parameters() {
  return {{std::string(kLayerFull), {"default", 5'000'000.0, 0.5}},
          {std::string(kLayerSliding), {"default", 10'000.0, 0.5}}};
}

void ZayaConfig::fill_defaults() {
  if (layer_types.empty() && num_hidden_layers > 0 && num_hidden_layers <= kMaxLayers)
    layer_types.assign(size_t(num_hidden_layers), std::string(kLayerFull));
}

ZayaConfig parse_config(std::string_view json_text, const std::string& source) {
  json object = parse_json(json_text, source);
  if (!object.is_object()) throw Error("expected a JSON object").file(source);

  ZayaConfig config;
  FieldReader fields(object, source);
  if (auto model_type = fields.take("model_type")) {
    if (*model_type != "zaya")
      throw fields.error("model_type", "expected \"zaya\", got " + model_type->dump());
  }
  fields.integer("vocab_size", config.vocab_size);
  fields.integer("hidden_size", config.hidden_size);
  fields.integer("num_hidden_layers", config.num_hidden_layers);
  fields.integer("num_attention_heads", config.num_attention_heads);
  fields.integer("num_key_value_heads", config.num_key_value_heads);
  fields.string("hidden_act", config.hidden_act);
  fields.integer("max_position_embeddings", config.max_position_embeddings);
  fields.number("initializer_range", config.initializer_range);
  fields.number("rms_norm_eps", config.rms_norm_eps);
  fields.boolean("use_cache", config.use_cache);
  fields.boolean("tie_word_embeddings", config.tie_word_embeddings);
  read_rope_parameters(fields, config);
  fields.optional_integer("sliding_window", config.sliding_window);
  fields.number("attention_dropout", config.attention_dropout);
  fields.integer("moe_intermediate_size", config.moe_intermediate_size);
  fields.integer("num_experts_per_tok", config.num_experts_per_tok);
  fields.integer("num_experts", config.num_experts);
  fields.boolean("output_router_logits", config.output_router_logits);
  if (auto types = fields.take("layer_types"); types && !types->is_null()) {
    if (!types->is_array()) throw fields.error("layer_types", "expected a list of strings");
    for (const json& type : *types) {
      if (!type.is_string())
        throw fields.error("layer_types", "expected a list of strings, got " + type.dump());
      config.layer_types.push_back(type.get<std::string>());
    }
  }
  fields.optional_integer("pad_token_id", config.pad_token_id);
  fields.optional_integer("bos_token_id", config.bos_token_id);
  if (auto eos = fields.take("eos_token_id")) {
    config.eos_token_id.clear();
    config.eos_token_id_is_list = eos->is_array();
    if (eos->is_array()) {
      for (const json& id : *eos) config.eos_token_id.push_back(fields.as_integer("eos_token_id", id));
    } else if (!eos->is_null()) {
      config.eos_token_id.push_back(fields.as_integer("eos_token_id", *eos));
    }
  }
  fields.integer("head_dim", config.head_dim);
  fields.boolean("attention_bias", config.attention_bias);
  fields.boolean("lm_head_bias", config.lm_head_bias);
  fields.integer("router_hidden_size", config.router_hidden_size);
  fields.integer("cca_time0", config.cca_time0);
  fields.integer("cca_time1", config.cca_time1);
  fields.string("torch_dtype", config.dtype);  // the older spelling of "dtype"
  fields.string("dtype", config.dtype);
  config.extra_json = object.dump();

  config.fill_defaults();
  validate_config(config, source);
  return config;
}

ZayaConfig load_config(const std::string& path) {
  return parse_config(read_text_file(path), path);
}

namespace {

// The sizes: each positive and within what zaya takes, and the parameter count they make too.
void validate_sizes(const ZayaConfig& c, const std::string& source) {
  auto fail = [&](const std::string& field, const std::string& message) {
    return Error(message).file(source).field(field);
  };
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"max_position_embeddings", c.max_position_embeddings},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"num_experts", c.num_experts},
      {"head_dim", c.head_dim},
      {"router_hidden_size", c.router_hidden_size},
      {"cca_time0", c.cca_time0},
      {"cca_time1", c.cca_time1},
  };
  for (const auto& [name, value] : positive) {
    if (value <= 0) throw fail(name, cat("must be positive, got ", value));
    if (value > kMaxDimension)
      throw fail(name, cat(value, " is past the largest size zaya takes, ", kMaxDimension));
  }
  if (c.num_hidden_layers > kMaxLayers) {
    throw fail("num_hidden_layers",
               cat(c.num_hidden_layers, " is past the most layers zaya takes, ", kMaxLayers));
  }
  // Every size zaya derives from these (tensor elements, offsets, bytes) must fit an int64 with room to
  // spare: bound the parameter count, counted in floating point so that the check itself cannot overflow.
  const long double hidden = c.hidden_size,
                    per_layer =
                        hidden * c.head_dim * (2.0L * c.num_attention_heads + 2.0L * c.num_key_value_heads) +
                        3.0L * c.num_experts * c.moe_intermediate_size * hidden +
                        hidden * c.router_hidden_size + 2.0L * c.router_hidden_size * c.router_hidden_size;
  const long double parameters = c.num_hidden_layers * per_layer + 2.0L * c.vocab_size * hidden;
  if (parameters > kMaxParameters) {
    throw fail("hidden_size", cat("these sizes make about ", double(parameters),
                                  " parameters, past the most zaya takes (", double(kMaxParameters), ")"));
  }
}

// Each layer type known, with a RoPE entry zaya supports, and a window where a layer slides.
void validate_layer_types(const ZayaConfig& c, const std::string& source) {
  auto fail = [&](const std::string& field, const std::string& message) {
    return Error(message).file(source).field(field);
  };
  if (int64_t(c.layer_types.size()) != c.num_hidden_layers) {
    throw fail("layer_types",
               cat("has ", c.layer_types.size(), " entries but num_hidden_layers is ", c.num_hidden_layers));
  }
  for (const std::string& type : c.layer_types) {
    if (type != kLayerFull && type != kLayerSliding) {
      throw fail("layer_types",
                 "unknown layer type \"" + type + "\" (expected \"hybrid\" or \"hybrid_sliding\")");
    }
    const auto rope = c.rope_parameters.find(type);
    if (rope == c.rope_parameters.end())
      throw fail("rope_parameters", "no entry for layer type \"" + type + "\"");
    const std::string key = "rope_parameters." + type;
    if (rope->second.rope_type != "default") {
      throw fail(key + ".rope_type",
                 "not supported: \"" + rope->second.rope_type + "\" (only \"default\" is)");
    }
    if (!(rope->second.rope_theta > 0 && std::isfinite(rope->second.rope_theta)))
      throw fail(key + ".rope_theta", cat("must be positive and finite, got ", rope->second.rope_theta));
    const double factor = rope->second.partial_rotary_factor;
    if (!(factor > 0 && factor <= 1)) throw fail(key + ".partial_rotary_factor", "must be in (0, 1]");
    if (int64_t(c.head_dim * factor) % 2 != 0) {
      throw fail(key + ".partial_rotary_factor",
                 "head_dim * partial_rotary_factor must be an even number of channels");
    }
    if (type == kLayerSliding && (!c.sliding_window || *c.sliding_window <= 0)) {
      throw fail("sliding_window", "must be a positive integer when layer_types contains \"hybrid_sliding\"");
    }
  }
}

}  // namespace

void validate_config(const ZayaConfig& c, const std::string& source) {
  auto fail = [&](const std::string& field, const std::string& message) {
    return Error(message).file(source).field(field);
  };
  validate_sizes(c, source);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw fail("num_key_value_heads",
               cat("num_attention_heads (", c.num_attention_heads,
                   ") must be a multiple of num_key_value_heads (", c.num_key_value_heads, ")"));
  }
  if (c.num_experts_per_tok != 1)
    throw fail("num_experts_per_tok", "ZAYA routes each token to one expert: must be 1");
  if ((c.num_key_value_heads * c.head_dim) % 2 != 0) {
    throw fail("head_dim",
               "num_key_value_heads * head_dim must be even (values are half current, half delayed)");
  }
  if (c.hidden_act != "silu")
    throw fail("hidden_act", "only \"silu\" is supported, got \"" + c.hidden_act + "\"");
  // JSON holds no NaN or infinity, but a configuration is also built from a run's TOML and from code.
  if (!(c.rms_norm_eps > 0 && std::isfinite(c.rms_norm_eps)))
    throw fail("rms_norm_eps", cat("must be positive and finite, got ", c.rms_norm_eps));
  if (!(c.initializer_range >= 0 && std::isfinite(c.initializer_range)))
    throw fail("initializer_range", cat("must be finite and not negative, got ", c.initializer_range));
  if (c.attention_dropout != 0)
    throw fail("attention_dropout", "attention dropout is not supported: must be 0");
  if (c.dtype != "float32" && c.dtype != "bfloat16" && c.dtype != "float16") {
    throw fail("dtype", "expected \"float32\", \"bfloat16\" or \"float16\", got \"" + c.dtype + "\"");
  }
  validate_layer_types(c, source);
  const std::pair<const char*, std::optional<int64_t>> token_ids[] = {{"pad_token_id", c.pad_token_id},
                                                                      {"bos_token_id", c.bos_token_id}};
  for (const auto& [name, id] : token_ids) {
    if (id && (*id < 0 || *id >= c.vocab_size))
      throw fail(name, cat(*id, " is outside the vocabulary of ", c.vocab_size));
  }
  for (int64_t id : c.eos_token_id) {
    if (id < 0 || id >= c.vocab_size)
      throw fail("eos_token_id", cat(id, " is outside the vocabulary of ", c.vocab_size));
  }
}

std::string config_to_json(const ZayaConfig& c) {
  json object = json::parse(c.extra_json);
  auto optional = [](const std::optional<int64_t>& value) { return value ? json(*value) : json(nullptr); };
  json rope = json::object();
  for (const auto& [type, params] : c.rope_parameters) {
    rope[type] = {{"rope_type", params.rope_type},
                  {"rope_theta", params.rope_theta},
                  {"partial_rotary_factor", params.partial_rotary_factor}};
  }
  json eos = json(nullptr);
  if (c.eos_token_id_is_list || c.eos_token_id.size() > 1) {
    eos = c.eos_token_id;
  } else if (!c.eos_token_id.empty()) {
    eos = c.eos_token_id[0];
  }
  object.update({
      {"architectures", object.value("architectures", json::array({"ZayaForCausalLM"}))},
      {"model_type", "zaya"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"hidden_act", c.hidden_act},
      {"max_position_embeddings", c.max_position_embeddings},
      {"initializer_range", c.initializer_range},
      {"rms_norm_eps", c.rms_norm_eps},
      {"use_cache", c.use_cache},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"rope_parameters", rope},
      {"sliding_window", optional(c.sliding_window)},
      {"attention_dropout", c.attention_dropout},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"num_experts_per_tok", c.num_experts_per_tok},
      {"num_experts", c.num_experts},
      {"output_router_logits", c.output_router_logits},
      {"layer_types", c.layer_types},
      {"pad_token_id", optional(c.pad_token_id)},
      {"bos_token_id", optional(c.bos_token_id)},
      {"eos_token_id", eos},
      {"head_dim", c.head_dim},
      {"attention_bias", c.attention_bias},
      {"lm_head_bias", c.lm_head_bias},
      {"router_hidden_size", c.router_hidden_size},
      {"cca_time0", c.cca_time0},
      {"cca_time1", c.cca_time1},
      {"dtype", c.dtype},
  });
  return object.dump(2) + "\n";
}

void save_config(const ZayaConfig& config, const std::string& path) {
  write_file_atomic(path, config_to_json(config));
}

namespace {

template <class T>
std::string printed(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string printed(const std::optional<int64_t>& value) {
  return value ? std::to_string(*value) : "none";
}

std::string printed(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

std::string printed(const std::vector<std::string>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + values[i];
  return out + "]";
}

}  // namespace

std::string model_difference(const ZayaConfig& a, const ZayaConfig& b) {
  std::string found;
  auto compare = [&](const char* field, const auto& x, const auto& y) {
    if (found.empty() && !(x == y)) found = cat(field, ": ", printed(x), " against ", printed(y));
  };
  compare("vocab_size", a.vocab_size, b.vocab_size);
  compare("hidden_size", a.hidden_size, b.hidden_size);
  compare("num_hidden_layers", a.num_hidden_layers, b.num_hidden_layers);
  compare("num_attention_heads", a.num_attention_heads, b.num_attention_heads);
  compare("num_key_value_heads", a.num_key_value_heads, b.num_key_value_heads);
  compare("head_dim", a.head_dim, b.head_dim);
  compare("hidden_act", a.hidden_act, b.hidden_act);
  compare("rms_norm_eps", a.rms_norm_eps, b.rms_norm_eps);
  compare("tie_word_embeddings", a.tie_word_embeddings, b.tie_word_embeddings);
  compare("sliding_window", printed(a.sliding_window), printed(b.sliding_window));
  compare("moe_intermediate_size", a.moe_intermediate_size, b.moe_intermediate_size);
  compare("num_experts_per_tok", a.num_experts_per_tok, b.num_experts_per_tok);
  compare("num_experts", a.num_experts, b.num_experts);
  compare("layer_types", printed(a.layer_types), printed(b.layer_types));
  compare("pad_token_id", printed(a.pad_token_id), printed(b.pad_token_id));
  compare("bos_token_id", printed(a.bos_token_id), printed(b.bos_token_id));
  compare("eos_token_id", printed(a.eos_token_id), printed(b.eos_token_id));
  compare("attention_bias", a.attention_bias, b.attention_bias);
  compare("lm_head_bias", a.lm_head_bias, b.lm_head_bias);
  compare("router_hidden_size", a.router_hidden_size, b.router_hidden_size);
  compare("cca_time0", a.cca_time0, b.cca_time0);
  compare("cca_time1", a.cca_time1, b.cca_time1);
  std::set<std::string> types;
  for (const auto& [type, rope] : a.rope_parameters) types.insert(type);
  for (const auto& [type, rope] : b.rope_parameters) types.insert(type);
  for (const std::string& type : types) {
    const auto x = a.rope_parameters.find(type), y = b.rope_parameters.find(type);
    if (x == a.rope_parameters.end() || y == b.rope_parameters.end()) {
      compare(cat("rope_parameters.", type).c_str(),
              std::string(x == a.rope_parameters.end() ? "none" : "set"),
              std::string(y == b.rope_parameters.end() ? "none" : "set"));
      continue;
    }
    compare(cat("rope_parameters.", type, ".rope_type").c_str(), x->second.rope_type, y->second.rope_type);
    compare(cat("rope_parameters.", type, ".rope_theta").c_str(), x->second.rope_theta, y->second.rope_theta);
    compare(cat("rope_parameters.", type, ".partial_rotary_factor").c_str(), x->second.partial_rotary_factor,
            y->second.partial_rotary_factor);
  }
  return found;
}

}  // namespace zaya
