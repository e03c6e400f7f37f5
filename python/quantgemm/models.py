"""The linear layers of the models quantgemm is measured and tuned on, as (layer, N, K).

N is the layer's output features (the weight's rows), K its input features. Column-parallel layers
(fused qkv, gate/up) split N across tensor-parallel ranks; row-parallel ones (o, down) split K.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    name: str
    n: int
    k: int
    split: str  #: "n" (column-parallel) or "k" (row-parallel) under tensor parallelism

    def shard(self, tp: int) -> "Layer":
        """This layer's slice on one of `tp` tensor-parallel ranks."""
        if self.split == "n":
            if self.n % tp:
                raise ValueError(f"{self.name}: N = {self.n} does not split {tp} ways")
            return Layer(self.name, self.n // tp, self.k, self.split)
        if self.k % tp:
            raise ValueError(f"{self.name}: K = {self.k} does not split {tp} ways")
        return Layer(self.name, self.n, self.k // tp, self.split)


def _llama(hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int, fuse_gate_up: bool) -> list[Layer]:
    gate = Layer("gate_up", 2 * intermediate, hidden, "n") if fuse_gate_up else Layer("gate", intermediate, hidden, "n")
    return [Layer("qkv", (heads + 2 * kv_heads) * head_dim, hidden, "n"),
            Layer("o", hidden, heads * head_dim, "k"),
            gate,
            Layer("down", hidden, intermediate, "k")]


_LLAMA3_70B = _llama(8192, 64, 8, 128, 28672, fuse_gate_up=False)

#: model -> its layers. The Llama-3-70B MLP is listed unfused (gate and up are each 28672 x 8192),
#: as its earlier benchmarks were; DeepSeek-V3's are the dense (non-expert) layers: the MLA
#: projections and the first three layers' MLP.
MODELS: dict[str, list[Layer]] = {
    "llama3-8b": _llama(4096, 32, 8, 128, 14336, fuse_gate_up=True),
    "llama3-70b": _LLAMA3_70B,
    "llama3-70b-tp2": [layer.shard(2) for layer in _LLAMA3_70B],
    "llama3-70b-tp4": [layer.shard(4) for layer in _LLAMA3_70B],
    "qwen2.5-7b": _llama(3584, 28, 4, 128, 18944, fuse_gate_up=True),
    "mixtral-8x7b-experts": [Layer("w1_w3", 2 * 14336, 4096, "n"), Layer("w2", 4096, 14336, "k")],
    "deepseek-v3": [Layer("q_a", 1536, 7168, "n"), Layer("q_b", 24576, 1536, "n"),
                    Layer("kv_a", 576, 7168, "n"), Layer("kv_b", 32768, 512, "n"),
                    Layer("o", 7168, 16384, "k"), Layer("gate_up", 2 * 18432, 7168, "n"),
                    Layer("down", 7168, 18432, "k")],
    # the shapes of DeepSeek-V3's block-scaled FP8 GEMMs that DeepGEMM published (fused q_a + kv_a,
    # the shared expert's gate/up and down), the block-scaled benchmark's default
    "deepseek-v3-fp8": [Layer("q_a_kv_a", 2112, 7168, "n"), Layer("q_b", 24576, 1536, "n"),
                        Layer("kv_b", 32768, 512, "n"), Layer("o", 7168, 16384, "k"),
                        Layer("shared_gate_up", 4096, 7168, "n"), Layer("shared_down", 7168, 2048, "k"),
                        Layer("kv_a", 576, 7168, "n")],
}

#: The models the benchmark runs by default (the foundation's table).
DEFAULT_MODELS = ("llama3-8b", "llama3-70b")


def unsupported_reason(n: int, k: int, group_size: int, layout: str = "sm90") -> str | None:
    """Why the u4b8 kernels of `layout` cannot take an N x K weight with this group size, if they cannot."""
    from .mixed_input import _check_activation_k, _check_group, _check_weight_shape

    try:
        _check_weight_shape(n, k)
        _check_group(k, group_size, layout)
        _check_activation_k(k, layout)
    except ValueError as e:
        return str(e)
    return None


def parse_models(text: str) -> list[str]:
    """The model names of a comma-separated list; ValueError naming any unknown one."""
    models = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in models if x not in MODELS]
    if unknown:
        raise ValueError(f"unknown models {unknown}; choose from {list(MODELS)}")
    return models
