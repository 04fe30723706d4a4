#include "cache/base64.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

llvm::Error bad(const llvm::Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "invalid base64: " + why.str());
}

}  // namespace

std::string base64_encode(llvm::ArrayRef<char> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[k])); };
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = byte(i) << 16 | byte(i + 1) << 8 | byte(i + 2);
    for (int shift : {18, 12, 6, 0}) out.push_back(kAlphabet[(v >> shift) & 63]);
  }
  size_t rest = bytes.size() - i;
  if (rest) {
    uint32_t v = byte(i) << 16 | (rest == 2 ? byte(i + 1) << 8 : 0);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

llvm::Expected<std::vector<char>> base64_decode(llvm::StringRef text) {
  std::vector<char> out;
  out.reserve(text.size() / 4 * 3);
  uint32_t accumulator = 0;
  int held = 0;     // sextets in `accumulator`
  int padding = 0;  // '=' seen; only more '=' and whitespace may follow
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    int v = sextet(c);
    if (v < 0) return bad(llvm::formatv("character '{0}' at offset {1}", c, i));
    if (padding) return bad(llvm::formatv("data after '=' padding at offset {0}", i));
    accumulator = accumulator << 6 | static_cast<uint32_t>(v);
    if (++held == 4) {
      out.push_back(static_cast<char>(accumulator >> 16));
      out.push_back(static_cast<char>(accumulator >> 8));
      out.push_back(static_cast<char>(accumulator));
      accumulator = 0;
      held = 0;
    }
  }
  // A final group of 2 or 3 sextets carries 1 or 2 bytes; padding, when
  // present, must complete it to 4.
  if (held == 1) return bad("a lone trailing character");
  if (padding > 2 || (padding && held + padding != 4)) return bad("wrong '=' padding");
  if (held == 2) out.push_back(static_cast<char>(accumulator >> 4));
  if (held == 3) {
    out.push_back(static_cast<char>(accumulator >> 10));
    out.push_back(static_cast<char>(accumulator >> 2));
  }
  return out;
}

}  // namespace flashjit
