// Shared by the cli_*_test.cpp files: the built `flashjit` binary run as a
// subprocess, with its exit code, stdout and stderr.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "llvm/ADT/Optional.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"

namespace flashjit::testing_cli {

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return buffer ? (*buffer)->getBuffer().str() : std::string();
}

// The binary under test: the build tree's, or $FLASHJIT_CLI where the tests
// run from a carried bundle (scripts/device-check.sh).
inline std::string cli_path() {
  const char *env = std::getenv("FLASHJIT_CLI");
  return env && *env ? env : FLASHJIT_CLI_PATH;
}

// Runs the binary with `args` (stdin empty, 300 s limit).
inline CliResult run_cli(std::vector<std::string> args) {
  const std::string binary = cli_path();
  llvm::SmallString<128> out_path, err_path;
  llvm::sys::fs::createTemporaryFile("flashjit-cli", "out", out_path);
  llvm::sys::fs::createTemporaryFile("flashjit-cli", "err", err_path);
  std::vector<llvm::StringRef> argv = {binary};
  for (const std::string &a : args) argv.push_back(a);
  const llvm::Optional<llvm::StringRef> redirects[] = {llvm::StringRef(""), out_path.str(),
                                                       err_path.str()};
  CliResult r;
  std::string message;
  r.code = llvm::sys::ExecuteAndWait(binary, argv, llvm::None, redirects, 300, 0,
                                     &message);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  llvm::sys::fs::remove(out_path);
  llvm::sys::fs::remove(err_path);
  return r;
}

}  // namespace flashjit::testing_cli
