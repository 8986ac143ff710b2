"""Length-grouped batches: every row once per epoch, sorted within windows, seeded, resumable; and
micro-batches padded to their own longest row only."""

import numpy as np
import pytest
import torch

from turnrl.supervised.batches import LengthGroupedLoader, chunks, epoch_batches, right_pad


def test_hand_worked_windows_without_shuffling():
    # lengths by row:      0  1  2  3  4  5  6
    lengths = [5, 1, 4, 2, 3, 6, 7]
    # batch 2, window 2 -> span 4: rows 0-3 sorted by length [1, 3, 2, 0], then rows 4-6 -> [4, 5, 6]
    assert epoch_batches(lengths, 2, 2, None) == [[1, 3], [2, 0], [4, 5], [6]]
    assert epoch_batches(lengths, 2, 1, None) == [[1, 0], [3, 2], [4, 5], [6]]  # sorted within a batch only
    assert epoch_batches(lengths, 2, 0, None) == [[0, 1], [2, 3], [4, 5], [6]]  # data order


@pytest.mark.parametrize("window", [0, 1, 3])
def test_every_row_once_sorted_within_each_batch(window):
    rng_lengths = np.random.default_rng(0).integers(1, 500, size=53).tolist()
    batches = epoch_batches(rng_lengths, 8, window, np.random.default_rng([7, 0]))
    assert sorted(i for b in batches for i in b) == list(range(53))
    assert [len(b) for b in batches].count(8) == 6 and len(batches) == 7  # the short batch is kept
    if window:
        for b in batches:
            assert [rng_lengths[i] for i in b] == sorted(rng_lengths[i] for i in b)


def test_windows_group_similar_lengths_and_cut_padding():
    lengths = np.random.default_rng(1).integers(1, 1000, size=256).tolist()

    def padding(window: int) -> int:
        batches = epoch_batches(lengths, 16, window, np.random.default_rng([3, 0]))
        return sum(
            len(mb) * max(lengths[i] for i in mb) - sum(lengths[i] for i in mb)
            for b in batches
            for mb in chunks(b, 4)
        )

    assert padding(8) < padding(1) < padding(0)


def test_the_order_is_seeded_and_changes_with_the_epoch():
    lengths = list(range(40))
    a = epoch_batches(lengths, 4, 3, np.random.default_rng([1, 0]))
    assert a == epoch_batches(lengths, 4, 3, np.random.default_rng([1, 0]))
    assert a != epoch_batches(lengths, 4, 3, np.random.default_rng([1, 1]))


def test_a_resumed_loader_yields_what_an_uninterrupted_one_does():
    lengths = np.random.default_rng(2).integers(1, 50, size=30).tolist()
    straight = LengthGroupedLoader(lengths, 4, 2, seed=5)
    stream = straight.forever()
    want = [next(stream) for _ in range(20)]  # past the first epoch's 8 batches

    first = LengthGroupedLoader(lengths, 4, 2, seed=5)
    s = first.forever()
    got = [next(s) for _ in range(8)]  # the whole first epoch: the resume lands on its boundary
    state = first.state_dict()
    resumed = LengthGroupedLoader(lengths, 4, 2, seed=0)
    resumed.load_state_dict(state)
    s = resumed.forever()
    got += [next(s) for _ in range(12)]
    assert got == want


def test_right_pad_stops_at_the_longest_row():
    ids, mask = right_pad([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert ids.dtype == mask.dtype == torch.long
