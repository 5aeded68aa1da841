#pragma once
// PostgreSQL sink (libpqxx 6.4): migrations, idempotent storage of spool records, and the
// detection-history query. Connection by libpq conventions: KCERT_DB (a URL or key=value
// string) when set, else the PG* variables and the service file. Passwords never appear in
// messages: targets are described by user, host, port and database only.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kcert::store {

class DatabaseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The server refused one record's data (a value it cannot hold, a limit of an index): the
// connection is fine and the next record may be stored. Everything else is the database
// being unavailable.
class RecordRefused : public DatabaseError {
 public:
  using DatabaseError::DatabaseError;
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
  // Results the server refused (case id, reason): skipped, the rest stored.
  std::vector<std::pair<std::string, std::string>> refused;
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
  std::string profile, kcert_version;  // of the run
  std::int64_t replicates = 0;
  bool variance_short = false;  // a variance PASS whose evidence falls short of the horizon
  bool algebra_applicable = true;  // false: an opaque production, its algebra gate did not run
};

// A run as the database knows it (for closing shards and comparing nights).
struct RunSummary {
  std::string run_id, status, profile, started_at;
  int shard_count = 1;
  std::vector<int> shards_started, shards_finished;  // 0-based shard indices
  nlohmann::json configuration = nlohmann::json::object();  // how it was started (cases, replicates, ...)
};

// One stored result of a run: its document, K-hat sample and where it ran.
struct StoredResult {
  std::string case_id, kind, family, fingerprint, calibration;
  int shard_index = 0;
  nlohmann::json document;
  std::vector<double> khat;  // +inf kept
  // The run it belongs to: id, start (UTC, ISO 8601), the kcert that ran it, its profile.
  std::string run_id, run_started_at, run_kcert_version, run_profile;
};

// A stored variance-gate calibration (schema/003_calibration.sql).
struct Calibration {
  long long id = 0;
  std::string fingerprint, family, rule_version, created_by, created_at;
  double warn_k = 2.0, fail_k = 10.0, previous_warn_k = 2.0, previous_fail_k = 10.0, max_u = 0.0;
  // The bias gate's ULP floors (schema/004_bias_floors.sql); unset: the shipped floors.
  std::optional<double> bias_c, bias_c_magnitude, previous_bias_c, previous_bias_c_magnitude;
  int positives = 0;
  std::vector<std::string> source_runs;
  nlohmann::json details = nlohmann::json::object();
  std::string label() const { return "cal-" + std::to_string(id); }
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
  // Texts are stored as valid UTF-8 without NUL, each at most 1 MiB; throws RecordRefused when
  // the server refuses the record's data anyway, DatabaseError when it is unavailable.
  bool store_result(const nlohmann::json& run_record, const nlohmann::json& result_record);  // false: present
  void store_finish(const nlohmann::json& finish_record);

  std::vector<HistoryRow> history(const HistoryQuery& query);
  // Every case id with a stored result, sorted (to suggest one for an id with none).
  std::vector<std::string> case_ids();

  std::optional<RunSummary> run_summary(const std::string& run_id);
  // Runs still marked `running` (a killed or interrupted run stays so), oldest first.
  std::vector<RunSummary> unfinished_runs();
  // Marks a running run `aborted` (its stored results stay); false when it is not running.
  bool abandon_run(const std::string& run_id);
  // Marks a running run whose every shard has finished `finished` (at its last shard's
  // finish): what a finish lost to a crash or an older kcert's race left behind. False when
  // the run is not running or a shard has not reported.
  bool close_if_complete(const std::string& run_id);
  std::vector<StoredResult> run_results(const std::string& run_id);
  // For every case of the run: its latest result in the same environment from an earlier
  // finished run of the same profile (what "since the last run" compares against).
  std::vector<StoredResult> previous_results(const std::string& run_id);
  // The newest finished run (of any shard count) holding results in this environment.
  std::optional<std::string> latest_finished_run(const std::string& fingerprint, const std::string& profile);

  // Newest calibration per family in the environment (none: defaults).
  std::map<std::string, Calibration> latest_calibrations(const std::string& fingerprint);
  std::vector<Calibration> calibrations(const std::string& fingerprint);  // all, newest first; "" = every environment
  long long store_calibration(const Calibration& c);  // returns the id

 private:
  bool store_result_as_is(const nlohmann::json& run_record, const nlohmann::json& result_record);
  struct Connection;  // holds the pqxx::connection; keeps libpqxx out of this header
  std::unique_ptr<Connection> conn_;
};

// Replays a spool: every run record, then every result (each in its own transaction),
// then finish records. Results already stored are counted, not duplicated; a result the
// server refuses is listed in `refused` and the others are stored.
UploadSummary upload(ResultStore& store, const std::vector<nlohmann::json>& records);

}  // namespace kcert::store
