"""What the transformers tests share (test_transformers_cpu.py, the plumbing
on the CPU; test_transformers.py, the kernels on a GPU): tiny causal LMs
built from configs with random weights (nothing is downloaded) whose
attention exercises every mapping flashjit.integrations.transformers makes,
padded batches, packed batches and the comparisons.

The models: Llama (GQA 4:1), Qwen3 (q/k norms, head_dim 128), Gemma 2 (a
logit softcap, a sliding window on every other layer, a custom scale),
GPT-OSS (learned sinks, a sliding window on every other layer, GQA). Their
attention is sharp enough that the masks, the softcap and the sinks change
the logits (initializer_range 0.1; the softcap low; the sinks set to
N(1, 1)), and the sequences are longer than the window."""
import torch

SLIDING_WINDOW = 5
VOCAB = 128
MODELS = ("llama", "qwen3", "gemma2", "gpt_oss")


def config(name):
    """The tiny config of model `name` (one of MODELS)."""
    import transformers
    common = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=256, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=256, initializer_range=0.1,
                  tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                  attention_dropout=0.0)
    layers = ["sliding_attention", "full_attention"]
    if name == "llama":
        return transformers.LlamaConfig(num_key_value_heads=1, head_dim=64, **common)
    if name == "qwen3":
        return transformers.Qwen3Config(num_key_value_heads=2, head_dim=128, **common)
    if name == "gemma2":
        # query_pre_attn_scalar: a scale that is not 1/sqrt(head_dim).
        return transformers.Gemma2Config(num_key_value_heads=2, head_dim=64,
                                         query_pre_attn_scalar=32, attn_logit_softcapping=3.0,
                                         final_logit_softcapping=None,
                                         sliding_window=SLIDING_WINDOW, layer_types=layers,
                                         **common)
    if name == "gpt_oss":
        # YaRN's original 4096 positions x factor 32, as GPT-OSS has them.
        common["max_position_embeddings"] = 131072
        # One expert: no routing decision that rounding could flip between
        # the models compared, no router gradient that is a difference of
        # large terms.
        return transformers.GptOssConfig(num_key_value_heads=2, head_dim=64, num_local_experts=1,
                                         num_experts_per_tok=1, sliding_window=SLIDING_WINDOW,
                                         layer_types=layers, **common)
    if name == "gemma3_bidirectional":
        # Not causal (an encoder, as EmbeddingGemma): |i - j| < window.
        return transformers.Gemma3TextConfig(num_key_value_heads=2, head_dim=64,
                                             query_pre_attn_scalar=64,
                                             sliding_window=SLIDING_WINDOW, layer_types=layers,
                                             use_bidirectional_attention=True, **common)
    raise ValueError(name)


def reference_implementation(name):
    """transformers' own implementation to compare with: sdpa ignores the
    softcap and has no sinks, so eager for Gemma 2 and GPT-OSS (and Gemma
    3, whose sdpa call is causal when no mask is given)."""
    return "eager" if name in ("gemma2", "gpt_oss", "gemma3_bidirectional") else "sdpa"


def build(name, attn_implementation, dtype=torch.float32, device="cpu", seed=0):
    """Model `name` with seeded random weights (the same for every dtype and
    implementation), in eval mode."""
    import transformers
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config(name),
                                                          attn_implementation="eager")
    with torch.no_grad():
        for module in model.modules():
            sinks = getattr(module, "sinks", None)
            if isinstance(sinks, torch.nn.Parameter):
                sinks.normal_(1.0, 1.0)
    model.set_attn_implementation(attn_implementation)
    if name == "gpt_oss":
        # The experts as plain matmuls: grouped_mm may lack an fp32 kernel.
        model.set_experts_implementation("eager")
    return model.to(device=device, dtype=dtype).eval()


def padded_batch(lengths, seqlen, side, device="cpu", seed=1):
    """(input_ids, attention_mask) [len(lengths), seqlen] of random tokens,
    row i holding lengths[i] tokens padded on `side` ("left" or "right")."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (len(lengths), seqlen), generator=g)
    mask = torch.zeros(len(lengths), seqlen, dtype=torch.long)
    for i, n in enumerate(lengths):
        if side == "left":
            mask[i, seqlen - n:] = 1
        else:
            mask[i, :n] = 1
    ids = ids.masked_fill(mask == 0, 0)
    return ids.to(device), mask.to(device)


def packed_batch(lengths, device="cpu", seed=2):
    """(input_ids [1, total], position_ids restarting at 0 for each sequence,
    cu_seqlens int32) of sequences of `lengths` packed in one row."""
    g = torch.Generator().manual_seed(seed)
    total = sum(lengths)
    ids = torch.randint(3, VOCAB, (1, total), generator=g)
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    cu = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    return ids.to(device), positions.to(device), cu.to(device)


def position_ids_of(mask):
    """The position ids generate() gives a padded batch: each row counts its
    own tokens (padding at 0)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def forward_and_grads(model, loss_mask, segments=None, **inputs):
    """(logits fp32 [batch, seqlen, vocab], {parameter: grad fp32}) of the
    model on `inputs` in training mode, the loss being the mean of the
    logits under loss_mask (1 = a real token) times a fixed random
    projection, so that every logit's gradient counts. segments: offsets
    (cu_seqlens) of sequences packed in input_ids' one row, each then run
    alone (the ground truth of a packed call)."""
    model.train()
    model.zero_grad(set_to_none=True)
    if segments is None:
        logits = model(**inputs, use_cache=False).logits
    else:
        ids, bounds = inputs["input_ids"], segments.tolist()
        logits = torch.cat([model(input_ids=ids[:, a:b], use_cache=False).logits
                            for a, b in zip(bounds, bounds[1:])], dim=1)
    g = torch.Generator().manual_seed(3)
    weights = torch.randn(logits.shape[-1], generator=g).to(logits.device, torch.float32)
    picked = logits.float()[loss_mask.bool()]
    (picked @ weights).mean().backward()
    grads = {name: p.grad.float().clone() for name, p in model.named_parameters()
             if p.grad is not None}
    model.eval()
    return logits.detach().float(), grads


def decode_logits(model, ids, mask, steps, tokens=None):
    """Greedy decoding by hand over a DynamicCache: the prefill of the
    padded batch, then `steps` single-token steps. Returns (the logits of
    the last position at each of the steps + 1 calls, fp32 [batch, vocab],
    the tokens fed). tokens: the tokens to feed ([batch, steps]) instead of
    this model's own argmax, so that models compared see the same inputs."""
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    out, fed = [], []
    with torch.no_grad():
        positions = position_ids_of(mask)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions,
                       past_key_values=cache, use_cache=True).logits[:, -1].float()
        out.append(logits)
        for step in range(steps):
            nxt = logits.argmax(-1) if tokens is None else tokens[:, step]
            fed.append(nxt)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            positions = positions[:, -1:] + 1
            logits = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=positions,
                           past_key_values=cache, use_cache=True).logits[:, -1].float()
            out.append(logits)
    return out, torch.stack(fed, dim=1)


def max_error(a, b):
    return (a.float() - b.float()).abs().max().item()
