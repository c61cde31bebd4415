// The script worker's embedding tables (script_worker.h: EmbeddingPull,
// EmbeddingGrad, and the job option "embedding_tables").

#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "capi/script_worker.h"
#include "common/embedding.h"
#include "common/json.h"
#include "common/rejoin.h"
#include "common/status_macros.h"

namespace pstrain {
namespace {

absl::Status TableKeyError(int index, const std::string& key, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("job option \"embedding_tables\": table ", index,
                                                 ", \"", key, "\": ", what));
}

absl::StatusOr<double> Number(int index, const std::string& key, const google::protobuf::Value& v) {
  if (v.kind_case() != google::protobuf::Value::kNumberValue || !std::isfinite(v.number_value())) {
    return TableKeyError(index, key, "expected a number");
  }
  return v.number_value();
}

absl::StatusOr<int64_t> Whole(int index, const std::string& key, const google::protobuf::Value& v) {
  ASSIGN_OR_RETURN(const double d, Number(index, key, v));
  if (d < 0 || d != std::floor(d) || d > 9e15) {
    return TableKeyError(index, key, "expected a whole number >= 0");
  }
  return static_cast<int64_t>(d);
}

absl::StatusOr<proto::EmbeddingTableConfig> TableFromJson(int index,
                                                          const google::protobuf::Value& value) {
  if (value.kind_case() != google::protobuf::Value::kStructValue) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job option \"embedding_tables\": table ", index, " is not a JSON object"));
  }
  proto::EmbeddingTableConfig t;
  // torch's defaults: Adagrad's eps and SparseAdam's betas and eps (once
  // the optimizer is known, where none was given).
  bool eps_given = false;
  t.set_beta1(0.9);
  t.set_beta2(0.999);
  t.set_init_std(1.0);  // nn.Embedding's N(0, 1)
  for (const auto& [key, v] : value.struct_value().fields()) {
    if (key == "name") {
      if (v.kind_case() != google::protobuf::Value::kStringValue) {
        return TableKeyError(index, key, "expected a string");
      }
      t.set_name(v.string_value());
    } else if (key == "dim") {
      ASSIGN_OR_RETURN(const int64_t d, Whole(index, key, v));
      t.set_dim(static_cast<int32_t>(std::min<int64_t>(d, INT32_MAX)));
    } else if (key == "num_embeddings") {
      ASSIGN_OR_RETURN(const int64_t n, Whole(index, key, v));
      t.set_num_embeddings(n);
    } else if (key == "optimizer") {
      if (v.kind_case() != google::protobuf::Value::kStringValue) {
        return TableKeyError(index, key, "expected a string");
      }
      ASSIGN_OR_RETURN(const proto::RowOptimizer o, ParseRowOptimizer(v.string_value()));
      t.set_optimizer(o);
    } else if (key == "init") {
      if (v.kind_case() != google::protobuf::Value::kStringValue ||
          (v.string_value() != "normal" && v.string_value() != "uniform")) {
        return TableKeyError(index, key, "expected \"normal\" or \"uniform\"");
      }
      t.set_init_uniform(v.string_value() == "uniform");
    } else if (key == "lr" || key == "eps" || key == "beta1" || key == "beta2" ||
               key == "initial_accumulator" || key == "init_std") {
      ASSIGN_OR_RETURN(const double d, Number(index, key, v));
      eps_given = eps_given || key == "eps";
      const google::protobuf::FieldDescriptor* f = t.GetDescriptor()->FindFieldByName(key);
      t.GetReflection()->SetDouble(&t, f, d);
    } else if (key == "admit_after" || key == "evict_after_steps" || key == "max_rows_per_ps") {
      ASSIGN_OR_RETURN(const int64_t n, Whole(index, key, v));
      if (key == "admit_after") t.set_admit_after(n);
      if (key == "evict_after_steps") t.set_evict_after_updates(n);
      if (key == "max_rows_per_ps") t.set_max_rows_per_ps(n);
    } else {
      return TableKeyError(index, key, "not an option of an embedding table");
    }
  }
  if (!eps_given) t.set_eps(t.optimizer() == proto::ROW_ADAGRAD ? kAdagradEps : kAdamEps);
  return t;
}

}  // namespace

absl::StatusOr<std::vector<proto::EmbeddingTableConfig>> EmbeddingTablesFromJson(
    const google::protobuf::Value& value) {
  if (value.kind_case() != google::protobuf::Value::kListValue) {
    return absl::InvalidArgumentError(
        "job option \"embedding_tables\": expected an array of tables (JSON objects)");
  }
  std::vector<proto::EmbeddingTableConfig> tables;
  for (const google::protobuf::Value& v : value.list_value().values()) {
    ASSIGN_OR_RETURN(proto::EmbeddingTableConfig t,
                     TableFromJson(static_cast<int>(tables.size()), v));
    tables.push_back(std::move(t));
  }
  proto::JobConfig job;
  for (const proto::EmbeddingTableConfig& t : tables) *job.add_tables() = t;
  RETURN_IF_ERROR(ValidateEmbeddingTables(job));
  return tables;
}

absl::Status ScriptWorker::CheckEmbeddingCall(absl::string_view call, int table,
                                              absl::Span<const int64_t> ids, size_t floats) const {
  if (table < 0 || table >= job_.tables_size()) {
    return UsageError(absl::StrCat(call, ": table ", table, " is not one of the job's ",
                                   job_.tables_size(), " embedding tables"));
  }
  const proto::EmbeddingTableConfig& t = job_.tables(table);
  if (floats != ids.size() * static_cast<size_t>(t.dim())) {
    return UsageError(absl::StrCat(call, ": ", floats, " floats for ", ids.size(), " rows of ",
                                   t.dim()));
  }
  absl::flat_hash_set<int64_t> seen;
  seen.reserve(ids.size());
  for (int64_t id : ids) {
    if (t.num_embeddings() > 0 && (id < 0 || id >= t.num_embeddings())) {
      return UsageError(absl::StrCat(call, ": id ", id, " of table \"", t.name(),
                                     "\" is outside [0, ", t.num_embeddings(), ")"));
    }
    if (!seen.insert(id).second) {
      return UsageError(absl::StrCat(call, ": id ", id, " of table \"", t.name(),
                                     "\" is given twice (give each id once)"));
    }
  }
  return absl::OkStatus();
}

absl::Status ScriptWorker::EmbeddingPull(int table, absl::Span<const int64_t> ids,
                                         absl::Span<float> rows) {
  EmbeddingRows request;
  request.table = table;
  request.ids = ids;
  request.rows = rows;
  return EmbeddingPull({&request, 1});
}

absl::Status ScriptWorker::EmbeddingPull(absl::Span<EmbeddingRows> requests) {
  RETURN_IF_ERROR(failed_);
  if (requests.empty()) return absl::OkStatus();
  for (EmbeddingRows& r : requests) {
    RETURN_IF_ERROR(CheckEmbeddingCall("EmbeddingPull", r.table, r.ids, r.rows.size()));
    r.dim = job_.tables(r.table).dim();
  }
  for (;;) {
    // A step's forward takes what the last step's prefetch brought; a read
    // between steps (read_rows, an evaluation) asks the ps.
    absl::Status s = runtime_->EmbeddingPull(requests, /*prefetched=*/in_step_);
    if (s.ok() || !IsRejoin(s)) return Latch(std::move(s));
    // A ps went away: join again (the tables start afresh with it), read again.
    RETURN_IF_ERROR(Latch(Recover(std::move(s))));
    if (in_step_) step_void_ = true;
  }
}

absl::Status ScriptWorker::EmbeddingPrefetch(absl::Span<EmbeddingRows> requests) {
  RETURN_IF_ERROR(failed_);
  for (EmbeddingRows& r : requests) {
    const size_t dim = r.table >= 0 && r.table < job_.tables_size()
                           ? static_cast<size_t>(job_.tables(r.table).dim())
                           : 0;
    RETURN_IF_ERROR(CheckEmbeddingCall("EmbeddingPrefetch", r.table, r.ids, r.ids.size() * dim));
    r.dim = static_cast<int>(dim);
  }
  if (absl::Status s = runtime_->StageEmbeddingPrefetch(requests); !s.ok()) {
    return UsageError(absl::StrCat("EmbeddingPrefetch: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status ScriptWorker::EmbeddingGrad(int table, absl::Span<const int64_t> ids,
                                         absl::Span<const float> grads, double lr) {
  RETURN_IF_ERROR(failed_);
  if (!in_step_) return UsageError("EmbeddingGrad: no step is under way (BeginStep first)");
  RETURN_IF_ERROR(CheckEmbeddingCall("EmbeddingGrad", table, ids, grads.size()));
  TableGrads& t = table_grads_[table];
  if (t.has_grad) {
    return UsageError(absl::StrCat("EmbeddingGrad: table ", table,
                                   " has its gradient for this step already (add them up first)"));
  }
  for (float g : grads) {
    if (!std::isfinite(g)) {
      return UsageError(absl::StrCat("EmbeddingGrad: a row gradient of table ", table,
                                     " is not finite"));
    }
  }
  if (!std::isfinite(lr)) {
    return UsageError(absl::StrCat("EmbeddingGrad: lr ", lr, " is not finite"));
  }
  t.has_grad = true;
  t.lr = lr;
  t.ids.assign(ids.begin(), ids.end());
  t.grads.assign(grads.begin(), grads.end());
  return absl::OkStatus();
}

absl::Status ScriptWorker::PushEmbeddingGrads() {
  if (job_.tables_size() == 0) return absl::OkStatus();
  std::vector<EmbeddingRows> rows(table_grads_.size());
  for (size_t t = 0; t < rows.size(); ++t) {
    rows[t].table = static_cast<int>(t);
    rows[t].dim = job_.tables(static_cast<int>(t)).dim();
    rows[t].ids = table_grads_[t].ids;
    rows[t].grads = table_grads_[t].grads;
    rows[t].has_grad = table_grads_[t].has_grad;
    rows[t].lr = table_grads_[t].lr;
  }
  const absl::Status s = runtime_->EmbeddingPush(step_.examples, rows);
  for (TableGrads& t : table_grads_) t = TableGrads();
  return s;
}

}  // namespace pstrain
