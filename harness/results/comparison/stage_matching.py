"""Which stages of different runs ran at the same load: matched on MEASURED concurrency, never on targets.

Why: targets lie about load (a staggered 100 holds ~3 in flight, a closed 100 at another time scale reads 104),
and two runs' targets rarely coincide (60/120/240 against 200). A stage is matched to the reference stage
nearest to it in measured concurrency, one to one, when the two are within a relative tolerance
(`concurrency.LEVEL_TOLERANCE`, 15%: ramps step by 2x, far apart at that); the rest are listed as unmatched.
`stampede compare` matches each candidate to the baseline; `stampede report A B …` builds its side-by-side
rows with `match_runs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.results.read.concurrency import LEVEL_TOLERANCE


def relative_gap(reference: float, other: float) -> float:
    """|other - reference| / reference (reference floored at 1 in flight, so a level of 0 never divides)."""
    return abs(other - reference) / max(reference, 1.0)


@dataclass(frozen=True, slots=True)
class StagePair:
    """A reference stage and the other run's stage at the same load; either side is None when unmatched."""

    reference: int | None  # index into the reference run's stages
    other: int | None  # index into the other run's stages
    gap: float | None  # relative_gap of the pair's measured levels (None when unmatched)

    @property
    def matched(self) -> bool:
        return self.reference is not None and self.other is not None


def match_stages(
    reference: Sequence[float], other: Sequence[float], tolerance: float = LEVEL_TOLERANCE
) -> list[StagePair]:
    """Pair stages one to one by measured level: the nearest pairs first, each within `tolerance` of the reference.

    Returns every matched pair in the reference's order, then the reference's unmatched stages, then the other
    run's unmatched stages (each in its own order).
    """
    candidates = sorted(
        (relative_gap(r_level, o_level), r, o)
        for r, r_level in enumerate(reference)
        for o, o_level in enumerate(other)
        if relative_gap(r_level, o_level) <= tolerance
    )
    taken_r: dict[int, tuple[int, float]] = {}
    taken_o: set[int] = set()
    for gap, r, o in candidates:  # greedy, nearest first: stages are few (a handful per run)
        if r in taken_r or o in taken_o:
            continue
        taken_r[r] = (o, gap)
        taken_o.add(o)
    pairs = [StagePair(r, taken_r[r][0], taken_r[r][1]) for r in range(len(reference)) if r in taken_r]
    pairs += [StagePair(r, None, None) for r in range(len(reference)) if r not in taken_r]
    pairs += [StagePair(None, o, None) for o in range(len(other)) if o not in taken_o]
    return pairs


def match_runs(levels: Sequence[Sequence[float]], tolerance: float = LEVEL_TOLERANCE) -> list[list[int | None]]:
    """Rows of stages at one load across several runs: row[k] is run k's stage index there, or None.

    The first run's stages are the first rows; each further run's stages are matched (as `match_stages`) to the
    rows it has no stage in yet, by each row's first level; its unmatched stages open new rows. Rows come out
    sorted by level.
    """
    rows: list[list[int | None]] = []
    row_level: list[float] = []
    for k, run_levels in enumerate(levels):
        open_rows = [i for i, row in enumerate(rows) if row[k] is None]
        pairs = match_stages([row_level[i] for i in open_rows], run_levels, tolerance)
        for pair in pairs:
            if pair.matched:
                rows[open_rows[pair.reference]][k] = pair.other  # type: ignore[index]
            elif pair.other is not None:
                row: list[int | None] = [None] * len(levels)
                row[k] = pair.other
                rows.append(row)
                row_level.append(run_levels[pair.other])
    order = sorted(range(len(rows)), key=lambda i: row_level[i])
    return [rows[i] for i in order]
