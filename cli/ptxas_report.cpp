#include "cli/ptxas_report.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Regex.h"

namespace flashjit::cli {

namespace {

int match_int(llvm::StringRef line, const char *pattern) {
  llvm::Regex regex(pattern);
  llvm::SmallVector<llvm::StringRef, 2> groups;
  int value = 0;
  if (regex.match(line, &groups)) groups[1].getAsInteger(10, value);
  return value;
}

}  // namespace

// ptxas prints, per function:
//   ptxas info    : Compiling entry function 'k' for 'sm_90a'
//   ptxas info    : Function properties for k
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, ...
std::optional<PtxasReport> parse_ptxas_report(llvm::StringRef log, llvm::StringRef entry) {
  std::optional<PtxasReport> report;
  bool in_entry = false;
  while (!log.empty()) {
    auto [line, rest] = log.split('\n');
    log = rest;
    if (line.contains("Compiling entry function")) {
      if (report) break;  // the wanted function's block has ended
      in_entry = entry.empty() || line.contains((llvm::Twine("'") + entry + "'").str());
      if (in_entry) report.emplace();
      continue;
    }
    if (!in_entry) continue;
    if (line.contains("bytes stack frame")) {
      report->stack_frame_bytes = match_int(line, "([0-9]+) bytes stack frame");
      report->spill_store_bytes = match_int(line, "([0-9]+) bytes spill stores");
      report->spill_load_bytes = match_int(line, "([0-9]+) bytes spill loads");
    } else if (line.contains("Used ") && line.contains(" registers")) {
      report->registers = match_int(line, "Used ([0-9]+) registers");
      report->static_smem_bytes = match_int(line, "([0-9]+) bytes smem");
    }
  }
  return report;
}

}  // namespace flashjit::cli
