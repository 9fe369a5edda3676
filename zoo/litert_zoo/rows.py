"""The zoo's results: one row per model, and the results file (read leniently, written atomically)."""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from litert_gpu_toolkit.core.atomic_file import write_text_atomic


@dataclass
class RunSummary:
    """One conversion of one model (plain or with rewrites)."""
    verdict: str
    residency: str = ""
    corr_fp16: float | None = None        # strict GPU fp16 vs torch (None when it did not run GPU-only)
    corr_fp32: float | None = None        # strict GPU fp32 (enforce_f32) vs torch: tells fp16 precision from a GPU bug
    rewrites: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0
    attempts: list[str] = field(default_factory=list)   # convert_for_gpu's conversions tried
    weights: str = ""                     # --weights MODE: the quantize line (which weights, which stayed float, why)


@dataclass
class ZooRow:
    name: str
    domain: str
    params: int = 0
    plain: RunSummary | None = None
    gpu: RunSummary | None = None         # convert_for_gpu with defaults
    error: str = ""                       # the row could not be produced (build failure, crash, timeout)
    seconds: float = 0.0
    library: str = ""                     # transformers / timm / torchvision / diffusers / ultralytics
    toolkit_commit: str = ""              # the toolkit's commit this row ran on ("" = the run's, in environment)
    input_share: float | None = None      # how much of the output the input drives (convert.sensitivity)
    runtimes: dict = field(default_factory=dict)   # --also-runtime: version -> the same file checked under it

    @property
    def passed(self) -> bool:
        return (self.gpu is not None and self.gpu.verdict == "PASS"
                and all(r.get("verdict") == "PASS" for r in self.runtimes.values()))


def _known(cls, d: dict) -> dict:
    """Only the fields `cls` has (a results file from another version of this module still loads)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def row_from_dict(d: dict) -> ZooRow:
    row = ZooRow(**_known(ZooRow, {k: v for k, v in d.items() if k not in ("plain", "gpu")}))
    row.plain = RunSummary(**_known(RunSummary, d["plain"])) if d.get("plain") else None
    row.gpu = RunSummary(**_known(RunSummary, d["gpu"])) if d.get("gpu") else None
    return row


def load_results(path: Path) -> dict[str, ZooRow]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {d["name"]: row_from_dict(d) for d in data.get("rows", [])}


_CHECKOUT = str(Path(__file__).resolve().parents[2]) + "/"
_PATHS = ((re.compile(r"/[^\s:'\"()]*/site-packages/"), "site-packages/"),      # an installed library's file
          (re.compile(r"/[^\s:'\"()]*/(zoo/litert_zoo|utilities/litert_gpu_toolkit)/"), r"\1/"),   # any checkout
          (re.compile(r"/tmp/[^\s:'\"()]+"), "<work file>"))


def scrub(text: str) -> str:
    """A note without this machine's paths: checkout, site-packages and temporary paths made relative / named."""
    for pattern, repl in _PATHS:
        text = pattern.sub(repl, text)
    return text.replace(_CHECKOUT, "")


def _scrubbed(d: dict) -> dict:
    for key in ("note", "error"):
        if isinstance(d.get(key), str):
            d[key] = scrub(d[key])
    for key in ("plain", "gpu"):
        if isinstance(d.get(key), dict):
            _scrubbed(d[key])
    return d


def save_results(path: Path, rows: dict[str, ZooRow], environment: dict, order: list[str] = ()) -> None:
    """Atomic write (temp file + rename) so an interrupted run never leaves a half file; rows in `order` first.
    Notes and errors are scrubbed of this machine's paths (results are committed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    order = [n for n in order if n in rows] + [n for n in rows if n not in order]
    data = {"environment": environment, "rows": [_scrubbed(asdict(rows[n])) for n in order]}
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")
