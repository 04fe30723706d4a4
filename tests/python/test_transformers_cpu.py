"""flashjit.integrations.transformers' plumbing without a GPU (run by ctest
as python_transformers_cpu): the flashjit calls it makes are replaced by
pure-torch references of their contract (flashjit.attention,
flashjit.attention_varlen: bottom-right causal masks, windows, softcap,
sinks, GQA, the mask_mods it passes), and tiny models run in fp32 on the
CPU under attn_implementation="fjit" must give the logits, the gradients
and the generated tokens of transformers' own sdpa/eager. So the argument
mapping (windows, softcap, sinks, padding, packing, GQA, scaling, the KV
cache) is checked here; the kernels are test_transformers.py's, on a GPU.
Needs torch and transformers (CPU builds are enough); without them the test
is skipped (exit 77, ctest's SKIP_RETURN_CODE).

    python3 tests/python/test_transformers_cpu.py
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_env import run_tests, torch, transformers_missing  # noqa: E402  (python/ first)

SKIP = 77  # ctest's SKIP_RETURN_CODE for this test



if torch is not None and transformers_missing() is None:
    import transformers_models as tm
    from flashjit.integrations import transformers as fj

# fp32 on both sides: only the order of the sums differs (about 1e-6 of the
# values); a wrong mask, scale, softcap or sink moves them by 1e-2 or more
# (test_wrong_mappings_are_caught).
LOGITS_RTOL = 1e-5
GRAD_RTOL = 5e-5


# ---- the references: flashjit's calls, in torch -------------------------------

class Calls:
    """The reference calls made since the last reset: (entry, detail)."""
    log = []


def _visible(b, sq, sk, causal, window, mask_mod, aux, device):
    """Bool [b, sq, sk]: which keys each query sees (flashjit's masks: the
    query rows aligned with the last seqlen_q keys)."""
    i = torch.arange(sq, device=device)[:, None] + (sk - sq)
    j = torch.arange(sk, device=device)[None, :]
    left, right = window
    if causal:
        right = 0
    seen = torch.ones(sq, sk, dtype=torch.bool, device=device)
    if left >= 0:
        seen &= j >= i - left
    if right >= 0:
        seen &= j <= i + right
    seen = seen.expand(b, sq, sk)
    if mask_mod is None:
        assert aux is None, "aux without a mask_mod"
        return seen
    if mask_mod == fj.KEY_PADDING_MASK:
        keys = aux["keys"]
        assert set(aux) == {"keys", "seqlen_k"}, sorted(aux)
        assert keys.dtype == torch.uint8 and tuple(keys.shape) == (b, sk), (keys.dtype, keys.shape)
        assert keys.is_contiguous() and aux["seqlen_k"] == sk, aux["seqlen_k"]
        return seen & (keys != 0)[:, None, :]
    if mask_mod == fj.SAME_SEQUENCE_MASK:
        sequence = aux["sequence"]
        assert set(aux) == {"sequence", "seqlen"}, sorted(aux)
        assert sq == sk and aux["seqlen"] == sq, (sq, sk, aux["seqlen"])
        assert sequence.dtype == torch.int32 and tuple(sequence.shape) == (b, sq)
        assert sequence.is_contiguous()
        return seen & (sequence[:, :, None] == sequence[:, None, :])
    raise AssertionError(f"unknown mask_mod:\n{mask_mod}")


def reference_attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, softmax_scale=None,
                        sinks=None, mask_mod=None, aux=None):
    """flashjit.attention's contract on [batch, seqlen, heads, d] tensors:
    a row that sees no key (nor a sink) gives zeros. Only the arguments the
    integration may pass are accepted."""
    Calls.log.append(("attention", mask_mod))
    b, sq, hq, d = q.shape
    _, sk, hkv, _ = k.shape
    assert k.shape == (b, sk, hkv, d) and v.shape[:3] == (b, sk, hkv), (q.shape, k.shape, v.shape)
    assert hq % hkv == 0 and q.dtype == k.dtype == v.dtype, (hq, hkv, q.dtype, k.dtype)
    assert isinstance(causal, bool) and isinstance(softcap, float), (causal, softcap)
    scale = 1.0 / math.sqrt(d) if softmax_scale is None else softmax_scale
    kk = k.repeat_interleave(hq // hkv, dim=2)
    vv = v.repeat_interleave(hq // hkv, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    seen = _visible(b, sq, sk, causal, window, mask_mod, aux, q.device)[:, None]
    s = s.masked_fill(~seen, float("-inf"))
    if sinks is not None:
        assert tuple(sinks.shape) == (hq,), sinks.shape
        s = torch.cat([s, sinks.to(s.dtype).view(1, hq, 1, 1).expand(b, hq, sq, 1)], dim=-1)
    top = s.amax(-1, keepdim=True).clamp(min=-1e30)  # -inf rows stay finite
    p = torch.exp(s - top)
    p = p / p.sum(-1, keepdim=True).clamp(min=1e-30)
    if sinks is not None:
        p = p[..., :-1]
    return torch.einsum("bhqk,bkhd->bqhd", p, vv)


def reference_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                               softmax_scale=None, causal=False, window=(-1, -1), softcap=0.0):
    """flashjit.attention_varlen's contract: sequence i owns rows cu[i] ..
    cu[i + 1] of the packed [total, heads, d] tensors; the offsets must be
    int32 and the max lengths ints that are the longest sequence's."""
    Calls.log.append(("attention_varlen", None))
    for name, cu, t in (("cu_seqlens_q", cu_seqlens_q, q), ("cu_seqlens_k", cu_seqlens_k, k)):
        assert cu.dtype == torch.int32 and cu.dim() == 1, (name, cu.dtype, cu.shape)
        assert cu[0].item() == 0 and cu[-1].item() == t.shape[0], (name, cu, t.shape)
    assert cu_seqlens_q.shape == cu_seqlens_k.shape
    for name, longest, cu in (("max_seqlen_q", max_seqlen_q, cu_seqlens_q),
                              ("max_seqlen_k", max_seqlen_k, cu_seqlens_k)):
        assert isinstance(longest, int) and longest == cu.diff().max().item(), (name, longest)
    pieces = []
    for i in range(cu_seqlens_q.shape[0] - 1):
        q0, q1 = cu_seqlens_q[i].item(), cu_seqlens_q[i + 1].item()
        k0, k1 = cu_seqlens_k[i].item(), cu_seqlens_k[i + 1].item()
        pieces.append(reference_attention(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
                                          causal=causal, window=window, softcap=softcap,
                                          softmax_scale=softmax_scale)[0])
        Calls.log.pop()  # one varlen call, not a dense one per sequence
    return torch.cat(pieces, dim=0)


class References:
    """Within: the integration calls the references, in fp32 too."""

    def __enter__(self):
        self.saved = (fj._attention, fj._attention_varlen, fj._DTYPES)
        fj._attention, fj._attention_varlen = reference_attention, reference_attention_varlen
        fj._DTYPES = (torch.float32,)
        Calls.log = []
        return self

    def __exit__(self, *exc):
        fj._attention, fj._attention_varlen, fj._DTYPES = self.saved


def _close(got, want, rtol, label, atol=0.0):
    err = tm.max_error(got, want)
    scale = want.float().abs().max().item()
    assert err <= rtol * scale + atol, \
        f"{label}: max error {err:.3g} > {rtol} * {scale:.3g} + {atol:.3g}"


def _compare_grads(got, want, label):
    """Each parameter's gradient within GRAD_RTOL of its largest element,
    plus 1e-6 of the largest of all: a gradient that is a small difference
    of large terms (GPT-OSS's router bias) keeps their absolute error."""
    assert got.keys() == want.keys(), (label, sorted(set(got) ^ set(want)))
    floor = 1e-6 * max(g.abs().max().item() for g in want.values())
    for name in want:
        _close(got[name], want[name], GRAD_RTOL, f"{label}: grad of {name}", atol=floor)


def _paths(entry, mask_mod=None):
    """Whether every call since the last reset was `entry` with `mask_mod`."""
    return bool(Calls.log) and all(c == (entry, mask_mod) for c in Calls.log)


# ---- the tests -----------------------------------------------------------------

def _padded_training(name, side):
    ids, mask = tm.padded_batch([12, 9, 4], 12, side)
    positions = tm.position_ids_of(mask)
    ref = tm.build(name, tm.reference_implementation(name))
    want, want_grads = tm.forward_and_grads(ref, mask, input_ids=ids, attention_mask=mask,
                                            position_ids=positions)
    model = tm.build(name, fj.NAME)
    with References():
        got, grads = tm.forward_and_grads(model, mask, input_ids=ids, attention_mask=mask,
                                          position_ids=positions)
        sinks = name == "gpt_oss"
        assert _paths("attention", fj.KEY_PADDING_MASK) if sinks else _paths("attention_varlen"), \
            Calls.log
    valid = mask.bool()
    _close(got[valid], want[valid], LOGITS_RTOL, f"{name} {side} padding logits")
    _compare_grads(grads, want_grads, f"{name} {side} padding")


def test_left_padding_training():
    for name in tm.MODELS:
        _padded_training(name, "left")


def test_right_padding_training():
    for name in tm.MODELS:
        _padded_training(name, "right")


def test_bidirectional_windows():
    # Gemma 3 as an encoder: not causal, the window both ways.
    name = "gemma3_bidirectional"
    for lengths, side in (([14, 14], "left"), ([14, 10, 6], "left"), ([14, 10, 6], "right")):
        ids, mask = tm.padded_batch(lengths, 14, side)
        ref = tm.build(name, tm.reference_implementation(name))
        want, want_grads = tm.forward_and_grads(ref, mask, input_ids=ids, attention_mask=mask)
        model = tm.build(name, fj.NAME)
        with References():
            got, grads = tm.forward_and_grads(model, mask, input_ids=ids, attention_mask=mask)
        valid = mask.bool()
        _close(got[valid], want[valid], LOGITS_RTOL, f"{name} {lengths} {side} logits")
        _compare_grads(grads, want_grads, f"{name} {lengths} {side}")


def test_no_padding_is_the_dense_call():
    ids = tm.padded_batch([16, 16], 16, "left")[0]
    for name in tm.MODELS:
        ref = tm.build(name, tm.reference_implementation(name))
        ones = torch.ones_like(ids)
        want, want_grads = tm.forward_and_grads(ref, ones, input_ids=ids)
        model = tm.build(name, fj.NAME)
        with References():
            got, grads = tm.forward_and_grads(model, ones, input_ids=ids)
            assert _paths("attention"), Calls.log
        _close(got, want, LOGITS_RTOL, f"{name} logits")
        _compare_grads(grads, want_grads, name)


def test_generation_over_a_dynamic_cache():
    # Left padding, as generate() pads; the cache's sliding layers keep
    # window - 1 keys, which the decode steps outgrow (prompt 9 + 6 steps).
    ids, mask = tm.padded_batch([9, 6, 3], 9, "left")
    for name in tm.MODELS:
        ref = tm.build(name, tm.reference_implementation(name))
        want, tokens = tm.decode_logits(ref, ids, mask, steps=6)
        model = tm.build(name, fj.NAME)
        with References():
            got, _ = tm.decode_logits(model, ids, mask, steps=6, tokens=tokens)
        for step, (g, w) in enumerate(zip(got, want)):
            _close(g, w, LOGITS_RTOL, f"{name} generation step {step}")


def test_generate_gives_the_same_tokens():
    ids, mask = tm.padded_batch([8, 5], 8, "left")
    for name in tm.MODELS:
        kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=6, do_sample=False,
                  pad_token_id=0)
        want = tm.build(name, tm.reference_implementation(name)).generate(**kw)
        with References():
            got = tm.build(name, fj.NAME).generate(**kw)
        assert torch.equal(got, want), (name, got, want)


def test_packed_sequences_from_position_ids():
    ids, positions, cu = tm.packed_batch([7, 11, 4, 9])
    ones = torch.ones_like(ids)
    for name in tm.MODELS:
        ref = tm.build(name, tm.reference_implementation(name))
        # Each sequence alone: GPT-OSS builds its masks without position_ids
        # (transformers 5.17), so its own packed call lets them see each other.
        want, want_grads = tm.forward_and_grads(ref, ones, segments=cu, input_ids=ids)
        model = tm.build(name, fj.NAME)
        with References():
            got, grads = tm.forward_and_grads(model, ones, input_ids=ids, position_ids=positions)
            sinks = name == "gpt_oss"
            assert (_paths("attention", fj.SAME_SEQUENCE_MASK) if sinks
                    else _paths("attention_varlen")), Calls.log
        _close(got, want, LOGITS_RTOL, f"{name} packed logits")
        _compare_grads(grads, want_grads, f"{name} packed")
        # The same offsets given as DataCollatorWithFlattening's kwargs.
        lengths = cu.diff().max().item()
        with References():
            got2, _ = tm.forward_and_grads(model, ones, input_ids=ids, position_ids=positions,
                                           cu_seq_lens_q=cu.long(), cu_seq_lens_k=cu.long(),
                                           max_length_q=lengths, max_length_k=lengths)
        _close(got2, want, LOGITS_RTOL, f"{name} packed logits (cu_seq_lens)")


def test_wrong_mappings_are_caught():
    """The models and tolerances are sharp enough that an off-by-one window,
    a lost softcap, lost sinks, a lost scale or a top-left decode step fail."""
    ids, mask = tm.padded_batch([16, 11], 16, "left")

    def worst(name, **patches):
        ref = tm.build(name, tm.reference_implementation(name))
        with torch.no_grad():
            want = ref(input_ids=ids, attention_mask=mask).logits
        model = tm.build(name, fj.NAME)
        with References():
            saved = {k: getattr(fj, k) for k in patches}
            for k, fn in patches.items():
                setattr(fj, k, fn)
            try:
                with torch.no_grad():
                    got = model(input_ids=ids, attention_mask=mask).logits
            finally:
                for k, fn in saved.items():
                    setattr(fj, k, fn)
        valid = mask.bool()
        return tm.max_error(got[valid], want[valid]) / want[valid].abs().max().item()

    assert worst("gemma2") <= LOGITS_RTOL
    window = fj._window
    wrong = {
        "window one key wider": ("gemma2", dict(_window=lambda w, c: (
            window(w, c)[0] + (w is not None), 0) if c else window(w, c))),
        "window one key narrower": ("gpt_oss", dict(_window=lambda w, c: (
            window(w, c)[0] - (w is not None), 0) if c else window(w, c))),
    }
    inner, inner_varlen = reference_attention, reference_attention_varlen
    wrong["softcap dropped"] = ("gemma2", dict(_attention_varlen=lambda *a, **kw: inner_varlen(
        *a, **{**kw, "softcap": 0.0})))
    wrong["sinks dropped"] = ("gpt_oss", dict(_attention=lambda *a, **kw: inner(
        *a, **{**kw, "sinks": None})))
    wrong["scale dropped"] = ("gemma2", dict(_attention_varlen=lambda *a, **kw: inner_varlen(
        *a, **{**kw, "softmax_scale": None})))
    for label, (name, patches) in wrong.items():
        rel = worst(name, **patches)
        assert rel > 100 * LOGITS_RTOL, f"{label}: relative error only {rel:.3g}"


def test_decode_alignment_matters():
    """A decode step is one query against the whole cache: aligned to the
    top-left corner (query 0 sees key 0 only) its logits differ."""
    ids, mask = tm.padded_batch([9, 9], 9, "left")
    ref = tm.build("llama", "sdpa")
    want, tokens = tm.decode_logits(ref, ids, mask, steps=2)

    def top_left(q, k, v, causal=False, window=(-1, -1), **kw):
        sq, sk = q.shape[1], k.shape[1]
        if causal and sq < sk:  # keys past sq - 1 hidden: the wrong corner
            k, v = k[:, :sq], v[:, :sq]
        return reference_attention(q, k, v, causal=causal, window=window, **kw)

    model = tm.build("llama", fj.NAME)
    with References():
        fj._attention = top_left
        got, _ = tm.decode_logits(model, ids, mask, steps=2, tokens=tokens)
    _close(got[0], want[0], LOGITS_RTOL, "prefill")
    rel = tm.max_error(got[1], want[1]) / want[1].abs().max().item()
    assert rel > 100 * LOGITS_RTOL, rel


def test_bad_inputs_are_refused_with_a_reason():
    ids, _ = tm.padded_batch([6], 6, "left")
    model = tm.build("llama", fj.NAME)
    try:  # fp32, without the references' dtype seam
        with torch.no_grad():
            model(input_ids=ids)
        raise AssertionError("fp32 inputs were accepted")
    except TypeError as e:
        assert "torch.float32" in str(e) and "bfloat16" in str(e), e
    attn = model.model.layers[0].self_attn
    q = torch.zeros(1, 4, 3, 64)
    kv = torch.zeros(1, 1, 3, 64)
    with References():
        try:
            fj.attention_forward(attn, q, kv, kv, None, dropout=0.1)
            raise AssertionError("dropout was accepted")
        except ValueError as e:
            assert "dropout=0.1" in str(e), e
        try:
            fj.attention_forward(attn, q, kv, kv, torch.zeros(1, 1, 3, 3, dtype=torch.bool))
            raise AssertionError("a 4-D mask was accepted")
        except ValueError as e:
            assert "4-D" in str(e), e
        out, weights = fj.attention_forward(attn, q, kv, kv, None)
        assert weights is None and tuple(out.shape) == (1, 3, 4, 64), out.shape
    for bad in ("flashjit", "my|fjit", ""):
        try:
            fj.register(bad)
            raise AssertionError(f"register({bad!r}) was accepted")
        except ValueError as e:
            assert repr(bad) in str(e), e


def test_registration():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask
    assert AttentionInterface._global_mapping[fj.NAME] is fj.attention_forward
    assert AttentionMaskInterface._global_mapping[fj.NAME] is flash_attention_mask
    assert fj.register("fjit_other") == "fjit_other"
    model = tm.build("llama", "fjit_other")
    assert model.config._attn_implementation == "fjit_other"


def skip_reason():
    """Why these tests cannot run here (no GPU needed), or None."""
    if torch is None:
        return "torch is not installed"
    return transformers_missing()


if __name__ == "__main__":
    if torch is not None:
        # Tiny matmuls: one thread is as fast, and does not spin against the
        # other jobs of a shared machine.
        torch.set_num_threads(1)
    sys.exit(run_tests(globals(), skip=skip_reason, skip_status=SKIP))
