// The worker-process machinery with stand-in workers (/bin/sh scripts), so
// every way a worker can end is tested without a GPU: a reply, a crash, a
// hang past the timeout, a fatal reply, garbage; and a fresh worker after
// each. Also the protocol's round trips and the planted-fault settings.
#include <gtest/gtest.h>

#include "tuner/planted_faults.h"
#include "tuner/worker_process.h"
#include "tuner/worker_protocol.h"

namespace flashjit {
namespace {

using llvm::json::Object;

// A worker that answers each line with `reply` (a JSON line) and counts
// requests in its replies' "n".
WorkerProcess echo_worker(const std::string &reply = R"({"ok":true})") {
  return WorkerProcess("/bin/sh", {"-c", "while read line; do echo '" + reply + "'; done"});
}

std::string message(llvm::Error e) { return llvm::toString(std::move(e)); }

TEST(WorkerProcess, ARunningWorkerServesManyRequests) {
  WorkerProcess worker("/bin/sh",
                       {"-c", "n=0; while read line; do n=$((n+1)); echo \"{\\\"ok\\\":true,\\\"n\\\":$n}\"; done"});
  for (int i = 1; i <= 3; ++i) {
    auto reply = worker.request(Object{{"op", "ping"}}, 10, "pinging");
    ASSERT_TRUE(bool(reply)) << message(reply.takeError());
    EXPECT_EQ(reply->getInteger("n").getValueOr(0), i);
  }
  EXPECT_EQ(worker.generation(), 1);
  EXPECT_TRUE(worker.running());
}

TEST(WorkerProcess, ACrashFailsTheRequestAndTheNextOneStartsAFreshWorker) {
  WorkerProcess worker("/bin/sh", {"-c", "read line; kill -SEGV $$"});
  auto reply = worker.request(Object{{"op", "compile"}}, 10, "compiling");
  ASSERT_FALSE(bool(reply));
  EXPECT_EQ(message(reply.takeError()), "worker killed by SIGSEGV while compiling");
  EXPECT_FALSE(worker.running());
  auto again = worker.request(Object{{"op", "compile"}}, 10, "compiling");
  ASSERT_FALSE(bool(again));
  EXPECT_EQ(message(again.takeError()), "worker killed by SIGSEGV while compiling");
  EXPECT_EQ(worker.generation(), 2);
}

TEST(WorkerProcess, AnExitIsReportedWithItsStatus) {
  WorkerProcess worker("/bin/sh", {"-c", "read line; exit 7"});
  auto reply = worker.request(Object{{"op", "time"}}, 10, "timing");
  ASSERT_FALSE(bool(reply));
  EXPECT_EQ(message(reply.takeError()), "worker exited with status 7 while timing");
}

TEST(WorkerProcess, AHangIsKilledAfterTheTimeout) {
  WorkerProcess worker("/bin/sh", {"-c", "read line; exec sleep 60"});
  const auto start = std::chrono::steady_clock::now();
  auto reply = worker.request(Object{{"op", "time"}}, 0.5, "timing");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(bool(reply));
  EXPECT_EQ(message(reply.takeError()), "timed out after 0.5 s while timing; the worker was killed");
  EXPECT_LT(seconds, 5.0);
  EXPECT_FALSE(worker.running());
}

TEST(WorkerProcess, AFatalReplyEndsTheWorker) {
  WorkerProcess worker = echo_worker(R"({"ok":false,"error":"GPU fault: boom","fatal":true})");
  auto reply = worker.request(Object{{"op", "time"}}, 10, "timing");
  ASSERT_FALSE(bool(reply));
  EXPECT_EQ(message(reply.takeError()), "GPU fault: boom");
  EXPECT_FALSE(worker.running());
}

TEST(WorkerProcess, ANonFatalErrorKeepsTheWorker) {
  WorkerProcess worker = echo_worker(R"({"ok":false,"error":"no such candidate"})");
  auto reply = worker.request(Object{{"op", "time"}}, 10, "timing");
  ASSERT_FALSE(bool(reply));
  EXPECT_EQ(message(reply.takeError()), "no such candidate");
  EXPECT_TRUE(worker.running());
  EXPECT_EQ(worker.generation(), 1);
}

TEST(WorkerProcess, GarbageIsAnErrorAndEndsTheWorker) {
  WorkerProcess worker = echo_worker("hello");
  auto reply = worker.request(Object{{"op", "time"}}, 10, "timing");
  ASSERT_FALSE(bool(reply));
  EXPECT_EQ(message(reply.takeError()),
            "the worker's reply while timing is not a JSON object: hello");
  EXPECT_FALSE(worker.running());
}

TEST(WorkerProcess, AMissingBinaryIsAClearError) {
  WorkerProcess worker("/nonexistent/flashjit", {"worker"});
  auto reply = worker.request(Object{{"op", "ping"}}, 10, "pinging");
  ASSERT_FALSE(bool(reply));
  EXPECT_EQ(message(reply.takeError()),
            "cannot start the worker /nonexistent/flashjit: No such file or directory");
}

TEST(WorkerProcess, EveryFreshWorkerIsSetUpFirst) {
  // The setup's reply is kept; a worker that fails its setup fails the
  // request that started it.
  WorkerProcess worker("/bin/sh",
                       {"-c", "read setup; echo '{\"ok\":true,\"input_sets\":4}'; read line; "
                              "kill -KILL $$"},
                       Object{{"op", "setup"}}, 10);
  auto reply = worker.request(Object{{"op", "time"}}, 10, "timing");
  ASSERT_FALSE(bool(reply));
  EXPECT_EQ(message(reply.takeError()), "worker killed by SIGKILL while timing");
  EXPECT_EQ(worker.setup_reply().getInteger("input_sets").getValueOr(0), 4);

  WorkerProcess no_setup("/bin/sh", {"-c", "read setup; echo '{\"ok\":false,\"error\":\"no GPU\"}'"},
                         Object{{"op", "setup"}}, 10);
  auto refused = no_setup.request(Object{{"op", "time"}}, 10, "timing");
  ASSERT_FALSE(bool(refused));
  EXPECT_EQ(message(refused.takeError()), "no GPU");
}

TEST(WorkerProcess, WorkerBinaryComesFromTheOptionThenTheEnvironment) {
  ::setenv("FLASHJIT_WORKER", "/opt/flashjit/bin/flashjit", 1);
  EXPECT_EQ(resolve_worker_binary("/usr/bin/flashjit"), "/usr/bin/flashjit");
  EXPECT_EQ(resolve_worker_binary(""), "/opt/flashjit/bin/flashjit");
  ::unsetenv("FLASHJIT_WORKER");
  EXPECT_EQ(resolve_worker_binary(""), "");
  EXPECT_FALSE(current_executable().empty());
}

TEST(WorkerProtocol, ProblemsAndSpecsSurviveTheRoundTrip) {
  Problem p;
  p.dtype = DType::fp16;
  p.batch = 3;
  p.heads_q = 12;
  p.heads_kv = 4;
  p.seqlen_q = 113;
  p.seqlen_k = 1023;
  p.head_dim_qk = 96;
  p.head_dim_v = 64;
  p.mask = MaskKind::window;
  p.window_left = 17;
  p.window_right = 3;
  p.softmax_scale = 0.123456789f;
  p.softcap = 30.5f;
  auto back = worker_protocol::problem_from_json(worker_protocol::problem_to_json(p));
  ASSERT_TRUE(bool(back)) << message(back.takeError());
  EXPECT_EQ(describe(*back), describe(p));
  EXPECT_EQ(back->softmax_scale, p.softmax_scale);
  EXPECT_EQ(back->softcap, p.softcap);
  EXPECT_EQ(back->window_right, 3);

  KernelSpec s;
  s.pass = Pass::backward;
  s.dtype = DType::fp16;
  s.head_dim_qk = 96;
  s.head_dim_v = 64;
  s.mask = MaskKind::causal;
  s.softcap = true;
  s.config = KernelConfig{KernelPath::sm80, 64, 128, 8, 2};
  s.config.deterministic = true;
  s.arch = TargetArch{9, 0, true};
  auto spec = worker_protocol::spec_from_json(worker_protocol::spec_to_json(s));
  ASSERT_TRUE(bool(spec)) << message(spec.takeError());
  EXPECT_EQ(*spec, s);
  EXPECT_EQ(spec->id(), s.id());
}

// A forward candidate's split-KV count and GQA packing reach the worker that
// compiles and measures it: each value of each, not only the defaults.
TEST(WorkerProtocol, SplitsAndPackGqaSurviveTheRoundTrip) {
  KernelSpec s;
  s.pass = Pass::forward;
  s.config = KernelConfig{KernelPath::sm90, 128, 112, 12, 2};
  s.arch = TargetArch{9, 0, true};
  for (int splits : {0, 1, 3, 256})
    for (GqaPacking packing : {GqaPacking::automatic, GqaPacking::on, GqaPacking::off}) {
      s.config.splits = splits;
      s.config.pack_gqa = packing;
      const Object o = worker_protocol::spec_to_json(s);
      EXPECT_EQ(o.getObject("config")->getInteger("splits").getValueOr(-1), splits);
      EXPECT_EQ(o.getObject("config")->getString("pack_gqa").getValueOr("").str(),
                to_string(packing));
      auto spec = worker_protocol::spec_from_json(o);
      ASSERT_TRUE(bool(spec)) << message(spec.takeError());
      EXPECT_EQ(spec->config.splits, splits);
      EXPECT_EQ(spec->config.pack_gqa, packing);
      EXPECT_EQ(*spec, s) << describe(s.config);
    }
  // The spec's derived fields: the kernel the worker compiles packs 8 heads
  // and splits the keys, as the tuner's spec said.
  s.config.splits = 4;
  s.config.pack_gqa = GqaPacking::on;
  s.pack_gqa = 8;
  s.split_kv = true;
  auto spec = worker_protocol::spec_from_json(worker_protocol::spec_to_json(s));
  ASSERT_TRUE(bool(spec)) << message(spec.takeError());
  EXPECT_EQ(spec->pack_gqa, 8);
  EXPECT_TRUE(spec->split_kv);
  EXPECT_EQ(*spec, s);
  EXPECT_EQ(spec->id(), s.id());
  EXPECT_NE(spec->id().find("_gqa8_split_"), std::string::npos) << spec->id();
}

TEST(WorkerProtocol, BadRequestsNameTheField) {
  Object o = worker_protocol::problem_to_json(Problem{});
  o["dtype"] = "fp8";
  auto bad = worker_protocol::problem_from_json(o);
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(message(bad.takeError()), "worker request: 'dtype': unknown value 'fp8'");
  o = worker_protocol::problem_to_json(Problem{});
  o.erase("seqlen_k");
  auto missing = worker_protocol::problem_from_json(o);
  ASSERT_FALSE(bool(missing));
  EXPECT_EQ(message(missing.takeError()), "worker request: 'seqlen_k': expected an integer");

  KernelSpec s;
  s.config = KernelConfig{KernelPath::sm80, 128, 64, 4, 2};
  Object spec = worker_protocol::spec_to_json(s);
  spec.getObject("config")->erase("splits");
  auto no_splits = worker_protocol::spec_from_json(spec);
  ASSERT_FALSE(bool(no_splits));
  EXPECT_EQ(message(no_splits.takeError()), "worker request: 'splits': expected an integer");
  spec = worker_protocol::spec_to_json(s);
  (*spec.getObject("config"))["pack_gqa"] = "yes";
  auto bad_packing = worker_protocol::spec_from_json(spec);
  ASSERT_FALSE(bool(bad_packing));
  EXPECT_EQ(message(bad_packing.takeError()), "worker request: 'pack_gqa': unknown value 'yes'");
  spec = worker_protocol::spec_to_json(s);
  spec.erase("split_kv");
  auto no_split_kv = worker_protocol::spec_from_json(spec);
  ASSERT_FALSE(bool(no_split_kv));
  EXPECT_EQ(message(no_split_kv.takeError()), "worker request: 'split_kv': expected true or false");
}

TEST(PlantedFaults, ParsesEachKindAndRefusesTypos) {
  auto plants = parse_planted_faults("compile_crash:2, gpu_fault:3,hang:4");
  ASSERT_TRUE(bool(plants)) << message(plants.takeError());
  EXPECT_EQ(plants->compile_crash, 2);
  EXPECT_EQ(plants->gpu_fault, 3);
  EXPECT_EQ(plants->hang, 4);
  EXPECT_EQ(planted_kernel_source(*plants, 3)->entry, "flashjit_planted_gpu_fault");
  EXPECT_EQ(planted_kernel_source(*plants, 4)->entry, "flashjit_planted_hang");
  EXPECT_FALSE(planted_kernel_source(*plants, 2).has_value());
  EXPECT_FALSE(parse_planted_faults("")->any());

  auto typo = parse_planted_faults("gpu_falt:1");
  ASSERT_FALSE(bool(typo));
  EXPECT_EQ(message(typo.takeError()),
            "FLASHJIT_TEST_PLANT: unknown kind 'gpu_falt' (compile_crash, gpu_fault, hang)");
  auto index = parse_planted_faults("hang:x");
  ASSERT_FALSE(bool(index));
  EXPECT_EQ(message(index.takeError()),
            "FLASHJIT_TEST_PLANT: 'hang:x': expected kind:candidate-index");
}

}  // namespace
}  // namespace flashjit
