// flashjit's host cost per call on a warm class, measured against a stand-in
// driver (tools/cuda_driver_stub.cpp, loaded as libcuda.so.1 through
// LD_LIBRARY_PATH) that answers every call at once, so what is timed is
// flashjit's own work from flashjit::forward's entry to the launch (the
// bar: <= 5 us with the real driver's launch included). Also counts the
// driver calls a warm call makes, and fails when they differ from the
// expected ones: a regression in the host path shows here without a GPU.
//
//   LD_LIBRARY_PATH=build/stub-driver FLASHJIT_DB=$(mktemp -d)/x.db
//     build/tests/flashjit_host_overhead [calls]
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "flashjit/forward.h"

namespace {

using flashjit::Problem;

struct Counts {
  uint64_t launches, pointer_queries, tensor_maps, context_queries, pool_allocations;
};

Counts stub_counts() {
  // The stub flashjit loaded (RTLD_NOLOAD: the same handle, not a new load).
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto *read = handle ? reinterpret_cast<void (*)(uint64_t *)>(dlsym(handle, "stub_call_counts"))
                      : nullptr;
  if (!read) {
    std::fprintf(stderr, "host_overhead: libcuda.so.1 is not the stub driver (set "
                         "LD_LIBRARY_PATH to build/stub-driver)\n");
    std::exit(2);
  }
  uint64_t c[5];
  read(c);
  return {c[0], c[1], c[2], c[3], c[4]};
}

const void *fake(uintptr_t address) { return reinterpret_cast<const void *>(address); }

// Runs `calls` warm calls of `p`; prints the time per call and the driver
// calls per call; returns false when those differ from `expected`.
bool measure(const char *name, const Problem &p, int calls, const Counts &expected) {
  flashjit::ForwardArgs args = flashjit::ForwardArgs::packed(
      p, fake(0x10000000), fake(0x20000000), fake(0x30000000),
      const_cast<void *>(fake(0x40000000)), nullptr);
  if (p.varlen) {  // a packed batch: [total, heads, dim] tensors and their offsets
    args.q_strides = args.o_strides = {0, p.heads_q * p.head_dim_qk, p.head_dim_qk};
    args.k_strides = args.v_strides = {0, p.heads_kv * p.head_dim_qk, p.head_dim_qk};
    args.varlen = {static_cast<const int32_t *>(fake(0x50000000)),
                   static_cast<const int32_t *>(fake(0x60000000)), 3 * p.seqlen_q,
                   3 * p.seqlen_k};
  }
  // The first call compiles (NVRTC) or reads the database, and loads: its
  // time and where it went (with a precompiled FLASHJIT_DB, the part of a
  // fresh process's first call that is flashjit's own, less the driver's).
  const flashjit::RuntimeStats stats_before = flashjit::runtime_stats();
  const auto first_start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    if (i == 1) {
      const flashjit::RuntimeStats s = flashjit::runtime_stats();
      auto ms = [](uint64_t a, uint64_t b) { return double(a - b) / 1e6; };
      std::printf("%-28s first call %.2f ms: compile %.2f, NVRTC load wait %.2f, database "
                  "%.2f, module load %.2f\n",
                  name,
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                            first_start)
                      .count(),
                  ms(s.compile_ns, stats_before.compile_ns),
                  ms(s.compiler_wait_ns, stats_before.compiler_wait_ns),
                  ms(s.database_ns, stats_before.database_ns),
                  ms(s.module_load_ns, stats_before.module_load_ns));
    }
    flashjit::Status s = flashjit::forward(p, args);
    if (!s.ok()) {
      std::fprintf(stderr, "host_overhead: %s: %s\n", name, s.message().c_str());
      return false;
    }
  }
  const Counts before = stub_counts();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) (void)flashjit::forward(p, args);
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      calls;
  const Counts after = stub_counts();
  const Counts per{(after.launches - before.launches) / calls,
                   (after.pointer_queries - before.pointer_queries) / calls,
                   (after.tensor_maps - before.tensor_maps) / calls,
                   (after.context_queries - before.context_queries) / calls,
                   (after.pool_allocations - before.pool_allocations) / calls};
  std::printf("%-28s %6.2f us/call; per call: %llu launches, %llu pointer queries, %llu tensor "
              "maps, %llu context queries, %llu pool allocations\n",
              name, us, (unsigned long long)per.launches, (unsigned long long)per.pointer_queries,
              (unsigned long long)per.tensor_maps, (unsigned long long)per.context_queries,
              (unsigned long long)per.pool_allocations);
  const bool same = per.launches == expected.launches &&
                    per.pointer_queries == expected.pointer_queries &&
                    per.tensor_maps == expected.tensor_maps &&
                    per.context_queries == expected.context_queries &&
                    per.pool_allocations == expected.pool_allocations;
  if (!same)
    std::fprintf(stderr, "host_overhead: %s: expected %llu launches, %llu pointer queries, %llu "
                         "tensor maps, %llu context queries, %llu pool allocations per call\n",
                 name, (unsigned long long)expected.launches,
                 (unsigned long long)expected.pointer_queries,
                 (unsigned long long)expected.tensor_maps,
                 (unsigned long long)expected.context_queries,
                 (unsigned long long)expected.pool_allocations);
  return same;
}

}  // namespace

int main(int argc, char **argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 20000;
  Problem train;  // a training step's forward: sm90, one kernel
  train.batch = 2;
  train.heads_q = train.heads_kv = 16;
  train.seqlen_q = train.seqlen_k = 4096;
  train.head_dim_qk = train.head_dim_v = 128;
  train.mask = flashjit::MaskKind::causal;
  Problem decode;  // a decode step: split-KV (main + combine) over a workspace
  decode.batch = 1;
  decode.heads_q = 32;
  decode.heads_kv = 8;
  decode.seqlen_q = 1;
  decode.seqlen_k = 8192;
  decode.head_dim_qk = decode.head_dim_v = 128;
  // A packed batch: its offsets are checked too (two more pointer queries),
  // and on persistent CTAs its sequences are ordered per call, heaviest
  // first, by a one-CTA kernel that also zeroes the tile counter a mask
  // takes tiles from (one more launch; order and counter in one pool
  // allocation): 8 sequences of up to 2048 (16 query blocks, 2048 work
  // tiles on 132 SMs).
  Problem packed = train;
  packed.varlen = true;
  packed.batch = 8;
  packed.seqlen_q = packed.seqlen_k = 2048;
  // Up to 4096 (32 query blocks, 2560 work tiles): one CTA per work tile,
  // which never reads a counter.
  Problem packed_long = train;
  packed_long.varlen = true;
  packed_long.batch = 5;
  // The same tensors every call: the 3 TMA maps are encoded by the first
  // call only (runtime/tensor_maps.cpp keeps a thread's recent ones).
  bool ok = measure("forward d128 causal 2x4096", train, calls, {1, 4, 0, 1, 0});
  ok = measure("decode d128 1x8192 (split)", decode, calls, {2, 4, 0, 1, 1}) && ok;
  ok = measure("varlen d128 causal (counter)", packed, calls, {2, 6, 0, 1, 1}) && ok;
  ok = measure("varlen d128 causal, a CTA per tile", packed_long, calls, {1, 6, 0, 1, 0}) && ok;
  packed.mask = flashjit::MaskKind::none;  // without a mask the static rotation, still ordered
  ok = measure("varlen d128 full", packed, calls, {2, 6, 0, 1, 1}) && ok;
  return ok ? 0 : 1;
}
