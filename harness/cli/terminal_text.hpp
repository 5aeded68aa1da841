#pragma once
// Text from case files, plugins and results on its way to a terminal (issue 34): control
// characters (an ESC starts a terminal command sequence: cursor moves, a retitled window, a
// cleared screen) and Unicode bidi controls (U+202E turns "PASS.txt" into something else on
// screen) are shown escaped, as are bytes that are not UTF-8. Tab and newline stay.
#include <cstdint>
#include <cstdio>
#include <string>

namespace kcert::cli {

inline std::string terminal_safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  const auto hex = [&](const char* fmt, unsigned v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, fmt, v);
    out += buf;
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) hex("\\x%02X", c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    std::size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    std::uint32_t cp = len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = len > 0 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      ok = (d & 0xC0) == 0x80;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (ok) ok = !(len == 2 && cp < 0x80) && !(len == 3 && cp < 0x800) && !(len == 4 && cp < 0x10000) &&
                 !(cp >= 0xD800 && cp <= 0xDFFF) && cp <= 0x10FFFF;
    if (!ok) {
      hex("\\x%02X", c);
      ++i;
      continue;
    }
    const bool control = (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
                         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
    if (control) hex("\\u{%04X}", cp);
    else out.append(s, i, len);
    i += len;
  }
  return out;
}

}  // namespace kcert::cli
