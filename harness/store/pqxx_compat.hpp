#pragma once
// libpqxx 6.4 (Debian 12) and 7.10 (Debian 13) spell some things differently. Parameterized queries:
// 7.10 deprecates exec_params / exec_params1 / exec0 / exec1 in favour of
// exec(sql, pqxx::params{...}) and the result's one_row() / no_rows(), which 6.4 lacks.
// These functions are the one place that knows; the store calls them everywhere.
#include <pqxx/pqxx>

#include <string>
#include <string_view>
#include <utility>

#if PQXX_VERSION_MAJOR > 7 || (PQXX_VERSION_MAJOR == 7 && PQXX_VERSION_MINOR >= 10)
#define KCERT_PQXX_EXEC_WITH_PARAMS 1
#endif

namespace kcert::store::pq {

template <typename... Args>
pqxx::result exec_params(pqxx::transaction_base& w, const std::string& sql, Args&&... args) {
#ifdef KCERT_PQXX_EXEC_WITH_PARAMS
  return w.exec(sql, pqxx::params{std::forward<Args>(args)...});
#else
  return w.exec_params(sql, std::forward<Args>(args)...);
#endif
}

// Exactly one row, else pqxx::unexpected_rows.
template <typename... Args>
pqxx::row exec_params1(pqxx::transaction_base& w, const std::string& sql, Args&&... args) {
#ifdef KCERT_PQXX_EXEC_WITH_PARAMS
  return w.exec(sql, pqxx::params{std::forward<Args>(args)...}).one_row();
#else
  return w.exec_params1(sql, std::forward<Args>(args)...);
#endif
}

// No rows, else pqxx::unexpected_rows.
inline pqxx::result exec0(pqxx::transaction_base& w, const std::string& sql) {
#ifdef KCERT_PQXX_EXEC_WITH_PARAMS
  auto r = w.exec(sql);
  r.no_rows();
  return r;
#else
  return w.exec0(sql);
#endif
}

// Exactly one row, else pqxx::unexpected_rows.
inline pqxx::row exec1(pqxx::transaction_base& w, const std::string& sql) {
#ifdef KCERT_PQXX_EXEC_WITH_PARAMS
  return w.exec(sql).one_row();
#else
  return w.exec1(sql);
#endif
}

// A field's PostgreSQL array text, parsed. 7.10 deprecates field::as_array() in favour of
// as_sql_array<T>(), which 6.4 lacks; the parser it returns is the same on both, so the
// deprecation is silenced here, the one place that knows.
inline pqxx::array_parser array_parser_of(const pqxx::field& field) {
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
  return field.as_array();
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
}

}  // namespace kcert::store::pq
