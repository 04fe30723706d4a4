// Shared by the CLI tests that work with files: a fresh folder per test,
// files written into it, the command's --json output parsed, and LLVM 14
// Optionals turned into comparable values.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "llvm/ADT/Optional.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::testing_cli {

// A fresh folder per test, removed with everything in it.
struct TempDir {
  TempDir() {
    llvm::sys::fs::createUniqueDirectory("flashjit-cli", path);
    // Only this user may write it, whatever the umask: flashjit loads no
    // cubin from a database others can write (cache/db_trust.h).
    llvm::sys::fs::setPermissions(path, llvm::sys::fs::owner_all);
  }
  ~TempDir() { llvm::sys::fs::remove_directories(path); }
  std::string file(llvm::StringRef name) const {
    llvm::SmallString<128> p(path);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }
  llvm::SmallString<128> path;
};

inline void write_file(const std::string &path, llvm::StringRef text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  os << text;
}

inline llvm::json::Object parse_json(const std::string &text) {
  auto value = llvm::json::parse(text);
  if (!value) {
    ADD_FAILURE() << llvm::toString(value.takeError()) << "\n" << text;
    return {};
  }
  return std::move(*value->getAsObject());
}

// LLVM 14's Optional compares with nothing but another Optional.
inline std::string S(llvm::Optional<llvm::StringRef> v) { return v ? v->str() : "<absent>"; }
inline int64_t I(llvm::Optional<int64_t> v) { return v ? *v : -999; }
inline double D(llvm::Optional<double> v) { return v ? *v : -999; }

// `query --json`'s source and config tiles, as "nearest sm80 64x64 w8 s2".
inline std::string source_and_tiles(const llvm::json::Object &o) {
  const llvm::json::Object *c = o.getObject("config");
  if (!c) return S(o.getString("source")) + " <no config>";
  return S(o.getString("source")) + " " + S(c->getString("path")) + " " +
         std::to_string(I(c->getInteger("block_m"))) + "x" +
         std::to_string(I(c->getInteger("block_n"))) + " w" +
         std::to_string(I(c->getInteger("warps"))) + " s" +
         std::to_string(I(c->getInteger("stages")));
}

}  // namespace flashjit::testing_cli
