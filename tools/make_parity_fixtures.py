"""Makes the checkpoint-conversion parity fixtures in tests/fixtures/ (run by hand).

Needs torch + transformers (pinned in requirements-fixtures.txt; install the
CPU torch first so pip does not pull a CUDA build):

    pip install -r requirements-fixtures.txt
    python tools/make_parity_fixtures.py                # writes tests/fixtures/
    python tools/make_parity_fixtures.py --check_export /tmp/hf_export   # optional check, see below

It builds randomly initialised Hugging Face ELECTRA models with the real
ELECTRA-Small widths (embedding 128 ≠ hidden 256, 4 heads, FFN 1024;
generator 64-d, 1 head, FFN 256) but 1 discriminator and 2 generator layers,
a 1000-token BERT-style vocabulary and 128 positions (the fixtures stay
≈ 5 MB), with the generator's embeddings equal to the discriminator's as in
ELECTRA. Every parameter (LayerNorm and biases included) is random so that
no mix-up can hide. It writes:

* `hf_electra/{discriminator,generator}/` — `save_pretrained` output
  (config.json, model.safetensors, tokenizer files) + vocab.txt;
* `hf_outputs.npz` — fixed inputs (`input_ids`, `token_type_ids`,
  `attention_mask`, `masked_positions`) and what transformers computes on them:
  `disc_logits` [B,S], `disc_hidden` [B,S,256], `gen_logits` [B,S,V] (all
  positions), `gen_hidden` [B,S,64], `gen_top1` [B,M] (argmax at masked positions);
  the tests compute the same arrays for our models with `tests/parity.py`;
* `torch_state_dict.bin` + `torch_state_dict.npz` — a tiny `torch.save` state dict
  (several dtypes, a strided view, a Parameter) for the torch-free .bin reader.

`--check_export DIR` loads DIR/{discriminator,generator} (written by
`python -m electra_tf.convert --to=hf`) with transformers and compares their
outputs on the fixture inputs with `hf_outputs.npz`.

The official-format (TF1) checkpoint is not stored: it would double the
fixtures. `official_variables` + `write_official_checkpoint` below derive it
from the Hugging Face fixture with TensorFlow only (the tests call them), using
their own name translation, independent of `electra_tf.convert.names`.
"""

import argparse
import json
import os
import re
import sys

import numpy as np

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "fixtures")
SIZES = dict(vocab_size=1000, embedding_size=128, max_position_embeddings=128, type_vocab_size=2)
DISCRIMINATOR = dict(hidden_size=256, num_hidden_layers=1, num_attention_heads=4, intermediate_size=1024)
GENERATOR = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=1, intermediate_size=256)
SPECIAL = {"pad": 0, "unk": 100, "cls": 101, "sep": 102, "mask": 103}
MASKED_POSITIONS = np.array([[3, 7, 12], [2, 5, 9]], np.int64)
WORDS = ("the of and to in is was he for it with as his on be at by i this had not are but from or have an "
         "they which one you were her all she there would their we him been has when who will more no if out "
         "so said what up its about into than them can only other new some could time these two may then do "
         "first any my now such like our over man me even most made after also did many before must through "
         "back years where much your way well down should because each just those people how too little state "
         "good very make world still own see men work long get here between both life being under never day "
         "same another know while last might us great old year off come since against go came right used take "
         "three quick brown fox jumps lazy dog hello electra model text token").split()


# --- Vocabulary ---------------------------------------------------------------------------------

def vocab_tokens(size=SIZES["vocab_size"]):
    """BERT layout: [PAD], [unused0-98], [UNK], [CLS], [SEP], [MASK], then pieces and words."""
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"()-")
    tokens += chars + ["##" + c for c in chars[:36]]
    tokens += [w for w in dict.fromkeys(WORDS) if w not in tokens]
    tokens += [f"word{i}" for i in range(size - len(tokens))]
    assert len(tokens) == size and len(set(tokens)) == size
    return tokens


def write_vocab(path):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(vocab_tokens()) + "\n")
    return path


# --- Official TF1 checkpoint (TensorFlow only) ---------------------------------------------------

def official_name(hf_name, role):
    """The official variable name of a Hugging Face tensor and whether it is transposed (None: skipped)."""
    if role == "generator" and (hf_name.startswith("electra.embeddings.") or hf_name == "generator_lm_head.weight"):
        return None, False  # the official generator uses the discriminator's embeddings
    if hf_name == "generator_lm_head.bias":
        return "generator_predictions/output_bias", False
    name = hf_name
    if name.startswith("electra."):
        name = ("electra" if role == "discriminator" else "generator") + "/" + name[len("electra."):]
    name = re.sub(r"layer\.(\d+)", r"layer_\1", name).replace("dense_prediction", "dense_1").replace(".", "/")
    if name.endswith("LayerNorm/weight"):
        return name[: -len("weight")] + "gamma", False
    if name.endswith("LayerNorm/bias"):
        return name[: -len("bias")] + "beta", False
    if name.endswith("_embeddings/weight"):
        return name[: -len("/weight")], False
    if name.endswith("/weight"):
        return name[: -len("weight")] + "kernel", True
    return name, False


def official_variables(hf_dir, optimizer_slots=True):
    """`{official name: array}` of the Hugging Face fixture (+ adam slots and global_step, as in a real run)."""
    from safetensors.numpy import load_file

    variables = {}
    for role in ("discriminator", "generator"):
        for hf_name, value in load_file(os.path.join(hf_dir, role, "model.safetensors")).items():
            name, transpose = official_name(hf_name, role)
            if name is not None:
                variables[name] = np.ascontiguousarray(value.T if transpose else value)
    if optimizer_slots:
        for name, value in list(variables.items()):
            variables[name + "/adam_m"] = np.full_like(value, 0.5)
            variables[name + "/adam_v"] = np.full_like(value, 0.25)
        variables["global_step"] = np.array(1000, np.int64)
    return variables


def write_official_checkpoint(variables, prefix):
    """Writes `variables` under exactly their names with a TF1 `Saver` (as the official code did)."""
    import tensorflow as tf

    os.makedirs(os.path.dirname(prefix) or ".", exist_ok=True)
    with tf.Graph().as_default():
        var_list = {name: tf.compat.v1.Variable(value, name=re.sub(r"[^A-Za-z0-9_./-]", "_", name))
                    for name, value in variables.items()}
        saver = tf.compat.v1.train.Saver(var_list=var_list)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return saver.save(session, prefix)


# --- Hugging Face fixture (torch + transformers) ---------------------------------------------------

def _randomize(model, torch):
    """Every parameter random (LayerNorm gains around 1), so that no name or layout mix-up can hide."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "LayerNorm.weight" in name:
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif "embeddings" in name and name.endswith("weight"):
                param.copy_(0.5 * torch.randn_like(param))
            else:
                param.copy_(0.05 * torch.randn_like(param))


def build_models(torch, transformers):
    torch.manual_seed(0)
    common = dict(SIZES, hidden_act="gelu", layer_norm_eps=1e-12, pad_token_id=SPECIAL["pad"])
    disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(**common, **DISCRIMINATOR)).eval()
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(**common, **GENERATOR)).eval()
    _randomize(disc, torch)
    _randomize(gen, torch)
    gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())  # shared, as in ELECTRA
    assert torch.equal(gen.generator_lm_head.weight, gen.electra.embeddings.word_embeddings.weight)
    return disc, gen


def fixture_inputs():
    rng = np.random.RandomState(0)
    ids = rng.randint(104, SIZES["vocab_size"], size=(2, 16)).astype(np.int64)
    lengths, splits = (16, 11), (8, 6)
    attention_mask = np.zeros_like(ids)
    token_type_ids = np.zeros_like(ids)
    for row, (length, split) in enumerate(zip(lengths, splits)):
        ids[row, 0], ids[row, split], ids[row, length - 1] = SPECIAL["cls"], SPECIAL["sep"], SPECIAL["sep"]
        ids[row, length:] = SPECIAL["pad"]
        attention_mask[row, :length] = 1
        token_type_ids[row, split + 1:length] = 1
    for row, positions in enumerate(MASKED_POSITIONS):
        ids[row, positions] = SPECIAL["mask"]
    return {"input_ids": ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask,
            "masked_positions": MASKED_POSITIONS}


def hf_outputs(disc, gen, inputs, torch):
    feed = {k: torch.tensor(inputs[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        d = disc(**feed, output_hidden_states=True)
        g = gen(**feed, output_hidden_states=True)
    gen_logits = g.logits.numpy()
    masked = np.take_along_axis(gen_logits, inputs["masked_positions"][..., None], axis=1)
    return {"disc_logits": d.logits.numpy(), "disc_hidden": d.hidden_states[-1].numpy(),
            "gen_logits": gen_logits, "gen_hidden": g.hidden_states[-1].numpy(),
            "gen_top1": masked.argmax(-1).astype(np.int64)}


def check_top1_margin(gen_logits, positions, margin=1e-2):
    """The top-1 token at each masked position must win clearly, or fp noise could flip it."""
    masked = np.sort(np.take_along_axis(gen_logits, positions[..., None], axis=1), axis=-1)
    gap = float(np.min(masked[..., -1] - masked[..., -2]))
    if gap < margin:
        raise RuntimeError(f"top-1 margin {gap} < {margin}: pick other inputs or seed")


def save_model(model, directory, transformers):
    """`save_pretrained` of the model and its tokenizer, plus vocab.txt as in Google's hub directories."""
    model.save_pretrained(directory)
    vocab = {token: i for i, token in enumerate(vocab_tokens())}
    transformers.ElectraTokenizer(vocab=vocab, do_lower_case=True).save_pretrained(directory)
    write_vocab(os.path.join(directory, "vocab.txt"))


def write_torch_state_dict(out_dir, torch):
    torch.manual_seed(1)
    state = {"float": torch.randn(3, 4), "transposed": torch.randn(4, 3).t(), "long": torch.arange(5),
             "half": torch.randn(2, 2).half(), "bfloat16": torch.randn(3).bfloat16(),
             "slice": torch.randn(6)[2:5], "parameter": torch.nn.Parameter(torch.randn(2))}
    torch.save(state, os.path.join(out_dir, "torch_state_dict.bin"))
    expected = {k: (v.detach().float() if v.is_floating_point() else v).numpy() for k, v in state.items()}
    np.savez(os.path.join(out_dir, "torch_state_dict.npz"), **expected)


def make_fixtures(out_dir):
    import torch
    import transformers

    hf_dir = os.path.join(out_dir, "hf_electra")
    disc, gen = build_models(torch, transformers)
    for role, model in (("discriminator", disc), ("generator", gen)):
        save_model(model, os.path.join(hf_dir, role), transformers)
    inputs = fixture_inputs()
    outputs = hf_outputs(disc, gen, inputs, torch)
    check_top1_margin(outputs["gen_logits"], inputs["masked_positions"])
    np.savez(os.path.join(out_dir, "hf_outputs.npz"), **inputs, **outputs)
    write_torch_state_dict(out_dir, torch)
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write("Generated by `python tools/make_parity_fixtures.py` (see its docstring); do not edit.\n"
                f"torch {torch.__version__}, transformers {transformers.__version__}.\n")


def check_export(export_dir, fixtures_dir, atol=1e-4):
    """Loads a `--to=hf` export with transformers and compares it with the fixture outputs."""
    import torch
    import transformers

    expected = dict(np.load(os.path.join(fixtures_dir, "hf_outputs.npz")))
    disc = transformers.ElectraForPreTraining.from_pretrained(os.path.join(export_dir, "discriminator")).eval()
    gen = transformers.ElectraForMaskedLM.from_pretrained(os.path.join(export_dir, "generator")).eval()
    got = hf_outputs(disc, gen, expected, torch)
    report = {name: float(np.max(np.abs(got[name] - expected[name]))) for name in got if name != "gen_top1"}
    report["gen_top1_equal"] = bool(np.array_equal(got["gen_top1"], expected["gen_top1"]))
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(export_dir, "discriminator"))
    report["tokenizer"] = tokenizer.tokenize("Hello the quick brown fox")
    print(json.dumps(report, indent=2))
    ok = all(v <= atol for k, v in report.items() if isinstance(v, float)) and report["gen_top1_equal"]
    return ok


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=FIXTURES, help="fixture directory (default tests/fixtures)")
    parser.add_argument("--check_export", help="compare this --to=hf export with the fixtures instead")
    args = parser.parse_args(argv)
    if args.check_export:
        return 0 if check_export(args.check_export, args.out) else 1
    make_fixtures(args.out)
    print(f"fixtures written to {os.path.abspath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
