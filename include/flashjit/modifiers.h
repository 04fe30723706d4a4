// A caller's own variant of attention (FlexAttention's score_mod and
// mask_mod): CUDA source that NVRTC compiles into the forward kernel, so the
// variant runs at the kernel's speed and a new sequence length compiles
// nothing. Plain data: no CUDA, no LLVM.
//
// A snippet runs with the caller's privileges, like any kernel: it is code.
#pragma once

#include <string>
#include <vector>

namespace flashjit {

// An extra input of the modifiers, passed at call time: a device pointer or
// a scalar, declared by C type and name. The types: "const float*",
// "const int*", "const long long*", "const unsigned char*", "float", "int",
// "long long".
struct AuxField {
  std::string type;
  std::string name;
  bool operator==(const AuxField &) const = default;
};

// Modifiers::mask_mod_qk_only: detected, declared, or refused.
enum class MaskModQkOnly : unsigned char { automatic, on, off };

struct Modifiers {
  // Defines
  //   __device__ float score_mod(float score, int b, int h, int q, int k)
  // applied to every scaled score (after the built-in softcap) before the
  // softmax; b is the batch index (the sequence of a packed batch), h the
  // query head, q and k the query and key positions within the sequence.
  // A score_mod that is score + slope(b, h) * (k - q) (ALiBi and its kin)
  // may say so by also defining, in the same text,
  //   __device__ float score_mod_slope(int b, int h)
  // (with `const Aux &aux` last where there are aux fields): the sm90
  // forward then adds the bias itself, 1.5 FMAs a score against the four
  // instructions of a call (H200, d=128 8k: ALiBi 0.89x -> 0.95x the plain
  // forward), and every other kernel still calls score_mod. The two must
  // agree, as a block mask and its mask_mod must; one with other
  // parameters is not found and changes nothing.
  std::string score_mod;
  // Defines
  //   __device__ float score_mod_grad(float score, int b, int h, int q, int k)
  // d score_mod(score) / d score at the same arguments, for the backward
  // (flashjit::backward recomputes the probabilities with score_mod and
  // scales each score's gradient by it). The score_mod snippet may define it
  // itself instead, with the same parameters as score_mod (`const Aux &aux`
  // last where there are aux fields): the backward finds it there by
  // overload resolution, as score_mod_slope is found, so this field is for
  // a derivative kept apart. Given here while the snippet defines one too
  // is an error naming both; a backward with neither is an error too (the
  // forward never needs it).
  std::string score_mod_grad;
  // Defines
  //   __device__ bool mask_mod(int b, int h, int q, int k)
  // true where query q sees key k; it composes with the built-in mask (a
  // key is visible when both say so).
  std::string mask_mod;
  // How many block maps of the tiles mask_mod hides or shows whole
  // (templates/fwd_block_map.cuh) a call builds. `automatic`: flashjit
  // compiles mask_mod once into a small probe with b and h as opaque kernel
  // parameters (runtime/modifier_facts.h); where the optimised code never
  // reads them, mask_mod is a function of (q, k) and the aux values alone,
  // and one map serves every batch and head, 1/(batch x heads) of the
  // per-(batch, head) cost, kept across calls where the aux fields hold no
  // pointer. `on` declares that without the probe (a mask that does read b
  // or h then gives wrong results: the map of (0, 0) is used for every
  // (b, h)); `off` builds the map per (batch, head) whatever the probe
  // would find.
  MaskModQkOnly mask_mod_qk_only = MaskModQkOnly::automatic;
  // Learned attention sinks (GPT-OSS), built in rather than a snippet: one
  // fp32 logit per query head (ForwardArgs::sinks, natural units like the
  // scaled scores) joins each row's softmax denominator with no value, so a
  // row's O shrinks by the sink's share and its LSE includes it. The
  // backward also writes their gradient (BackwardArgs::dsinks).
  bool sinks = false;
  // Extra inputs: where there are any, each function takes one more
  // parameter, `const Aux &aux`, a struct of these fields in this order.
  std::vector<AuxField> aux;

  bool empty() const { return score_mod.empty() && mask_mod.empty() && !sinks; }
  bool operator==(const Modifiers &) const = default;
};

// A caller's block mask (FlexAttention's BlockMask, in its layout): for each
// (batch, head, block of block_q queries), the blocks of block_k keys it
// sees in part (mask_mod decides each element), as a count and a row of
// k_blocks block indices (the first `count` read), and those it sees
// whole, likewise; a block in neither list is hidden.
// It stands in for the pre-pass that evaluates mask_mod per tile, so one
// mask built once serves every layer of a model (and Flex's own masks can
// be passed as they are): the sm90 kernels skip the key tiles it hides and
// call mask_mod only on the tiles it does not show whole. The block sizes
// need not be the kernel's tiles: a kernel tile takes the kinds of every
// block it overlaps. It must agree with mask_mod (a hidden block hidden by
// it, a full block shown by it): the sm80 kernels, which evaluate mask_mod
// on every element, give the same result then, and where it does not agree
// results depend on the kernel. Needs a mask_mod. Device pointers, int32,
// contiguous: counts [batches][heads][q_blocks], indices [batches][heads]
// [q_blocks][k_blocks]; batches and heads are 1 (one row for all) or the
// problem's batch and heads_q. Counts are clamped to [0, k_blocks] and
// indices outside [0, k_blocks) ignored, on the GPU.
struct BlockMask {
  int block_q = 128, block_k = 128;
  long long batches = 1, heads = 1;
  // ceil(seqlen_q / block_q) and ceil(seqlen_k / block_k), of the longest
  // sequences in a packed batch.
  long long q_blocks = 0, k_blocks = 0;
  const int *kv_num_blocks = nullptr, *kv_indices = nullptr;  // the partial blocks
  // The full blocks, or both null: none (a block in both lists is partial).
  const int *full_kv_num_blocks = nullptr, *full_kv_indices = nullptr;
};

// The values of a Modifiers' aux fields, by name, laid out as its struct Aux
// (C layout): what ForwardArgs::aux and aux_bytes point at.
class AuxValues {
 public:
  explicit AuxValues(const Modifiers &modifiers);
  // Each returns "" or why not: no such field, or a value of another kind
  // (a pointer for a pointer field, an integer for int and long long, a
  // float for float).
  std::string set(const std::string &name, const void *device_pointer);
  std::string set(const std::string &name, long long value);
  std::string set(const std::string &name, float value);
  // Why the fields cannot be laid out ("" when they can: the same checks as
  // a call's).
  const std::string &error() const { return error_; }
  const void *data() const { return bytes_; }
  size_t size() const { return size_; }

 private:
  struct Slot {
    std::string name, type;
    int offset;
  };
  const Slot *slot_for(const std::string &name, int kind, std::string &error) const;
  std::vector<Slot> slots_;
  std::string error_;
  alignas(8) unsigned char bytes_[64] = {};
  size_t size_ = 0;
};

}  // namespace flashjit
