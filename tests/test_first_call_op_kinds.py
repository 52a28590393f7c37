"""bench/first_call_op_kinds.py: which (op, T) pairs a serving signature runs, and the probe's per-kind cost."""

import pytest
import tensorflow as tf

from bench import first_call_op_kinds


class TwoFunctions(tf.Module):
    """A signature whose `Sin` runs only in a `tf.cond` branch, and a saved function the signature never calls."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def serve(self, x):
        return {"y": tf.cond(tf.size(x) > 0, lambda: tf.sin(x), lambda: x) + tf.abs(x)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def unused(self, x):
        return tf.math.lgamma(x)


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("op_kinds") / "export")
    module = TwoFunctions()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve.get_concrete_function()})
    return path


def test_the_pairs_are_those_the_signature_runs_its_branches_included(export):
    pairs = first_call_op_kinds.op_kind_pairs(export)
    assert ("Sin", tf.float32.as_datatype_enum) in pairs  # inside the If's then-branch only
    assert ("Abs", tf.float32.as_datatype_enum) in pairs
    assert ("Lgamma", tf.float32.as_datatype_enum) not in pairs  # saved, never called by the signature
    assert all(op not in ("SaveV2", "RestoreV2", "Lgamma") for op, _ in pairs)


def test_the_count_and_its_dtypes_add_up(export):
    pairs = first_call_op_kinds.op_kind_pairs(export)
    counted = first_call_op_kinds.op_kinds(export)
    assert counted["op_kinds"] == len(pairs)
    assert sum(counted["by_dtype"].values()) == len(pairs)
    assert counted["by_dtype"]["float32"] == sum(dtype == tf.float32.as_datatype_enum for _, dtype in pairs)


def test_a_kind_costs_the_distinct_functions_extra_time_over_one_less_kind():
    runs = [{"onednn": onednn, "kinds": kinds, "first_call_ms": ms}
            for onednn, kinds, ms in [("on", "same", 80.0), ("on", "same", 90.0), ("on", "distinct", 100.0),
                                      ("on", "distinct", 110.0), ("off", "same", 70.0), ("off", "distinct", 72.0)]]
    summary = first_call_op_kinds.probe_summary(runs, count=11)
    assert summary["oneDNN on"] == {"same_ms": 85.0, "distinct_ms": 105.0, "per_kind_ms": 2.0}
    assert summary["oneDNN off"]["per_kind_ms"] == 0.2
