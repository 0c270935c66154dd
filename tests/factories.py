"""Small constructors for tests: tiny random-weight checkpoints of the real architectures.

Each tiny model is a real transformers model of its family (same attention code
path, RoPE variant, norms, sliding layers) with a few layers and a byte-level
tokenizer, saved as a local checkpoint dir so ``--model PATH`` loading is tested too.
"""

from __future__ import annotations

from pathlib import Path

import torch

__all__ = ["tiny_config", "make_tiny_checkpoint", "byte_tokenizer", "tiny_runner", "token_ids", "TINY_FAMILIES",
           "dequantized_copy"]

TINY_FAMILIES = ("llama", "qwen3", "gemma3_text")
_VOCAB = 300  # 256 bytes + specials + spare


def byte_tokenizer():
    """A byte-level fast tokenizer: every UTF-8 byte is a token (offsets map to chars)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([byte_level, pre_tokenizers.Split("", "isolated")])
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>"
    )


def tiny_config(family: str, sliding_window: int = 16):
    common = dict(
        vocab_size=_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    if family == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(num_hidden_layers=2, **common)
    if family == "qwen3":
        from transformers import Qwen3Config

        return Qwen3Config(num_hidden_layers=2, head_dim=16, **common)
    if family == "gemma3_text":
        from transformers import Gemma3TextConfig

        common["num_key_value_heads"] = 1
        return Gemma3TextConfig(
            num_hidden_layers=4,
            head_dim=32,
            query_pre_attn_scalar=32,
            sliding_window=sliding_window,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            **common,
        )
    raise ValueError(family)


def make_tiny_checkpoint(family: str, path: Path, seed: int = 0, sliding_window: int = 16) -> Path:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, sliding_window))
    # Random init of norms is all-ones/zeros; perturb so norm weights matter in the check.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path


def greedy_tokens(runner, doc, prompt_ids, pages=None, max_new_tokens: int = 8, stop_ids=None) -> list[int]:
    """Greedy tokens after a prefilled document, straight on a ModelRunner (the engine's token loop)."""
    from agentctx.serving.engine.reference_sampling import greedy_decode

    with torch.inference_mode():
        tail = runner.new_tail(doc)
        logits = runner.extend(doc, tail, list(prompt_ids), pages)
        return greedy_decode(logits, lambda token: runner.extend(doc, tail, [token], pages), max_new_tokens,
                             runner.stop_token_ids() if stop_ids is None else stop_ids)


def token_ids(n: int, seed: int) -> list[int]:
    """n reproducible token ids of a tiny model's byte range (no special tokens)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, 259, (n,), generator=g).tolist()


def tiny_runner(family: str, path: Path, **kw):
    """A CPU ModelRunner over a fresh tiny checkpoint: 16-token pages, 32-token prefill chunks."""
    from agentctx.serving.model_loader import load_model
    from agentctx.serving.runner.model_runner import ModelRunner

    kw.setdefault("page_size", 16)
    kw.setdefault("prefill_chunk_tokens", 32)
    return ModelRunner(load_model(make_tiny_checkpoint(family, path), device="cpu"), **kw)


def dequantized_copy(doc):
    """The same document with its quantised pages (model.kv_dtype fp8_e4m3 / int8) dequantised to
    its compute dtype: float pages of exactly the values the quantised ones stand for."""
    from agentctx.serving.runner.paged_kv import DocKV

    k = {l: doc.flat(l)[0].view(doc.k_pages[l].shape).clone() for l in doc.k_pages}
    v = {l: doc.flat(l)[1].view(doc.v_pages[l].shape).clone() for l in doc.v_pages}
    return DocKV(doc.layout, doc.page_size, doc.num_tokens, k, v, window_k=dict(doc.window_k),
                 window_v=dict(doc.window_v), window_pos=doc.window_pos)
