#include "api/models.h"

#include <algorithm>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

namespace kiln::api {
namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 (RFC 3629, table in section 4).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
  unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;  // overlong
    if (c == 0xED && b(1) > 0x9F) return 0;  // surrogates
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;  // overlong
    if (c == 0xF4 && b(1) > 0x8F) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = Utf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace

std::string ValidUtf8(std::string_view s) {
  if (IsValidUtf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    size_t n = Utf8SequenceLength(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

void EnsureUtf8(google::protobuf::Message* message) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(*message, &fields);
  for (const FieldDescriptor* f : fields) {
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(*message, f); ++i) {
          std::string v = r->GetRepeatedString(*message, f, i);
          if (!IsValidUtf8(v)) r->SetRepeatedString(message, f, i, ValidUtf8(v));
        }
      } else {
        std::string v = r->GetString(*message, f);
        if (!IsValidUtf8(v)) r->SetString(message, f, ValidUtf8(v));
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(*message, f); ++i) EnsureUtf8(r->MutableRepeatedMessage(message, f, i));
      } else {
        EnsureUtf8(r->MutableMessage(message, f));
      }
    }
  }
}

Result<std::string> ResolveModelRef(const store::ModelStore& store, const std::string& ref) {
  auto exact = store.Get(ref);  // an id, then a name
  if (exact.ok() || exact.status().code() != StatusCode::kNotFound) {
    if (!exact.ok()) return exact.status();
    return ref;
  }
  const bool hex = !ref.empty() && std::all_of(ref.begin(), ref.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
  if (hex && ref.size() < kMinModelIdPrefix) {
    return NotFound("no model with id or name '" + ref + "' (an id prefix needs at least " +
                    std::to_string(kMinModelIdPrefix) + " hex digits)");
  }
  const bool prefix = hex && ref.size() < 64;
  if (!prefix) return exact.status();
  // One more than listed: whether there are more.
  auto found = store.WithIdPrefix(ref, kMaxPrefixCandidates + 1);
  if (!found.ok()) return found.status();
  const std::vector<store::ModelInfo>& hits = *found;
  if (hits.empty()) return NotFound("no model with id, name or id prefix '" + ref + "'");
  if (hits.size() == 1) return hits[0].model_id;
  std::string list;
  for (size_t i = 0; i < hits.size() && i < kMaxPrefixCandidates; ++i) {
    list += (i ? ", " : "") + hits[i].model_id.substr(0, std::max<size_t>(16, ref.size() + 8));  // enough to tell apart
    if (!hits[i].names.empty()) list += " (" + hits[i].names[0].substr(0, 32) + ")";
  }
  if (hits.size() > kMaxPrefixCandidates) list += ", and more";
  return InvalidArgument("model id prefix '" + ref + "' is ambiguous: it begins " + list +
                         "; give more digits or a name");
}

void ToProto(const store::ModelInfo& info, kiln::v1::Model* out) {
  out->set_model_id(info.model_id);
  for (const auto& n : info.names) out->add_names(n);
  out->set_size_bytes(info.size_bytes);
  out->set_opset(info.opset);
  for (const auto& s : info.inputs) out->add_inputs(ValidUtf8(s));
  for (const auto& s : info.outputs) out->add_outputs(ValidUtf8(s));
  out->set_node_count(info.node_count);
  out->set_producer_name(ValidUtf8(info.producer_name));
  out->set_created_unix_seconds(info.created_unix_seconds);
}

}  // namespace kiln::api
