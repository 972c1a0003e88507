#include "core/json_config.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"

namespace hpcnn {

using nlohmann::json;

namespace {

std::string keys_of(const json& schema) {
  std::string s;
  for (auto it = schema.begin(); it != schema.end(); ++it) s += (s.empty() ? "" : ", ") + it.key();
  return s;
}

bool same_kind(const json& schema, const json& v) {
  if (schema.is_number()) return v.is_number();
  if (schema.is_array()) return v.is_array();
  return schema.type() == v.type();
}

}  // namespace

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_error(ErrorKind::io, "cannot open configuration " + path);
  try {
    return json::parse(in, nullptr, true, /*ignore_comments=*/true);
  } catch (const json::parse_error& e) {
    throw_error(ErrorKind::usage, "configuration " + path + " is not valid JSON: " + e.what());
  } catch (const json::exception& e) {  // e.g. a number too large for a double
    throw_error(ErrorKind::usage, "configuration " + path + " holds a value out of range: " + e.what());
  }
}

void merge_into_schema(json& base, const json& user, const std::string& where) {
  if (!user.is_object())
    throw_error(ErrorKind::usage, (where.empty() ? "the configuration" : "'" + where + "'") + " must be a JSON object");
  for (auto it = user.begin(); it != user.end(); ++it) {
    const std::string key = where.empty() ? it.key() : where + "." + it.key();
    if (!base.contains(it.key()))
      throw_error(ErrorKind::usage, "unknown configuration key '" + key + "'; valid keys" +
                                        (where.empty() ? "" : " of '" + where + "'") + ": " + keys_of(base));
    json& slot = base[it.key()];
    if (slot.is_object()) {
      merge_into_schema(slot, it.value(), key);
    } else {
      if (!same_kind(slot, it.value()))
        throw_error(ErrorKind::usage, "configuration key '" + key + "' must be a JSON " + std::string(slot.type_name()) +
                                          ", got " + it.value().dump());
      slot = it.value();
    }
  }
}

void apply_override(json& config, const std::string& key, const std::string& text) {
  json value;
  try {
    value = json::parse(text);
  } catch (const json::parse_error&) {
    value = text;  // a bare string
  } catch (const json::exception& e) {
    throw_error(ErrorKind::usage, "override " + key + "=" + text + ": a value out of range (" + e.what() + ")");
  }
  // {"a": {"b": value}} from "a.b".
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
  if (parts.empty()) throw_error(ErrorKind::usage, "empty override key");
  json patch = value;
  for (size_t i = parts.size(); i-- > 0;) patch = json{{parts[i], patch}};
  with_context("while applying override " + key + "=" + text, [&] {
    merge_into_schema(config, patch, "");
    return 0;
  });
}

}  // namespace hpcnn
