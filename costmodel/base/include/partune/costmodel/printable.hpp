#pragma once
// Text from files and arguments made safe for a terminal, for error messages.
#include <cstddef>
#include <string>

namespace partune {

// `text` safe to print on a terminal: valid UTF-8 and newlines and tabs stay as they are;
// every other control byte and every byte that is not part of valid UTF-8 becomes \xNN
// (a file's raw 0xff byte reads "\xff"). Applying it twice changes nothing more.
inline std::string escape_unprintable(const std::string& text) {
  static const char* const hex = "0123456789abcdef";
  std::string out;
  const auto byte = [&](std::size_t i) { return i < text.size() ? static_cast<unsigned char>(text[i]) : 0u; };
  const auto continuation = [&](std::size_t i) { return (byte(i) & 0xC0u) == 0x80u; };
  for (std::size_t i = 0; i < text.size();) {
    const unsigned c = byte(i);
    // A multi-byte sequence's length, and the range of its second byte (no overlong
    // forms, no surrogates, nothing past U+10FFFF).
    std::size_t n = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    bool valid = n > 0 && byte(i + 1) >= lo && byte(i + 1) <= hi;
    for (std::size_t k = 2; valid && k < n; ++k) valid = continuation(i + k);
    if (valid) {
      out.append(text, i, n);
      i += n;
    } else if ((c >= 0x20 && c < 0x7F) || c == '\n' || c == '\t') {
      out += static_cast<char>(c);
      ++i;
    } else {
      out += {'\\', 'x', hex[c >> 4], hex[c & 0xF]};
      ++i;
    }
  }
  return out;
}

}  // namespace partune
