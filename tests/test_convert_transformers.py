"""Opt-in: our Hugging Face export loads in transformers and computes the fixture's outputs.

Opt-in (`slow`) and only where torch and transformers are installed (requirements-fixtures.txt):

    pip install -r requirements-fixtures.txt
    python -m pytest -m slow tests/test_convert_transformers.py
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from electra_tf.convert import load_any, load_hf_checkpoint, save_hf  # noqa: E402
import parity  # noqa: E402  # tests/parity.py

ROOT = Path(__file__).resolve().parents[1]
HF_DIR = ROOT / "tests" / "fixtures" / "hf_electra"


def fixture_tool():
    spec = importlib.util.spec_from_file_location("make_parity_fixtures", ROOT / "tools" / "make_parity_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_export_loads_in_transformers_with_same_outputs(tmp_path):
    config, pretrainer, vocab = load_hf_checkpoint(str(HF_DIR))
    save_hf(pretrainer, config, str(tmp_path), vocab)
    assert fixture_tool().check_export(str(tmp_path), str(HF_DIR.parent))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "discriminator"))
    assert tokenizer.tokenize("Hello the QUICK fox") == ["hello", "the", "quick", "fox"]


def test_pytorch_bin_checkpoints_convert_without_safetensors(tmp_path):
    expected = dict(np.load(HF_DIR.parent / "hf_outputs.npz"))
    for role, cls in (("discriminator", transformers.ElectraForPreTraining),
                      ("generator", transformers.ElectraForMaskedLM)):
        model = cls.from_pretrained(str(HF_DIR / role))
        (tmp_path / role).mkdir()
        torch.save(model.state_dict(), tmp_path / role / "pytorch_model.bin")  # as on the hub before safetensors
        for name in ("config.json", "vocab.txt"):
            (tmp_path / role / name).write_text((HF_DIR / role / name).read_text())
    _, pretrainer, _ = load_any(str(tmp_path))
    got = parity.pretrainer_outputs(pretrainer, expected)
    assert max(parity.max_differences(got, expected).values()) <= 1e-4
