// SPDX-License-Identifier: MIT
// Hugging Face's config.json, flattened to key -> JSON text of the value
// (nn/models/hf.h). The loaders read what they need from the text, so that
// nlohmann-json stays private to libsnug, as it is in core/safetensors.cpp.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include <snug/base/error.h>
#include <snug/nn/models/hf.h>

namespace snug::nn::models {

std::map<std::string, std::string> read_hf_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SNUG_CHECK(in.good(), IOError, path, ": cannot open the model configuration: ", std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  SNUG_CHECK(!in.bad(), IOError, path, ": cannot read the model configuration: ", std::strerror(errno));
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based: the byte after the last one read.
    throw IOError(str(path, ": malformed JSON at byte offset ", e.byte > 0 ? e.byte - 1 : 0, " (", e.what(), ")"));
  }
  SNUG_CHECK(root.is_object(), IOError, path, ": a model configuration must be a JSON object, got a ",
             root.type_name());
  std::map<std::string, std::string> out;
  for (auto it = root.begin(); it != root.end(); ++it) out[it.key()] = it.value().dump();
  return out;
}

namespace {
using json = nlohmann::json;
[[noreturn]] void bad(const std::string& path, const std::string& key, const char* want, const std::string& got) {
  throw IOError(str(path, ": \"", key, "\" must be ", want, ", got ", got));
}
}  // namespace

HfConfig::HfConfig(const std::string& path) : path_(path), entries_(read_hf_config(path)) {}

bool HfConfig::has(const std::string& key) const {
  auto it = entries_.find(key);
  return it != entries_.end() && it->second != "null";
}

const std::string& HfConfig::raw(const std::string& key) const {
  auto it = entries_.find(key);
  SNUG_CHECK(it != entries_.end(), IOError, path_, ": the configuration has no \"", key, "\"");
  return it->second;
}

int64_t HfConfig::integer(const std::string& key) const {
  SNUG_CHECK(has(key), IOError, path_, ": the configuration has no \"", key, "\"");
  const json v = json::parse(raw(key));
  if (!v.is_number_integer()) bad(path_, key, "an integer", raw(key));
  return v.get<int64_t>();
}

double HfConfig::number(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const json v = json::parse(raw(key));
  if (!v.is_number()) bad(path_, key, "a number", raw(key));
  return v.get<double>();
}

std::string HfConfig::text(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const json v = json::parse(raw(key));
  if (!v.is_string()) bad(path_, key, "a string", raw(key));
  return v.get<std::string>();
}

bool HfConfig::flag(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const json v = json::parse(raw(key));
  if (!v.is_boolean()) bad(path_, key, "true or false", raw(key));
  return v.get<bool>();
}

}  // namespace snug::nn::models
