"""What the ranks' flight recorders say of a hang, pure: their recent collectives in, one phrase out.

Why: the sampler sees where a rank *ended up*. A rank that skipped one ``all_reduce`` of a loop waits in
the ``barrier`` after it while the others wait in ``all_reduce``: the hang verdict
(:mod:`paijob.runtime.watch.hang.verdict`) names it "in a different collective". Torch's flight recorder
numbers each process group's collectives on every rank (its ``collective_seq_id``), and the slow-rank
doctor already keeps each rank's newest 256 (:mod:`paijob.runtime.watch.evidence`): at the first
number the ranks call differently, and by each rank's count of the call there, the numbers say the
rank is one collective behind. Pinned in ``tests/runtime/watch/hang/test_hang_verdict.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from paijob.common.records import rank_ranges


def _ranks(ranks: Sequence[int]) -> str:
    return ("ranks " if len(ranks) > 1 else "rank ") + rank_ranges(ranks)


def sequence_phrase(calls: Mapping[int, Sequence[Sequence[Any]]], ranks: Iterable[int]) -> str:
    """``flight recorder: collective #41 of the default group is barrier on rank 1, all_reduce on ranks
    0, 2-3; rank 1 made 40 all_reduce calls, the others 41 (it skipped one)``: where the ranks' calls
    part by their sequence numbers (per process group), and each rank's count of the call there over
    the collectives every one of them still keeps (each keeps its newest 256). "": a rank's calls are
    missing, their calls never part, or no call is most ranks' where they part (who parted is unknown).

    ``calls``: rank -> ``[group, seq, op, enqueued]`` as :mod:`paijob.runtime.watch.evidence` keeps them."""
    wanted = sorted(set(ranks))
    if not all(calls.get(rank) for rank in wanted):
        return ""
    groups: dict[str, dict[int, dict[int, str]]] = {}
    for rank in wanted:
        for call in calls[rank]:
            groups.setdefault(str(call[0]), {}).setdefault(rank, {})[int(call[1])] = str(call[2])
    for group in sorted(groups, key=lambda g: (len(g), g)):  # "0", the default group, first
        phrase = _parted(group, groups[group])
        if phrase:
            return phrase
    return ""


def _parted(group: str, seen: Mapping[int, Mapping[int, str]]) -> str:
    """:func:`sequence_phrase` for one process group (``seen``: rank -> seq -> op)."""
    common = sorted(set.intersection(*(set(ops) for ops in seen.values())))
    parted = next((seq for seq in common if len({ops[seq] for ops in seen.values()}) > 1), None)
    if parted is None:  # one rank of the group alone, or the same calls everywhere
        return ""
    by_op: dict[str, list[int]] = {}
    for rank in sorted(seen):
        by_op.setdefault(seen[rank][parted], []).append(rank)
    ordered = sorted(by_op.items(), key=lambda item: (len(item[1]), item[1][0]))  # the majority last
    if len(ordered[-1][1]) == len(ordered[-2][1]):
        return ""
    name = "the default group" if group == "0" else f"process group {group}"
    head = (f"flight recorder: collective #{parted} of {name} is "
            + ", ".join(f"{op} on {_ranks(members)}" for op, members in ordered))
    counts = {rank: Counter(ops[seq] for seq in common) for rank, ops in seen.items()}
    return head + _counted(counts, ordered, common)


def _counted(counts: Mapping[int, Counter[str]], ordered: Sequence[tuple[str, list[int]]],
             common: Sequence[int]) -> str:
    """``; rank 1 made 40 all_reduce calls, the others 41 (it skipped one)``: the call made most, of
    those where the calls part, counted on the ranks in the minority and on the others; "": the counts
    within either side differ, or not between them."""
    op = max((op for op, _members in ordered), key=lambda o: sum(c[o] for c in counts.values()))
    minority = [rank for _op, members in ordered[:-1] for rank in members]
    few = {counts[rank][op] for rank in minority}
    many = {counts[rank][op] for rank in ordered[-1][1]}
    if len(few) > 1 or len(many) > 1 or few == many:
        return ""
    mine, theirs = few.pop(), many.pop()
    span = "" if common[0] == 1 else f" in collectives #{common[0]}-#{common[-1]}"
    who = "it" if len(minority) == 1 else "they"
    amount = abs(theirs - mine)
    said = "one" if amount == 1 else str(amount)
    what = f"{who} skipped {said}" if mine < theirs else f"{who} made {said} more"
    return (f"; {_ranks(minority)} made {mine} {op} call{'' if mine == 1 else 's'}{span}, "
            f"the others {theirs} ({what})")
