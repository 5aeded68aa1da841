#include "harness/store/conninfo.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>
#include <vector>

namespace kcert::store {

namespace {

bool is_uri(const std::string& c) { return c.rfind("postgresql://", 0) == 0 || c.rfind("postgres://", 0) == 0; }

// [begin, end) of the password inside the connection string, or {npos, npos}.
std::pair<std::size_t, std::size_t> password_span(const std::string& c) {
  constexpr auto npos = std::string::npos;
  if (is_uri(c)) {
    const auto auth = c.find("://") + 3;
    // The userinfo ends at the last '@' before the path; a malformed host may contain
    // anything, so take the last '@' of the string before any '?'.
    const auto query = c.find('?', auth);
    const auto at = c.rfind('@', query == npos ? npos : query);
    if (at == npos || at < auth) return {npos, npos};
    const auto colon = c.find(':', auth);
    if (colon == npos || colon > at) return {npos, npos};
    return {colon + 1, at};
  }
  // key=value: "password", optional spaces, '=', optional spaces, then a quoted or bare value.
  for (std::size_t k = c.find("password"); k != npos; k = c.find("password", k + 1)) {
    if (k > 0 && !std::isspace(static_cast<unsigned char>(c[k - 1]))) continue;
    auto i = k + 8;
    while (i < c.size() && std::isspace(static_cast<unsigned char>(c[i]))) ++i;
    if (i >= c.size() || c[i] != '=') continue;
    ++i;
    while (i < c.size() && std::isspace(static_cast<unsigned char>(c[i]))) ++i;
    if (i < c.size() && c[i] == '\'') {
      const auto close = c.find('\'', i + 1);
      return {i + 1, close == npos ? c.size() : close};
    }
    // A bare value ends at the next " key=" (a password with a space is malformed, but
    // its second half is still the password).
    auto end = c.size();
    for (auto j = i; j < c.size(); ++j) {
      if (!std::isspace(static_cast<unsigned char>(c[j]))) continue;
      auto w = j;
      while (w < c.size() && std::isspace(static_cast<unsigned char>(c[w]))) ++w;
      auto e = w;
      while (e < c.size() && (std::isalnum(static_cast<unsigned char>(c[e])) || c[e] == '_')) ++e;
      while (e < c.size() && std::isspace(static_cast<unsigned char>(c[e]))) ++e;
      if (e > w && e < c.size() && c[e] == '=') {
        end = j;
        break;
      }
    }
    return {i, end};
  }
  return {npos, npos};
}

void replace_all(std::string& s, const std::string& what, const std::string& with) {
  if (what.empty()) return;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + with.size())) s.replace(p, what.size(), with);
}

}  // namespace

std::string with_default_timeouts(const std::string& conninfo) {
  std::vector<std::string> add;
  if (conninfo.find("connect_timeout") == std::string::npos && !std::getenv("PGCONNECT_TIMEOUT")) {
    add.push_back("connect_timeout=" + std::to_string(kDefaultConnectTimeoutSeconds));
  }
  if (conninfo.find("keepalives") == std::string::npos) {
    add.insert(add.end(), {"keepalives=1", "keepalives_idle=30", "keepalives_interval=10", "keepalives_count=3"});
  }
  if (add.empty()) return conninfo;
  std::string out = conninfo;
  for (const auto& a : add) {
    if (is_uri(conninfo)) out += (out.find('?') == std::string::npos ? "?" : "&") + a;
    else out += (out.empty() ? "" : " ") + a;
  }
  return out;
}

std::string redact_password(std::string message, const std::string& conninfo) {
  static const std::string kMark = "[password hidden]";
  std::vector<std::string> secrets;
  const auto [b, e] = password_span(conninfo);
  if (b != std::string::npos && e > b) {
    const auto pw = conninfo.substr(b, e - b);
    secrets.push_back(pw);  // (one-character secrets are dropped below: they would blank every letter)
    // The pieces libpq may quote alone ("missing \"=\" after \"PW\"").
    std::size_t i = 0;
    while (i < pw.size()) {
      while (i < pw.size() && std::isspace(static_cast<unsigned char>(pw[i]))) ++i;
      auto j = i;
      while (j < pw.size() && !std::isspace(static_cast<unsigned char>(pw[j]))) ++j;
      if (j > i + 1) secrets.push_back(pw.substr(i, j - i));
      i = j;
    }
    // Quoted fragments of the message that lie inside the password's span.
    for (auto q = message.find('"'); q != std::string::npos;) {
      const auto close = message.find('"', q + 1);
      if (close == std::string::npos) break;
      const auto frag = message.substr(q + 1, close - q - 1);
      bool inside = false;
      for (auto at = frag.empty() ? std::string::npos : conninfo.find(frag); at != std::string::npos;
           at = conninfo.find(frag, at + 1)) {
        if (at < e && at + frag.size() > b) inside = true;
      }
      if (inside && frag != conninfo) secrets.push_back(frag);
      q = message.find('"', close + 1);
    }
  }
  if (const char* env = std::getenv("PGPASSWORD"); env && std::string(env).size() > 1) secrets.emplace_back(env);
  secrets.erase(std::remove_if(secrets.begin(), secrets.end(), [](const auto& s) { return s.size() < 2; }), secrets.end());
  // Longest first, so a piece does not break up a longer secret before it is replaced.
  std::sort(secrets.begin(), secrets.end(), [](const auto& x, const auto& y) { return x.size() > y.size(); });
  for (const auto& s : secrets) replace_all(message, s, kMark);
  return message;
}

}  // namespace kcert::store
