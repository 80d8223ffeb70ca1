#include "store/pg/pg_model_index.h"

#include <optional>

#include <nlohmann/json.hpp>

namespace kiln::store::pg {
namespace {

constexpr char kColumns[] =
    "m.model_id, m.size_bytes, m.opset, m.node_count, m.producer_name, m.inputs::text, m.outputs::text,"
    " m.created_unix_seconds, (SELECT coalesce(json_agg(n.name ORDER BY n.name), '[]')::text"
    " FROM kiln_model_names n WHERE n.model_id = m.model_id)";

std::vector<std::string> JsonStrings(const pqxx::field& f) {
  std::vector<std::string> out;
  for (const auto& v : nlohmann::json::parse(f.c_str())) out.push_back(v.get<std::string>());
  return out;
}

ModelInfo FromRow(const pqxx::row& r) {
  ModelInfo m;
  m.model_id = r[0].as<std::string>();
  m.size_bytes = r[1].as<uint64_t>();
  m.opset = r[2].as<int64_t>();
  m.node_count = r[3].as<int64_t>();
  m.producer_name = r[4].as<std::string>();
  m.inputs = JsonStrings(r[5]);
  m.outputs = JsonStrings(r[6]);
  m.created_unix_seconds = r[7].as<int64_t>();
  m.names = JsonStrings(r[8]);
  return m;
}

Status NotFoundStatus(const std::string& id_or_name) {
  return NotFound("model '" + id_or_name.substr(0, 160) + "' not found");
}

}  // namespace

PgModelIndex::PgModelIndex(PgPool* pool) : pool_(pool) {
  pool_->Prepare("kiln_model_by_id", std::string("SELECT ") + kColumns + " FROM kiln_models m WHERE m.model_id = $1");
  pool_->Prepare("kiln_model_by_name", std::string("SELECT ") + kColumns +
                                           " FROM kiln_models m JOIN kiln_model_names k ON k.model_id = m.model_id"
                                           " WHERE k.name = $1");
  pool_->Prepare("kiln_model_list", std::string("SELECT ") + kColumns +
                                        " FROM kiln_models m WHERE m.model_id > $1 ORDER BY m.model_id"
                                        " LIMIT NULLIF($2::bigint, 0)");
  pool_->Prepare("kiln_model_insert",
                 "INSERT INTO kiln_models (model_id, size_bytes, opset, node_count, producer_name, inputs,"
                 " outputs, created_unix_seconds) VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, $8)"
                 " ON CONFLICT (model_id) DO NOTHING");
  pool_->Prepare("kiln_model_lock", "SELECT 1 FROM kiln_models WHERE model_id = $1 FOR UPDATE");
  pool_->Prepare("kiln_name_lock", "SELECT pg_advisory_xact_lock(hashtextextended($1, 19))");
  pool_->Prepare("kiln_name_owner", "SELECT model_id FROM kiln_model_names WHERE name = $1");
  pool_->Prepare("kiln_name_upsert",
                 "INSERT INTO kiln_model_names (name, model_id) VALUES ($1, $2)"
                 " ON CONFLICT (name) DO UPDATE SET model_id = EXCLUDED.model_id");
  pool_->Prepare("kiln_name_delete", "DELETE FROM kiln_model_names WHERE name = $1 RETURNING model_id");
  pool_->Prepare("kiln_model_delete", "DELETE FROM kiln_models WHERE model_id = $1");
  pool_->Prepare("kiln_model_delete_unnamed",
                 "DELETE FROM kiln_models WHERE model_id = $1"
                 " AND NOT EXISTS (SELECT 1 FROM kiln_model_names WHERE model_id = $1)");
  pool_->Prepare("kiln_model_totals", "SELECT count(*), coalesce(sum(size_bytes), 0) FROM kiln_models");
}

Result<ModelIndex::PutResult> PgModelIndex::Put(const ModelInfo& info, const std::string& name) {
  return PutImpl(info, name, /*move_name=*/true);
}

Result<ModelIndex::PutResult> PgModelIndex::PutIfNameFree(const ModelInfo& info, const std::string& name) {
  return PutImpl(info, name, /*move_name=*/false);
}

Result<ModelIndex::PutResult> PgModelIndex::PutImpl(const ModelInfo& info, const std::string& name, bool move_name) {
  if (!IsModelId(info.model_id)) return InvalidArgument("model id '" + info.model_id.substr(0, 80) + "' is not a SHA-256");
  if (!name.empty()) {
    if (Status s = CheckModelName(name); !s.ok()) return s;
  }
  if (info.size_bytes == 0) return InvalidArgument("model " + info.model_id + ": size_bytes 0");
  const std::string inputs = nlohmann::json(info.inputs).dump();
  const std::string outputs = nlohmann::json(info.outputs).dump();
  PutResult result;
  Status st = pool_->Transact("indexing model " + info.model_id, [&](pqxx::work& tx) -> Status {
    result = PutResult();
    if (!name.empty()) tx.exec_prepared("kiln_name_lock", name);
    pqxx::result ins = tx.exec_prepared("kiln_model_insert", info.model_id, info.size_bytes, info.opset,
                                        info.node_count, info.producer_name, inputs, outputs,
                                        info.created_unix_seconds);
    result.already_indexed = ins.affected_rows() == 0;
    // Locked: a concurrent Remove by name waits, then sees the name this Put adds.
    if (tx.exec_prepared("kiln_model_lock", info.model_id).empty()) {
      return {StatusCode::kAborted, "model " + info.model_id + " was removed concurrently; retry"};
    }
    if (!name.empty()) {
      pqxx::result owner = tx.exec_prepared("kiln_name_owner", name);
      if (!owner.empty() && owner[0][0].as<std::string>() != info.model_id) {
        if (!move_name) return NameTaken(name, owner[0][0].as<std::string>());  // rolls back the insert too
        result.replaced_model_id = owner[0][0].as<std::string>();
      }
      tx.exec_prepared("kiln_name_upsert", name, info.model_id);
    }
    pqxx::result row = tx.exec_prepared("kiln_model_by_id", info.model_id);
    result.info = FromRow(row[0]);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return result;
}

Result<ModelInfo> PgModelIndex::Get(const std::string& id_or_name) {
  std::optional<ModelInfo> found;
  Status st = pool_->ReadOne("looking up model " + id_or_name.substr(0, 160), [&](pqxx::nontransaction& tx) -> Status {
    pqxx::result r = tx.exec_prepared(IsModelId(id_or_name) ? "kiln_model_by_id" : "kiln_model_by_name", id_or_name);
    if (!r.empty()) found = FromRow(r[0]);
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!found) return NotFoundStatus(id_or_name);
  return *std::move(found);
}

Result<std::vector<ModelInfo>> PgModelIndex::ListAfter(const std::string& after_id, size_t limit) {
  std::vector<ModelInfo> out;
  Status st = pool_->ReadOne("listing models", [&](pqxx::nontransaction& tx) -> Status {
    out.clear();
    for (const auto& row : tx.exec_prepared("kiln_model_list", after_id, static_cast<int64_t>(limit))) {
      out.push_back(FromRow(row));
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

Result<ModelIndex::Removed> PgModelIndex::Remove(const std::string& id_or_name) {
  std::optional<Removed> removed;
  Status st = pool_->Transact("removing model " + id_or_name.substr(0, 160), [&](pqxx::work& tx) -> Status {
    removed.reset();
    if (IsModelId(id_or_name)) {
      if (tx.exec_prepared("kiln_model_delete", id_or_name).affected_rows() > 0) {
        removed = Removed{id_or_name, true};
      }
      return Status::Ok();
    }
    pqxx::result r = tx.exec_prepared("kiln_name_delete", id_or_name);
    if (r.empty()) return Status::Ok();
    const std::string id = r[0][0].as<std::string>();
    tx.exec_prepared("kiln_model_lock", id);  // after a concurrent Put that names it (pg_model_index.h)
    removed = Removed{id, tx.exec_prepared("kiln_model_delete_unnamed", id).affected_rows() > 0};
    return Status::Ok();
  });
  if (!st.ok()) return st;
  if (!removed) return NotFoundStatus(id_or_name);
  return *removed;
}

Result<ModelIndex::Totals> PgModelIndex::GetTotals() {
  Totals t;
  Status st = pool_->ReadOne("counting models", [&](pqxx::nontransaction& tx) -> Status {
    pqxx::row r = tx.exec_prepared1("kiln_model_totals");
    t.models = r[0].as<uint64_t>();
    t.bytes = r[1].as<uint64_t>();
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return t;
}

}  // namespace kiln::store::pg
