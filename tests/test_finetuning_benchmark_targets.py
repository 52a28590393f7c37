"""The tiny benchmarks' targets fail for a model that learned nothing (a target that cannot fail checks nothing).

Degenerate SQuAD answers are scored with the official scorer, on the benchmark's own
evaluation articles (40-47 of dev-v1.1) where the shared data is present.
"""

import json
import random

import pytest

from electra_tf.finetuning import metrics
from test_finetuning_slow import benchmarks
from test_squad_features import squad_json


def _answers(articles, guess, seed=0):
    """{question id: guess(paragraph words, rng)} for every question of `articles`."""
    rng = random.Random(seed)
    return {qa["id"]: guess(paragraph["context"].split(), rng)
            for article in articles for paragraph in article["paragraphs"] for qa in paragraph["qas"]}


def _random_span(longest):
    def guess(words, rng):
        start = rng.randrange(len(words))
        return " ".join(words[start:start + rng.randint(1, longest)])
    return guess


def _gold(articles):
    return {qa["id"]: qa["answers"][0]["text"]
            for article in articles for paragraph in article["paragraphs"] for qa in paragraph["qas"]}


# What a model that was not fine-tuned may answer: nothing, the paragraph's start, all of it, a random span.
DEGENERATE = {
    "empty": lambda words, rng: "",
    "first word": lambda words, rng: words[0],
    "first 5 words": lambda words, rng: " ".join(words[:5]),
    "first 30 words": lambda words, rng: " ".join(words[:30]),
    "whole paragraph": lambda words, rng: " ".join(words),
    **{f"random span of up to {n} words": _random_span(n) for n in (1, 3, 10, 30)},
}


def test_empty_answers_fail_the_squad_target():
    articles = squad_json()["data"]
    scores = metrics.squad_v1_evaluate(articles, _answers(articles, DEGENERATE["empty"]))
    assert scores == {"exact_match": 0.0, "f1": 0.0}
    assert not benchmarks.meets_target("squad", scores)
    assert benchmarks.meets_target("squad", metrics.squad_v1_evaluate(articles, _gold(articles)))


@pytest.mark.data
@pytest.mark.parametrize("name", sorted(DEGENERATE))
def test_degenerate_answers_fail_the_squad_target_on_the_benchmark_articles(shared_data, name):
    articles = json.loads(benchmarks.SQUAD_DEV.read_text())["data"][40:48]
    scores = metrics.squad_v1_evaluate(articles, _answers(articles, DEGENERATE[name]))
    assert not benchmarks.meets_target("squad", scores), scores


@pytest.mark.data
def test_the_gold_answers_meet_the_squad_target(shared_data):
    articles = json.loads(benchmarks.SQUAD_DEV.read_text())["data"][40:48]
    assert benchmarks.meets_target("squad", metrics.squad_v1_evaluate(articles, _gold(articles)))
