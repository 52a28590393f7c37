"""GLUE examples from TensorFlow Datasets (`glue/*`), prepared data only: nothing is downloaded.

`spec` below is a `glue.GlueSpec`: its `tfds_name`, `tfds_fields` (the text
features, in order) and `is_regression`.

Example:

>>> from electra_tf.finetuning.glue import GLUE_SPECS
>>> tfds_split_name(GLUE_SPECS["MNLI"], "dev_mismatched"), tfds_split_name(GLUE_SPECS["RTE"], "dev")
(('glue/mnli', 'validation_mismatched'), ('glue/rte', 'validation'))
"""

from __future__ import annotations

from typing import Optional

from electra_tf.finetuning.task import InputExample

DIAGNOSTIC_FIELDS = ("premise", "hypothesis")  # glue/ax


def tfds_split_name(spec, split: str) -> tuple[str, str]:
    """(TFDS dataset name, split name) for one of our split names."""
    if split == "diagnostic":
        return "glue/ax", "test"
    name = {"train": "train", "dev": "validation", "test": "test"}.get(split)
    if name is None:  # MNLI: dev_matched → validation_matched, test_mismatched → test_mismatched
        kind, rest = split.split("_", 1)
        name = ("validation" if kind == "dev" else kind) + "_" + rest
    return spec.tfds_name, name


def read_tfds_examples(spec, split: str, data_dir: Optional[str]) -> list[InputExample]:
    """Examples of a GLUE task from TFDS (`download=False`), sorted by their `idx`."""
    import tensorflow_datasets as tfds

    dataset_name, split_name = tfds_split_name(spec, split)
    fields = DIAGNOSTIC_FIELDS if split == "diagnostic" else spec.tfds_fields
    try:
        builder = tfds.builder(dataset_name, data_dir=data_dir)
        label_names = None if spec.is_regression else builder.info.features["label"].names
        dataset = tfds.load(dataset_name, split=split_name, data_dir=data_dir, download=False)
    except Exception as e:  # DatasetNotFoundError, AssertionError, ... depending on the TFDS version
        raise FileNotFoundError(f"TFDS dataset {dataset_name} split {split_name} is not prepared under "
                                f"--tfds_data_dir={data_dir} (downloads are disabled): {type(e).__name__}") from e
    examples = []
    for record in tfds.as_numpy(dataset):
        texts = [record[f].decode("utf-8") for f in fields]
        label = record["label"]
        if spec.is_regression:
            label = float(label) if split.split("_")[0] != "test" else None
        else:
            label = label_names[int(label)] if int(label) >= 0 else None
        examples.append(InputExample(str(int(record["idx"])), texts[0], texts[1] if len(texts) > 1 else None, label))
    examples.sort(key=lambda e: int(e.guid))
    return examples
