"""bench/inference_paired.py: the turns both systems take, and the summary of their timings."""

import pytest

from bench import inference_paired


def test_each_chunk_goes_to_both_systems_the_first_alternating_the_requests_cycling():
    assert inference_paired.schedule(requests=5, chunk=2, distinct=3) == [
        ("ours", [0, 1]), ("ort", [0, 1]), ("ort", [2, 0]), ("ours", [2, 0]), ("ours", [1]), ("ort", [1])]


def test_the_summary_compares_the_medians_and_each_chunk():
    turns = [("ours", [0, 1]), ("ort", [0, 1]), ("ort", [2, 3]), ("ours", [2, 3])]
    timings = [[2.0, 4.0], [1.0, 1.0], [2.0, 2.0], [4.0, 4.0]]
    summary = inference_paired.paired_summary(turns, timings, bucket_of=lambda i: "odd" if i % 2 else "even",
                                              bucket_order=["odd", "even"].index)
    assert summary["ours"] == {"median_ms": 4.0, "p90_ms": 4.0, "requests": 4}
    assert summary["ort"]["median_ms"] == 1.5
    assert summary["ours_over_ort"] == pytest.approx(4.0 / 1.5, abs=1e-3)
    assert summary["chunk_ratios"] == {"chunks": 2, "median": 2.5, "quartiles": [2.25, 2.75], "range": [2.0, 3.0]}
    assert list(summary["by_bucket"]) == ["odd", "even"]  # in the given order
    assert summary["by_bucket"]["even"] == {"ours_ms": 3.0, "ort_ms": 1.5, "ours_over_ort": 2.0}  # 2, 4 and 1, 2
    assert summary["by_bucket"]["odd"] == {"ours_ms": 4.0, "ort_ms": 1.5, "ours_over_ort": pytest.approx(2.667)}


def test_chunks_of_the_same_requests_count_apart():
    turns = inference_paired.schedule(requests=4, chunk=2, distinct=2)  # both chunks request inputs 0 and 1
    timings = [[3.0, 3.0], [1.0, 1.0], [1.0, 1.0], [2.0, 2.0]]  # ort then ours in the second chunk
    summary = inference_paired.paired_summary(turns, timings)
    assert summary["chunk_ratios"]["chunks"] == 2
    assert summary["chunk_ratios"]["range"] == [2.0, 3.0]
