#pragma once
// One UTF-8 decoder for every text that leaves kcert (issue 51): the loader's check of a case
// file, the terminal's escaping and the JUnit XML writer each decoded UTF-8 by hand, three
// copies of the same bit twiddling with the same rules. Free of LibTorch and of the layers.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kcert::text {

// The character that starts at byte `i` of `s`.
struct Utf8Char {
  std::uint32_t code_point = 0;  // when valid
  std::size_t length = 1;        // bytes it takes when valid; 1 for an invalid byte (skip it alone)
  bool valid = false;
};

// Decodes one character at `i` (< s.size()). Invalid: a stray continuation byte, a lead byte
// of no sequence (0xF8..0xFF), a sequence cut short or with a bad continuation byte, an overlong
// form, a UTF-16 surrogate, a code point past U+10FFFF. What follows an invalid byte may be valid.
inline Utf8Char decode_utf8(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return {c, 1, true};
  const std::size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  std::uint32_t cp = len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
  bool ok = len > 0 && i + len <= s.size();
  for (std::size_t k = 1; ok && k < len; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    ok = (d & 0xC0) == 0x80;
    cp = (cp << 6) | (d & 0x3Fu);
  }
  ok = ok && !(len == 2 && cp < 0x80) && !(len == 3 && cp < 0x800) && !(len == 4 && cp < 0x10000) &&
       !(cp >= 0xD800 && cp <= 0xDFFF) && cp <= 0x10FFFF;
  if (!ok) return {0, 1, false};
  return {cp, len, true};
}

}  // namespace kcert::text
