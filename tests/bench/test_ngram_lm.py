import numpy as np

from benchlib.ngram_lm import BigramLM, keep_lm_signal


def test_seen_word_order_is_likelier_than_shuffled_and_probabilities_sum_to_one():
    pages = [[1, 2, 3, 4, 5, 6] * 5, [1, 2, 3, 7, 8] * 4]
    model = BigramLM(pages)
    assert model.mean_log_prob([1, 2, 3, 4, 5]) > model.mean_log_prob([5, 3, 1, 4, 2]) + 1.0
    assert np.isnan(model.mean_log_prob([1]))
    # interpolated Kneser-Ney: after a seen history, the next token's probabilities over the vocabulary
    # (and one unseen token standing for the rest) sum to at most one
    total = sum(np.exp(model.mean_log_prob([3, w])) for w in [1, 2, 3, 4, 5, 6, 7, 8])
    assert 0.5 < total <= 1.0


def test_signal_reads_only_keep_pages_of_the_reference_in_the_same_language():
    tokens = [[1, 2, 3] * 10, [9, 8, 7] * 10, [1, 2, 3] * 3, [9, 8, 7] * 3]
    keep = np.array([True, False, False, False])
    reference = np.array([True, True, False, False])
    values = keep_lm_signal(tokens, ["en"] * 4, keep, reference, ~reference)
    assert np.isnan(values[:2]).all()
    assert values[2] > values[3] + 1.0
