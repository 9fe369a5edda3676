"""The telling line of a conversion error: what failed and where in the user's code, not the converter's trailer.

torch.export and litert-torch end their errors with generic advice ("Use tlparse to see full graph",
"For more information, run with TORCH_LOGS=...", "The error above occurred when calling torch.export.export")
-- the last line of the text is almost never the one that says what went wrong. `telling(text)` picks, in
order: a missing lowering ("Lowering not found: aten.linalg_matrix_exp.default"), an operation the converter
could not legalize ("failed to legalize operation 'mhlo.convolution'"), a data-dependent guard (the
expression and the user's source line), an unsupported element type (and the op that produced it), an op
refused as unsupported; else the first line of the error that is not generic advice. The source line is the
deepest frame of the error's own traceback text outside torch, litert-torch and this toolkit (the deepest
frame at all when there is none). No torch import: this module reads text.
"""
from __future__ import annotations

import os
import re
import sysconfig
from dataclasses import dataclass

_GENERIC = re.compile(
    r"^\s*(Use tlparse|For more information, run with|For extended logs|If you suspect the guard|"
    r"For more debugging help|For C\+\+ stack trace|The error above occurred when calling|"
    r"consider using data-dependent friendly|Set TORCH_LOGS|Set TORCHDYNAMO|Exception raised from|"
    r"While executing|Original traceback|The following call raised this error|Caused by:|"
    r"Traceback \(most recent call last\)|File \"|\(Size-like symbols|\s*$)")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')
_LIBRARY = re.compile(r"site-packages|dist-packages|/torch/|/litert_torch/|/litert_gpu_toolkit/|<frozen|^<")
_STDLIB = tuple({os.path.dirname(os.__file__), sysconfig.get_paths()["stdlib"]})


def is_library(path: str) -> bool:
    """Is `path` torch, litert-torch, this toolkit, an installed package or the standard library?"""
    return bool(_LIBRARY.search(path)) or path.startswith(_STDLIB)


_CAUSED_BY = re.compile(r"Caused by: \((\S+?):(\d+) in (\S+)\)")


@dataclass(frozen=True)
class Telling:
    kind: str                    # missing_lowering / not_legalized / data_dependent_guard / unsupported_type /
    #                              refused_op / from_log (a converter-log line) / error
    line: str                    # what failed, one line
    op: str | None = None        # the op it names, when it names one
    source: str | None = None    # 'file:line in fn: code' of the user's code (or the deepest frame)

    def __str__(self) -> str:
        return f"{self.line} (at {self.source})" if self.source else self.line


def frames(text: str) -> list[tuple[str, int, str, str]]:
    """Every 'File "f", line N, in fn' frame in `text` with its code line, in order."""
    return [(m.group(1), int(m.group(2)), m.group(3), m.group(4).strip()) for m in _FRAME.finditer(text)]


def source_of(text: str) -> str | None:
    """'file:line in fn: code' of the deepest frame outside the libraries (else the deepest frame, else None)."""
    found = frames(text)
    user = [f for f in found if not is_library(f[0])]
    if user or found:
        file, line, fn, code = (user or found)[-1]
        return f"{file}:{line} in {fn}: {code}"
    m = _CAUSED_BY.search(text)
    return f"{m.group(1)}:{m.group(2)} in {m.group(3)}" if m else None


def _first_line(text: str) -> str:
    for ln in text.strip().splitlines():
        if not _GENERIC.match(ln):
            return ln.strip()
    return text.strip().splitlines()[0].strip() if text.strip() else ""


def telling(text: str) -> Telling:
    """The telling line of an exception text or converter log (see the module docstring)."""
    text = text or ""
    source = source_of(text)
    m = re.search(r"Lowering not found: (\S+)", text)
    if m:
        return Telling("missing_lowering", f"no lowering for {m.group(1)} (Lowering not found)", m.group(1), source)
    m = re.search(r"failed to legalize operation '([^']+)'", text)
    if m:
        extra = " (a transposed convolution: lhs_dilation)" if "lhs_dilation" in text else ""
        loc = re.search(r"(\S+?):(\d+):\d+: error: failed to legalize", text)
        where = f"{loc.group(1)}:{loc.group(2)}" if loc and not source else source
        return Telling("not_legalized", f"failed to legalize operation '{m.group(1)}'{extra}", m.group(1), where)
    m = re.search(r"(Could not guard on data-dependent expression|Could not extract specialized integer from "
                  r"data-dependent expression) (.+?)(?: \(unhinted|\s*$)", text, re.M)
    if m:
        return Telling("data_dependent_guard", f"data-dependent branch on {m.group(2).strip()} "
                       "(Python control flow on a tensor's value or on a data-dependent size)", None, source)
    m = re.search(r"Unsupported ir element type: (\S+)", text)
    if m:
        producer = re.search(r"While executing .*?args = \(%(\w+)", text)
        op = producer.group(1).lstrip("_") if producer else None
        tail = f" (produced by {producer.group(1)})" if producer else ""
        return Telling("unsupported_type", f"unsupported element type {m.group(1)}{tail}", op, source)
    m = re.search(r"'([\w.]+)' op is neither a custom op nor a flex op", text)
    if m:
        return Telling("refused_op", f"'{m.group(1)}' is not a TFLite builtin op (neither a custom nor a flex op)",
                       m.group(1), source)
    m = re.search(r"^.*\b((?:op|operator|operation)\b.{0,80}\bnot supported|[Uu]nsupported op\w*:?.{0,80}|"
                  r"NotImplementedError: .{0,200})$", text, re.M)
    if m:
        return Telling("refused_op", m.group(0).strip()[:300], None, source)
    m = re.search(r"^\(converter log\) (.+)$", text, re.M)     # added by `with_log`
    if m:
        return Telling("from_log", m.group(1)[:400])
    return Telling("error", _first_line(text)[:300], None, source)


def with_log(error: str, log: str | None) -> str:
    """`error`, plus the converter log's telling line when the error alone names nothing specific."""
    if not log or telling(error).kind != "error":
        return error
    found = telling(log)
    return error if found.kind == "error" else f"{error}\n(converter log) {found}"


def telling_line(text: str) -> str:
    """`str(telling(text))`: one line, at most ~400 characters."""
    return str(telling(text))[:400]


def user_frame(exc: BaseException) -> str | None:
    """'File "f", line N, in fn\\n    code' of the deepest traceback frame of `exc` in the user's code, or None.

    (An error raised while torch.export runs the user's forward has that frame on its stack even when the
    text names only a frame of the converter or of this toolkit.)"""
    import traceback

    user = [f for f in traceback.extract_tb(exc.__traceback__) if not is_library(f.filename)]
    if not user:
        return None
    f = user[-1]
    return f'File "{f.filename}", line {f.lineno}, in {f.name}\n    {f.line or ""}'


class NotSpecialisable(Exception):
    """torch.export failed on a data-dependent guard, and again with the branches fixed to the example input."""


def error_text(e: BaseException) -> str:
    """'Type: message', plus the user's source line from the traceback when the text does not name it."""
    if isinstance(e, NotSpecialisable):
        return str(e)
    try:
        message = str(e)
    except Exception as exc:                   # noqa: BLE001 - a user's exception whose __str__ itself raises
        message = f"(its message cannot be shown: str() raised {type(exc).__name__})"
    text = f"{type(e).__name__}: {message}"
    frame = user_frame(e)
    if frame and frame.splitlines()[0] not in text:
        text += "\n(in your code) " + frame
    return text
