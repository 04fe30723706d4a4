"""Rotary embedding of flashjit.attention_with_kvcache (flashjit/rotary.py)
without a GPU (ctest python_rotary_cpu): the rotated q and appended k
against a per-element loop written from flash_attn_with_kvcache's
definition (GPT-NeoX halves and GPT-J interleaved pairs, partial rotary
dims, each sequence's positions from cache_seqlens, every query at
cache_seqlens without a mask), and the refusals by name. Needs torch;
without it the test is skipped (exit 77).

    python3 tests/python/test_rotary_cpu.py
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import flashjit, run_tests, torch  # noqa: E402  (this checkout's python/ first)

SKIP = 77


def fail(kind, message):
    return kind("flashjit.attention_with_kvcache: " + message)


def loop_reference(x, cos, sin, start, one_step, interleaved):
    """x [b, s, h, d] in float64, each element rotated one by one."""
    out = x.double().clone()
    b, s, h, d = x.shape
    half = cos.shape[1]
    for i in range(b):
        for t in range(s):
            pos = int(start[i]) + (0 if one_step else t)
            for j in range(half):
                c, sn = float(cos[pos, j]), float(sin[pos, j])
                a_idx, b_idx = (2 * j, 2 * j + 1) if interleaved else (j, j + half)
                for head in range(h):
                    a = float(x[i, t, head, a_idx])
                    bb = float(x[i, t, head, b_idx])
                    out[i, t, head, a_idx] = a * c - bb * sn
                    out[i, t, head, b_idx] = a * sn + bb * c
    return out


def tables(rows, half):
    inv = 1.0 / (10000 ** (torch.arange(half, dtype=torch.float64) / half))
    angles = torch.arange(rows, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(angles).float(), torch.sin(angles).float()


def test_rotation_matches_the_definition():
    from flashjit.rotary import rotate_step
    torch.manual_seed(0)
    for interleaved in (False, True):
        for masked in (False, True):
            for d, rotary_dim in ((64, 64), (64, 32), (128, 96)):
                q = torch.randn(3, 4, 2, d, dtype=torch.float32).to(torch.bfloat16)
                k = torch.randn(3, 2, 1, d, dtype=torch.float32).to(torch.bfloat16)
                cos, sin = tables(40, rotary_dim // 2)
                lens = torch.tensor([0, 7, 30], dtype=torch.int32)
                rq, rk = rotate_step(torch, fail, q, k, cos, sin, lens, interleaved, masked)
                want_q = loop_reference(q, cos, sin, lens, not masked, interleaved)
                want_k = loop_reference(k, cos, sin, lens, False, interleaved)
                label = f"interleaved={interleaved} masked={masked} d={d} rotary={rotary_dim}"
                # bf16 rounding of the result, once.
                assert (rq.double() - want_q).abs().max() <= 2 ** -7 * want_q.abs().max(), label
                assert (rk.double() - want_k).abs().max() <= 2 ** -7 * want_k.abs().max(), label
                # Columns past rotary_dim are untouched, bit for bit.
                assert torch.equal(rq[..., rotary_dim:], q[..., rotary_dim:]), label
                assert rq.dtype == q.dtype and rq.shape == q.shape, label
    # An int cache_seqlens is every sequence's; no appended keys: q alone.
    q = torch.randn(2, 1, 2, 64).to(torch.float16)
    cos, sin = tables(10, 16)
    rq, rk = rotate_step(torch, fail, q, None, cos, sin, 5, False, True)
    assert rk is None
    want = loop_reference(q, cos, sin, [5, 5], False, False)
    assert (rq.double() - want).abs().max() <= 2 ** -9 * want.abs().max()
    # Position 0 rotates by nothing.
    zero, _ = rotate_step(torch, fail, q, None, cos, sin, 0, True, True)
    assert torch.equal(zero, q)
    assert math.isclose(float(cos[0, 0]), 1.0)


def test_refusals_name_the_argument():
    from flashjit.rotary import rotate_step
    q = torch.randn(2, 1, 2, 64).to(torch.bfloat16)
    cos, sin = tables(10, 16)
    cases = [
        (lambda: rotate_step(torch, fail, q, None, cos, None, 0, False, True),
         "rotary_cos and rotary_sin go together"),
        (lambda: rotate_step(torch, fail, q, None, cos[0], sin[0], 0, False, True),
         "rotary_cos must be [seqlen_ro, rotary_dim / 2], got shape (16,)"),
        (lambda: rotate_step(torch, fail, q, None, *tables(10, 40), 0, False, True),
         "rotary_cos's 40 columns rotate 80 of the head dim's 64: expected 1 to 32 columns"),
        (lambda: rotate_step(torch, fail, q, None, cos, sin[:, :8], 0, False, True),
         "rotary_cos (10, 16) and rotary_sin (10, 8) must have one shape"),
        (lambda: rotate_step(torch, fail, q, torch.zeros(2, 2, 1, 64, dtype=q.dtype), cos, sin,
                             9, False, False),
         "rotary_cos has 10 rows but position 10 is rotated"),
        (lambda: rotate_step(torch, fail, q.float(), None, cos, sin, 0, False, True),
         "rotary embedding rotates 16-bit q, got torch.float32"),
    ]
    for call, message in cases:
        try:
            call()
        except (TypeError, ValueError) as e:
            assert message in str(e), f"{str(e)!r} lacks {message!r}"
            assert str(e).startswith("flashjit.attention_with_kvcache: "), str(e)
        else:
            raise AssertionError(f"not refused: {message}")
    rotate_step(torch, fail, q, None, cos, sin, 9, False, False)  # the last row: allowed


def skip_reason():
    """Why these tests cannot run here (no GPU needed), or None."""
    return "torch is not installed" if torch is None else None


if __name__ == "__main__":
    sys.exit(run_tests(globals(), skip=skip_reason, skip_status=SKIP))
