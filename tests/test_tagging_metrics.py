"""Chunk scores against a line-by-line port of `conlleval`'s Perl loop, and against hand counts.

The library turns each sentence into a set of (type, start, end) spans and
intersects sets. The reference below is written the other way: it walks
one flat stream of `conlleval` lines (sentence boundaries as `-X- O O`)
with the script's `$inCorrect` state machine and counters, keeping the
Perl's tag splitting (`/^([^-]*)-(.*)$/`) and its full startOfChunk /
endOfChunk rule tables (including the IOBES and bracket rows).
"""

import random

import pytest

from electra_tf.finetuning import conll, tagging_metrics
from electra_tf.finetuning.tagging_metrics import ChunkCounts, chunks, evaluate

BOUNDARY = "-X-"


def perl_split(tag):
    prefix, dash, chunk_type = tag.partition("-")
    return (prefix, chunk_type) if dash else (tag, "")


def end_of_chunk(prev_tag, tag, prev_type, type_):
    end = (prev_tag, tag) in {("B", "B"), ("B", "O"), ("I", "B"), ("I", "O"),
                              ("E", "E"), ("E", "I"), ("E", "O"), ("I", "O")}
    if prev_tag != "O" and prev_tag != "." and prev_type != type_:
        end = True
    return end or prev_tag in ("]", "[")


def start_of_chunk(prev_tag, tag, prev_type, type_):
    start = (prev_tag, tag) in {("B", "B"), ("I", "B"), ("O", "B"), ("O", "I"),
                                ("E", "E"), ("E", "I"), ("O", "E"), ("O", "I")}
    if tag != "O" and tag != "." and prev_type != type_:
        start = True
    return start or tag in ("[", "]")


def conlleval(gold_sentences, predicted_sentences):
    """(correct, found_guessed, found_correct, correct_tags, tokens) overall and per type."""
    lines = []
    for gold, predicted in zip(gold_sentences, predicted_sentences):
        lines += [("w", g, p) for g, p in zip(gold, predicted)] + [(BOUNDARY, "O", "O")]
    correct_chunk, found_correct, found_guessed = {}, {}, {}
    total = dict(correct=0, correct_found=0, guessed_found=0, correct_tags=0, tokens=0)
    in_correct = False
    last_correct, last_correct_type, last_guessed, last_guessed_type = "O", "", "O", ""
    for first_item, gold_tag, guessed_tag in lines:
        guessed, guessed_type = perl_split(guessed_tag)
        correct, correct_type = perl_split(gold_tag)
        if first_item == BOUNDARY:
            guessed = "O"
        gold_end = end_of_chunk(last_correct, correct, last_correct_type, correct_type)
        guess_end = end_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type)
        if in_correct:
            if gold_end and guess_end and last_guessed_type == last_correct_type:
                in_correct = False
                total["correct"] += 1
                correct_chunk[last_correct_type] = correct_chunk.get(last_correct_type, 0) + 1
            elif gold_end != guess_end or guessed_type != correct_type:
                in_correct = False
        gold_start = start_of_chunk(last_correct, correct, last_correct_type, correct_type)
        guess_start = start_of_chunk(last_guessed, guessed, last_guessed_type, guessed_type)
        if gold_start and guess_start and guessed_type == correct_type:
            in_correct = True
        if gold_start:
            total["correct_found"] += 1
            found_correct[correct_type] = found_correct.get(correct_type, 0) + 1
        if guess_start:
            total["guessed_found"] += 1
            found_guessed[guessed_type] = found_guessed.get(guessed_type, 0) + 1
        if first_item != BOUNDARY:
            if correct == guessed and guessed_type == correct_type:
                total["correct_tags"] += 1
            total["tokens"] += 1
        last_guessed, last_correct = guessed, correct
        last_guessed_type, last_correct_type = guessed_type, correct_type
    if in_correct:
        total["correct"] += 1
        correct_chunk[last_correct_type] = correct_chunk.get(last_correct_type, 0) + 1
    types = sorted(set(correct_chunk) | set(found_correct) | set(found_guessed))
    per_type = {t: (correct_chunk.get(t, 0), found_guessed.get(t, 0), found_correct.get(t, 0)) for t in types}
    return total, per_type


def conlleval_percent(correct, guessed, gold):
    precision = 100 * correct / guessed if guessed > 0 else 0
    recall = 100 * correct / gold if gold > 0 else 0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0
    return precision, recall, f1


def assert_agree(gold, predicted):
    scores = evaluate(gold, predicted)
    total, per_type = conlleval(gold, predicted)
    assert (scores.overall.correct, scores.overall.predicted, scores.overall.gold) == \
        (total["correct"], total["guessed_found"], total["correct_found"])
    assert (scores.correct_tags, scores.tokens) == (total["correct_tags"], total["tokens"])
    assert {t: (c.correct, c.predicted, c.gold) for t, c in scores.per_type.items()} == per_type
    expected = conlleval_percent(total["correct"], total["guessed_found"], total["correct_found"])
    assert (scores.precision, scores.recall, scores.f1) == pytest.approx(expected)
    for chunk_type, counts in per_type.items():
        assert scores.as_dict()[f"{chunk_type}_f1"] == pytest.approx(conlleval_percent(*counts)[2])
    return scores


# (gold, predicted) sentence lists, each a crafted edge case.
EDGE_CASES = {
    "entity at sentence end": ([["O", "B-PER", "I-PER"]], [["O", "B-PER", "I-PER"]]),
    "prediction runs into next sentence": ([["B-PER"], ["I-PER", "O"]], [["B-PER"], ["O", "O"]]),
    "I- without B-": ([["O", "I-LOC", "I-LOC"]], [["O", "B-LOC", "I-LOC"]]),
    "I- first in sentence": ([["I-LOC", "O"]], [["B-LOC", "O"]]),
    "type change B-PER I-LOC": ([["B-PER", "I-LOC"]], [["B-PER", "B-LOC"]]),
    "type change in gold only": ([["B-PER", "I-PER"]], [["B-PER", "I-LOC"]]),
    "IOB1 adjacent same type": ([["I-PER", "I-PER", "B-PER", "O"]], [["I-PER", "I-PER", "I-PER", "O"]]),
    "IOB2 adjacent same type": ([["B-PER", "I-PER", "B-PER", "O"]], [["B-PER", "I-PER", "B-PER", "O"]]),
    "IOB1 vs IOB2 spelling": ([["I-ORG", "I-ORG", "O", "I-LOC"]], [["B-ORG", "I-ORG", "O", "B-LOC"]]),
    "all O": ([["O", "O"], ["O"]], [["O", "O"], ["O"]]),
    "empty predictions": ([["B-PER", "O", "B-LOC"]], [["O", "O", "O"]]),
    "predictions only": ([["O", "O"]], [["B-MISC", "I-MISC"]]),
    "longer prediction": ([["B-PER", "O"]], [["B-PER", "I-PER"]]),
    "shorter prediction": ([["B-PER", "I-PER", "I-PER"]], [["B-PER", "I-PER", "O"]]),
    "wrong type same span": ([["B-PER", "I-PER"]], [["B-ORG", "I-ORG"]]),
    "empty sentences": ([[], ["B-X"], []], [[], ["B-X"], []]),
    "no sentences": ([], []),
}


@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases_agree_with_conlleval(name):
    assert_agree(*EDGE_CASES[name])


def test_edge_case_counts_by_hand():
    counts = {name: evaluate(*case).overall for name, case in EDGE_CASES.items()}
    assert counts["prediction runs into next sentence"] == ChunkCounts(gold=2, predicted=1, correct=1)
    assert counts["I- without B-"] == ChunkCounts(gold=1, predicted=1, correct=1)
    assert counts["type change B-PER I-LOC"] == ChunkCounts(gold=2, predicted=2, correct=2)
    assert counts["type change in gold only"] == ChunkCounts(gold=1, predicted=2, correct=0)
    assert counts["IOB1 adjacent same type"] == ChunkCounts(gold=2, predicted=1, correct=0)
    assert counts["IOB1 vs IOB2 spelling"] == ChunkCounts(gold=2, predicted=2, correct=2)
    assert counts["all O"] == ChunkCounts() and evaluate(*EDGE_CASES["all O"]).f1 == 0.0
    assert counts["empty predictions"] == ChunkCounts(gold=2, predicted=0, correct=0)
    assert counts["longer prediction"] == ChunkCounts(gold=1, predicted=1, correct=0)
    empty = evaluate([], [])
    assert (empty.precision, empty.recall, empty.f1, empty.accuracy, empty.per_type) == (0.0, 0.0, 0.0, 0.0, {})


def test_chunk_spans():
    assert chunks(["I-PER", "I-PER", "B-PER", "O", "I-LOC"]) == [("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4)]
    assert chunks(["B-PER", "I-LOC", "I-LOC", "B-LOC"]) == [("PER", 0, 0), ("LOC", 1, 2), ("LOC", 3, 3)]
    assert chunks(["O", "O"]) == [] and chunks([]) == []
    assert chunks(["B-A-B", "I-A-B"]) == [("A-B", 0, 1)]  # the type is everything after the first '-'


def test_hand_computed_example():
    gold = [["B-PER", "I-PER", "O", "B-LOC", "O"], ["B-ORG", "I-ORG"]]
    predicted = [["B-PER", "I-PER", "O", "O", "O"], ["B-ORG", "O"]]  # PER right, ORG too short
    scores = assert_agree(gold, predicted)
    assert (scores.overall.gold, scores.overall.predicted, scores.overall.correct) == (3, 2, 1)
    assert scores.precision == pytest.approx(50.0)
    assert scores.recall == pytest.approx(100 / 3)
    assert scores.f1 == pytest.approx(40.0)
    assert scores.accuracy == pytest.approx(500 / 7)
    assert scores.per_type == {"LOC": ChunkCounts(1, 0, 0), "ORG": ChunkCounts(1, 1, 0), "PER": ChunkCounts(1, 1, 1)}
    assert scores.as_dict()["PER_f1"] == 100.0 and scores.as_dict()["LOC_recall"] == 0.0


def random_sentence(rng, tags, length):
    return [rng.choice(tags) for _ in range(length)]


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_agree_with_conlleval(seed):
    rng = random.Random(seed)
    tags = ["O", "O", "B-A", "I-A", "B-B", "I-B", "I-C"]
    for _ in range(100):
        lengths = [rng.randint(0, 8) for _ in range(rng.randint(0, 5))]
        gold = [random_sentence(rng, tags, n) for n in lengths]
        # Predictions near gold (some tags changed) so that correct chunks are common.
        predicted = [[rng.choice(tags) if rng.random() < 0.3 else t for t in sentence] for sentence in gold]
        assert_agree(gold, predicted)


def test_bad_input():
    with pytest.raises(ValueError, match="tag 'E-PER' is not IOB"):
        evaluate([["E-PER"]], [["O"]])
    with pytest.raises(ValueError, match="tag 'B-' is not IOB"):
        chunks(["B-"])
    with pytest.raises(ValueError, match="sentence 1: 1 predicted tags for 2 gold tags"):
        evaluate([["O"], ["O", "O"]], [["O"], ["O"]])
    with pytest.raises(ValueError, match="1 predicted sentences for 2 gold sentences"):
        evaluate([["O"], ["O"]], [["O"]])


@pytest.mark.data
def test_conll2003_dev_gold_against_itself(shared_data):
    path = shared_data / "conll2003" / "dev.txt"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    gold = [tags for _, tags in conll.read_conll(str(path))]
    scores = tagging_metrics.evaluate(gold, gold)
    assert scores.f1 == 100.0 and scores.accuracy == 100.0
    assert sorted(scores.per_type) == ["LOC", "MISC", "ORG", "PER"]
    # IOB2: every chunk starts with B-, so the chunk count is the B- count.
    assert scores.overall.gold == sum(tag.startswith("B-") for tags in gold for tag in tags)
    # Dropping every I- tag makes multi-token entities wrong: the reference agrees on the real data.
    assert_agree(gold, [[t if not t.startswith("I-") else "O" for t in tags] for tags in gold])
