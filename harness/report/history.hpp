#pragma once
// `kcert history`'s three renderings of one case's stored results (the report room, issue 51):
// a table for people, JSON (format kcert-history/1) and CSV for tools. The command queries
// the database and picks one; what a row means is read once here (HistoryTimeline).
#include <nlohmann/json.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "harness/store/postgres.hpp"

namespace kcert::report {

// The rows read once: which row's verdict changed within its environment (time order), and
// the first and last runs where the case was flagged (a negative detected, a positive's false
// alarm).
struct HistoryTimeline {
  std::vector<bool> verdict_changed;  // one per row
  const store::HistoryRow* first_flagged = nullptr;
  const store::HistoryRow* last_flagged = nullptr;
  std::string event = "detection";  // or "false alarm" (the case is a positive)
};

// Whether a stored result counts as flagged: a negative detected, a positive's false alarm.
bool flagged(const store::HistoryRow& r);

HistoryTimeline read_timeline(const std::vector<store::HistoryRow>& rows);

nlohmann::json history_json(const std::string& case_id, const std::vector<store::HistoryRow>& rows,
                            const HistoryTimeline& t, const std::string& kcert_version);

// A header line, then one line per row; fields with a comma, a quote or a line end quoted.
void print_history_csv(std::ostream& out, const std::vector<store::HistoryRow>& rows, const HistoryTimeline& t);

// The table, each environment in words, and the first and last flagged run. Stored texts pass
// through text::terminal_safe (a run id or a CPU model is whatever the writer sent).
void print_history_table(std::ostream& out, const std::string& case_id, const std::vector<store::HistoryRow>& rows,
                         const HistoryTimeline& t);

}  // namespace kcert::report
