#include "harness/runner/run_storage.hpp"

#include "harness/runner/errors.hpp"
#include "harness/runner/isolated.hpp"
#include "harness/store/environment.hpp"

#include <cstdlib>

namespace kcert::runner {

std::string state_dir() {
  const char* home = std::getenv("KCERT_HOME");
  return home && *home ? home : ".kcert";
}

RunStorage::RunStorage(const StorageOptions& o) : wanted_db_(o.db), note_(o.note) {
  if (!o.db && o.spool.empty() && !o.force) return;
  run_.emplace();
  run_->run_id = o.run_id.empty() ? store::new_run_id() : o.run_id;
  run_->started_at = store::utc_now_iso();
  run_->kcert_version = o.kcert_version;
  run_->git_revision = o.git_revision;
  run_->profile = o.profile;
  run_->shard_index = o.shard_index;
  run_->shard_count = o.shard_count;
  run_->configuration = o.configuration;
  run_->environment = store::detect_environment();
  const std::string suffix = o.shard_count > 1 ? "-shard" + std::to_string(o.shard_index + 1) : "";
  const std::string folder = o.spool_dir.empty() ? state_dir() + "/spool" : o.spool_dir;
  const std::string path = o.spool.empty() ? folder + "/" + run_->run_id + suffix + ".jsonl" : o.spool;
  try {
    spool_ = std::make_unique<store::SpoolWriter>(path);
  } catch (const std::runtime_error& e) {
    throw InputError(e.what());  // before any control ran: nothing to lose
  }
  close_in_forked_cases(spool_->fd());  // a forked case neither writes it nor holds its lock
  run_record_ = store::run_record(*run_);
  spool_->append(run_record_);
  tell("run " + run_->run_id +
       (o.shard_count > 1 ? " shard " + std::to_string(o.shard_index + 1) + "/" + std::to_string(o.shard_count) : "") +
       ", spool " + path);
  tell("environment " + store::describe_environment(run_->environment));
  if (!o.db) return;
  try {
    db_ = std::make_unique<store::ResultStore>(store::conninfo_from_environment());
    db_->store_run(run_record_);
    // A --run-id of a run that has finished: the database refuses results after a finish,
    // so say it once here rather than once per control.
    if (const auto stored = db_->run_summary(run_->run_id); stored && stored->status != "running") {
      tell("warning: run " + run_->run_id + " is " + stored->status +
           " in the database; this run's results go to the spool only (choose a new --run-id)");
      db_.reset();
      run_closed_ = true;
      return;
    }
    tell("storing results in " + db_->describe());
  } catch (const std::exception& e) {
    database_down(e.what());
  }
}

RunStorage::~RunStorage() {
  if (spool_) keep_in_forked_cases(spool_->fd());
}

const std::string& RunStorage::spool_path() const { return spool_->path(); }

void RunStorage::store(const engine::CaseResult& result) {
  if (!spool_) return;
  const auto rec = store::result_record(*run_, result);
  spool_->append(rec);
  if (!db_) return;
  try {
    db_->store_result(run_record_, rec);
  } catch (const store::RecordRefused& e) {
    // One result the server cannot hold: the others still go in (the spool has this one).
    ++refused_;
    tell("warning: the database refused the result of " + result.testcase.id + " (it is in the spool): " + e.what());
  } catch (const std::exception& e) {
    database_down(e.what());
  }
}

void RunStorage::finish(const std::string& status) {
  if (!spool_) return;
  const auto rec = store::finish_record(*run_, status);
  spool_->append(rec);
  if (db_) {
    try {
      db_->store_finish(rec);
    } catch (const std::exception& e) {
      database_down(e.what());
    }
  }
  if (db_ && refused_ > 0) {
    tell("run " + run_->run_id + " stored in the database but for " + std::to_string(refused_) +
         " result(s) it refused (see the warnings); every result is in " + spool_->path());
  } else if (db_) {
    tell("run " + run_->run_id + " stored in the database");
  } else if (run_closed_) {
    tell("run " + run_->run_id + " was already closed in the database; every result is in " + spool_->path());
  } else if (wanted_db_) {
    tell("the database was unavailable; every result is in " + spool_->path() +
         "; upload it later with: kcert upload " + spool_->path());
  }
}

void RunStorage::database_down(const std::string& why) {
  tell("warning: database write failed, continuing with the spool only: " + why);
  db_.reset();
}

}  // namespace kcert::runner
