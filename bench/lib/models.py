"""The models a benchmark runs: real architectures with random weights, the real Gemma 3 270M, tiny test configs.

    gemma3-270m-random, llama3-8b-random  real architectures, random weights built on the device
                                          (bf16 on CUDA: the GPU machine has no network and no weights)
    real-gemma                            the converted Gemma 3 270M checkpoint (or ``weights``)
    tiny-gemma3, tiny-llama, tiny-qwen3   tiny configs from tests/factories.py (smoke tests)

:func:`build_model` returns ``(LoadedModel, info)``; ``info`` says what the weights are.
"""

from __future__ import annotations

import torch

__all__ = ["DEFAULT_SIZES", "TINY", "build_model", "random_config"]

#: Model name -> the sizes a session runs by default.
DEFAULT_SIZES = {
    "gemma3-270m-random": "8k,32k,128k,512k,1m",
    "llama3-8b-random": "8k,32k,128k",
    "real-gemma": "8k",
    "tiny-gemma3": "1k",
    "tiny-llama": "1k",
    "tiny-qwen3": "1k",
}
#: Tiny model name -> its config family in tests/factories.py.
TINY = {"tiny-gemma3": "gemma3_text", "tiny-llama": "llama", "tiny-qwen3": "qwen3"}


def _random_init_(model: torch.nn.Module, seed: int, std: float = 0.02) -> None:
    """Small random normal weights in place (matrices and embeddings); norms keep their init."""
    p0 = next(model.parameters())
    g = torch.Generator(device=p0.device).manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, std, generator=g)


def _rope_thetas(cfg) -> dict:
    rp = getattr(cfg, "rope_parameters", None)
    out = {}
    if isinstance(rp, dict):
        if "rope_theta" in rp:
            out["rope_theta"] = rp["rope_theta"]
        for k, v in rp.items():
            if isinstance(v, dict) and "rope_theta" in v:
                out[k] = v["rope_theta"]
    for name in ("rope_theta", "rope_local_base_freq"):
        if getattr(cfg, name, None) is not None:
            out.setdefault(name, getattr(cfg, name))
    return out


def random_config(name: str):
    if name == "gemma3-270m-random":
        from transformers import Gemma3TextConfig

        cfg = Gemma3TextConfig(
            vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
            num_attention_heads=4, num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
            sliding_window=512, layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 3,
            max_position_embeddings=1 << 21, tie_word_embeddings=True,
            pad_token_id=0, eos_token_id=1, bos_token_id=2,
        )
        # Gemma 3 defaults: 10k local / 1M global RoPE bases. Check rather than set: the
        # config field names for per-layer-type RoPE changed across transformers 5.x.
        th = _rope_thetas(cfg)
        vals = {float(v) for v in th.values()}
        if not {10000.0, 1000000.0} <= vals:
            raise RuntimeError(f"unexpected Gemma 3 RoPE bases {th}; expected 10000 local / 1e6 global")
        return cfg
    if name == "llama3-8b-random":
        from transformers import LlamaConfig

        common = dict(
            vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
            num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=1 << 21,
            rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001,
        )
        try:
            cfg = LlamaConfig(rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, **common)
        except TypeError:
            cfg = LlamaConfig(rope_theta=500000.0, **common)
        if 500000.0 not in {float(v) for v in _rope_thetas(cfg).values()}:
            cfg = LlamaConfig(rope_theta=500000.0, **common)
        if 500000.0 not in {float(v) for v in _rope_thetas(cfg).values()}:
            raise RuntimeError(f"could not set Llama RoPE theta 500000: {_rope_thetas(cfg)}")
        return cfg
    raise ValueError(name)


def build_model(name: str, device: torch.device, seed: int, weights: str | None = None,
                tokenizer: str | None = None):
    """Returns (LoadedModel, info dict). ``weights``: for real-gemma, a checkpoint dir or a .gguf
    file to load instead of the embedded model (how real weights reach a machine without them);
    ``tokenizer``: a dir whose tokenizer replaces theirs."""
    from agentctx.serving.model_loader import LoadedModel

    if name == "real-gemma":
        from agentctx.serving.model_loader import load_model

        dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
        loaded = load_model(weights, dtype=dtype, device=str(device), tokenizer=tokenizer)
        what = f"real ({weights})" if weights else "real (converted Gemma 3 270M)"
        if tokenizer:
            what += f", tokenizer from {tokenizer}"
        return loaded, {"weights": what, "random": False, "dtype": str(dtype)}
    if name in TINY:
        from transformers import AutoModelForCausalLM

        from tests.factories import tiny_config

        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(tiny_config(TINY[name]))
        with torch.no_grad():  # as tests/factories: norms off their trivial init
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.add_(0.1 * torch.randn_like(p))
        model.to(device).eval()
        return LoadedModel(model, None, name, None), {"weights": "random (tiny)", "random": True, "dtype": "float32"}
    cfg = random_config(name)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if name.startswith("gemma3"):
        from transformers import Gemma3ForCausalLM as cls
    else:
        from transformers import LlamaForCausalLM as cls
    prev = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):  # parameters are born on the device, in the target dtype
            torch.manual_seed(seed)
            model = cls(cfg)
    finally:
        torch.set_default_dtype(prev)
    _random_init_(model, seed)
    model.eval()
    info = {"weights": "random (std 0.02)", "random": True, "dtype": str(dtype).replace("torch.", ""),
            "rope": {k: float(v) for k, v in _rope_thetas(cfg).items()}}
    return LoadedModel(model, None, name, None), info

