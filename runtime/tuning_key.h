// The keys flashjit files tunings and cubins under: a Problem's class and
// buckets, the device's and the software's fingerprints, and the content
// hash of a compilation.
#pragma once

#include <string>

#include "cache/tuning_db.h"
#include "flashjit/problem.h"
#include "generator/source.h"
#include "generator/target_arch.h"
#include "runtime/device.h"

namespace flashjit {

// ceil(log2(x)) for x >= 1: seqlens 4097..8192 share bucket 13.
int size_bucket(int64_t x);

// `modifiers`: the caller's modifiers' hash (modifiers_hash; "" for none),
// part of the class: a modified call takes only tunings of its snippets.
ProblemClassKey problem_class_key(const Problem &problem, llvm::StringRef pass = "fwd",
                                  llvm::StringRef modifiers = "");

// The problem as the tuning classes and the config choice see it. A packed
// batch (varlen) of `total_q` queries whose longest sequence has seqlen_q
// is sized as ceil(total_q / seqlen_q) sequences of that length: its
// buckets are its longest lengths and its total (batch x heads of the
// equivalent dense batch), not its count of sequences, which says little
// about its work. Other problems (and total_q 0: unknown) come back as they
// are. Only the choice reads it; kernels launch with the real problem.
Problem class_view(const Problem &problem, int64_t total_q);

// The `pass` field of a class key: "fwd", "bwd", or "bwd-det" for the
// deterministic backward. The deterministic mode is the caller's choice,
// never the tuner's (it trades speed for bit-identical gradients) and runs
// another set of kernels, so it is tuned and looked up as a class of its own.
const char *class_pass(Pass pass, bool deterministic = false);
DeviceFingerprint device_fingerprint(const DeviceInfo &device);
// The NVRTC version (loads libnvrtc) and the templates hash.
llvm::Expected<SoftwareFingerprint> software_fingerprint();

// SHA-256 (hex) of source, headers, options, NVRTC version and arch: cubins
// are arch-specific and a compiler change makes a different binary.
std::string cubin_key(const GeneratedSource &source, const TargetArch &arch,
                      llvm::StringRef nvrtc_version);

StoredConfig to_stored(const KernelConfig &config);
llvm::Expected<KernelConfig> from_stored(const StoredConfig &config);
// "sm80 128x64 w4 s2" (" splits=4", " pack_gqa" where set): short enough for
// a table column.
std::string config_text(const StoredConfig &config);

}  // namespace flashjit
