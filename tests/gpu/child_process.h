// A "fresh process" for tests of what a process does on its first call: this
// test binary re-executed with a gtest filter that runs one helper test,
// $FLASHJIT_DB pointing at a given database and a marker variable set (the
// helper skips itself without it). The helper prints one line
// "<TAG> key=value ..." that the parent reads back.
#pragma once

#include <string>
#include <vector>

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

extern char **environ;

namespace flashjit::testing {

struct ChildReport {
  int exit_code = -1;
  std::string output;
  llvm::StringMap<std::string> values;
  std::string get(llvm::StringRef key) const { return values.lookup(key); }
};

// Runs the helper test `filter` ("--gtest_filter=Suite.Name") with `marker`=1
// and FLASHJIT_DB=`db_path`; its output goes to `dir`/`name`.out; the
// key=value tokens of its line starting with `tag` are parsed.
inline ChildReport run_child(llvm::StringRef filter, llvm::StringRef marker, llvm::StringRef tag,
                             llvm::StringRef db_path, llvm::StringRef dir, llvm::StringRef name) {
  ChildReport report;
  const std::string self = llvm::sys::fs::getMainExecutable(nullptr, nullptr);
  // The parent's environment, with the database and the child marker set.
  std::vector<std::string> env;
  for (char **e = environ; *e; ++e) {
    llvm::StringRef entry(*e);
    if (entry.startswith("FLASHJIT_DB=") || entry.startswith(marker.str() + "=")) continue;
    env.push_back(entry.str());
  }
  env.push_back("FLASHJIT_DB=" + db_path.str());
  env.push_back(marker.str() + "=1");
  std::vector<llvm::StringRef> env_refs(env.begin(), env.end());

  llvm::SmallString<128> out_path(dir);
  llvm::sys::path::append(out_path, name + ".out");
  const llvm::StringRef args[] = {self, filter};
  const llvm::Optional<llvm::StringRef> redirects[] = {llvm::None, llvm::StringRef(out_path),
                                                       llvm::StringRef(out_path)};
  std::string error;
  report.exit_code = llvm::sys::ExecuteAndWait(self, args, llvm::ArrayRef(env_refs), redirects,
                                               /*SecondsToWait=*/300, 0, &error);
  if (auto buffer = llvm::MemoryBuffer::getFile(out_path))
    report.output = (*buffer)->getBuffer().str();
  report.output += error;
  llvm::SmallVector<llvm::StringRef, 16> lines;
  llvm::StringRef(report.output).split(lines, '\n');
  const std::string prefix = tag.str() + " ";
  for (llvm::StringRef line : lines) {
    if (!line.consume_front(prefix)) continue;
    llvm::SmallVector<llvm::StringRef, 16> tokens;
    line.split(tokens, ' ', -1, false);
    for (llvm::StringRef token : tokens) {
      auto [key, value] = token.split('=');
      report.values[key] = value.str();
    }
  }
  return report;
}

}  // namespace flashjit::testing
