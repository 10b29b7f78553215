"""Run inside the vLLM venv: build a tiny Llama (random weights, ~1 MB) and its tokenizer, offline.

A byte-level BPE trained on a few generated sentences, wrapped as a fast tokenizer with a chat template;
hidden 128, 2 layers, 4 heads, 2 KV heads, bf16. Takes seconds; argv[1] is the output directory.
argv[2] (optional) picks other shapes for vLLM's config checks of the big layouts: `wide` (16 heads,
8 KV heads, 4 layers, 32k context: TP up to 16 and PP up to 4 divide it) or `moe` (the same as a Mixtral
with 32 experts, top-2: EP up to 32), or a checkpoint format: `fp8-ct` (the tiny Llama with its linear
layers stored as FP8 in the compressed-tensors format, per-channel weight scales and dynamic per-token
activations, lm_head kept bf16, as llm-compressor's FP8_DYNAMIC scheme writes it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    PreTrainedTokenizerFast,
)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    words = ["alpha", "beta", "gamma", "delta", "serve", "layout", "tensor", "pipeline", "expert", "token"]
    text = [" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) for i in range(400)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="</s>")
    fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    fast.save_pretrained(out)
    kind = sys.argv[2] if len(sys.argv) > 2 else "llama"
    common = {"vocab_size": len(fast), "bos_token_id": fast.bos_token_id, "eos_token_id": fast.eos_token_id,
              "torch_dtype": "bfloat16"}
    torch.manual_seed(0)
    if kind in ("llama", "fp8-ct"):
        cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, max_position_embeddings=1024, **common)
        model = LlamaForCausalLM(cfg)
    elif kind == "wide":
        cfg = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=16,
                          num_key_value_heads=8, max_position_embeddings=32768, **common)
        model = LlamaForCausalLM(cfg)
    elif kind == "moe":
        cfg = MixtralConfig(hidden_size=256, intermediate_size=64, num_hidden_layers=4,
                            num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=32768,
                            num_local_experts=32, num_experts_per_tok=2, **common)
        model = MixtralForCausalLM(cfg)
    else:
        raise SystemExit(f"unknown kind {kind!r}: llama, wide, moe or fp8-ct")
    model.to(torch.bfloat16).save_pretrained(out)
    if kind == "fp8-ct":
        to_fp8_compressed_tensors(out)
    print("built", out)


def to_fp8_compressed_tensors(out: Path) -> None:
    """Rewrite the saved checkpoint's decoder Linear weights as FP8 (E4M3) with a per-output-channel
    scale, and declare it in config.json the way compressed-tensors does."""
    import json

    from safetensors.torch import load_file, save_file

    path = out / "model.safetensors"
    tensors = load_file(str(path))
    fp8 = torch.float8_e4m3fn
    for name in [n for n in tensors if n.startswith("model.layers.") and n.endswith("proj.weight")]:
        w = tensors[name].float()
        scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / torch.finfo(fp8).max
        tensors[name] = (w / scale).to(fp8)
        tensors[name.removesuffix("weight") + "weight_scale"] = scale.to(torch.bfloat16)
    save_file(tensors, str(path), metadata={"format": "pt"})
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"] = {
        "quant_method": "compressed-tensors", "format": "float-quantized",
        "quantization_status": "compressed",
        "ignore": ["lm_head"], "kv_cache_scheme": None,
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                        "dynamic": False},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                                  "dynamic": True},
        }},
    }
    cfg_path.write_text(json.dumps(cfg, indent=2))


if __name__ == "__main__":
    main()
