// The kernels' shared parts stay shared: the online softmax and the score
// policy are written once, in templates/common/, and every kernel calls
// them. A kernel that computes a row max, an exponential of a score or a
// softcap of its own fails here, naming the file and line.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace {

struct TemplateFile {
  std::string name;  // relative to templates/
  std::string text;
};

std::vector<TemplateFile> template_files() {
  std::vector<TemplateFile> files;
  const std::string root = std::string(FLASHJIT_SOURCE_DIR) + "/templates";
  std::error_code ec;
  for (llvm::sys::fs::recursive_directory_iterator it(root, ec), end; it != end && !ec;
       it.increment(ec)) {
    if (llvm::sys::path::extension(it->path()) != ".cuh") continue;
    std::ifstream in(it->path());
    std::stringstream text;
    text << in.rdbuf();
    files.push_back({it->path().substr(root.size() + 1), text.str()});
  }
  return files;
}

// "file:line: text" of every line of `files` matching `pattern`, outside
// the files allowed to.
std::vector<std::string> uses(const std::vector<TemplateFile> &files, const std::regex &pattern,
                              const std::vector<std::string> &allowed) {
  std::vector<std::string> found;
  for (const TemplateFile &file : files) {
    if (std::find(allowed.begin(), allowed.end(), file.name) != allowed.end()) continue;
    std::istringstream lines(file.text);
    std::string line;
    for (int n = 1; std::getline(lines, line); ++n) {
      const size_t comment = line.find("//");
      if (std::regex_search(line.substr(0, comment), pattern))
        found.push_back(file.name + ":" + std::to_string(n) + ": " + line);
    }
  }
  return found;
}

std::string joined(const std::vector<std::string> &lines) {
  std::string out;
  for (const std::string &line : lines) out += line + "\n";
  return out;
}

// The fp32 references (reference_attention*.cuh) are independent of the
// kernels they check, so they keep their own arithmetic.
const std::vector<std::string> kReferences = {"reference_attention.cuh",
                                              "reference_attention_backward.cuh"};

std::vector<std::string> with_references(std::vector<std::string> allowed) {
  allowed.insert(allowed.end(), kReferences.begin(), kReferences.end());
  return allowed;
}

TEST(KernelParts, TemplatesAreFound) {
  const std::vector<TemplateFile> files = template_files();
  EXPECT_GE(files.size(), 40u);
  for (const char *kernel : {"fwd_sm80.cuh", "fwd_sm90.cuh", "bwd_sm80.cuh", "bwd_dq_sm80.cuh",
                             "bwd_sm90_consumer.cuh", "common/online_softmax.cuh",
                             "common/score_policy.cuh"})
    EXPECT_TRUE(std::any_of(files.begin(), files.end(),
                            [&](const TemplateFile &f) { return f.name == kernel; }))
        << kernel;
}

TEST(KernelParts, OnlyTheOnlineSoftmaxTakesARowMax) {
  // quad_max is the reduction of a fragment row's max across its four lanes.
  const auto found = uses(template_files(), std::regex(R"(\bquad_max\s*\()"),
                          with_references({"common/ptx.cuh", "common/online_softmax.cuh"}));
  EXPECT_TRUE(found.empty()) << joined(found);
}

TEST(KernelParts, OnlyTheSoftmaxExponentiatesScores) {
  // exp2_approx of a score against a max or an LSE is the softmax's.
  const auto found = uses(template_files(), std::regex(R"(\bexp2_approx\s*\()"),
                          with_references({"common/ptx.cuh", "common/online_softmax.cuh"}));
  EXPECT_TRUE(found.empty()) << joined(found);
}

TEST(KernelParts, OnlyTheScorePolicySoftcaps) {
  const auto found =
      uses(template_files(), std::regex(R"(\btanh_approx\s*\(|\bscore_scale\b)"),
           with_references({"common/ptx.cuh", "common/score_policy.cuh", "common/fwd_params.cuh",
                            "common/bwd_params.cuh"}));
  EXPECT_TRUE(found.empty()) << joined(found);
}

TEST(KernelParts, KernelsCallTheSharedParts) {
  for (const TemplateFile &file : template_files()) {
    const bool forward = file.name == "fwd_sm80.cuh" || file.name == "fwd_sm90.cuh";
    const bool backward = file.name == "bwd_sm80.cuh" || file.name == "bwd_dq_sm80.cuh" ||
                          file.name == "bwd_sm90_consumer.cuh";
    if (!forward && !backward) continue;
    EXPECT_NE(file.text.find("Score::softcap("), std::string::npos) << file.name;
    if (forward) {
      EXPECT_NE(file.text.find("stats.update<"), std::string::npos) << file.name;
    }
    if (backward) {
      EXPECT_NE(file.text.find("probability_from_lse("), std::string::npos) << file.name;
      EXPECT_NE(file.text.find("Score::logit2("), std::string::npos) << file.name;
    }
  }
}

}  // namespace
