// Runs of the forward and the backward with a caller's modifiers, shared by
// the GPU suites of modifiers (modifiers_test.cpp, block_mask_test.cpp):
// packed tensors uploaded from host values, outputs poisoned before each
// run and downloaded after it.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "flashjit/backward.h"
#include "flashjit/forward.h"
#include "forward_check.h"
#include "reference/cpu_attention_backward.h"
#include "runtime/launch_backward.h"
#include "runtime/launch_forward.h"

namespace flashjit {
namespace testing {

struct Outputs {
  std::vector<float> out, lse;
};

// Runs `p` through flashjit::forward with `config` (its path) and
// `modifiers` (aux: their values, packed; block_mask: the caller's, or
// null); `out` comes back poisoned where the kernel did not write.
inline Outputs run_forward(const Problem &p, const KernelConfig &config,
                           const Modifiers &modifiers, const AuxValues *aux,
                           const std::vector<float> &q, const std::vector<float> &k,
                           const std::vector<float> &v, const BlockMask *block_mask = nullptr) {
  Outputs r;
  auto dq = upload_values(p.dtype, q), dk = upload_values(p.dtype, k),
       dv = upload_values(p.dtype, v);
  auto dout = DeviceBuffer::allocate(o_elements(p) * 2);
  auto dlse = DeviceBuffer::allocate(lse_elements(p) * 4);
  if (!dq || !dk || !dv || !dout || !dlse) {
    ADD_FAILURE() << "device buffers: "
                  << llvm::toString(llvm::joinErrors(
                         llvm::joinErrors(dq.takeError(), dk.takeError()),
                         llvm::joinErrors(dv.takeError(),
                                          llvm::joinErrors(dout.takeError(), dlse.takeError()))));
    return r;
  }
  EXPECT_FALSE(bool(dout->fill_bytes(0xff)));
  EXPECT_FALSE(bool(dlse->fill_bytes(0xff)));
  ForwardArgs args = ForwardArgs::packed(p, dq->data(), dk->data(), dv->data(), dout->data(),
                                         static_cast<float *>(dlse->data()));
  if (!modifiers.empty()) args.modifiers = &modifiers;
  args.block_mask = block_mask;
  if (aux) {
    EXPECT_EQ(aux->error(), "");
    args.aux = aux->data();
    args.aux_bytes = aux->size();
  }
  ForwardOptions options;
  options.config = config;
  options.use_config = true;
  const Status status = forward(p, args, nullptr, options);
  EXPECT_TRUE(status.ok()) << status.message();
  auto out = testing::download_values(p.dtype, *dout, o_elements(p));
  EXPECT_TRUE(bool(out)) << llvm::toString(out.takeError());
  if (out) r.out = std::move(*out);
  r.lse.resize(lse_elements(p));
  EXPECT_FALSE(bool(dlse->download(r.lse.data(), r.lse.size() * 4)));
  return r;
}

// Gradients of `p` with `modifiers` through the forward and launch_backward
// (the same modifiers and block mask, BackwardArgs::modifiers), the
// gradients poisoned before the backward.
inline AttentionGradients run_backward(const Problem &p, const KernelConfig &config,
                                       const Modifiers &modifiers, const std::vector<float> &q,
                                       const std::vector<float> &k, const std::vector<float> &v,
                                       const std::vector<float> &dout,
                                       const BlockMask *block_mask = nullptr) {
  AttentionGradients g;
  auto dq_in = upload_values(p.dtype, q), dk_in = upload_values(p.dtype, k),
       dv_in = upload_values(p.dtype, v), ddo = upload_values(p.dtype, dout);
  auto o = DeviceBuffer::allocate(o_elements(p) * 2);
  auto lse = DeviceBuffer::allocate(lse_elements(p) * 4);
  auto dq = DeviceBuffer::allocate(q_elements(p) * 2);
  auto dk = DeviceBuffer::allocate(k_elements(p) * 2);
  auto dv = DeviceBuffer::allocate(v_elements(p) * 2);
  auto ws = DeviceBuffer::allocate(backward_workspace_bytes(p));
  if (!dq_in || !dk_in || !dv_in || !ddo || !o || !lse || !dq || !dk || !dv || !ws) {
    ADD_FAILURE() << "device buffers";
    llvm::consumeError(dq_in.takeError());
    llvm::consumeError(dk_in.takeError());
    llvm::consumeError(dv_in.takeError());
    llvm::consumeError(ddo.takeError());
    llvm::consumeError(o.takeError());
    llvm::consumeError(lse.takeError());
    llvm::consumeError(dq.takeError());
    llvm::consumeError(dk.takeError());
    llvm::consumeError(dv.takeError());
    llvm::consumeError(ws.takeError());
    return g;
  }
  ForwardArgs fa = ForwardArgs::packed(p, dq_in->data(), dk_in->data(), dv_in->data(), o->data(),
                                       static_cast<float *>(lse->data()));
  fa.modifiers = &modifiers;
  fa.block_mask = block_mask;
  EXPECT_FALSE(bool(launch_forward(p, fa, nullptr, {})));
  for (DeviceBuffer *poisoned : {&*dq, &*dk, &*dv, &*ws}) EXPECT_FALSE(bool(poisoned->fill_bytes(0xff)));
  BackwardArgs ba = BackwardArgs::packed(p, dq_in->data(), dk_in->data(), dv_in->data(), o->data(),
                                         ddo->data(), static_cast<const float *>(lse->data()),
                                         dq->data(), dk->data(), dv->data(), ws->data(),
                                         ws->size());
  ba.modifiers = &modifiers;
  ba.block_mask = block_mask;
  if (llvm::Error e = launch_backward(p, ba, nullptr, config)) {
    ADD_FAILURE() << llvm::toString(std::move(e));
    return g;
  }
  auto grads = testing::download_gradients(p, *dq, *dk, *dv);
  if (!grads) {
    ADD_FAILURE() << llvm::toString(grads.takeError());
    return g;
  }
  return std::move(*grads);
}

// Causal written as a mask_mod, against the built-in causal's float64
// gradients: a problem without a mask (`plain`, bf16, batch 2, 4 query
// heads on 2 KV heads, square), its random inputs from `seed`, and the
// reference gradients of the same problem under the built-in causal mask.
struct CausalGradientCase {
  Problem plain;
  std::vector<float> q, k, v, dout;
  AttentionGradients exact, element;
};
inline CausalGradientCase causal_gradient_case(int64_t seqlen, int64_t hdim, uint64_t seed) {
  CausalGradientCase c;
  c.plain = make_problem(DType::bf16, 2, 4, 2, seqlen, seqlen, hdim, hdim, MaskKind::none);
  Problem built_in = c.plain;
  built_in.mask = MaskKind::causal;
  c.q = random_values(c.plain.dtype, q_elements(c.plain), seed);
  c.k = random_values(c.plain.dtype, k_elements(c.plain), seed + 1);
  c.v = random_values(c.plain.dtype, v_elements(c.plain), seed + 2);
  c.dout = random_values(c.plain.dtype, o_elements(c.plain), seed + 3);
  c.exact = cpu_attention_backward(built_in, c.q, c.k, c.v, c.dout, ReferencePrecision::exact);
  c.element =
      cpu_attention_backward(built_in, c.q, c.k, c.v, c.dout, ReferencePrecision::element);
  return c;
}

}  // namespace testing
}  // namespace flashjit
