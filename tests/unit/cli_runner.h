// Shared by the cli_*_test.cpp files: the built `flashjit` binary run as a
// subprocess, with its exit code, stdout and stderr.
#pragma once

#include <unistd.h>  // environ

#include <cstdlib>
#include <string>
#include <vector>

#include "llvm/ADT/Optional.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "runtime/device.h"

namespace flashjit::testing_cli {

// Whether a CUDA device is usable here: tests of what a machine without
// one prints skip where there is one.
inline bool gpu_present() {
  auto count = device_count();
  if (!count) {
    llvm::consumeError(count.takeError());
    return false;
  }
  return *count > 0;
}

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return buffer ? (*buffer)->getBuffer().str() : std::string();
}

// The binary under test: $FLASHJIT_CLI when set, else the build tree's, else
// the `flashjit` beside this test binary (a carried bundle run without the
// variable: the build tree's path does not exist on the GPU machine).
inline std::string cli_path() {
  const char *env = std::getenv("FLASHJIT_CLI");
  if (env && *env) return env;
  if (llvm::sys::fs::can_execute(FLASHJIT_CLI_PATH)) return FLASHJIT_CLI_PATH;
  llvm::SmallString<256> beside(llvm::sys::fs::getMainExecutable(nullptr, nullptr));
  llvm::sys::path::remove_filename(beside);
  llvm::sys::path::append(beside, "flashjit");
  return beside.str().str();
}

// The environment of a command under test: this process's, but in the
// sanitizer build (ASan + LSan, .ci/run's build-asan) without LeakSanitizer
// in the child. There the child's exit-time leak check crashed inside LSan
// itself ("Tracer caught signal 11", in its scan of the thread-local storage
// that the dlopen'ed NVRTC adds) for some lengths of the working directory
// and not others: a fault of gcc 12's LeakSanitizer with this glibc, not a
// leak. The test process keeps its own leak check.
inline std::vector<std::string> child_environment() {
  std::vector<std::string> env;
  bool asan_options = false;
  for (char **e = environ; *e; ++e) {
    std::string entry = *e;
#if defined(__SANITIZE_ADDRESS__)
    if (llvm::StringRef(entry).startswith("ASAN_OPTIONS=")) {
      entry += ":detect_leaks=0";
      asan_options = true;
    }
#endif
    env.push_back(std::move(entry));
  }
#if defined(__SANITIZE_ADDRESS__)
  if (!asan_options) env.push_back("ASAN_OPTIONS=detect_leaks=0");
#else
  (void)asan_options;
#endif
  return env;
}

// Runs the binary with `args` (stdin empty, 300 s limit).
inline CliResult run_cli(std::vector<std::string> args) {
  const std::string binary = cli_path();
  const std::vector<std::string> env_strings = child_environment();
  const std::vector<llvm::StringRef> env(env_strings.begin(), env_strings.end());
  llvm::SmallString<128> out_path, err_path;
  llvm::sys::fs::createTemporaryFile("flashjit-cli", "out", out_path);
  llvm::sys::fs::createTemporaryFile("flashjit-cli", "err", err_path);
  std::vector<llvm::StringRef> argv = {binary};
  for (const std::string &a : args) argv.push_back(a);
  const llvm::Optional<llvm::StringRef> redirects[] = {llvm::StringRef(""), out_path.str(),
                                                       err_path.str()};
  CliResult r;
  std::string message;
  r.code = llvm::sys::ExecuteAndWait(binary, argv, llvm::ArrayRef<llvm::StringRef>(env),
                                     redirects, 300, 0, &message);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  llvm::sys::fs::remove(out_path);
  llvm::sys::fs::remove(err_path);
  return r;
}

}  // namespace flashjit::testing_cli
