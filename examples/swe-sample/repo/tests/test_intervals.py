from minilib.intervals import merge, total_length


def test_merge_overlapping():
    assert merge([(1, 3), (2, 5), (8, 9)]) == [(1, 5), (8, 9)]


def test_merge_empty():
    assert merge([]) == []


def test_total_length_disjoint():
    assert total_length([(1, 2), (5, 5)]) == 3
