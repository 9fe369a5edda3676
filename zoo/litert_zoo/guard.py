"""The zoo as a guard: a row that passed in the baseline results and does not pass now is a regression."""
from __future__ import annotations

from .rows import ZooRow


def regressions(baseline: dict[str, ZooRow], now: dict[str, ZooRow], names) -> list[str]:
    """Names among `names` that PASSed in `baseline` and, run again, do not PASS in `now`."""
    return [n for n in names if n in baseline and baseline[n].passed and n in now and not now[n].passed]


def describe(baseline: dict[str, ZooRow], now: dict[str, ZooRow], name: str) -> str:
    before, after = baseline[name].gpu, now[name].gpu
    why = now[name].error or (after.note if after else "") or ""
    return (f"{name}: PASS before ({before.residency if before else '-'}), now "
            f"{after.verdict if after else 'no result'}: {why[:200]}")
