"""flashjit behind transformers on a GPU (scripts/device-check.sh's
python-transformers step): tiny Llama, Qwen3, Gemma 2 and GPT-OSS models
(transformers_models.py: random weights, nothing downloaded) in bf16 under
attn_implementation="fjit" against the same weights in fp32 with eager
attention (the exact reference). Their error must be at most a small
factor of the error transformers' own bf16 implementation makes (sdpa, or
eager where sdpa lacks the softcap or the sinks), FlashAttention's
criterion (reference/accuracy.h) applied to whole models: the logits
within 2x, each parameter's gradient within 3x (relative Frobenius norms,
which single elements do not dominate; see _check_grads), in training with left and right
padding and packed sequences, and in generation over a DynamicCache.
test_transformers_cpu.py checks the argument mapping itself on the CPU.

    python3 tests/python/test_transformers.py
"""
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_env  # noqa: E402  (this checkout's python/ first)
from gpu_env import run_tests, torch, transformers_missing  # noqa: E402



if torch is not None and transformers_missing() is None:
    import transformers_models as tm
    from flashjit.integrations import transformers as fj

DEVICE = "cuda"
LOGITS_FACTOR = 2.0  # reference/accuracy.h's forward factor
GRAD_FACTOR = 3.0    # and its gradient factor
# Added to the allowed relative error: a baseline that happens to be
# almost exact must not make the bound 0.
REL_FLOOR = 1e-3


def _relative(got, want):
    """||got - want|| / ||want|| in fp32 (0 where both are 0)."""
    got, want = got.float(), want.float()
    norm = want.norm().item()
    diff = (got - want).norm().item()
    return diff / norm if norm > 0 else diff


def _check(got, base, exact, factor, label, report=True):
    """got's relative error against exact at most `factor` times base's;
    returns the ratio of the two."""
    e_got, e_base = _relative(got, exact), _relative(base, exact)
    bound = factor * e_base + REL_FLOOR
    ratio = e_got / (e_base + REL_FLOOR)
    if report:
        print(f"     {label}: fjit {e_got:.3g}, baseline {e_base:.3g} (ratio {ratio:.2f})")
    assert e_got <= bound, f"{label}: relative error {e_got:.3g} > {factor} * {e_base:.3g} + " \
                           f"{REL_FLOOR} (the baseline's)"
    return ratio


def _check_steps(got, base, exact, label):
    """_check of each step's logits; prints the worst step."""
    ratios = [_check(g, b, w, LOGITS_FACTOR, f"{label} step {step}", report=False)
              for step, (g, b, w) in enumerate(zip(got, base, exact))]
    worst = max(range(len(ratios)), key=ratios.__getitem__)
    print(f"     {label}: {len(ratios)} steps, worst ratio {ratios[worst]:.2f} (step {worst})")


def _check_grads(got, base, exact, label):
    """Each parameter's gradient: its relative error at most GRAD_FACTOR
    times the larger of the baseline's for that parameter and the
    baseline's over all the gradients together (the model's bf16 noise: a
    small gradient that sums terms of both signs, GPT-OSS's sinks, gets
    errors of that size from the layers around attention, whichever
    attention runs)."""
    assert got.keys() == base.keys() == exact.keys(), label
    names = sorted(exact)
    noise = _relative(torch.cat([base[n].flatten() for n in names]),
                      torch.cat([exact[n].flatten() for n in names]))
    worst = None
    for name in names:
        e_got, e_base = _relative(got[name], exact[name]), _relative(base[name], exact[name])
        allowed = max(e_base, noise)
        assert e_got <= GRAD_FACTOR * allowed + REL_FLOOR, \
            f"{label}: grad of {name}: relative error {e_got:.3g} > {GRAD_FACTOR} * " \
            f"max({e_base:.3g}, {noise:.3g}) + {REL_FLOOR} (the baseline's, its whole model's)"
        ratio = e_got / (allowed + REL_FLOOR)
        if worst is None or ratio > worst[0]:
            worst = (ratio, name, e_got, e_base)
    print(f"     {label}: gradients' noise {noise:.3g}; worst {worst[1]}: fjit {worst[2]:.3g}, "
          f"baseline {worst[3]:.3g} (ratio {worst[0]:.2f})")


def _models(name):
    """(the bf16 model, its fp32 copy with eager attention: the same weights
    exactly)."""
    model = tm.build(name, "eager", dtype=torch.bfloat16, device=DEVICE)
    exact = copy.deepcopy(model).float()
    return model, exact


def _three(model, exact, name, run):
    """run(model) for the exact fp32 model, transformers' bf16 baseline and
    flashjit's bf16 model."""
    want = run(exact)
    model.set_attn_implementation(tm.reference_implementation(name))
    base = run(model)
    model.set_attn_implementation(fj.NAME)
    got = run(model)
    return got, base, want


def _training(name, lengths, side):
    seqlen = max(lengths)
    ids, mask = tm.padded_batch(lengths, seqlen, side, device=DEVICE)
    positions = tm.position_ids_of(mask)
    model, exact = _models(name)
    (got, g_got), (base, g_base), (want, g_want) = _three(
        model, exact, name, lambda m: tm.forward_and_grads(m, mask, input_ids=ids,
                                                           attention_mask=mask,
                                                           position_ids=positions))
    valid = mask.bool()
    label = f"{name} {side} padding {lengths}" if min(lengths) < seqlen else f"{name} unpadded"
    _check(got[valid], base[valid], want[valid], LOGITS_FACTOR, f"{label} logits")
    _check_grads(g_got, g_base, g_want, label)


def test_training_with_left_padding():
    gpu_env.require_gpu()
    for name in tm.MODELS:
        _training(name, [40, 33, 17, 6], "left")


def test_training_with_right_padding():
    gpu_env.require_gpu()
    for name in tm.MODELS:
        _training(name, [40, 33, 17, 6], "right")


def test_training_without_padding():
    gpu_env.require_gpu()
    for name in tm.MODELS:
        _training(name, [48, 48], "left")


def test_training_on_packed_sequences():
    gpu_env.require_gpu()
    ids, positions, cu = tm.packed_batch([13, 29, 6, 21], device=DEVICE)
    ones = torch.ones_like(ids)
    for name in tm.MODELS:
        model, exact = _models(name)
        # The references run each sequence alone; flashjit the packed row.
        want, g_want = tm.forward_and_grads(exact, ones, segments=cu, input_ids=ids)
        model.set_attn_implementation(tm.reference_implementation(name))
        base, g_base = tm.forward_and_grads(model, ones, segments=cu, input_ids=ids)
        model.set_attn_implementation(fj.NAME)
        got, g_got = tm.forward_and_grads(model, ones, input_ids=ids, position_ids=positions)
        _check(got, base, want, LOGITS_FACTOR, f"{name} packed logits")
        _check_grads(g_got, g_base, g_want, f"{name} packed")


def test_decoding_over_a_dynamic_cache():
    gpu_env.require_gpu()
    # Left padding as generate() pads it; 12 steps outgrow the sliding
    # layers' window. Every model is fed the exact model's greedy tokens.
    ids, mask = tm.padded_batch([20, 14, 5], 20, "left", device=DEVICE)
    for name in tm.MODELS:
        model, exact = _models(name)
        want, tokens = tm.decode_logits(exact, ids, mask, steps=12)
        model.set_attn_implementation(tm.reference_implementation(name))
        base, _ = tm.decode_logits(model, ids, mask, steps=12, tokens=tokens)
        model.set_attn_implementation(fj.NAME)
        got, _ = tm.decode_logits(model, ids, mask, steps=12, tokens=tokens)
        _check_steps(got, base, want, f"{name} decode")


def test_generate():
    """model.generate (greedy) under flashjit: its tokens are the argmax of
    its logits, and those logits meet the criterion against the exact
    model's and the baseline's, both fed generate's tokens."""
    gpu_env.require_gpu()
    ids, mask = tm.padded_batch([16, 9], 16, "left", device=DEVICE)
    new = 8
    for name in tm.MODELS:
        model, exact = _models(name)
        model.set_attn_implementation(fj.NAME)
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new,
                                 do_sample=False, eos_token_id=None, pad_token_id=0,
                                 output_logits=True, return_dict_in_generate=True)
        tokens = out.sequences[:, ids.shape[1]:]
        got = [step.float() for step in out.logits]
        assert tokens.shape == (ids.shape[0], new) and len(got) == new, tokens.shape
        assert torch.equal(torch.stack([g.argmax(-1) for g in got], dim=1), tokens), \
            f"{name}: generate's tokens are not its logits' argmax"
        want, _ = tm.decode_logits(exact, ids, mask, steps=new - 1, tokens=tokens)
        model.set_attn_implementation(tm.reference_implementation(name))
        base, _ = tm.decode_logits(model, ids, mask, steps=new - 1, tokens=tokens)
        _check_steps(got, base, want, f"{name} generate")


def skip_reason():
    return gpu_env.skip_reason() or transformers_missing()


if __name__ == "__main__":
    sys.exit(run_tests(globals(), skip=skip_reason))
