"""flashjit as the attention of a Hugging Face transformers model: one import
and attn_implementation="fjit".

    python3 examples/transformers_backend.py                 # a tiny random Llama
    python3 examples/transformers_backend.py --model PATH    # a checkpoint you have

Needs a CUDA GPU, torch, transformers >= 5 and flashjit (PYTHONPATH=python,
or pip install .). The model runs in bf16: flashjit takes bf16/fp16 only.
"""
import argparse

import torch
import transformers

import flashjit.integrations.transformers  # noqa: F401  registers attn_implementation="fjit"


def load(path):
    if path:
        return transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.bfloat16, attn_implementation="fjit")
    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=512, intermediate_size=1024,
                                      num_hidden_layers=4, num_attention_heads=8,
                                      num_key_value_heads=2, pad_token_id=0)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16,
                                                         attn_implementation="fjit")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a causal LM's path or name (default: a tiny random Llama)")
    args = parser.parse_args()
    model = load(args.model).cuda()
    vocab = model.config.vocab_size

    # A left-padded batch, as generate() expects: two prompts of 12 and 7 tokens.
    ids = torch.randint(3, vocab, (2, 12), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    ids[1, :5] = 0

    # Generation: the DynamicCache hands each layer its whole cache; flashjit
    # runs the prefill (unpadded, varlen) and each decode step.
    model.eval()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=16,
                             do_sample=False, pad_token_id=0)
    print("generated:", out[:, ids.shape[1]:].tolist())

    # Training: forward and backward through flashjit's kernels (attention
    # dropout must be 0, as it is by default).
    model.train()
    labels = ids.masked_fill(mask == 0, -100)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    print(f"loss {loss.item():.4f}; q_proj grad norm "
          f"{model.model.layers[0].self_attn.q_proj.weight.grad.norm().item():.4f}")

    # The same model switched back and forth at run time.
    model.set_attn_implementation("sdpa")
    model.set_attn_implementation("fjit")


if __name__ == "__main__":
    main()
