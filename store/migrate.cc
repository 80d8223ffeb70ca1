#include "store/migrate.h"

#include <optional>
#include <vector>

namespace kiln::store {

namespace {

constexpr size_t kChunkBytes = 1 << 20;

// What the target has of one model of the data dir.
struct Plan {
  const ModelInfo* model = nullptr;
  bool indexed = false;                 // the target indexes the id
  bool blob_present = false;            // and holds its bytes (verified)
  std::vector<std::string> new_names;   // names the target lacks
};

// Reads `reader` to its end: the reader checks the digest with the last chunk (DATA_LOSS).
Status Drain(BlobReader& reader) {
  std::string chunk;
  do {
    KILN_RETURN_IF_ERROR(reader.Read(kChunkBytes, &chunk));
  } while (!chunk.empty());
  return Status::Ok();
}

std::string Names(const ModelInfo& m) {
  if (m.names.empty()) return "(no name)";
  std::string out;
  for (const auto& n : m.names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// Fills `plan` for `m`; a conflict is appended to `conflicts`, an error of the target returned.
Status Check(const ModelInfo& m, ModelIndex* index, BlobStore* blobs, Plan* plan,
             std::vector<std::string>* conflicts) {
  plan->model = &m;
  auto entry = index->Get(m.model_id);
  if (entry.ok()) {
    plan->indexed = true;
    if (entry->size_bytes != m.size_bytes) {
      conflicts->push_back("model " + m.model_id + ": the database indexes it with " +
                           std::to_string(entry->size_bytes) + " bytes, the data dir holds " +
                           std::to_string(m.size_bytes));
      return Status::Ok();
    }
  } else if (entry.status().code() != StatusCode::kNotFound) {
    return entry.status().WithContext("model " + m.model_id);
  }
  auto size = blobs->Size(m.model_id);
  if (size.ok()) {
    if (*size != m.size_bytes) {
      conflicts->push_back("model " + m.model_id + ": the database holds " + std::to_string(*size) +
                           " bytes under this id, the data dir " + std::to_string(m.size_bytes));
      return Status::Ok();
    }
    // Same size is not same bytes: read them through the digest check.
    auto reader = blobs->Open(m.model_id);
    if (!reader.ok()) return reader.status().WithContext("model " + m.model_id);
    Status read = Drain(**reader);
    if (read.code() == StatusCode::kDataLoss) {
      conflicts->push_back("model " + m.model_id + ": the database holds different bytes under this id (" +
                           read.message() + ")");
      return Status::Ok();
    }
    if (!read.ok()) return read.WithContext("model " + m.model_id);
    plan->blob_present = true;
  } else if (size.status().code() != StatusCode::kNotFound) {
    return size.status().WithContext("model " + m.model_id);
  }
  for (const auto& name : m.names) {
    auto owner = index->Get(name);
    if (owner.ok()) {
      if (owner->model_id != m.model_id) {
        conflicts->push_back("name '" + name + "' of model " + m.model_id + " points at another model in the database (" +
                             owner->model_id + ")");
      }
      continue;
    }
    if (owner.status().code() != StatusCode::kNotFound) return owner.status().WithContext("name '" + name + "'");
    plan->new_names.push_back(name);
  }
  return Status::Ok();
}

// Streams the data dir's object into the blob store; both ends check the SHA-256.
Status CopyBytes(const EmbeddedSnapshot& from, const ModelInfo& m, BlobStore* blobs) {
  auto reader = from.OpenBytes(m.model_id);
  if (!reader.ok()) return reader.status();
  auto writer = blobs->Begin(m.model_id, m.size_bytes);
  if (!writer.ok()) return writer.status();
  std::string chunk;
  for (;;) {
    KILN_RETURN_IF_ERROR((*reader)->Read(kChunkBytes, &chunk));
    if (chunk.empty()) break;
    KILN_RETURN_IF_ERROR((*writer)->Append(chunk.data(), chunk.size()));
  }
  return (*writer)->Commit();
}

}  // namespace

Result<MigrateReport> MigrateEmbeddedStore(const EmbeddedSnapshot& from, ModelIndex* index, BlobStore* blobs,
                                           const MigrateOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.on_model) options.on_model(line);
  };
  MigrateReport report;
  report.missing_objects = from.missing().size();
  for (const auto& m : from.missing()) {
    say("skipped " + m.model_id + " (" + Names(m) + "): its object is gone from the data dir (kilnd drops the entry)");
  }

  // Everything is checked before anything is written: a conflict leaves the target as it was.
  std::vector<Plan> plans(from.models().size());
  std::vector<std::string> conflicts;
  for (size_t i = 0; i < plans.size(); ++i) {
    KILN_RETURN_IF_ERROR(Check(from.models()[i], index, blobs, &plans[i], &conflicts));
  }
  if (!conflicts.empty()) {
    std::string msg = std::to_string(conflicts.size()) + " conflict(s) with the database; nothing was written:";
    for (const auto& c : conflicts) msg += "\n  " + c;
    return FailedPrecondition(msg);
  }

  const char* verb = options.dry_run ? "would move" : "moved";
  for (const Plan& p : plans) {
    const ModelInfo& m = *p.model;
    if (!p.blob_present) {
      if (options.dry_run) {
        // What a real run would read: the data dir's bytes, through their digest check.
        auto reader = from.OpenBytes(m.model_id);
        if (!reader.ok()) return reader.status();
        KILN_RETURN_IF_ERROR(Drain(**reader));
      } else {
        Status st = CopyBytes(from, m, blobs);
        if (!st.ok()) return st.WithContext("model " + m.model_id);
      }
      report.bytes_moved += m.size_bytes;
    } else {
      report.bytes_present += m.size_bytes;
    }
    if (!options.dry_run) {
      // A nameless model (its index was rebuilt from objects) is indexed by id alone.
      std::vector<std::string> names = p.new_names;
      if (!p.indexed && names.empty()) names.push_back("");
      for (const auto& name : names) {
        auto put = index->PutIfNameFree(m, name);
        if (!put.ok()) return put.status().WithContext("model " + m.model_id);
      }
    }
    report.names_added += p.new_names.size();
    std::string names_note = p.new_names.empty() ? "" : ", names added: ";
    for (size_t i = 0; i < p.new_names.size(); ++i) names_note += (i ? "," : "") + p.new_names[i];
    if (!p.indexed) {
      ++report.models_moved;
      say(std::string(verb) + " " + m.model_id + " (" + Names(m) + ", " + std::to_string(m.size_bytes) + " bytes)");
    } else {
      ++report.models_present;
      if (!p.blob_present) ++report.blobs_restored;
      say("already present " + m.model_id + " (" + Names(m) + ")" +
          (p.blob_present ? std::string() : std::string(options.dry_run ? ", bytes would be restored" : ", bytes restored")) +
          names_note);
    }
  }
  return report;
}

}  // namespace kiln::store
