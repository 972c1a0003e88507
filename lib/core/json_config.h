// hpcnn core: JSON configuration files whose defaults are their schema (dist-train's training
// configuration, train/config.h, and its data sections, data/config.h).
//
// A schema is a JSON object holding every valid key with its default value. A user's value
// replaces the default when it has the same JSON kind (any number for a number, any array for an
// array, an object is merged key by key); a key the schema lacks is ErrorKind::usage listing the
// valid keys of its section, a value of another kind is ErrorKind::usage naming the key
// ("section.key").
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace hpcnn {

// The JSON object in the file at `path` (comments allowed). ErrorKind::io when the file cannot be
// opened; ErrorKind::usage, naming the file, when it is not valid JSON or holds a number out of
// range.
nlohmann::json read_json_file(const std::string& path);

// Merges `user` into `schema` as described above; `where` is the section's dotted path ("" for
// the top level), used in the messages.
void merge_into_schema(nlohmann::json& schema, const nlohmann::json& user, const std::string& where = "");

// Applies the override "a.b=value" to `config` through merge_into_schema: the value is parsed as
// JSON, or taken as a string when it is not JSON. ErrorKind::usage naming the override.
void apply_override(nlohmann::json& config, const std::string& key, const std::string& value);

}  // namespace hpcnn
