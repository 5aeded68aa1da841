#pragma once
// PostgreSQL sink (libpqxx 6.4): migrations, idempotent storage of spool records, and the
// detection-history query. Connection by libpq conventions: KCERT_DB (a URL or key=value
// string) when set, else the PG* variables and the service file. Passwords never appear in
// messages: targets are described by user, host, port and database only.
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kcert::store {

class DatabaseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct MigrationState {
  int version = 0;
  std::string name;
  bool applied = false;
  std::string applied_at;
};

struct UploadSummary {
  int runs = 0;
  int results_added = 0;
  int results_present = 0;  // already stored: a repeated upload adds nothing
};

struct HistoryQuery {
  std::string case_id;
  std::string environment;  // fingerprint, exact
  std::string hardware;     // substring of CPU model or GPU name, case-insensitive
  std::string since;        // a date or timestamp PostgreSQL understands
};

struct HistoryRow {
  std::string started_at, run_id, fingerprint, cpu_model, gpu, torch_version;
  std::string verdict, algebra, bias, variance;
  std::optional<double> variance_u, max_abs_z;
  std::optional<bool> detected, false_alarm;
  std::string kind, reference_version, production_version, calibration;
};

// KCERT_DB, or "" (libpq defaults: PG* variables, service file).
std::string conninfo_from_environment();

class ResultStore {
 public:
  // Throws DatabaseError (naming the target, never a password) when it cannot connect.
  explicit ResultStore(const std::string& conninfo);
  ~ResultStore();

  std::string describe() const;  // "user@host:port/db"

  std::vector<MigrationState> migration_status();
  // Applies pending migrations in order, each in its own transaction; returns how many.
  int migrate();

  // Spool records (spool.hpp). Each call is one transaction; repeats are no-ops.
  void store_run(const nlohmann::json& run_record);
  bool store_result(const nlohmann::json& run_record, const nlohmann::json& result_record);  // false: present
  void store_finish(const nlohmann::json& finish_record);

  std::vector<HistoryRow> history(const HistoryQuery& query);

 private:
  struct Connection;  // holds the pqxx::connection; keeps libpqxx out of this header
  std::unique_ptr<Connection> conn_;
};

// Replays a spool: every run record, then every result (each in its own transaction),
// then finish records. Results already stored are counted, not duplicated.
UploadSummary upload(ResultStore& store, const std::vector<nlohmann::json>& records);

}  // namespace kcert::store
