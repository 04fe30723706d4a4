// The shipped modifiers' snippets (include/flashjit/mods.h).
#include "flashjit/mods.h"

namespace flashjit::mods {

namespace {
// A bias added to the score: d score_mod / d score is 1.
const char *const kBiasGradient =
    "__device__ float score_mod_grad(float score, int b, int h, int q, int k, const Aux &aux) {\n"
    "  return 1.f;\n"
    "}\n";
}  // namespace

Modifiers alibi() {
  Modifiers m;
  m.score_mod =
      "__device__ float score_mod(float score, int b, int h, int q, int k, const Aux &aux) {\n"
      "  return score + aux.slopes[h] * (k - q);\n"
      "}\n"
      "__device__ float score_mod_slope(int b, int h, const Aux &aux) {\n"
      "  return aux.slopes[h];\n"
      "}\n";
  m.score_mod_grad = kBiasGradient;
  m.aux = {{"const float*", "slopes"}};
  return m;
}

Modifiers relative_bias() {
  Modifiers m;
  m.score_mod =
      "__device__ float score_mod(float score, int b, int h, int q, int k, const Aux &aux) {\n"
      "  const int m = aux.max_distance;\n"
      "  const int d = k - q < -m ? -m : k - q > m ? m : k - q;\n"
      "  return score + aux.table[h * (2 * m + 1) + d + m];\n"
      "}\n";
  m.score_mod_grad = kBiasGradient;
  m.aux = {{"const float*", "table"}, {"int", "max_distance"}};
  return m;
}

Modifiers document_mask() {
  Modifiers m;
  m.mask_mod =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  const long long row = static_cast<long long>(b) * aux.seqlen;\n"
      "  return aux.doc_ids[row + q] == aux.doc_ids[row + k];\n"
      "}\n";
  m.aux = {{"const int*", "doc_ids"}, {"int", "seqlen"}};
  return m;
}

Modifiers prefix_lm() {
  Modifiers m;
  m.mask_mod =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  return k < aux.prefix || k <= q;\n"
      "}\n";
  m.aux = {{"int", "prefix"}};
  m.mask_mod_qk_only = MaskModQkOnly::on;
  return m;
}

Modifiers sliding_window_with_sinks() {
  Modifiers m;
  m.mask_mod =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  return k <= q && (q - k < aux.window || k < aux.sinks);\n"
      "}\n";
  m.aux = {{"int", "window"}, {"int", "sinks"}};
  m.mask_mod_qk_only = MaskModQkOnly::on;
  return m;
}

Modifiers causal_mask() {
  Modifiers m;
  m.mask_mod = "__device__ bool mask_mod(int b, int h, int q, int k) { return k <= q; }\n";
  m.mask_mod_qk_only = MaskModQkOnly::on;
  return m;
}

}  // namespace flashjit::mods
