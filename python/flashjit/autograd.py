"""The torch.autograd.Functions of flashjit.attention and
flashjit.attention_varlen: the forward saves the (padded) inputs the kernel
read, O and the log-sum-exp, never P; the backward recomputes the
probabilities from them (flashjit_backward, flashjit_backward_varlen).
Defined on first use: torch is imported lazily."""
from . import _launch
from ._layout import unpad

_functions = {}


def attention_function(torch):
    """The Function of a dense call: apply(q, k, v, sinks, call) -> (out,
    lse), call a _launch.Call of dense.prepare_call; sinks: the caller's
    learned sinks (for autograd; the kernels read call.sinks, their float32
    copy) or None."""
    function = _functions.get("attention")
    if function is not None:
        return function
    from torch.autograd.function import once_differentiable

    class FlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, sinks, call):
            # The LSE is always computed: the backward recomputes P from it.
            out, lse, qp, kp, vp = _launch.forward(torch, call, q, k, v, want_lse=True)
            ctx.save_for_backward(qp, kp, vp, out, lse)
            ctx.call = call
            ctx.shapes = (q.shape, k.shape, v.shape)
            ctx.sinks_dtype = sinks.dtype if sinks is not None else None
            ctx.mark_non_differentiable(lse)
            return unpad(out, call.dim_v), lse

        @staticmethod
        @once_differentiable
        def backward(ctx, dout, _dlse):
            # The LSE is an output for the caller's information only: a
            # gradient through it is not supported (as FlashAttention).
            call = ctx.call
            qp, kp, vp, out, lse = ctx.saved_tensors
            if call.empty:
                # No key for any row (or no row): O = 0 does not depend on q,
                # k, v, nor on the sinks (D = rowsum(dO * O) = 0).
                grads = [torch.zeros(s, dtype=dout.dtype, device=dout.device) for s in ctx.shapes]
                dsinks = torch.zeros_like(call.sinks) if call.sinks is not None else None
            else:
                *grads, dsinks = _launch.backward(torch, call, dout, qp, kp, vp, out, lse)
            if dsinks is not None and ctx.needs_input_grad[3]:
                dsinks = dsinks.to(ctx.sinks_dtype)
            else:
                dsinks = None
            return (*(g if need else None for g, need in zip(grads, ctx.needs_input_grad[:3])),
                    dsinks, None)

    _functions["attention"] = FlashAttention
    return FlashAttention


def varlen_function(torch):
    """The Function of a packed varlen call: apply(q, k, v, call) -> (out
    [total_q, hq, dv], lse [hq, total_q]), call a _launch.Call of
    varlen.prepare_call without a KV cache."""
    function = _functions.get("varlen")
    if function is not None:
        return function
    from torch.autograd.function import once_differentiable

    class AttentionVarlen(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, call):
            outp, lse, qp, kp, vp = _launch.forward(
                torch, call, q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), want_lse=True)
            lse = lse[0]  # [heads_q, total_q]
            # With the offsets, which the call's argument block points into.
            ctx.save_for_backward(qp, kp, vp, outp, lse, *call.keep)
            ctx.call = call
            ctx.mark_non_differentiable(lse)
            return unpad(outp[0], call.dim_v), lse

        @staticmethod
        @once_differentiable
        def backward(ctx, dout, _dlse):
            qp, kp, vp, outp, lse = ctx.saved_tensors[:5]
            dq, dk, dv, _ = _launch.backward(torch, ctx.call, dout.unsqueeze(0), qp, kp, vp,
                                             outp, lse)
            return dq[0], dk[0], dv[0], None

    _functions["varlen"] = AttentionVarlen
    return AttentionVarlen
