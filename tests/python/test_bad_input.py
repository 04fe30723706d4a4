"""Bad input at the Python binding: every refusal is the exact
message naming the argument, raised before anything reaches the library, and
nothing is launched. Needs torch with a CUDA device (the binding's tensors
live there); skips cleanly (exit 0) otherwise.

Run: FLASHJIT_LIB=build/libflashjit.so python3 tests/python/test_bad_input.py
(or with pytest). Prints the number of cases checked.

A last dim that is not contiguous is not bad input: the binding copies such
a tensor (as any stride the kernel cannot read directly) and the call
succeeds; test_attention.py's test_strided_inputs checks its result.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import flashjit, require_gpu as _require_gpu, skip_reason as _skip_reason, torch  # noqa: E402


def _inputs(b=1, s=64, hq=4, hkv=4, d=64, dtype=None, device="cuda"):
    dtype = dtype or torch.bfloat16
    return (torch.randn(b, s, hq, d, device=device, dtype=dtype),
            torch.randn(b, s, hkv, d, device=device, dtype=dtype),
            torch.randn(b, s, hkv, d, device=device, dtype=dtype))


def _cases():
    """(label, exception type, exact message, call)."""
    q, k, v = _inputs()
    P = "flashjit.attention: "
    cases = [
        ("q not a tensor", TypeError, P + "q must be a torch.Tensor, got list",
         lambda: flashjit.attention([1.0], k, v)),
        ("v not a tensor", TypeError, P + "v must be a torch.Tensor, got NoneType",
         lambda: flashjit.attention(q, k, None)),
        ("q 3-D", ValueError,
         P + "q must be 4-D [batch, seqlen, heads, head_dim], got shape (64, 4, 64)",
         lambda: flashjit.attention(q[0], k, v)),
        ("k 5-D", ValueError,
         P + "k must be 4-D [batch, seqlen, heads, head_dim], got shape (1, 1, 64, 4, 64)",
         lambda: flashjit.attention(q, k[None], v)),
        ("all on the CPU", ValueError, P + "q must be a CUDA tensor, got device cpu",
         lambda: flashjit.attention(q.cpu(), k.cpu(), v.cpu())),
        ("k on the CPU", ValueError, P + "k must be a CUDA tensor, got device cpu",
         lambda: flashjit.attention(q, k.cpu(), v)),
        ("v on the CPU", ValueError, P + "v must be a CUDA tensor, got device cpu",
         lambda: flashjit.attention(q, k, v.cpu())),
        ("fp32", TypeError, P + "q must be bf16, fp16 or float8_e4m3fn, got torch.float32",
         lambda: flashjit.attention(q.float(), k.float(), v.float())),
        ("k fp16, q bf16", TypeError,
         P + "k is torch.float16 but q is torch.bfloat16; q, k and v must have the same dtype",
         lambda: flashjit.attention(q, k.half(), v)),
        ("v fp32", TypeError,
         P + "v is torch.float32 but q is torch.bfloat16; q, k and v must have the same dtype",
         lambda: flashjit.attention(q, k, v.float())),
        ("k and v seqlens differ", ValueError,
         P + "k (1, 64, 4, 64) and v (1, 32, 4, 64) must agree in batch, seqlen and heads",
         lambda: flashjit.attention(q, k, v[:, :32])),
        ("batch differs", ValueError, P + "q has batch 1 but k has 2",
         lambda: flashjit.attention(q, torch.cat([k, k]), torch.cat([v, v]))),
        ("q/k head dims differ", ValueError, P + "q has head_dim 64 but k has 32",
         lambda: flashjit.attention(q, k[..., :32], v)),
        ("heads_q not a multiple of heads_kv", ValueError,
         P + "heads_q (4) must be a multiple of heads_kv (3)",
         lambda: flashjit.attention(q, k[:, :, :3], v[:, :, :3])),
        ("head dim 264", ValueError, P + "head_dim of q/k is 264; flashjit supports 1..256",
         lambda: flashjit.attention(*_inputs(d=264))),
        ("window (-2, 0)", ValueError,
         P + "window bounds must be >= -1 (-1: unbounded); got (-2, 0)",
         lambda: flashjit.attention(q, k, v, window=(-2, 0))),
        ("window of one value", ValueError,
         P + "window must be a pair (left, right) of ints, -1 meaning unbounded; got (5,)",
         lambda: flashjit.attention(q, k, v, window=(5,))),
        ("negative softcap", ValueError, P + "softcap must be >= 0 (0: off), got -1.0",
         lambda: flashjit.attention(q, k, v, softcap=-1)),
        ("num_splits -1", ValueError,
         P + "num_splits must be in [0, 256] (0: the library chooses, 1: off), got -1",
         lambda: flashjit.attention(q, k, v, num_splits=-1)),
        ("num_splits 257", ValueError,
         P + "num_splits must be in [0, 256] (0: the library chooses, 1: off), got 257",
         lambda: flashjit.attention(q, k, v, num_splits=257)),
        ("num_splits 2.0", TypeError,
         P + "num_splits must be an int (0: the library chooses, 1: off), got float",
         lambda: flashjit.attention(q, k, v, num_splits=2.0)),
        ("pack_gqa 'on'", TypeError,
         P + "pack_gqa must be None (the library chooses), True or False, got 'on'",
         lambda: flashjit.attention(q, k, v, pack_gqa="on")),
    ]
    if torch.cuda.device_count() > 1:
        other = [t.to("cuda:1") for t in (k, v)]
        cases.append(("k on another GPU", ValueError,
                      P + "k is on cuda:1 but q is on cuda:0; q, k and v must be on the same device",
                      lambda: flashjit.attention(q.to("cuda:0"), other[0], v.to("cuda:0"))))
    return cases


def test_bad_inputs_are_refused_with_their_message():
    _require_gpu()
    before = flashjit.compile_count()
    failures = []
    cases = _cases()
    for label, exc, message, call in cases:
        try:
            call()
        except exc as e:
            if str(e) != message:
                failures.append(f"{label}: message {str(e)!r}, expected {message!r}")
        except Exception as e:  # the wrong type
            failures.append(f"{label}: {type(e).__name__}: {e} (expected {exc.__name__})")
        else:
            failures.append(f"{label}: accepted")
    assert not failures, "\n".join(failures)
    # Refused before the library: nothing compiled.
    assert flashjit.compile_count() == before, "a refused call compiled a kernel"
    print(f"python bad-input cases: {len(cases)} (multi-GPU case "
          f"{'run' if torch.cuda.device_count() > 1 else 'skipped: one GPU'})")


def test_non_contiguous_last_dim_is_copied_not_refused():
    _require_gpu()
    q, k, v = _inputs(d=128)
    out = flashjit.attention(q[..., ::2], k[..., ::2], v[..., ::2])
    torch.cuda.synchronize()
    assert out.shape == (1, 64, 4, 64) and torch.isfinite(out.float()).all()


def main():
    reason = _skip_reason()
    if reason:
        print(f"SKIP: {reason}")
        return 0
    failed = 0
    for name, fn in sorted(globals().items()):
        if not name.startswith("test_") or not callable(fn):
            continue
        try:
            fn()
            print(f"PASS {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - report every failure
            failed += 1
            print(f"FAIL {name}: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
