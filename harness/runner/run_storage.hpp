#pragma once
// Storage of a run (the runner room, issue 51): the spool first (fsync'ed per record), then
// the database when asked for and reachable. A database failure is reported once and the run
// goes on spooling, so an outage loses nothing (`kcert upload` replays the spool later). What
// the storage has to tell its user goes to the caller's Note, as the suite's notes do.
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

#include "harness/engine/case_result.hpp"
#include "harness/runner/sink.hpp"
#include "harness/runner/suite.hpp"
#include "harness/store/postgres.hpp"
#include "harness/store/spool.hpp"

namespace kcert::runner {

// kcert's state folder: KCERT_HOME, else ".kcert" (spool/, reports/, postgres/ live in it).
std::string state_dir();

struct StorageOptions {
  bool db = false;
  std::string spool;      // a spool file; default with db: STATE/spool/RUN_ID.jsonl
  std::string spool_dir;  // or the folder for it (the file is named after the run and shard)
  std::string run_id;  // default: a new one
  std::string profile;
  int shard_index = 0;  // 0-based
  int shard_count = 1;
  nlohmann::json configuration = nlohmann::json::object();
  bool force = false;  // spool even without db (nightly always spools)
  // What the run record says made it: the caller's version and git revision.
  std::string kcert_version;
  std::string git_revision;
  // Lines for the user: the run and its spool, where results go, a database that went away,
  // a result it refused ("warning: ..." for those). Each is one line without "kcert: "; texts
  // from results and the server are passed as they are (escaping is the printer's job).
  Note note;
};

// A sink (sink.hpp): the run record when made, each result as it comes, the finish record
// ("finished") when the run ends; a run ended by an exception writes no finish record.
class RunStorage : public ResultSink {
 public:
  explicit RunStorage(const StorageOptions& o);
  ~RunStorage() override;
  RunStorage(const RunStorage&) = delete;
  RunStorage& operator=(const RunStorage&) = delete;
  void store(const engine::CaseResult& result);
  void finish(const std::string& status);
  void case_finished(const std::vector<engine::CaseResult>& done) override { store(done.back()); }
  void run_finished(const std::vector<engine::CaseResult>&) override { finish("finished"); }

  bool active() const { return spool_ != nullptr; }
  bool database_ok() const { return db_ != nullptr; }
  const store::RunInfo& run() const { return *run_; }
  const std::string& spool_path() const;

 private:
  void database_down(const std::string& why);
  void tell(const std::string& line) const {
    if (note_) note_(line);
  }

  std::optional<store::RunInfo> run_;
  nlohmann::json run_record_;
  std::unique_ptr<store::SpoolWriter> spool_;
  std::unique_ptr<store::ResultStore> db_;
  int refused_ = 0;  // results the database refused (each in the spool, named in a warning)
  bool wanted_db_ = false;
  bool run_closed_ = false;  // the --run-id names a run the database holds as finished or aborted
  Note note_;
};

}  // namespace kcert::runner
