"""Generated blocks in Markdown files: one marker style for every table that a command writes.

A block is `<!-- BEGIN GENERATED name: scripts/gen_docs.py from SOURCE; do not edit -->`, the body, then
`<!-- END GENERATED name -->`. `scripts/gen_docs.py` and the zoo both write their blocks through `splice`,
so a block written by either one is the block the other would write.
"""
from __future__ import annotations


def begin(name: str, source: str) -> str:
    return f"<!-- BEGIN GENERATED {name}: scripts/gen_docs.py from {source}; do not edit -->"


def end(name: str) -> str:
    return f"<!-- END GENERATED {name} -->"


def splice(text: str, name: str, source: str, body: str, heading: str = "") -> str:
    """`text` with block `name` replaced by `body` (appended under `heading` when the file has no such block)."""
    head_marker, tail_marker = f"<!-- BEGIN GENERATED {name}:", end(name)
    block = f"{begin(name, source)}\n{body.rstrip()}\n{tail_marker}"
    if head_marker in text and tail_marker in text:
        head, rest = text.split(head_marker, 1)
        return head + block + rest.split(tail_marker, 1)[1]
    if not text.strip():
        return block + "\n"
    return text.rstrip("\n") + (f"\n\n{heading}" if heading else "") + f"\n\n{block}\n"
