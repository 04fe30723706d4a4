"""flashjit.flash_attn_interface without a GPU (ctest
python_flash_attn_interface_cpu): each function's parameters (names, order,
defaults) are FlashAttention-3's (hopper/flash_attn_interface.py), every
argument reaches flashjit's call under its flashjit name (the calls replaced
by recorders), qkv-packed inputs are split as FA3 splits them, and what
flashjit does not serve is refused by name. Needs torch; without it the
test is skipped (exit 77).

    python3 tests/python/test_flash_attn_interface_cpu.py
"""
import inspect
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import run_tests, torch  # noqa: E402  (this checkout's python/ first)

SKIP = 77

R = inspect.Parameter.empty  # a required parameter

# FA3's signatures (flash-attention, hopper/flash_attn_interface.py).
FA3 = {
    "flash_attn_func": [
        ("q", R), ("k", R), ("v", R), ("softmax_scale", None), ("causal", False),
        ("qv", None), ("q_descale", None), ("k_descale", None), ("v_descale", None),
        ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0), ("num_splits", 1),
        ("pack_gqa", None), ("deterministic", False), ("sm_margin", 0),
        ("return_attn_probs", False)],
    "flash_attn_qkvpacked_func": [
        ("qkv", R), ("softmax_scale", None), ("causal", False), ("q_descale", None),
        ("k_descale", None), ("v_descale", None), ("window_size", (-1, -1)),
        ("attention_chunk", 0), ("softcap", 0.0), ("deterministic", False),
        ("num_heads_q", None), ("sm_margin", 0), ("return_attn_probs", False)],
    "flash_attn_varlen_func": [
        ("q", R), ("k", R), ("v", R), ("cu_seqlens_q", R), ("cu_seqlens_k", R),
        ("max_seqlen_q", R), ("max_seqlen_k", R), ("seqused_q", None),
        ("seqused_k", None), ("softmax_scale", None), ("causal", False), ("qv", None),
        ("q_descale", None), ("k_descale", None), ("v_descale", None),
        ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0),
        ("num_splits", 1), ("pack_gqa", None), ("deterministic", False), ("sm_margin", 0),
        ("return_attn_probs", False)],
    "flash_attn_with_kvcache": [
        ("q", R), ("k_cache", R), ("v_cache", R), ("k", None), ("v", None),
        ("qv", None), ("rotary_cos", None), ("rotary_sin", None), ("cache_seqlens", None),
        ("cache_batch_idx", None), ("cache_leftpad", None), ("page_table", None),
        ("cu_seqlens_q", None), ("cu_seqlens_k_new", None), ("max_seqlen_q", None),
        ("rotary_seqlens", None), ("q_descale", None), ("k_descale", None),
        ("v_descale", None), ("softmax_scale", None), ("causal", False),
        ("window_size", (-1, -1)), ("attention_chunk", 0), ("softcap", 0.0),
        ("rotary_interleaved", True), ("scheduler_metadata", None), ("num_splits", 0),
        ("pack_gqa", None), ("sm_margin", 0), ("return_softmax_lse", False)],
}


def interface():
    from flashjit import flash_attn_interface
    return flash_attn_interface


def test_signatures_are_fa3s():
    fa = interface()
    for name, expected in FA3.items():
        params = list(inspect.signature(getattr(fa, name)).parameters.values())
        got = [(p.name, p.default) for p in params]
        assert got == expected, f"{name}: {got} != {expected}"


class Recorder:
    """Stands in for a flashjit call: keeps its arguments, returns a marker."""

    def __init__(self):
        self.args = self.kwargs = None

    def __call__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        return "result"


def with_recorders(body):
    fa = interface()
    saved = (fa.attention, fa.attention_varlen, fa.attention_with_kvcache)
    recorders = (Recorder(), Recorder(), Recorder())
    fa.attention, fa.attention_varlen, fa.attention_with_kvcache = recorders
    try:
        body(fa, *recorders)
    finally:
        fa.attention, fa.attention_varlen, fa.attention_with_kvcache = saved


def test_arguments_reach_flashjit_under_its_names():
    def body(fa, dense, varlen, cache):
        q, k, v, d = object(), object(), object(), object()
        assert fa.flash_attn_func(q, k, v, 0.5, True, None, d, d, d, [3, 0], 64, 30.0, 2, True,
                                  True, 0, True) == "result"
        assert dense.args == (q, k, v)
        assert dense.kwargs == dict(causal=True, window=(3, 0), softcap=30.0,
                                    softmax_scale=0.5, return_lse=True, num_splits=2,
                                    pack_gqa=True, q_descale=d, k_descale=d, v_descale=d,
                                    deterministic=True, attention_chunk=64)
        cu_q, cu_k, used_q, used_k = object(), object(), object(), object()
        fa.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 7, 9, used_q, used_k, causal=True,
                                  window_size=(5, 1), num_splits=0, return_attn_probs=True)
        assert varlen.args == (q, k, v, cu_q, cu_k, 7, 9)
        assert varlen.kwargs["seqused_q"] is used_q and varlen.kwargs["seqused_k"] is used_k
        assert varlen.kwargs["window"] == (5, 1) and varlen.kwargs["return_lse"] is True
        assert varlen.kwargs["num_splits"] == 0 and varlen.kwargs["causal"] is True
        names = ("k_cache", "v_cache", "k", "v", "cos", "sin", "lens", "idx", "pad", "table",
                 "cu_q", "cu_new", "ro", "qd", "kd", "vd")
        t = {n: object() for n in names}
        fa.flash_attn_with_kvcache(
            q, t["k_cache"], t["v_cache"], t["k"], t["v"], None, t["cos"], t["sin"], t["lens"],
            t["idx"], t["pad"], t["table"], t["cu_q"], t["cu_new"], 5, t["ro"], t["qd"],
            t["kd"], t["vd"], 0.25, True, (8, 0), 0, 20.0, False, None, 3, False, 0, True)
        assert cache.args == (q, t["k_cache"], t["v_cache"])
        expected = dict(k=t["k"], v=t["v"], cache_seqlens=t["lens"], block_table=t["table"],
                        softmax_scale=0.25, causal=True, window=(8, 0), softcap=20.0,
                        num_splits=3, return_lse=True, q_descale=t["qd"], k_scale=t["kd"],
                        v_scale=t["vd"], pack_gqa=False, attention_chunk=0,
                        rotary_cos=t["cos"], rotary_sin=t["sin"], rotary_interleaved=False,
                        cache_batch_idx=t["idx"], cache_leftpad=t["pad"], cu_seqlens_q=t["cu_q"],
                        cu_seqlens_k_new=t["cu_new"], max_seqlen_q=5, rotary_seqlens=t["ro"])
        assert cache.kwargs == expected, cache.kwargs
        # FA3's default: interleaved rotary (flashjit's own default is NeoX).
        fa.flash_attn_with_kvcache(q, t["k_cache"], t["v_cache"])
        assert cache.kwargs["rotary_interleaved"] is True
    with_recorders(body)


def test_qkv_packed_is_split_as_fa3_splits_it():
    def body(fa, dense, varlen, cache):
        qkv = torch.arange(2 * 3 * 3 * 4 * 8, dtype=torch.float32).reshape(2, 3, 3, 4, 8)
        fa.flash_attn_qkvpacked_func(qkv, causal=True)
        q, k, v = dense.args
        assert torch.equal(q, qkv[:, :, 0]) and torch.equal(v, qkv[:, :, 2])
        # GQA: [batch, seqlen, heads_q + 2 * heads_kv, d].
        packed = torch.randn(2, 3, 8 + 2 + 2, 16)
        fa.flash_attn_qkvpacked_func(packed, num_heads_q=8)
        q, k, v = dense.args
        assert q.shape[2] == 8 and k.shape[2] == 2 and torch.equal(v, packed[:, :, 10:])
    with_recorders(body)


def test_what_flashjit_does_not_serve_is_refused_by_name():
    fa = interface()
    t = torch.zeros(1, 1, 1, 8)
    cases = [
        (lambda: fa.flash_attn_func(t, t, t, qv=t), "qv"),
        (lambda: fa.flash_attn_varlen_func(t, t, t, None, None, 1, 1, sm_margin=4),
         "sm_margin=4"),
        (lambda: fa.flash_attn_with_kvcache(t, t, t, scheduler_metadata=t),
         "scheduler_metadata"),
        (lambda: fa.flash_attn_qkvpacked_func(torch.zeros(1, 1, 6, 8)), "needs num_heads_q"),
    ]
    for call, name in cases:
        try:
            call()
        except (NotImplementedError, ValueError) as e:
            assert name in str(e), f"{e!r} lacks {name!r}"
        else:
            raise AssertionError(f"not refused: {name}")


def skip_reason():
    """Why these tests cannot run here (no GPU needed), or None."""
    return "torch is not installed" if torch is None else None


if __name__ == "__main__":
    sys.exit(run_tests(globals(), skip=skip_reason, skip_status=SKIP))
