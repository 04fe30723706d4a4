// SHA-256 of a byte string, with the x86 SHA extensions where the CPU has
// them (every x86 server CPU since 2017), LLVM's portable code elsewhere.
// Every cubin read from the database is hashed (its integrity check): with
// LLVM's code, a few hundred kilobytes of cubin took most of a fresh
// process's first call served from the database (tests/host/host_overhead:
// ~2.5 ms a class); the extensions do the same in a tenth of the time.
#pragma once

#include <array>
#include <cstdint>

#include "llvm/ADT/ArrayRef.h"

namespace flashjit {

std::array<uint8_t, 32> sha256(llvm::ArrayRef<uint8_t> bytes);

// Whether sha256 runs on the CPU's SHA extensions (tests report it).
bool sha256_uses_cpu_extensions();

}  // namespace flashjit
