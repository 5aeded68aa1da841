#pragma once
// Text on its way out of kcert, one function per destination (issue 51: the escaping was
// written once per writer). Texts from case files, plugins, results and the database reach
// terminals, HTML pages, JUnit XML and Markdown tables; each destination has its own
// mechanism that a text could turn on (a terminal's escape sequences, HTML's tags, XML's
// invalid characters that make a CI parser refuse the whole file, a Markdown table's cells).
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "harness/text/utf8.hpp"

namespace kcert::text {

// For a terminal (issue 34): control characters (an ESC starts a terminal command sequence:
// cursor moves, a retitled window, a cleared screen) and Unicode bidi controls (U+202E turns
// "PASS.txt" into something else on screen) are shown escaped (\x1B, \u{202E}), as are bytes
// that are not UTF-8. Tab and newline stay.
inline std::string terminal_safe(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto hex = [&](const char* fmt, unsigned v) {
    char buf[16];
    std::snprintf(buf, sizeof buf, fmt, v);
    out += buf;
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto ch = decode_utf8(s, i);
    const auto cp = ch.code_point;
    if (!ch.valid) {
      hex("\\x%02X", static_cast<unsigned char>(s[i]));
    } else if (cp < 0x80) {
      if ((cp < 0x20 && cp != '\n' && cp != '\t') || cp == 0x7F) hex("\\x%02X", cp);
      else out += static_cast<char>(cp);
    } else {
      const bool control = (cp >= 0x80 && cp <= 0x9F) || cp == 0x061C || cp == 0x200E || cp == 0x200F ||
                           (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
      if (control) hex("\\u{%04X}", cp);
      else out.append(s.substr(i, ch.length));
    }
    i += ch.length;
  }
  return out;
}

// For HTML text and attribute values (double-quoted): & < > " as entities. The page's own
// encoding (UTF-8) carries the rest.
inline std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// For an XML 1.0 attribute or element: the five entities escaped, and what XML 1.0 cannot hold
// at all dropped (CI's JUnit parsers refuse the whole file over one): C0 control characters
// other than tab, LF and CR become a space; bytes that are not UTF-8, U+FFFE and U+FFFF are
// dropped.
inline std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto ch = decode_utf8(s, i);
    const auto cp = ch.code_point;
    if (ch.valid && cp < 0x80) {
      switch (cp) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default:
          if (cp < 0x20 && cp != '\n' && cp != '\t' && cp != '\r') out += ' ';
          else out += static_cast<char>(cp);
      }
    } else if (ch.valid && cp != 0xFFFE && cp != 0xFFFF) {
      out.append(s.substr(i, ch.length));
    }
    i += ch.length;  // an invalid byte is dropped alone; what follows may be valid
  }
  return out;
}

// For a cell of a Markdown table (or a list item): `|` would end the cell and a line ending
// the row (LF, and a bare CR, which CommonMark also reads as one), and Markdown passes raw HTML
// through (a `<script>` or `<img onerror>` would be live on a rendered page), so `&`, `<` and
// `>` become entities. Other control characters become a space too; a tab stays.
inline std::string markdown_cell(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7F) {
      out += ' ';
      continue;
    }
    switch (c) {
      case '|': out += "\\|"; break;
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace kcert::text
