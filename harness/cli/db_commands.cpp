#include "harness/cli/db_commands.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "harness/cli/exit_codes.hpp"
#include "harness/cli/flag_checks.hpp"
#include "harness/cli/suggest.hpp"
#include "harness/text/escape.hpp"
#include "harness/store/postgres.hpp"
#include "harness/store/spool.hpp"

namespace kcert::cli {

namespace {

// A gate verdict column is NULL (read as "") for a harness ERROR, which ran no gate.
nlohmann::json gate_json(const std::string& v) { return v.empty() ? nlohmann::json(nullptr) : nlohmann::json(v); }
std::string gate_text(const std::string& v) { return v.empty() ? "-" : v; }

constexpr const char* kConnectionHelp =
    "Connection: KCERT_DB (a postgresql:// URL or a libpq key=value string) when set, else\n"
    "libpq's PG* variables and ~/.pg_service.conf. Put passwords in ~/.pgpass, never on the\n"
    "command line.";

store::ResultStore connect() {
  try {
    return store::ResultStore(store::conninfo_from_environment());
  } catch (const store::DatabaseError& e) {
    throw InputError(e.what());
  }
}

std::string opt(const std::optional<double>& v) { return v ? fmt::format("{:.4g}", *v) : "-"; }

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

bool flagged(const store::HistoryRow& r) {
  return r.kind == "negative" ? r.detected.value_or(false) : r.false_alarm.value_or(false);
}

// A history with no rows for an id the database has never stored is a typo or a case that
// never ran here: an error (exit 2) that names the closest stored ids, not an empty table.
void unknown_case_check(store::ResultStore& s, const std::string& case_id) {
  std::vector<std::string> ids;
  try {
    ids = s.case_ids();
  } catch (const std::exception& e) {
    throw InputError(std::string("history query failed: ") + e.what());
  }
  if (std::find(ids.begin(), ids.end(), case_id) != ids.end()) return;  // stored, just not under these filters
  std::string message = "no stored results for case '" + text::terminal_safe(case_id) + "' in " + s.describe();
  const auto near = closest(case_id, ids);
  if (!near.empty()) {
    message += "; did you mean ";
    for (std::size_t i = 0; i < near.size(); ++i) message += (i ? ", " : "") + text::terminal_safe(near[i]);
    message += "?";
  } else {
    message += fmt::format(" ({} case id(s) stored; a case id is the `id:` of its case file)", ids.size());
  }
  throw InputError(message);
}

}  // namespace

void register_db_commands(CLI::App& app) {
  auto* db = app.add_subcommand("db", "Manage the results database (PostgreSQL)");
  db->require_subcommand(1);
  db->footer(kConnectionHelp);
  auto* migrate = db->add_subcommand("migrate", "Apply pending schema migrations (each in a transaction; re-running is a no-op)");
  migrate->callback([]() {
    auto s = connect();
    const int n = s.migrate();
    std::cout << fmt::format("{}: {} migration(s) applied\n", s.describe(), n);
  });
  auto* status = db->add_subcommand("status", "List schema migrations and whether they are applied");
  status->callback([]() {
    auto s = connect();
    std::cout << fmt::format("{}\n", s.describe());
    for (const auto& m : s.migration_status()) {
      std::cout << fmt::format("  {:03}  {:<24} {}\n", m.version, m.name, m.applied ? "applied " + m.applied_at : "PENDING");
    }
    // A run killed mid-way stays `running` forever unless someone closes it.
    const auto open = s.unfinished_runs();
    std::cout << fmt::format("runs still marked running: {}\n", open.size());
    for (const auto& r : open) {
      std::cout << fmt::format("  {}  started {}  profile {}  shards reported {}/{}  (upload its spool first if the database "
                               "was down during it: a closed run takes no more results; then close it: kcert db abandon {}, "
                               "or kcert nightly --finish {} once every shard has reported)\n",
                               text::terminal_safe(r.run_id), r.started_at, r.profile.empty() ? "contract" : text::terminal_safe(r.profile),
                               r.shards_finished.size(), r.shard_count, text::terminal_safe(r.run_id), text::terminal_safe(r.run_id));
    }
  });
  auto abandon_id = std::make_shared<std::string>();
  auto* abandon = db->add_subcommand("abandon", "Mark a run that will never finish (killed, interrupted) as aborted");
  abandon->footer("Its stored results stay and remain queryable; the run no longer reads `running`.\n"
                  "Example: kcert db status; kcert db abandon 20261130T220301Z-1a2b3c4d");
  abandon->add_option("run", *abandon_id, "run id")->required();
  abandon->callback([abandon_id]() {
    auto s = connect();
    const auto summary = s.run_summary(*abandon_id);
    if (!summary) throw InputError("run " + *abandon_id + " is not in the database " + s.describe());
    if (!s.abandon_run(*abandon_id)) throw InputError("run " + *abandon_id + " is " + summary->status + ", not running");
    std::cout << fmt::format("run {} marked aborted ({} of {} shard(s) had reported)\n", *abandon_id,
                             summary->shards_finished.size(), summary->shard_count);
  });

  auto files = std::make_shared<std::vector<std::string>>();
  auto* up = app.add_subcommand("upload", "Insert spooled results into the database (idempotent: a repeated upload adds nothing)");
  up->footer(std::string("A spool is written by `kcert run --db` before each database insert; when the\n"
                         "database was down, upload it later.\n") + kConnectionHelp);
  up->add_option("spool", *files, "spool files (.jsonl)")->required()->check(CLI::ExistingFile);
  up->callback([files]() {
    auto s = connect();
    bool refused_any = false;
    for (const auto& f : *files) {
      store::SpoolContents spool;
      try {
        spool = store::read_spool(f);
      } catch (const std::runtime_error& e) {
        throw InputError(e.what());
      }
      if (spool.torn_tail) std::cerr << "kcert: warning: " << *spool.torn_tail << "\n";
      const auto sum = store::upload(s, spool.records);
      std::cout << fmt::format("{}: {} run record(s), {} result(s) added, {} already present{}\n", text::terminal_safe(f), sum.runs,
                               sum.results_added, sum.results_present,
                               sum.refused.empty() ? "" : fmt::format(", {} refused", sum.refused.size()));
      for (const auto& [id, why] : sum.refused) {
        std::cerr << "kcert: warning: " << text::terminal_safe(f) << ": the database refused the result of " << text::terminal_safe(id)
                  << ": " << text::terminal_safe(why) << "\n";
        refused_any = true;
      }
    }
    // The rest is stored; what was refused stays in the spool and is named above.
    if (refused_any) throw ExitWith{exit_input_error};
  });

  struct HistoryOptions {
    store::HistoryQuery q;
    std::string format = "table";
  };
  auto h = std::make_shared<HistoryOptions>();
  auto* hist = app.add_subcommand("history", "Timeline of one test case's verdicts across runs and environments");
  hist->footer(std::string("Shows U and max |z| per run, environment keys and kernel versions, the first and\n"
                           "last detection (negatives) or false alarm (positives), and the runs where the\n"
                           "verdict changed within an environment.\n"
                           "Example: kcert history n1_gemma_rmsnorm_offset_bf16 --hardware H100 --since 2026-01-01\n") +
               kConnectionHelp);
  hist->add_option("case", h->q.case_id, "test-case id")->required();
  hist->add_option("--env", h->q.environment, "only this environment fingerprint");
  hist->add_option("--hardware", h->q.hardware, "only environments whose CPU model or GPU name contains this");
  hist->add_option("--since", h->q.since, "only runs started at or after this date (YYYY-MM-DD)")->check(calendar_date());
  hist->add_option("--format", h->format, "table, json or csv")->check(CLI::IsMember({"table", "json", "csv"}))->capture_default_str();
  hist->callback([h]() {
    auto s = connect();
    std::vector<store::HistoryRow> rows;
    try {
      rows = s.history(h->q);
    } catch (const std::exception& e) {
      throw InputError(std::string("history query failed: ") + e.what());
    }
    if (rows.empty()) unknown_case_check(s, h->q.case_id);
    // Verdict changes within an environment, in time order.
    std::map<std::string, std::string> last_by_env;
    std::vector<bool> changed(rows.size(), false);
    const store::HistoryRow* first = nullptr;
    const store::HistoryRow* last = nullptr;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      auto it = last_by_env.find(r.fingerprint);
      changed[i] = it != last_by_env.end() && it->second != r.verdict;
      last_by_env[r.fingerprint] = r.verdict;
      if (flagged(r)) {
        if (!first) first = &rows[i];
        last = &rows[i];
      }
    }
    const std::string event = !rows.empty() && rows.front().kind == "positive" ? "false alarm" : "detection";
    if (h->format == "json") {
      nlohmann::json out = {{"format", "kcert-history/1"}, {"kcert_version", KCERT_VERSION}, {"case", h->q.case_id},
                            {"runs", nlohmann::json::array()}};
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        out["runs"].push_back({{"started_at", r.started_at}, {"run_id", r.run_id}, {"environment", r.fingerprint},
                               {"cpu_model", r.cpu_model}, {"gpu", r.gpu}, {"torch_version", r.torch_version},
                               {"verdict", r.verdict}, {"algebra", gate_json(r.algebra)}, {"bias", gate_json(r.bias)}, {"variance", gate_json(r.variance)},
                               {"U", r.variance_u ? nlohmann::json(*r.variance_u) : nlohmann::json(nullptr)},
                               {"max_abs_z", r.max_abs_z ? nlohmann::json(*r.max_abs_z) : nlohmann::json(nullptr)},
                               {"flagged", flagged(r)}, {"verdict_changed", static_cast<bool>(changed[i])},
                               {"reference_version", r.reference_version}, {"production_version", r.production_version},
                               {"profile", r.profile}, {"replicates", r.replicates}, {"kcert_version", r.kcert_version},
                               {"variance_short_of_horizon", r.variance_short}, {"algebra_applicable", r.algebra_applicable}});
      }
      out["first_" + std::string(event == "detection" ? "detection" : "false_alarm")] = first ? nlohmann::json(first->run_id) : nlohmann::json(nullptr);
      out["last_" + std::string(event == "detection" ? "detection" : "false_alarm")] = last ? nlohmann::json(last->run_id) : nlohmann::json(nullptr);
      std::cout << out.dump(2) << "\n";
      return;
    }
    if (h->format == "csv") {
      std::cout << "started_at,run_id,environment,cpu_model,gpu,torch_version,verdict,algebra,bias,variance,U,max_abs_z,"
                   "flagged,verdict_changed,reference_version,production_version,profile,replicates,kcert_version,"
                   "variance_short_of_horizon,algebra_applicable\n";
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        std::cout << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", r.started_at, csv_field(r.run_id),
                                 r.fingerprint, csv_field(r.cpu_model), csv_field(r.gpu), r.torch_version, r.verdict,
                                 r.algebra, r.bias, r.variance, r.variance_u ? fmt::format("{}", *r.variance_u) : "",
                                 r.max_abs_z ? fmt::format("{}", *r.max_abs_z) : "", flagged(r) ? "true" : "false",
                                 changed[i] ? "true" : "false", csv_field(r.reference_version),
                                 csv_field(r.production_version), csv_field(r.profile), r.replicates, csv_field(r.kcert_version),
                                 r.variance_short ? "true" : "false", r.algebra_applicable ? "true" : "false");
      }
      return;
    }
    // Stored texts reach the terminal only through terminal_safe (a run id or a CPU model is
    // whatever the writer sent).
    const auto safe = [](const std::string& t) { return text::terminal_safe(t); };
    std::cout << fmt::format("history of {} ({} run(s))\n", safe(h->q.case_id), rows.size());
    // A variance PASS short of the horizon says so where the verdict is read (issue 32).
    bool any_short = false;
    for (const auto& r : rows) any_short |= r.variance_short;
    std::cout << fmt::format("{:<20}  {:<26}  {:<16}  {:<8} {:>7} {:<8}  {:<7} {:<7} {:<7} {:<8} {:>9} {:>8}  {}\n",
                             "started (UTC)", "run", "environment", "profile", "R", "kcert", "verdict", "algebra", "bias",
                             "variance", "U", "max |z|", "");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      std::cout << fmt::format("{:<20}  {:<26}  {:<16}  {:<8} {:>7} {:<8}  {:<7} {:<7} {:<7} {:<8} {:>9} {:>8}  {}\n",
                               safe(r.started_at), safe(r.run_id.substr(0, 26)), safe(r.fingerprint),
                               r.profile.empty() ? "-" : safe(r.profile), r.replicates, safe(r.kcert_version), safe(r.verdict),
                               r.algebra_applicable ? safe(gate_text(r.algebra)) : std::string("n/a"), safe(gate_text(r.bias)), safe(gate_text(r.variance)) + (r.variance_short ? "*" : ""),
                               opt(r.variance_u), opt(r.max_abs_z), changed[i] ? "<- verdict changed" : "");
    }
    if (any_short) std::cout << "PASS*: a variance PASS whose evidence supports fewer replicates than the horizon T\n";
    if (std::any_of(rows.begin(), rows.end(), [](const store::HistoryRow& r) { return !r.algebra_applicable; }))
      std::cout << "n/a: the algebra gate did not run (an opaque production, exact=False: no fp64 mode)\n";
    std::map<std::string, const store::HistoryRow*> envs;
    for (const auto& r : rows) envs[r.fingerprint] = &r;
    for (const auto& [fp, r] : envs) {
      std::cout << fmt::format("  environment {}: {} | GPU {} | LibTorch {} | kernels {} / {}\n", safe(fp), safe(r->cpu_model),
                               safe(r->gpu), safe(r->torch_version), safe(r->reference_version), safe(r->production_version));
    }
    std::cout << fmt::format("first {}: {}\nlast {}: {}\n", event,
                             first ? safe(first->started_at + " (" + first->run_id + ")") : "never", event,
                             last ? safe(last->started_at + " (" + last->run_id + ")") : "never");
  });
}

}  // namespace kcert::cli
