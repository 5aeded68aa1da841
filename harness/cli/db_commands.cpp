#include "harness/cli/db_commands.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "harness/cli/exit_codes.hpp"
#include "harness/cli/flag_checks.hpp"
#include "harness/cli/suggest.hpp"
#include "harness/report/history.hpp"
#include "harness/text/escape.hpp"
#include "harness/store/postgres.hpp"
#include "harness/store/spool.hpp"

namespace kcert::cli {

namespace {

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

// `kcert db status`: the migrations, and the runs still marked running with how to close them.
void print_db_status() {
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
}

// `kcert upload`: each spool's records stored; a record the database refuses is named and
// skipped, and the exit status is then 2.
void upload_spools(const std::vector<std::string>& files) {
  auto s = connect();
  bool refused_any = false;
  for (const auto& f : files) {
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
}

void register_upload_command(CLI::App& app) {
  auto files = std::make_shared<std::vector<std::string>>();
  auto* up = app.add_subcommand("upload", "Insert spooled results into the database (idempotent: a repeated upload adds nothing)");
  up->footer(std::string("A spool is written by `kcert run --db` before each database insert; when the\n"
                         "database was down, upload it later.\n") + kConnectionHelp);
  up->add_option("spool", *files, "spool files (.jsonl)")->required()->check(CLI::ExistingFile);
  up->callback([files]() { upload_spools(*files); });
}

void register_history_command(CLI::App& app) {
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
    const auto timeline = report::read_timeline(rows);
    if (h->format == "json") std::cout << report::history_json(h->q.case_id, rows, timeline, KCERT_VERSION).dump(2) << "\n";
    else if (h->format == "csv") report::print_history_csv(std::cout, rows, timeline);
    else report::print_history_table(std::cout, h->q.case_id, rows, timeline);
  });
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
  status->callback(print_db_status);
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
  register_upload_command(app);
  register_history_command(app);
}

}  // namespace kcert::cli
