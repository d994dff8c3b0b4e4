"""Interval arithmetic on closed integer ranges [start, end]."""


def merge(intervals):
    """Merges overlapping or touching closed intervals; returns them sorted.

    merge([(1, 3), (2, 5), (8, 9)]) == [(1, 5), (8, 9)]
    merge([(1, 2), (2, 4)]) == [(1, 4)]   # touching intervals merge too
    """
    out = []
    for start, end in sorted(intervals):
        if out and start < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def total_length(intervals):
    """Number of integers covered by the union of the intervals."""
    return sum(end - start + 1 for start, end in merge(intervals))
