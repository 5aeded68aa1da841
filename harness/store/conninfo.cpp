#include "harness/store/conninfo.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace kcert::store {

namespace {

// What libpq reads as a URI: exactly this prefix (case-sensitive, nothing before it).
bool is_uri(const std::string& c) { return c.rfind("postgresql://", 0) == 0 || c.rfind("postgres://", 0) == 0; }

// Where a URI's authority starts, read leniently for redaction: after leading spaces, a
// scheme in any case and any number of slashes. libpq reads " postgresql://...",
// "POSTGRESQL://..." and "postgresql:/..." as key=value strings and echoes them whole in its
// error, password included.
std::size_t lenient_authority(const std::string& c) {
  std::size_t i = 0;
  while (i < c.size() && std::isspace(static_cast<unsigned char>(c[i]))) ++i;
  std::string head;
  for (auto j = i; j < c.size() && j < i + 11; ++j) head += static_cast<char>(std::tolower(static_cast<unsigned char>(c[j])));
  std::size_t at = std::string::npos;
  if (head.rfind("postgresql:", 0) == 0) at = i + 11;
  else if (head.rfind("postgres:", 0) == 0) at = i + 9;
  else return at;
  while (at < c.size() && c[at] == '/') ++at;
  return at;
}

// The end of a URI's userinfo as libpq finds it: the first '@' before any '/' (libpq scans
// for either), or npos when there is none.
std::size_t userinfo_end(const std::string& c, std::size_t auth) {
  const auto stop = c.find_first_of("@/", auth);
  return stop != std::string::npos && c[stop] == '@' ? stop : std::string::npos;
}

// %XX decoded, or "" when the text holds a bad escape (libpq then echoes it raw).
std::string percent_decoded(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(s[i + 2])))
      return "";
    out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return out;
}

// A key=value string's "password = value" spans, quoted or bare.
void keyword_password_spans(const std::string& c, std::vector<std::pair<std::size_t, std::size_t>>& spans) {
  constexpr auto npos = std::string::npos;
  for (std::size_t k = c.find("password"); k != npos; k = c.find("password", k + 1)) {
    if (k > 0 && !std::isspace(static_cast<unsigned char>(c[k - 1]))) continue;
    auto i = k + 8;
    while (i < c.size() && std::isspace(static_cast<unsigned char>(c[i]))) ++i;
    if (i >= c.size() || c[i] != '=') continue;
    ++i;
    while (i < c.size() && std::isspace(static_cast<unsigned char>(c[i]))) ++i;
    if (i < c.size() && c[i] == '\'') {
      const auto close = c.find('\'', i + 1);
      spans.emplace_back(i + 1, close == npos ? c.size() : close);
      continue;
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
    spans.emplace_back(i, end);
  }
}

// Every [begin, end) that may hold the password, under each reading of a malformed string
// (over-redacting costs a word of the message; under-redacting printed it). Issue 34 found six
// of 38 malformed forms that printed it: a '?' inside the password (the userinfo was cut at
// the '?'), an upper-case scheme and a leading space (not a URI to the old check, so no
// userinfo was looked for), and a bad escape in `?password=` (the query was not searched).
std::vector<std::pair<std::size_t, std::size_t>> password_spans(const std::string& c) {
  constexpr auto npos = std::string::npos;
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  if (const auto auth = lenient_authority(c); auth != npos) {
    // userinfo "user:password@": libpq's end (first '@' before '/'), and the last '@' of the
    // string, which is where a user who put an unescaped '@' or '/' in it meant it to end.
    const auto colon = c.find(':', auth);
    for (const auto at : {userinfo_end(c, auth), c.rfind('@')}) {
      if (at == npos || at < auth) continue;
      if (colon != npos && colon < at) spans.emplace_back(colon + 1, at);
    }
    // No '@' at all ("postgresql://user:PW"): libpq reads "user:PW" as host and port and
    // quotes the "port"; up to the path or the parameters. Digits alone are a port (the common
    // "postgresql://localhost:5432/db"), left readable: a password of digits only, given
    // without a host, is the one form this cannot tell from a port.
    if (c.find('@', auth) == npos && colon != npos) {
      const auto end = std::min(c.find_first_of("/?", colon + 1), c.size());
      const auto port = c.substr(colon + 1, end - colon - 1);
      if (!std::all_of(port.begin(), port.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); })) {
        spans.emplace_back(colon + 1, end);
      }
    }
    // Parameters whose key is "password", percent-encoded or not ("?%70assword=..."), up to
    // the next '&'; libpq decodes the key and echoes a value with a bad escape raw.
    for (auto k = c.find_first_of("?&", auth); k != npos; k = c.find_first_of("?&", k + 1)) {
      const auto eq = c.find('=', k + 1);
      if (eq == npos) break;
      const auto key = c.substr(k + 1, eq - k - 1);
      if (key != "password" && percent_decoded(key) != "password") continue;
      const auto end = c.find('&', eq + 1);
      spans.emplace_back(eq + 1, end == npos ? c.size() : end);
    }
  }
  // A string libpq reads as key=value (also what a lenient URI above is to libpq).
  if (!is_uri(c)) keyword_password_spans(c, spans);
  return spans;
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
  // A URI's parameters start at the first '?' after its userinfo: a '?' inside the password
  // took the defaults into the password (and the connect timeout was lost).
  bool has_query = false;
  if (is_uri(conninfo)) {
    const auto auth = conninfo.find("://") + 3;
    const auto at = userinfo_end(conninfo, auth);
    has_query = conninfo.find('?', at == std::string::npos ? auth : at + 1) != std::string::npos;
  }
  for (const auto& a : add) {
    if (is_uri(conninfo)) {
      out += (has_query ? "&" : "?") + a;
      has_query = true;
    } else {
      out += (out.empty() ? "" : " ") + a;
    }
  }
  return out;
}

std::string redact_password(std::string message, const std::string& conninfo) {
  static const std::string kMark = "[password hidden]";
  std::vector<std::string> secrets;
  for (const auto& [b, e] : password_spans(conninfo)) {
    if (e <= b) continue;
    const auto pw = conninfo.substr(b, e - b);
    secrets.push_back(pw);  // (one-character secrets are dropped below: they would blank every letter)
    if (const auto decoded = percent_decoded(pw); !decoded.empty() && decoded != pw) secrets.push_back(decoded);
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
