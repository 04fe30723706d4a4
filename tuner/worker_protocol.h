// What the tuner and its worker processes say to each other: one JSON object
// per line each way. A request names its operation ("op") and, where it is
// about a candidate, the candidate's index in the tune and its KernelSpec
// (pass, dtype, head dims, mask, softcap, config, the forward's packed heads
// and split_kv, the KV cache's seqused_k and page_size, varlen, arch), so
// that a forward or backward candidate is the same kind of request; `setup`
// names the pass the worker measures ("fwd" or "bwd") and, for a varlen
// problem, its packed batch's lengths ("packed": {"seqlens_q": [...],
// "seqlens_k": [...]}), which the worker's inputs are laid out by; with a
// caller's modifiers, "modifiers" (the pass's part) and "aux_values"
// (["NAME=VALUE", ...]), which every run and check carries. A reply is
// {"ok":true,...} or {"ok":false,"error":"...","fatal":bool}; fatal means
// the worker's CUDA context is broken and it exits after replying.
//
//   op        request fields                 reply fields
//   compile   candidate, spec                cubin_key, entry, from_store, compile_ms
//   setup     pass, problem, device[, packed] input_sets
//             [, modifiers, aux_values]
//   load      candidate, spec                registers, spill_bytes, static_smem_bytes,
//                                            dynamic_smem_bytes, occupancy, rejected
//   warm_up   candidate, ms
//   time      candidate, repeats             median_ms, min_ms, max_ms
//   check     candidate                      passed, why
//
// Every reply also carries "compiles": the NVRTC compiles the worker made
// for it, so that the tuner's count ("NVRTC compiles in this run") includes
// them.
#pragma once

#include <string>

#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "reference/packed_batch.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

namespace flashjit::worker_protocol {

llvm::json::Object problem_to_json(const Problem &problem);
llvm::Expected<Problem> problem_from_json(const llvm::json::Object &object);

// {"seqlens_q": [...], "seqlens_k": [...]}; reading checks the form only
// (two lists of non-negative integers of one length): the runner validates
// the lengths against the problem.
llvm::json::Object packed_batch_to_json(const PackedBatch &batch);
llvm::Expected<PackedBatch> packed_batch_from_json(const llvm::json::Object &object);

// A caller's modifiers: their text is what a worker compiles (the hash in
// a spec's id follows from it) and runs ({"score_mod": "...", ...,
// "aux": [[type, name], ...]}); reading validates them.
llvm::json::Object modifiers_to_json(const Modifiers &modifiers);
llvm::Expected<Modifiers> modifiers_from_json(const llvm::json::Object &object);

llvm::json::Object spec_to_json(const KernelSpec &spec);
llvm::Expected<KernelSpec> spec_from_json(const llvm::json::Object &object);

// The named member of `object`, or an error naming it and what was expected.
llvm::Expected<int64_t> integer_field(const llvm::json::Object &object, llvm::StringRef key);
llvm::Expected<double> number_field(const llvm::json::Object &object, llvm::StringRef key);
llvm::Expected<std::string> string_field(const llvm::json::Object &object, llvm::StringRef key);
// "fwd" or "bwd" (to_string(Pass)).
llvm::Expected<Pass> pass_field(const llvm::json::Object &object, llvm::StringRef key);
llvm::Expected<const llvm::json::Object &> object_field(const llvm::json::Object &object,
                                                        llvm::StringRef key);

llvm::json::Object error_reply(const std::string &message, bool fatal);

}  // namespace flashjit::worker_protocol

namespace flashjit {

// Adds the NVRTC compiles a worker reports in `reply`, and their time, to
// this process's counters (runtime_counters), so a tune's "NVRTC compiles"
// and runtime_stats() include them.
void count_worker_compiles(const llvm::json::Object &reply);

}  // namespace flashjit
