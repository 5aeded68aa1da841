#include "harness/store/postgres.hpp"

#include "harness/store/conninfo.hpp"
#include "harness/store/statement_deadline.hpp"

#include <pqxx/pqxx>

#include "harness/store/pqxx_compat.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>
#include <type_traits>

#include "harness/store/schema_sql.hpp"

namespace kcert::store {

namespace {

// A statement parameter: text, or SQL NULL. libpqxx 6.4 maps a null `const char*` to NULL.
struct Param {
  std::optional<std::string> text;
  const char* c() const { return text ? text->c_str() : nullptr; }
};

Param str(const std::string& s) { return {s}; }
Param null() { return {std::nullopt}; }

std::string format_double(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A JSON number as a finite double; "inf", null and NaN become NULL (the schema says so).
Param finite(const nlohmann::json& j) {
  if (!j.is_number()) return null();
  const double v = j.get<double>();
  return std::isfinite(v) ? str(format_double(v)) : null();
}

Param number(const nlohmann::json& j) { return j.is_number() ? str(format_double(j.get<double>())) : null(); }

std::string text_array(const std::vector<std::string>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    out += i ? ",\"" : "\"";
    for (char c : values[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "}";
}

std::string double_array(const nlohmann::json& values) {
  std::string out = "{";
  bool first = true;
  for (const auto& v : values) {
    out += first ? "" : ",";
    first = false;
    if (v.is_number()) out += format_double(v.get<double>());
    else if (v.is_string() && v.get<std::string>() == "inf") out += "Infinity";
    else if (v.is_string() && v.get<std::string>() == "-inf") out += "-Infinity";
    else out += "NaN";
  }
  return out + "}";
}

const nlohmann::json& need(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) throw DatabaseError(std::string("spool record lacks '") + key + "'");
  return j.at(key);
}

std::string describe_connection(pqxx::connection& c) {  // libpqxx 6 accessors are not const
  const char* host = c.hostname();
  return std::string(c.username() ? c.username() : "?") + "@" + (host && *host ? host : "local socket") + ":" +
         (c.port() ? c.port() : "?") + "/" + (c.dbname() ? c.dbname() : "?");
}

}  // namespace

struct ResultStore::Connection : pqxx::connection {
  Connection(const std::string& conninfo, double timeout)
      : pqxx::connection(conninfo), statement_timeout(timeout) {}
  double statement_timeout;
  StatementWatchdog watchdog;
};

namespace {
// Runs one database call under the statement deadline (statement_deadline.hpp). A call the
// watchdog cut short reports the deadline, not libpq's "server closed the connection
// unexpectedly", which would send the reader looking for a crashed server.
template <class Body>
auto guarded(pqxx::connection& c, StatementWatchdog& watchdog, double seconds, Body&& body) -> decltype(body()) {
  watchdog.arm(c.sock(), seconds);
  try {
    if constexpr (std::is_void_v<decltype(body())>) {
      body();
      watchdog.disarm();
    } else {
      auto out = body();
      watchdog.disarm();
      return out;
    }
  } catch (const pqxx::undefined_table& e) {
    // A database nobody migrated (or migrated by an older kcert): the server's "relation
    // \"result\" does not exist" does not say what to do.
    watchdog.disarm();
    std::string what = e.what();
    if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    throw DatabaseError("the results database lacks kcert's tables (" + what +
                        "): run `kcert db migrate` once (docs/database.md); `kcert db status` lists what is applied");
  } catch (const std::exception& e) {
    if (watchdog.disarm())
      throw DatabaseError("the results database did not answer within " + format_double(seconds) +
                          " s (KCERT_DB_STATEMENT_TIMEOUT); the connection was dropped");
    throw;
  }
}
}  // namespace

std::string conninfo_from_environment() {
  const char* v = std::getenv("KCERT_DB");
  return v ? v : "";
}

ResultStore::ResultStore(const std::string& conninfo) {
  double timeout = 0;
  try {
    timeout = statement_timeout_seconds();
  } catch (const std::invalid_argument& e) {
    throw DatabaseError(e.what());
  }
  try {
    conn_ = std::make_unique<Connection>(with_default_timeouts(conninfo), timeout);
  } catch (const std::exception& e) {
    // libpq's parse errors quote the connection string, password included: redact it.
    std::string msg = redact_password(e.what(), conninfo);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    throw DatabaseError("cannot connect to the results database (" +
                        std::string(conninfo.empty() ? "libpq defaults: PG* variables / service file" : "KCERT_DB") +
                        "): " + msg +
                        ". To fix: set KCERT_DB to a reachable server (postgresql://user@host/db; password in "
                        "~/.pgpass), or start a local one with scripts/pg-cluster.sh start DIR and use the connection "
                        "string it prints (scripts/nightly.sh does this when KCERT_DB is unset); docs/database.md");
  }
}

ResultStore::~ResultStore() = default;

std::string ResultStore::describe() const { return describe_connection(*conn_); }

namespace {
void ensure_migration_table(pqxx::connection& c) {
  pqxx::work w(c);
  pq::exec0(w, 
      "CREATE TABLE IF NOT EXISTS kcert_migration ("
      " version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,"
      " applied_at timestamptz NOT NULL DEFAULT now())");
  w.commit();
}
}  // namespace

std::vector<MigrationState> ResultStore::migration_status() {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> std::vector<MigrationState> {
    ensure_migration_table(*conn_);
    pqxx::work w(*conn_);
    std::vector<MigrationState> out;
    for (const auto& m : schema_migrations()) {
      MigrationState s{m.version, m.name, false, ""};
      const auto r = pq::exec_params(w, "SELECT applied_at::text FROM kcert_migration WHERE version = $1", m.version);
      if (!r.empty()) {
        s.applied = true;
        s.applied_at = r[0][0].c_str();
      }
      out.push_back(s);
    }
    return out;
  });
}

namespace {
std::string first_line(const std::string& s) {
  const auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}
}  // namespace

int ResultStore::migrate() {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> int {
    ensure_migration_table(*conn_);
    int applied = 0;
    for (const auto& m : schema_migrations()) {
      pqxx::work w(*conn_);
      // Two migrators at once: the second waits here, then sees the version applied.
      w.exec("SELECT pg_advisory_xact_lock(7165432101)");
      if (!pq::exec_params(w, "SELECT 1 FROM kcert_migration WHERE version = $1", m.version).empty()) continue;
      try {
        pq::exec0(w, m.sql);
      } catch (const pqxx::insufficient_privilege& e) {
        // 002_roles creates the group roles kcert_reader / kcert_writer (cluster-wide objects):
        // the server's "permission denied to create role" does not say what to do.
        throw DatabaseError("migration " + std::string(m.name) + " needs more privilege than " + describe() +
                            " has: " + first_line(e.what()) +
                            ". Run `kcert db migrate` once as a role with CREATEROLE (it creates the group roles "
                            "kcert_reader and kcert_writer) and owning the database, e.g. the database owner or "
                            "postgres; later runs need only kcert_writer (docs/database.md)");
      }
      pq::exec_params(w, "INSERT INTO kcert_migration (version, name, checksum) VALUES ($1, $2, $3)", m.version, m.name,
                    m.checksum);
      w.commit();
      ++applied;
    }
    return applied;
  });
}

void ResultStore::store_run(const nlohmann::json& run) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> void {
    const auto& env = need(run, "environment");
    pqxx::work w(*conn_);
    pq::exec_params(w, 
        "INSERT INTO environment (fingerprint, identity, details) VALUES ($1, $2::jsonb, $3::jsonb) "
        "ON CONFLICT (fingerprint) DO NOTHING",
        need(env, "fingerprint").get<std::string>(), need(env, "identity").dump(), env.value("details", nlohmann::json::object()).dump());
    pq::exec_params(w, 
        "INSERT INTO run (id, started_at, kcert_version, git_revision, profile, shard_count, configuration) "
        "VALUES ($1, $2::timestamptz, $3, $4, $5, $6, $7::jsonb) ON CONFLICT (id) DO NOTHING",
        need(run, "run_id").get<std::string>(), need(run, "started_at").get<std::string>(),
        need(run, "kcert_version").get<std::string>(), run.value("git_revision", ""), run.value("profile", ""),
        run.value("shard_count", 1), run.value("configuration", nlohmann::json::object()).dump());
    pq::exec_params(w, 
        "INSERT INTO run_shard (run_id, shard_index, environment_id, started_at) "
        "SELECT $1, $2, e.id, $3::timestamptz FROM environment e WHERE e.fingerprint = $4 ON CONFLICT DO NOTHING",
        run.at("run_id").get<std::string>(), run.value("shard_index", 0), run.at("started_at").get<std::string>(),
        env.at("fingerprint").get<std::string>());
    w.commit();
  });
}

namespace {
// Valid UTF-8 of `s` (an invalid sequence becomes U+FFFD), without NUL (PostgreSQL's text and
// jsonb hold none), at most kMaxStoredText bytes: a file name that is not UTF-8 or an error
// text of 256 MB made the server refuse the row (issue 53).
constexpr std::size_t kMaxStoredText = std::size_t{1} << 20;
std::string storable_text(const std::string& s) {
  std::string out = nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  out = nlohmann::json::parse(out).get<std::string>();
  std::string clean;
  for (char c : out) {
    if (c == '\0') clean += "\xEF\xBF\xBD";
    else clean += c;
  }
  if (clean.size() > kMaxStoredText) {
    auto cut = kMaxStoredText;
    while (cut > 0 && (static_cast<unsigned char>(clean[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
    const auto dropped = clean.size() - cut;
    clean.resize(cut);
    clean += " [" + std::to_string(dropped) + " more bytes not stored]";
  }
  return clean;
}

nlohmann::json storable(const nlohmann::json& j) {
  if (j.is_string()) return storable_text(j.get_ref<const std::string&>());
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : j.items()) out[storable_text(k)] = storable(v);
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : j) out.push_back(storable(v));
    return out;
  }
  return j;
}
}  // namespace

bool ResultStore::store_result(const nlohmann::json& run, const nlohmann::json& given) {
  const auto rec = storable(given);
  // The server's first line: its DETAIL repeats the whole row (a megabyte of text, perhaps).
  const auto refused = [](const std::exception& e) {
    std::string what = e.what();
    if (const auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    return RecordRefused(what);
  };
  try {
    return store_result_as_is(run, rec);
  } catch (const pqxx::data_exception& e) {  // SQLSTATE class 22: a value the column cannot hold
    throw refused(e);
  } catch (const pqxx::sql_error& e) {
    // 54: a program limit (an index row too large); 23: a constraint the record breaks.
    const auto state = e.sqlstate();
    if (state.rfind("54", 0) == 0 || state.rfind("23", 0) == 0) throw refused(e);
    throw;
  } catch (const pqxx::argument_error& e) {
    throw refused(e);
  } catch (const nlohmann::json::exception& e) {
    // A field below what the spool check reads (a bucket's z, a gradient's name, the probe's
    // seed) of another type: this record is refused whole (its transaction rolls back) and the
    // others are stored. It was an `internal error` that stopped the upload halfway.
    throw RecordRefused(std::string("a field of the result is not what kcert writes: ") + e.what());
  }
}

bool ResultStore::store_result_as_is(const nlohmann::json& run, const nlohmann::json& rec) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> bool {
    const auto& tc = need(rec, "testcase");
    const auto& r = need(rec, "result");
    const auto& gates = need(r, "gates");
    pqxx::work w(*conn_);
    const std::string run_id = need(rec, "run_id");
    const std::string case_id = need(tc, "case_id");
    // A run's results are added while it runs. FOR SHARE: its finish waits for this result.
    const auto status = pq::exec_params(w, "SELECT status FROM run WHERE id = $1 FOR SHARE", run_id);
    if (status.empty()) throw DatabaseError("run " + run_id + " is not stored (store the run record first)");
    // One result per case and run: a second case file with the case's id (another yaml_sha256)
    // became a second row of the case in the run (issue 53, item 7).
    // Every row is asked: a run stored before this check may hold two for one case.
    const auto held = pq::exec_params1(w,
        "SELECT count(*), count(*) FILTER (WHERE t.yaml_sha256 = $3) FROM result r JOIN testcase t ON t.id = r.testcase_id "
        "WHERE r.run_id = $1 AND t.case_id = $2",
        run_id, case_id, need(tc, "yaml_sha256").get<std::string>());
    if (held[1].as<long long>() > 0) return false;  // present: nothing to add
    if (held[0].as<long long>() > 0)
      throw RecordRefused("run " + run_id + " already holds a result for " + case_id + " from another version of its case file");
    // A finished or aborted run is history: `upload` added results to it after its finish.
    if (const std::string st = status[0][0].c_str(); st != "running")
      throw RecordRefused("run " + run_id + " is " + st + ": a result cannot be added after its finish");
    pq::exec_params(w, 
        "INSERT INTO testcase (case_id, kind, family, mechanism, refs, yaml_sha256) "
        "VALUES ($1, $2, $3, $4, $5::text[], $6) ON CONFLICT (case_id, yaml_sha256) DO NOTHING",
        need(tc, "case_id").get<std::string>(), need(tc, "kind").get<std::string>(), need(tc, "family").get<std::string>(),
        tc.value("mechanism", ""), text_array(tc.value("references", std::vector<std::string>{})),
        need(tc, "yaml_sha256").get<std::string>());
    const auto testcase_id = pq::exec_params1(w, "SELECT id FROM testcase WHERE case_id = $1 AND yaml_sha256 = $2",
                                            tc.at("case_id").get<std::string>(), tc.at("yaml_sha256").get<std::string>())[0]
                                 .as<long long>();
    const auto env_rows = pq::exec_params(w, "SELECT id FROM environment WHERE fingerprint = $1", need(rec, "environment").get<std::string>());
    if (env_rows.empty()) throw DatabaseError("environment " + rec.at("environment").get<std::string>() + " is not stored (store the run record first)");
    const auto environment_id = env_rows[0][0].as<long long>();

    const std::string kind = tc.at("kind");
    const std::string verdict = need(r, "verdict");
    const bool error = verdict == "ERROR";
    const bool skipped = verdict == "SKIP";
    // An ERROR row ran no gate to its end: its gate columns are NULL (schema/005), its reason
    // is in `error`. They once read PASS, the gates' defaults, and counted as passing. A SKIP
    // row (schema/006) ran nothing: NULL gates, its reason in `skipped`.
    const bool not_run = error || skipped;
    const auto gate_verdict = [&](const char* g) { return not_run ? std::string() : gates.at(g).at("verdict").get<std::string>(); };
    const std::string va = gate_verdict("algebra"), vb = gate_verdict("bias"), vv = gate_verdict("variance");
    const Param pa = not_run ? null() : str(va), pb = not_run ? null() : str(vb), pv = not_run ? null() : str(vv);
    // A detection is a WARN or a FAIL: an INCONCLUSIVE gate (schema/008) detects nothing.
    const auto detects = [](const std::string& v) { return v == "WARN" || v == "FAIL"; };
    const bool any_warn_or_fail = detects(va) || detects(vb) || detects(vv);
    const bool any_fail = va == "FAIL" || vb == "FAIL" || vv == "FAIL";
    const Param detected = (kind == "negative" && !not_run) ? str(any_warn_or_fail ? "true" : "false") : null();
    const Param false_alarm = (kind == "positive" && !not_run) ? str(any_fail ? "true" : "false") : null();
    const Param skip_reason = skipped ? str(r.value("skipped", std::string("not runnable in this environment"))) : null();
    double max_z = 0.0;
    bool have_z = false;
    for (const char* s : {"signed", "magnitude"}) {
      const auto& st = gates.at("bias").value(s, nlohmann::json::object());
      if (st.value("deciding", false) && st.contains("max_abs_z") && st.at("max_abs_z").is_number()) {
        max_z = std::max(max_z, st.at("max_abs_z").get<double>());
        have_z = true;
      }
    }
    const auto& tail = gates.at("variance").value("tail", nlohmann::json::object());
    nlohmann::json thresholds = gates.at("bias").value("thresholds", nlohmann::json::object());
    if (tail.contains("settings")) {
      for (const char* k : {"warn_K", "fail_K", "tail_q", "horizon"}) thresholds[k] = tail.at("settings").at(k);
    }
    const auto& probe = r.value("probe", nlohmann::json::object());
    const auto& runtime = r.value("runtime", nlohmann::json::object());
    const Param z = have_z && !not_run ? finite(nlohmann::json(max_z)) : null();
    const Param u = not_run ? null() : finite(gates.at("variance").value("U", nlohmann::json()));
    const Param err = r.contains("error") && r.at("error").is_string() ? str(r.at("error").get<std::string>())
                      : error                                          ? str("harness error (no reason recorded)")
                                                                       : null();
    const Param seed = str(std::to_string(probe.value("seed", std::uint64_t{0})));
    const Param duration = str(format_double(runtime.value("seconds", 0.0)));
    const Param calibration = r.contains("calibration") && r.at("calibration").is_string()
                                  ? str(r.at("calibration").get<std::string>())
                                  : null();
    const auto inserted = pq::exec_params(w, 
        "INSERT INTO result (run_id, shard_index, testcase_id, environment_id, reference_variant, reference_version, "
        " production_variant, production_version, verdict, algebra_verdict, bias_verdict, variance_verdict, detected, "
        " false_alarm, replicates, seed, variance_u, max_abs_z, thresholds, calibration, duration_seconds, error, document, skipped) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::boolean, $14::boolean, $15, $16::numeric, "
        " $17::double precision, $18::double precision, $19::jsonb, $23, $20::double precision, $21, $22::jsonb, $24) "
        "ON CONFLICT (run_id, testcase_id) DO NOTHING RETURNING id",
        need(rec, "run_id").get<std::string>(), rec.value("shard_index", 0), testcase_id, environment_id,
        r.at("reference").at("variant").get<std::string>(), r.at("reference").at("version").get<std::string>(),
        r.at("production").at("variant").get<std::string>(), r.at("production").at("version").get<std::string>(), verdict,
        pa.c(), pb.c(), pv.c(), detected.c(), false_alarm.c(), r.value("replicates", std::uint64_t{0}), seed.c(), u.c(), z.c(),
        thresholds.dump(), duration.c(), err.c(), r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), calibration.c(), skip_reason.c());
    if (inserted.empty()) return false;  // this run already holds this case: nothing to add
    const auto result_id = inserted[0][0].as<long long>();

    for (const char* s : {"signed", "magnitude"}) {
      const auto& st = gates.at("bias").value(s, nlohmann::json::object());
      std::set<long long> seen;
      for (const char* list : {"flagged", "top"}) {
        for (const auto& b : st.value(list, nlohmann::json::array())) {
          const auto bucket = b.at("bucket").get<long long>();
          if (!seen.insert(bucket).second) continue;
          const bool flagged = b.at("verdict") != "PASS";
          pq::exec_params(w, 
              "INSERT INTO bias_bucket (result_id, statistic, bucket, flagged, direction, z, effect, ulp_effect, mean, sd, verdict) "
              "VALUES ($1, $2, $3, $4, $5, $6::double precision, $7::double precision, $8::double precision, "
              "$9::double precision, $10::double precision, $11)",
              result_id, s, bucket, flagged, b.at("direction").get<int>(), finite(b.at("z")).c(), finite(b.at("effect")).c(),
              number(b.at("ulp_effect")).c(), number(b.at("mean")).c(), number(b.at("sd")).c(), b.at("verdict").get<std::string>());
        }
      }
    }
    // A backward result (schema/007): one row per gradient. JSON's json_number writes a
    // non-finite U as a string; finite() maps it to NULL as for the result's own U.
    if (r.contains("backward") && r.at("backward").is_object()) {
      for (const auto& g : r.at("backward").value("gradients", nlohmann::json::array())) {
        pq::exec_params(w,
            "INSERT INTO result_gradient (result_id, gradient, input, bucket_axis, reduction_size, verdict, algebra_verdict, "
            " bias_verdict, variance_verdict, variance_u, max_abs_z) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, "
            " $10::double precision, $11::double precision) ON CONFLICT DO NOTHING",
            result_id, g.at("name").get<std::string>(), g.at("input").get<std::string>(),
            g.at("bucket_axis").get<std::string>(), g.at("reduction_size").get<long long>(),
            g.at("verdict").get<std::string>(), g.at("algebra").get<std::string>(), g.at("bias").get<std::string>(),
            g.at("variance").get<std::string>(), finite(g.value("U", nlohmann::json())).c(),
            finite(g.value("max_abs_z", nlohmann::json())).c());
      }
    }
    if (!tail.empty()) {
      const auto& kh = tail.value("khat", nlohmann::json::object());
      const auto pick = [&](const char* k) { return tail.contains(k) ? number(tail.at(k)) : null(); };
      pq::exec_params(w, 
          "INSERT INTO variance_tail (result_id, mode, u, n_exc, zeta, xi_raw, xi_clipped, sigma, r_t, se, u_bound, "
          " zero_fraction, q50, q90, q99, k_max, khat) VALUES ($1, $2, $3::double precision, $4, $5::double precision, "
          " $6::double precision, $7::double precision, $8::double precision, $9::double precision, $10::double precision, "
          " $11::double precision, $12::double precision, $13::double precision, $14::double precision, "
          " $15::double precision, $16::double precision, $17::double precision[])",
          result_id, tail.value("mode", ""), pick("u").c(), tail.value("n_exc", 0), pick("zeta").c(), pick("xi_raw").c(),
          pick("xi_clipped").c(), pick("sigma").c(), pick("r_T").c(), pick("se").c(), finite(tail.value("U", nlohmann::json())).c(),
          number(kh.value("zero_fraction", nlohmann::json())).c(), number(kh.value("q50", nlohmann::json())).c(),
          number(kh.value("q90", nlohmann::json())).c(), number(kh.value("q99", nlohmann::json())).c(),
          finite(kh.value("max", nlohmann::json())).c(), double_array(rec.value("khat", nlohmann::json::array())));
    }
    w.commit();
    return true;
  });
}

void ResultStore::store_finish(const nlohmann::json& fin) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> void {
    pqxx::work w(*conn_);
    const std::string run_id = need(fin, "run_id");
    const std::string at = need(fin, "finished_at");
    const std::string status = fin.value("status", "finished");
    // The run's row is locked first: two shards finishing at once each counted the finished
    // shards without the other's uncommitted row and left the run `running` with every shard
    // reported (issue 53, item 7; 1 in 10 tries).
    pq::exec_params(w, "SELECT 1 FROM run WHERE id = $1 FOR UPDATE", run_id);
    // Only a running run changes: a finished or aborted one is history (a one-line spool
    // holding a finish record flipped a finished run to aborted), and a shard's first
    // finish time stays.
    pq::exec_params(w, "UPDATE run_shard SET finished_at = $3::timestamptz WHERE run_id = $1 AND shard_index = $2 "
                       "AND finished_at IS NULL AND (SELECT status FROM run WHERE id = $1) = 'running'",
                    run_id, fin.value("shard_index", 0), at);
    if (status == "aborted") {
      pq::exec_params(w, "UPDATE run SET status = 'aborted', finished_at = $2::timestamptz WHERE id = $1 AND status = 'running'",
                      run_id, at);
    } else {
      // The run is finished when every one of its shards has finished.
      pq::exec_params(w, 
          "UPDATE run SET status = 'finished', finished_at = $2::timestamptz WHERE id = $1 AND status = 'running' "
          "AND (SELECT count(*) FROM run_shard s WHERE s.run_id = $1 AND s.finished_at IS NOT NULL) >= shard_count",
          run_id, at);
    }
    w.commit();
  });
}

std::vector<HistoryRow> ResultStore::history(const HistoryQuery& q) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> std::vector<HistoryRow> {
    pqxx::work w(*conn_);
    const auto rows = pq::exec_params(w, 
        // The view with the run's profile and kcert version and the document's reaches_horizon
        // (schema/009).
        "SELECT to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), run_id, fingerprint, "
        " coalesce(cpu_model, ''), coalesce(gpu, ''), coalesce(torch_version, ''), verdict, algebra_verdict, bias_verdict, "
        " variance_verdict, variance_u, max_abs_z, detected, false_alarm, kind, reference_version, production_version, "
        " coalesce(calibration, ''), profile, kcert_version, replicates, coalesce(reaches_horizon, ''), "
        " coalesce(algebra_applicable, '') "
        "FROM detection_history WHERE case_id = $1 AND ($2 = '' OR fingerprint = $2) "
        " AND ($3 = '' OR cpu_model ILIKE '%' || $3 || '%' OR gpu ILIKE '%' || $3 || '%') "
        " AND ($4 = '' OR started_at >= $4::timestamptz) ORDER BY started_at, run_id",
        q.case_id, q.environment, q.hardware, q.since);
    std::vector<HistoryRow> out;
    for (const auto& row : rows) {
      HistoryRow h;
      h.started_at = row[0].c_str();
      h.run_id = row[1].c_str();
      h.fingerprint = row[2].c_str();
      h.cpu_model = row[3].c_str();
      h.gpu = row[4].c_str();
      h.torch_version = row[5].c_str();
      h.verdict = row[6].c_str();
      h.algebra = row[7].c_str();
      h.bias = row[8].c_str();
      h.variance = row[9].c_str();
      if (!row[10].is_null()) h.variance_u = row[10].as<double>();
      if (!row[11].is_null()) h.max_abs_z = row[11].as<double>();
      if (!row[12].is_null()) h.detected = row[12].as<bool>();
      if (!row[13].is_null()) h.false_alarm = row[13].as<bool>();
      h.kind = row[14].c_str();
      h.reference_version = row[15].c_str();
      h.production_version = row[16].c_str();
      h.calibration = row[17].c_str();
      h.profile = row[18].c_str();
      h.kcert_version = row[19].c_str();
      h.replicates = row[20].as<std::int64_t>();
      h.variance_short = h.variance == "PASS" && std::string(row[21].c_str()) == "false";
      h.algebra_applicable = std::string(row[22].c_str()) != "false";
      out.push_back(std::move(h));
    }
    return out;
  });
}

std::vector<std::string> ResultStore::case_ids() {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> std::vector<std::string> {
    pqxx::work w(*conn_);
    std::vector<std::string> out;
    for (const auto& row : w.exec("SELECT DISTINCT case_id FROM testcase ORDER BY 1")) out.emplace_back(row[0].c_str());
    return out;
  });
}

namespace {

// PostgreSQL arrays in their text form ({1.5,Infinity,0}, {"a","b \\"c\\""}) read by libpqxx's
// array parser (issue 51; kcert parsed them by hand, and an empty string or a NULL element was
// lost or read as the word NULL). One dimension: kcert stores no nested arrays.
template <typename Element>
std::vector<Element> one_dimensional_array(const pqxx::field& field, Element (*element)(const std::string&)) {
  std::vector<Element> out;
  auto parser = pq::array_parser_of(field);
  for (auto [juncture, value] = parser.get_next(); juncture != pqxx::array_parser::juncture::done;
       std::tie(juncture, value) = parser.get_next()) {
    if (juncture == pqxx::array_parser::juncture::string_value) out.push_back(element(value));
    else if (juncture == pqxx::array_parser::juncture::null_value) out.push_back(element(""));
  }
  return out;
}

double array_double(const std::string& item) {
  if (item == "Infinity") return INFINITY;
  if (item == "-Infinity") return -INFINITY;
  if (item.empty() || item == "NaN") return NAN;  // NULL: none stored (the schema keeps +inf, not NaN)
  return std::stod(item);
}

std::string array_text(const std::string& item) { return item; }

// What stored_result() reads, and from where; callers add SELECT (DISTINCT ON ...) and WHERE.
const char* kResultColumns =
    " t.case_id, t.kind, t.family, e.fingerprint, coalesce(r.calibration, ''), r.shard_index, r.document::text, "
    " coalesce(v.khat::text, '{}'), ru.id, to_char(ru.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
    " ru.kcert_version, ru.profile "
    "FROM result r JOIN testcase t ON t.id = r.testcase_id JOIN environment e ON e.id = r.environment_id "
    "JOIN run ru ON ru.id = r.run_id LEFT JOIN variance_tail v ON v.result_id = r.id ";

StoredResult stored_result(const pqxx::row& row) {
  StoredResult s;
  s.case_id = row[0].c_str();
  s.kind = row[1].c_str();
  s.family = row[2].c_str();
  s.fingerprint = row[3].c_str();
  s.calibration = row[4].c_str();
  s.shard_index = row[5].as<int>();
  s.document = nlohmann::json::parse(row[6].c_str());
  s.khat = one_dimensional_array(row[7], array_double);
  s.run_id = row[8].c_str();
  s.run_started_at = row[9].c_str();
  s.run_kcert_version = row[10].c_str();
  s.run_profile = row[11].c_str();
  return s;
}

Calibration calibration_row(const pqxx::row& row) {
  Calibration c;
  c.id = row[0].as<long long>();
  c.fingerprint = row[1].c_str();
  c.family = row[2].c_str();
  c.warn_k = row[3].as<double>();
  c.fail_k = row[4].as<double>();
  c.previous_warn_k = row[5].as<double>();
  c.previous_fail_k = row[6].as<double>();
  c.rule_version = row[7].c_str();
  c.source_runs = one_dimensional_array(row[8], array_text);
  c.positives = row[9].as<int>();
  c.max_u = row[10].as<double>();
  c.created_by = row[11].c_str();
  c.created_at = row[12].c_str();
  c.details = nlohmann::json::parse(row[13].c_str());
  const auto optional_double = [&](int i) { return row[i].is_null() ? std::nullopt : std::optional<double>(row[i].as<double>()); };
  c.bias_c = optional_double(14);
  c.bias_c_magnitude = optional_double(15);
  c.previous_bias_c = optional_double(16);
  c.previous_bias_c_magnitude = optional_double(17);
  return c;
}

const char* kCalibrationColumns =
    "SELECT c.id, e.fingerprint, c.family, c.warn_k, c.fail_k, c.previous_warn_k, c.previous_fail_k, c.rule_version, "
    " c.source_runs::text, c.positives, c.max_u, c.created_by, "
    " to_char(c.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), c.details::text, "
    " c.bias_c, c.bias_c_magnitude, c.previous_bias_c, c.previous_bias_c_magnitude "
    "FROM calibration c JOIN environment e ON e.id = c.environment_id ";

}  // namespace

std::vector<RunSummary> ResultStore::unfinished_runs() {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> std::vector<RunSummary> {
    std::vector<std::string> ids;
    {
      pqxx::work w(*conn_);
      for (const auto& row : w.exec("SELECT id FROM run WHERE status = 'running' ORDER BY started_at, id")) {
        ids.emplace_back(row[0].c_str());
      }
    }
    std::vector<RunSummary> out;
    for (const auto& id : ids) {
      if (auto s = run_summary(id)) out.push_back(std::move(*s));
    }
    return out;
  });
}

bool ResultStore::abandon_run(const std::string& run_id) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> bool {
    pqxx::work w(*conn_);
    const auto r = pq::exec_params(w, "UPDATE run SET status = 'aborted', finished_at = now() WHERE id = $1 AND status = 'running'",
                                 run_id);
    w.commit();
    return r.affected_rows() == 1;
  });
}

bool ResultStore::close_if_complete(const std::string& run_id) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> bool {
    pqxx::work w(*conn_);
    const auto r = pq::exec_params(w,
        "UPDATE run SET status = 'finished', finished_at = (SELECT max(s.finished_at) FROM run_shard s WHERE s.run_id = $1) "
        "WHERE id = $1 AND status = 'running' "
        "AND (SELECT count(*) FROM run_shard s WHERE s.run_id = $1 AND s.finished_at IS NOT NULL) >= shard_count",
        run_id);
    w.commit();
    return r.affected_rows() == 1;
  });
}

std::optional<RunSummary> ResultStore::run_summary(const std::string& run_id) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> std::optional<RunSummary> {
    pqxx::work w(*conn_);
    const auto r = pq::exec_params(w, 
        "SELECT id, status, profile, to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), shard_count, "
        "configuration::text FROM run WHERE id = $1",
        run_id);
    if (r.empty()) return std::nullopt;
    RunSummary s;
    s.run_id = r[0][0].c_str();
    s.status = r[0][1].c_str();
    s.profile = r[0][2].c_str();
    s.started_at = r[0][3].c_str();
    s.shard_count = r[0][4].as<int>();
    // Written by kcert itself; a row someone edited into non-JSON reads as no configuration.
    s.configuration = nlohmann::json::parse(r[0][5].c_str(), nullptr, /*allow_exceptions=*/false);
    if (!s.configuration.is_object()) s.configuration = nlohmann::json::object();
    for (const auto& row : pq::exec_params(w, "SELECT shard_index, finished_at IS NOT NULL FROM run_shard WHERE run_id = $1 "
                                         "ORDER BY shard_index",
                                         run_id)) {
      s.shards_started.push_back(row[0].as<int>());
      if (row[1].as<bool>()) s.shards_finished.push_back(row[0].as<int>());
    }
    return s;
  });
}

std::vector<StoredResult> ResultStore::run_results(const std::string& run_id) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> std::vector<StoredResult> {
    pqxx::work w(*conn_);
    std::vector<StoredResult> out;
    for (const auto& row : pq::exec_params(w, std::string("SELECT") + kResultColumns + "WHERE r.run_id = $1 ORDER BY t.case_id", run_id)) {
      out.push_back(stored_result(row));
    }
    return out;
  });
}

std::vector<StoredResult> ResultStore::previous_results(const std::string& run_id) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> std::vector<StoredResult> {
    pqxx::work w(*conn_);
    std::vector<StoredResult> out;
    const auto rows = pq::exec_params(w, 
        std::string("SELECT DISTINCT ON (t.case_id, e.fingerprint)") + kResultColumns +
            "JOIN run this ON this.id = $1 "
            "WHERE ru.id <> this.id AND ru.status = 'finished' AND ru.profile = this.profile "
            " AND ru.started_at < this.started_at "
            " AND (t.case_id, r.environment_id) IN (SELECT t2.case_id, r2.environment_id FROM result r2 "
            "   JOIN testcase t2 ON t2.id = r2.testcase_id WHERE r2.run_id = this.id) "
            "ORDER BY t.case_id, e.fingerprint, ru.started_at DESC",
        run_id);
    for (const auto& row : rows) out.push_back(stored_result(row));
    return out;
  });
}

std::optional<std::string> ResultStore::latest_finished_run(const std::string& fingerprint, const std::string& profile) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> std::optional<std::string> {
    pqxx::work w(*conn_);
    const auto r = pq::exec_params(w, 
        "SELECT ru.id FROM run ru WHERE ru.status = 'finished' AND ru.profile = $2 AND EXISTS (SELECT 1 FROM result r "
        " JOIN environment e ON e.id = r.environment_id WHERE r.run_id = ru.id AND e.fingerprint = $1) "
        "ORDER BY ru.started_at DESC LIMIT 1",
        fingerprint, profile);
    if (r.empty()) return std::nullopt;
    return std::string(r[0][0].c_str());
  });
}

std::map<std::string, Calibration> ResultStore::latest_calibrations(const std::string& fingerprint) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> std::map<std::string, Calibration> {
    pqxx::work w(*conn_);
    std::map<std::string, Calibration> out;
    for (const auto& row : pq::exec_params(w, std::string(kCalibrationColumns) +
                                             "WHERE e.fingerprint = $1 ORDER BY c.family, c.created_at DESC, c.id DESC",
                                         fingerprint)) {
      auto c = calibration_row(row);
      out.emplace(c.family, std::move(c));  // the first of each family is the newest
    }
    return out;
  });
}

std::vector<Calibration> ResultStore::calibrations(const std::string& fingerprint) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> std::vector<Calibration> {
    pqxx::work w(*conn_);
    std::vector<Calibration> out;
    const auto rows = pq::exec_params(w, std::string(kCalibrationColumns) +
                                        "WHERE ($1 = '' OR e.fingerprint = $1) ORDER BY e.fingerprint, c.created_at DESC, c.id DESC",
                                    fingerprint);
    for (const auto& row : rows) out.push_back(calibration_row(row));
    return out;
  });
}

namespace {
// A nullable double as a query parameter: NULL when unset.
Param optional_number(const std::optional<double>& v) { return v ? str(format_double(*v)) : null(); }
}  // namespace

long long ResultStore::store_calibration(const Calibration& c) {
  return guarded(*conn_, conn_->watchdog, conn_->statement_timeout, [&]() -> long long {
    pqxx::work w(*conn_);
    const auto env = pq::exec_params(w, "SELECT id FROM environment WHERE fingerprint = $1", c.fingerprint);
    if (env.empty()) throw DatabaseError("environment " + c.fingerprint + " is not stored");
    const auto id = pq::exec_params1(w, 
                         "INSERT INTO calibration (environment_id, family, warn_k, fail_k, previous_warn_k, previous_fail_k, "
                         " rule_version, source_runs, positives, max_u, created_by, details, bias_c, bias_c_magnitude, "
                         " previous_bias_c, previous_bias_c_magnitude) "
                         "VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text[], $9, $10, $11, $12::jsonb, $13::double precision, "
                         " $14::double precision, $15::double precision, $16::double precision) RETURNING id",
                         env[0][0].as<long long>(), c.family, format_double(c.warn_k), format_double(c.fail_k),
                         format_double(c.previous_warn_k), format_double(c.previous_fail_k), c.rule_version,
                         text_array(c.source_runs), c.positives, format_double(c.max_u), c.created_by, c.details.dump(),
                         optional_number(c.bias_c).c(), optional_number(c.bias_c_magnitude).c(),
                         optional_number(c.previous_bias_c).c(), optional_number(c.previous_bias_c_magnitude).c())[0]
                        .as<long long>();
    w.commit();
    return id;
  });
}

UploadSummary upload(ResultStore& store, const std::vector<nlohmann::json>& records) {
  UploadSummary s;
  std::map<std::pair<std::string, int>, const nlohmann::json*> runs;
  for (const auto& r : records) {
    if (r.at("type") == "run") {
      store.store_run(r);
      runs[{r.at("run_id").get<std::string>(), r.value("shard_index", 0)}] = &r;
      ++s.runs;
    }
  }
  for (const auto& r : records) {
    if (r.at("type") != "result") continue;
    const auto it = runs.find({r.at("run_id").get<std::string>(), r.value("shard_index", 0)});
    if (it == runs.end()) throw DatabaseError("spool result for run " + r.at("run_id").get<std::string>() + " has no run record");
    try {
      (store.store_result(*it->second, r) ? s.results_added : s.results_present)++;
    } catch (const RecordRefused& e) {
      // One record the server cannot hold must not keep every other one out for good.
      const auto& tc = r.value("testcase", nlohmann::json::object());
      s.refused.emplace_back(tc.is_object() ? tc.value("case_id", std::string("?")) : std::string("?"), e.what());
    }
  }
  for (const auto& r : records) {
    if (r.at("type") != "finish") continue;
    // A finish without its run's record in the same spool is not this spool's to give.
    if (!runs.count({r.at("run_id").get<std::string>(), r.value("shard_index", 0)}))
      throw DatabaseError("spool finish record for run " + r.at("run_id").get<std::string>() + " has no run record");
    store.store_finish(r);
  }
  return s;
}

}  // namespace kcert::store
