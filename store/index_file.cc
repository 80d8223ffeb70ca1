#include "store/index_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <set>

#include "common/limits.h"
#include "common/sha256.h"

namespace kiln::store::internal {
namespace {

bool IsHexId(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

ModelInfo EntryFromYaml(const YAML::Node& n) {
  ModelInfo m;
  m.model_id = n["id"].as<std::string>();
  for (const auto& name : n["names"]) m.names.push_back(name.as<std::string>());
  m.size_bytes = n["size_bytes"].as<uint64_t>();
  m.opset = n["opset"].as<int64_t>(0);
  for (const auto& s : n["inputs"]) m.inputs.push_back(s.as<std::string>());
  for (const auto& s : n["outputs"]) m.outputs.push_back(s.as<std::string>());
  m.node_count = n["node_count"].as<int64_t>(0);
  m.producer_name = n["producer_name"].as<std::string>("");
  m.created_unix_seconds = n["created_unix_seconds"].as<int64_t>(0);
  return m;
}

void SortById(std::vector<ModelInfo>& models) {
  std::sort(models.begin(), models.end(),
            [](const ModelInfo& a, const ModelInfo& b) { return a.model_id < b.model_id; });
}

Status Damaged(const std::string& why) { return FailedPrecondition("index is damaged: " + why); }

}  // namespace

std::string SerializeIndex(const std::vector<ModelInfo>& models) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "format_version" << YAML::Value << kIndexFormatVersion;
  out << YAML::Key << "model_count" << YAML::Value << models.size();
  out << YAML::Key << "models" << YAML::Value << YAML::BeginSeq;
  for (const auto& m : models) {
    out << YAML::BeginMap;
    out << YAML::Key << "id" << YAML::Value << m.model_id;
    out << YAML::Key << "names" << YAML::Value << YAML::Flow << m.names;
    out << YAML::Key << "size_bytes" << YAML::Value << m.size_bytes;
    out << YAML::Key << "opset" << YAML::Value << m.opset;
    out << YAML::Key << "inputs" << YAML::Value << YAML::Flow << m.inputs;
    out << YAML::Key << "outputs" << YAML::Value << YAML::Flow << m.outputs;
    out << YAML::Key << "node_count" << YAML::Value << m.node_count;
    out << YAML::Key << "producer_name" << YAML::Value << m.producer_name;
    out << YAML::Key << "created_unix_seconds" << YAML::Value << m.created_unix_seconds;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  std::string body = std::string(out.c_str()) + "\n";
  return body + kChecksumPrefix + Sha256Hex(body) + "\n";
}

Result<std::vector<ModelInfo>> ParseIndex(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const std::exception& e) {
    return Damaged(std::string("not YAML (") + e.what() + ")");
  }
  int version = 0;
  try {
    version = root["format_version"].as<int>(0);
  } catch (const std::exception&) {
  }
  if (version != 1 && version != kIndexFormatVersion) {
    return FailedPrecondition("index has format_version " + std::to_string(version) +
                              "; this kilnd reads versions 1 and " + std::to_string(kIndexFormatVersion));
  }
  if (version == kIndexFormatVersion) {
    // The checksum line is the last line; a file cut anywhere (even at a line boundary) or
    // edited by hand fails here.
    size_t at = text.rfind(kChecksumPrefix);
    if (at == std::string::npos || (at > 0 && text[at - 1] != '\n')) return Damaged("no checksum line");
    std::string want = text.substr(at + sizeof(kChecksumPrefix) - 1);
    while (!want.empty() && (want.back() == '\n' || want.back() == '\r')) want.pop_back();
    std::string got = Sha256Hex(text.substr(0, at));
    if (want != got) return Damaged("checksum mismatch (the file was truncated or edited)");
  }
  std::vector<ModelInfo> models;
  try {
    if (root["models"] && !root["models"].IsSequence()) return Damaged("'models' is not a list");
    for (const auto& n : root["models"]) models.push_back(EntryFromYaml(n));
    if (version == kIndexFormatVersion && root["model_count"].as<size_t>() != models.size()) {
      return Damaged("model_count " + root["model_count"].as<std::string>() + " but " +
                     std::to_string(models.size()) + " entries");
    }
  } catch (const std::exception& e) {
    return Damaged(std::string("an entry does not parse (") + e.what() + ")");
  }
  std::set<std::string> ids, names;
  for (const auto& m : models) {
    if (!IsHexId(m.model_id)) return Damaged("entry with invalid id '" + m.model_id.substr(0, 80) + "'");
    if (!ids.insert(m.model_id).second) return Damaged("model " + m.model_id + " is listed twice");
    if (m.size_bytes == 0 || m.size_bytes > kMaxModelBytes) {
      return Damaged("model " + m.model_id + " has size_bytes " + std::to_string(m.size_bytes));
    }
    for (const auto& name : m.names) {
      if (!IsValidModelName(name)) return Damaged("model " + m.model_id + " has an invalid name");
      if (!names.insert(name).second) return Damaged("name '" + name + "' is given to two models");
    }
  }
  SortById(models);
  return models;
}

std::vector<ModelInfo> SalvageIndex(const std::string& text) {
  std::vector<ModelInfo> models;
  YAML::Node root;
  try {
    root = YAML::Load(text);
    for (const auto& n : root["models"]) {
      try {
        ModelInfo m = EntryFromYaml(n);
        if (IsHexId(m.model_id)) models.push_back(std::move(m));
      } catch (const std::exception&) {
      }
    }
  } catch (const std::exception&) {
  }
  return models;
}

}  // namespace kiln::store::internal
