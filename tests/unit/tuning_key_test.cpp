// The keys tunings and cubins are filed under: size buckets, problem classes
// (what must share a tuning and what must not), the cubin content hash and
// the stored form of a config.
#include <gtest/gtest.h>

#include "generator/source.h"
#include "runtime/call_key.h"
#include "runtime/tuning_key.h"

namespace flashjit {
namespace {

Problem base_problem() {
  Problem p;
  p.dtype = DType::bf16;
  p.batch = 2;
  p.heads_q = 16;
  p.heads_kv = 16;
  p.seqlen_q = 4096;
  p.seqlen_k = 4096;
  p.head_dim_qk = p.head_dim_v = 128;
  return p;
}

TEST(SizeBucket, IsCeilLog2) {
  EXPECT_EQ(size_bucket(1), 0);
  EXPECT_EQ(size_bucket(2), 1);
  EXPECT_EQ(size_bucket(3), 2);
  EXPECT_EQ(size_bucket(4), 2);
  EXPECT_EQ(size_bucket(4096), 12);
  EXPECT_EQ(size_bucket(4097), 13);
  EXPECT_EQ(size_bucket(8192), 13);
  EXPECT_EQ(size_bucket(8193), 14);
  EXPECT_EQ(size_bucket(int64_t(1) << 40), 40);
  EXPECT_EQ(size_bucket(0), 0);  // never valid, but never UB either
}

// An fp8 problem never takes a 16-bit problem's tuning: Q's dtype, an fp8
// cache and a non-default output type each key a class; spellings of one
// kernel share theirs.
TEST(ProblemClassKey, ElementTypesSplitClasses) {
  Problem bf16 = base_problem();
  Problem e4m3 = bf16;
  e4m3.dtype = DType::e4m3;
  Problem cache = bf16;
  cache.kv_dtype = KvDType::e4m3;
  Problem e4m3_fp16 = e4m3;
  e4m3_fp16.out_dtype = OutDType::fp16;
  const ProblemClassKey keys[] = {problem_class_key(bf16), problem_class_key(e4m3),
                                  problem_class_key(cache), problem_class_key(e4m3_fp16)};
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = i + 1; j < 4; ++j) EXPECT_FALSE(keys[i] == keys[j]) << i << " " << j;
  EXPECT_EQ(keys[1].dtype, "e4m3");
  EXPECT_EQ(keys[1].kv_dtype, "same");
  EXPECT_EQ(keys[1].out_dtype, "auto");
  EXPECT_EQ(keys[2].dtype, "bf16");
  EXPECT_EQ(keys[2].kv_dtype, "e4m3");
  EXPECT_EQ(keys[3].out_dtype, "fp16");

  Problem same = e4m3;
  same.kv_dtype = KvDType::e4m3;  // all e4m3 either way
  same.out_dtype = OutDType::bf16;  // the default output
  EXPECT_EQ(problem_class_key(same), keys[1]);
  Problem spelled = bf16;
  spelled.out_dtype = OutDType::bf16;
  EXPECT_EQ(problem_class_key(spelled), keys[0]);
}

TEST(ProblemClassKey, FieldsFollowTheProblem) {
  Problem p = base_problem();
  p.heads_kv = 4;
  p.seqlen_q = 1000;
  p.seqlen_k = 5000;
  p.softcap = 30.f;
  ProblemClassKey k = problem_class_key(p);
  EXPECT_EQ(k.pass, "fwd");
  EXPECT_EQ(k.dtype, "bf16");
  EXPECT_EQ(k.head_dim_qk, 128);
  EXPECT_EQ(k.head_dim_v, 128);
  EXPECT_EQ(k.mask, "none");
  EXPECT_EQ(k.window_left, -1);
  EXPECT_EQ(k.window_right, -1);
  EXPECT_TRUE(k.softcap);
  EXPECT_EQ(k.gqa_ratio, 4);
  EXPECT_EQ(k.seqlen_q_bucket, 10);
  EXPECT_EQ(k.seqlen_k_bucket, 13);
  EXPECT_EQ(k.batch_heads_bucket, 5);  // 2 * 16 = 32
  EXPECT_EQ(problem_class_key(p, "bwd").pass, "bwd");
}

// A packed batch is a class of its own ("packed"), bucketed by its longest
// lengths and its total: 3 sequences of at most 4096 queries, 4413 in all,
// size like 2 sequences of 4096 (ceil(4413 / 4096)), x 16 heads.
TEST(ProblemClassKey, APackedBatchIsClassedByItsLongestSequenceAndItsTotal) {
  Problem p = base_problem();
  p.varlen = true;
  p.batch = 3;
  p.seqlen_q = 4096;
  p.seqlen_k = 3000;
  const Problem view = class_view(p, 4413);
  EXPECT_EQ(view.batch, 2);
  EXPECT_EQ(view.seqlen_q, 4096);
  const ProblemClassKey k = problem_class_key(view);
  EXPECT_EQ(k.kv_layout, "packed");
  EXPECT_EQ(k.seqlen_q_bucket, 12);
  EXPECT_EQ(k.seqlen_k_bucket, 12);
  EXPECT_EQ(k.batch_heads_bucket, 5);  // 2 * 16 = 32
  // 40 sequences of 100 queries and one of 4096 weigh like 2 of 4096.
  EXPECT_EQ(problem_class_key(class_view(p, 40 * 100 + 4096)), k);
  // Twice the tokens: another bucket; the sequence count alone changes nothing.
  EXPECT_EQ(problem_class_key(class_view(p, 4 * 4096)).batch_heads_bucket, 6);
  Problem more = p;
  more.batch = 300;
  EXPECT_EQ(problem_class_key(class_view(more, 4413)), k);
  // Unknown total, or a dense problem: as they are.
  EXPECT_EQ(class_view(p, 0).batch, 3);
  Problem dense = base_problem();
  EXPECT_EQ(class_view(dense, 999999).batch, dense.batch);
  EXPECT_EQ(problem_class_key(dense).kv_layout, "contiguous");
}

TEST(ProblemClassKey, SizesInOneBucketShareAClass) {
  Problem a = base_problem(), b = base_problem();
  a.seqlen_q = a.seqlen_k = 4097;
  b.seqlen_q = b.seqlen_k = 8192;
  b.batch = 1;
  b.heads_q = b.heads_kv = 31;  // 31 and 32 both in bucket 5
  EXPECT_EQ(problem_class_key(a), problem_class_key(b));
  // Scales are run-time parameters, and the softcap only matters on/off.
  b.softmax_scale = 0.1f;
  a.softcap = 10.f;
  b.softcap = 50.f;
  EXPECT_EQ(problem_class_key(a), problem_class_key(b));
}

TEST(ProblemClassKey, EquivalentMasksShareAClass) {
  Problem causal = base_problem(), window = base_problem(), unbounded = base_problem();
  causal.mask = MaskKind::causal;
  causal.window_left = 100;  // ignored: only read for a window
  window.mask = MaskKind::window;
  window.window_left = -1;
  window.window_right = 0;
  EXPECT_EQ(problem_class_key(causal), problem_class_key(window));
  EXPECT_EQ(problem_class_key(causal).mask, "causal");
  EXPECT_EQ(problem_class_key(causal).window_left, -1);
  unbounded.mask = MaskKind::window;
  EXPECT_EQ(problem_class_key(unbounded), problem_class_key(base_problem()));
}

TEST(ProblemClassKey, WhatChangesTheKernelOrItsSpeedDiffers) {
  const ProblemClassKey base = problem_class_key(base_problem());
  auto differs = [&](auto change) {
    Problem p = base_problem();
    change(p);
    return !(problem_class_key(p) == base);
  };
  EXPECT_TRUE(differs([](Problem &p) { p.dtype = DType::fp16; }));
  EXPECT_TRUE(differs([](Problem &p) { p.head_dim_qk = 64; }));
  EXPECT_TRUE(differs([](Problem &p) { p.head_dim_v = 64; }));
  EXPECT_TRUE(differs([](Problem &p) { p.mask = MaskKind::causal; }));
  EXPECT_TRUE(differs([](Problem &p) { p.softcap = 30.f; }));
  EXPECT_TRUE(differs([](Problem &p) { p.heads_kv = 2; }));
  EXPECT_TRUE(differs([](Problem &p) { p.seqlen_q = 4097; }));
  EXPECT_TRUE(differs([](Problem &p) { p.seqlen_k = 2048; }));
  EXPECT_TRUE(differs([](Problem &p) { p.batch = 4; }));

  Problem w1 = base_problem(), w2 = base_problem();
  w1.mask = w2.mask = MaskKind::window;
  w1.window_left = w2.window_left = 256;
  w1.window_right = 0;
  w2.window_right = 16;
  EXPECT_EQ(problem_class_key(w1).window_left, 256);
  EXPECT_EQ(problem_class_key(w1).window_right, 0);
  EXPECT_FALSE(problem_class_key(w1) == problem_class_key(w2));
}

TEST(DeviceFingerprint, CopiesTheIdentifyingFields) {
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.sm_count = 132;
  d.driver_version = 13000;
  d.total_memory = 1;  // not part of the fingerprint
  DeviceFingerprint fp = device_fingerprint(d);
  EXPECT_EQ(fp, (DeviceFingerprint{"NVIDIA H200", 9, 0, 132, 13000}));
  d.total_memory = 2;
  EXPECT_EQ(device_fingerprint(d), fp);
}

GeneratedSource sample_source() {
  KernelSpec spec;
  spec.config = {KernelPath::sm80, 128, 64, 4, 2};
  spec.arch = {8, 0, false};
  return generate_forward(spec);
}

TEST(CubinKey, ChangesWithEveryInput) {
  const GeneratedSource source = sample_source();
  const TargetArch sm80{8, 0, false}, sm90a{9, 0, true};
  const std::string key = cubin_key(source, sm80, "13.0");
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(cubin_key(source, sm80, "13.0"), key);  // deterministic

  EXPECT_NE(cubin_key(source, sm90a, "13.0"), key);
  EXPECT_NE(cubin_key(source, TargetArch{9, 0, false}, "13.0"),
            cubin_key(source, sm90a, "13.0"));  // sm_90 vs sm_90a
  EXPECT_NE(cubin_key(source, sm80, "12.8"), key);

  GeneratedSource changed = source;
  changed.source += "\n";
  EXPECT_NE(cubin_key(changed, sm80, "13.0"), key);

  changed = source;
  changed.options.push_back("-G");
  EXPECT_NE(cubin_key(changed, sm80, "13.0"), key);

  // Options split differently are different command lines.
  GeneratedSource one = source, two = source;
  one.options = {"-a b"};
  two.options = {"-a", "b"};
  EXPECT_NE(cubin_key(one, sm80, "13.0"), cubin_key(two, sm80, "13.0"));

  // A header's text and its name are part of the program.
  ASSERT_FALSE(source.headers.empty());
  std::vector<TemplateFile> headers(source.headers.begin(), source.headers.end());
  const std::string edited = headers[0].text.str() + "// edit\n";
  headers[0].text = edited;
  changed = source;
  changed.headers = headers;
  EXPECT_NE(cubin_key(changed, sm80, "13.0"), key);
  headers[0].text = source.headers[0].text;
  headers[0].name = "renamed.cuh";
  changed.headers = headers;
  EXPECT_NE(cubin_key(changed, sm80, "13.0"), key);
}

TEST(CubinKey, DiffersBetweenSpecs) {
  KernelSpec a, b;
  a.config = b.config = {KernelPath::sm80, 128, 64, 4, 2};
  a.arch = b.arch = {8, 0, false};
  b.config.stages = 3;
  EXPECT_NE(cubin_key(generate_forward(a), a.arch, "13.0"),
            cubin_key(generate_forward(b), b.arch, "13.0"));
}

TEST(StoredConfig, RoundTrips) {
  for (KernelConfig c : {KernelConfig{KernelPath::sm80, 128, 64, 4, 2},
                         KernelConfig{KernelPath::sm90, 64, 16, 2, 4}}) {
    StoredConfig s = to_stored(c);
    EXPECT_EQ(s.path, to_string(c.path));
    auto back = from_stored(s);
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(*back, c);
  }
  // Left to the heuristic, splits and pack_gqa are stored as such.
  EXPECT_EQ(to_stored({KernelPath::sm80, 128, 64, 4, 2}),
            (StoredConfig{"sm80", 128, 64, 4, 2, 0, "auto"}));
}

TEST(StoredConfig, SplitsAndPackGqaRoundTrip) {
  KernelConfig c{KernelPath::sm90, 128, 112, 12, 2};
  for (int splits : {0, 1, 7, 256})
    for (GqaPacking packing : {GqaPacking::automatic, GqaPacking::on, GqaPacking::off}) {
      c.splits = splits;
      c.pack_gqa = packing;
      const StoredConfig s = to_stored(c);
      EXPECT_EQ(s.splits, splits);
      EXPECT_EQ(s.pack_gqa, to_string(packing));
      auto back = from_stored(s);
      ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
      EXPECT_EQ(*back, c) << describe(c);
    }
  // A row of schema 1 (StoredConfig's defaults): one split, no packing.
  auto old = from_stored(StoredConfig{"sm90", 128, 128, 12, 2});
  ASSERT_TRUE(bool(old)) << llvm::toString(old.takeError());
  EXPECT_EQ(old->splits, 1);
  EXPECT_EQ(old->pack_gqa, GqaPacking::off);
}

TEST(StoredConfig, RejectsBadPathAndNonPositiveFields) {
  auto expect_error = [](const StoredConfig &s, llvm::StringRef needle) {
    auto c = from_stored(s);
    ASSERT_FALSE(bool(c)) << "accepted " << s.path;
    std::string message = llvm::toString(c.takeError());
    EXPECT_NE(message.find(needle.str()), std::string::npos) << message;
  };
  expect_error({"sm_80", 128, 64, 4, 2}, "sm_80");
  expect_error({"", 128, 64, 4, 2}, "unknown kernel path");
  expect_error({"SM80", 128, 64, 4, 2}, "SM80");
  expect_error({"sm80", 0, 64, 4, 2}, "block_m=0");
  expect_error({"sm80", 128, -64, 4, 2}, "block_n=-64");
  expect_error({"sm80", 128, 64, 0, 2}, "warps=0");
  expect_error({"sm80", 128, 64, 4, 0}, "stages=0");
  expect_error({"sm80", 128, 64, 4, 2, -1, "off"}, "splits=-1: expected 0 to 256");
  expect_error({"sm80", 128, 64, 4, 2, 257, "off"}, "splits=257");
  expect_error({"sm80", 128, 64, 4, 2, 1, "yes"}, "pack_gqa 'yes' (expected auto, on or off)");
  expect_error({"sm80", 128, 64, 4, 2, 1, ""}, "pack_gqa ''");
}

// ---- call keys ------------------------------------------------------------------

Problem gqa_problem(int64_t seqlen_q, int64_t seqlen_k) {
  Problem p = base_problem();
  p.heads_q = 32;
  p.heads_kv = 8;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.mask = MaskKind::window;
  p.window_left = 128;
  p.window_right = 0;
  return p;
}

// An fp8 cache or another output type runs another kernel: another plan,
// even with a complete config.
TEST(CallKey, ElementTypesAreInTheKeyAndItsHash) {
  const KernelConfig complete{KernelPath::sm90, 128, 128, 12, 2, false, 1, GqaPacking::off};
  Problem bf16 = base_problem();
  Problem cache = bf16;
  cache.kv_dtype = KvDType::e4m3;
  Problem e4m3 = bf16;
  e4m3.dtype = DType::e4m3;
  Problem e4m3_fp16 = e4m3;
  e4m3_fp16.out_dtype = OutDType::fp16;
  const CallKey keys[] = {CallKey::make(1, bf16, complete), CallKey::make(1, cache, complete),
                          CallKey::make(1, e4m3, complete), CallKey::make(1, e4m3_fp16, complete)};
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = i + 1; j < 4; ++j) {
      EXPECT_FALSE(keys[i] == keys[j]) << i << " " << j;
      EXPECT_NE(CallKeyHash{}(keys[i]), CallKeyHash{}(keys[j])) << i << " " << j;
    }
  Problem spelled = e4m3;
  spelled.out_dtype = OutDType::bf16;
  spelled.kv_dtype = KvDType::e4m3;
  EXPECT_TRUE(CallKey::make(1, spelled, complete) == keys[2]);
}

TEST(CallKey, ACompleteConfigThatFixesEverythingIgnoresTheSizes) {
  KernelConfig c{KernelPath::sm90, 128, 128, 12, 2};
  c.splits = 1;
  c.pack_gqa = GqaPacking::off;
  const CallKey a = CallKey::make(1, gqa_problem(1, 8192), c);
  EXPECT_EQ(a.gqa_ratio, 0);
  EXPECT_EQ(a.seqlen_q_bucket, 0);
  EXPECT_EQ(a.seqlen_k_bucket, 0);
  EXPECT_EQ(a.batch_heads_bucket, 0);
  EXPECT_EQ(a.window_left, -1);
  // Other sizes, the same kernel: one entry.
  const CallKey b = CallKey::make(1, gqa_problem(4096, 512), c);
  EXPECT_EQ(a, b);
  EXPECT_EQ(CallKeyHash{}(a), CallKeyHash{}(b));
}

// splits = 0 or pack_gqa = auto: the heuristic picks them from the sizes
// (decode: few queries, long keys, the GQA ratio), so the key has them.
TEST(CallKey, SplitsOrPackingLeftToTheHeuristicKeyOnTheSizes) {
  for (auto [splits, packing] : {std::pair{0, GqaPacking::off}, {1, GqaPacking::automatic},
                                 {0, GqaPacking::automatic}}) {
    KernelConfig c{KernelPath::sm90, 128, 128, 12, 2};
    c.splits = splits;
    c.pack_gqa = packing;
    const CallKey decode = CallKey::make(1, gqa_problem(1, 8192), c);
    EXPECT_EQ(decode.gqa_ratio, 4);
    EXPECT_EQ(decode.seqlen_q_bucket, 0);
    EXPECT_EQ(decode.seqlen_k_bucket, 13);
    EXPECT_EQ(decode.batch_heads_bucket, 6);  // 2 x 32
    // The database is not consulted for a complete config: no window.
    EXPECT_EQ(decode.window_left, -1);
    EXPECT_EQ(decode.window_right, -1);
    const CallKey prefill = CallKey::make(1, gqa_problem(4096, 8192), c);
    EXPECT_EQ(prefill.seqlen_q_bucket, 12);
    EXPECT_FALSE(decode == prefill) << describe(c);
    EXPECT_EQ(decode, CallKey::make(1, gqa_problem(1, 5000), c)) << describe(c);  // same buckets
  }
  // An incomplete config still keys on everything, window included.
  const CallKey partial = CallKey::make(1, gqa_problem(1, 8192), KernelConfig{});
  EXPECT_EQ(partial.gqa_ratio, 4);
  EXPECT_EQ(partial.window_left, 128);
  EXPECT_EQ(partial.window_right, 0);
}

TEST(CallKey, SplitsAndPackGqaAreInTheKeyAndItsHash) {
  KernelConfig c{KernelPath::sm90, 128, 128, 12, 2};
  c.splits = 1;
  c.pack_gqa = GqaPacking::off;
  const Problem p = gqa_problem(1, 8192);
  const CallKey base = CallKey::make(1, p, c);
  KernelConfig more_splits = c;
  more_splits.splits = 4;
  KernelConfig packed = c;
  packed.pack_gqa = GqaPacking::on;
  for (const KernelConfig &other : {more_splits, packed}) {
    const CallKey k = CallKey::make(1, p, other);
    EXPECT_FALSE(k == base) << describe(other);
    EXPECT_NE(CallKeyHash{}(k), CallKeyHash{}(base)) << describe(other);
  }
}

}  // namespace
}  // namespace flashjit
