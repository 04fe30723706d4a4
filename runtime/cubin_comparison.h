// Whether a stored cubin is the program NVRTC writes for its source: the
// check of `flashjit db verify` and `db import`, which recompile a row and
// compare. NVRTC 13.0's output is a function of the source, the options
// and its version, with one exception measured here (2026-12-07, x86-64,
// sm_80 and sm_90a, forward and backward): under -lineinfo the DWARF line
// table (.debug_line, and its relocations .rel.debug_line on sm_80 and
// .rela.debug_line on sm_90a) names the
// compiling process's working directory, so one kernel compiled in two
// folders differs there and nowhere else. The driver never reads those
// sections (debuggers and profilers do), so they are left out of the
// comparison; every other section, the headers and every loaded segment
// must be byte-identical.
#pragma once

#include <string>

#include "llvm/ADT/ArrayRef.h"

namespace flashjit {

struct CubinComparison {
  bool same = false;       // the same program
  bool identical = false;  // and the same bytes
  // What differs (`same` false), or which sections were left out
  // (`same` true, `identical` false).
  std::string detail;
};

// `stored` is what a database holds, `rebuilt` what NVRTC wrote here; both
// are bytes from anywhere and are parsed defensively (a malformed ELF file
// differs, never crashes).
CubinComparison compare_cubins(llvm::ArrayRef<char> stored, llvm::ArrayRef<char> rebuilt);

}  // namespace flashjit
