"""Bad input and faults, the way a hostile but ordinary user meets them: every case must end cleanly.

Clean = the documented exit status (`litert_gpu_toolkit.cli.EXIT_STATUS`), a message that says what is
wrong, no Python traceback, and nothing left behind (no runtime child process, no temporary folder).

`CASES` is the case list, one row per case, grouped by class (the numbers of issue 17):
  1 worker lifetime      the parent dies or is interrupted while a runtime child works
  4 corrupt model        damaged flatbuffers (hand-made damage + a seeded mutation fuzz)
  5 files                unreadable / unwritable paths
  6 arguments            values that make no sense
  7 commands             `phone run` on a bad model / npz, `bisect` with a bad builder
  8 minor                tiny / looping / huge files, inf inputs, a worker killed from outside
Every case runs the real CLI (or API) in a child process, so the same table can be counted against
any version of the toolkit:

    PYTHONPATH=<toolkit>/utilities python tests/toolkit/test_cli_faults.py      # prints the table and the count

Measured (llvmpipe (software Vulkan), ai-edge-litert 2.3.0, for the three cases that need a GPU run):
  before, the toolkit at commit 9c740b8 (`git archive 9c740b8 utilities | tar -x -C BASE`, then
  PYTHONPATH=BASE/utilities): 1 of 51 clean by the table's checks; 9 more miss only the expected words,
  and reading their messages 5 of those are clean (op input index, negative dim, reference shape, no such
  script, broken link) while 4 are not (a huge shape read without complaint, a directory called "no such
  .npz file", --timeout 0 blamed on the model as a hang, an outside kill blamed on the model): 6 of 51.
  after (this file's commit): 51 of 51; a 52nd case (bisect on a model that does not export) was
  added later and is clean too.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
TEST_FAULT = "LITERT_GPU_TOOLKIT_TEST_FAULT"  # the runtime child's documented test-only fault hook


# ------------------------------------------------------------------------------------------ fixtures (files)

def _edited_add_model(edit) -> bytes:
    """The one-op probe model (out = x + y, [1, 8, 8, 4]) after `edit(ModelT)`."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    from litert_gpu_toolkit.tiny_models import add_model_bytes

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(add_model_bytes(), 0))
    edit(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _custom_op_not_utf8(m):
    m.operatorCodes[0].builtinCode, m.operatorCodes[0].deprecatedBuiltinCode = 32, 32  # CUSTOM
    m.operatorCodes[0].customCode = b"\xff\xfeFFT"


def _signature_tensor_out_of_range(m):
    m.signatureDefs[0].inputs[0].tensorIndex = 99


def _signature_key_not_utf8(m):
    m.signatureDefs[0].signatureKey = b"serving\xff"


def _huge_shape(m):
    m.subgraphs[0].tensors[0].shape = [2 ** 31 - 1, 2 ** 31 - 1, 8, 4]


def _op_input_out_of_range(m):
    m.subgraphs[0].operators[0].inputs = [0, 7]


def _negative_dim(m):
    m.subgraphs[0].tensors[0].shape = [1, -8, 8, 4]


def make_files(root: Path) -> dict[str, Path]:
    """Every file the cases use, under `root`."""
    from litert_gpu_toolkit.tiny_models import add_model_bytes

    f: dict[str, Path] = {}

    def put(name: str, data: bytes) -> Path:
        f[name] = root / name
        f[name].write_bytes(data)
        return f[name]

    put("add.tflite", add_model_bytes())
    put("notes.tflite", b"this is a README, not a model\n" * 4)
    put("four.tflite", b"\x1c\x00\x00\x00")
    for edit in (_custom_op_not_utf8, _signature_tensor_out_of_range, _signature_key_not_utf8, _huge_shape,
                 _op_input_out_of_range, _negative_dim):
        put(f"{edit.__name__.lstrip('_')}.tflite", _edited_add_model(edit))
    loop = root / "loop.tflite"
    loop.symlink_to("loop.tflite")
    f["loop.tflite"] = loop
    broken = root / "broken.tflite"
    broken.symlink_to("nowhere.tflite")
    f["broken.tflite"] = broken
    big = root / "big.tflite"  # 3 GB, sparse: a file that is not a model must cost its header, not 3 GB of RAM
    with open(big, "wb") as fh:
        fh.write(b"<html>this download failed</html>\n")
        fh.truncate(3 * 10 ** 9)
    f["big.tflite"] = big
    x = np.ones((1, 8, 8, 4), np.float32)
    np.savez(root / "empty.npz")
    f["empty.npz"] = root / "empty.npz"
    np.savez(root / "wrong_shape_ref.npz", out=np.zeros((64, 4), np.float32))  # right size, wrong shape
    f["wrong_shape_ref.npz"] = root / "wrong_shape_ref.npz"
    np.savez(root / "inf.npz", x=np.full_like(x, np.inf), y=x)
    f["inf.npz"] = root / "inf.npz"
    f["bad.npz"] = put("bad.npz", b"PK\x03\x04 not really a zip archive")
    f["ok.json"] = root / "ok.json"
    (root / "a_file").write_text("x")
    f["a_file"] = root / "a_file"
    scripts = {
        "builder_syntax.py": "def build(:\n    pass\n",
        "builder_raises.py": "def build():\n    raise RuntimeError('weights not found')\n",
        "builder_wrong.py": "def build():\n    return 42\n",
        "builder_unexportable.py": textwrap.dedent("""
            import torch
            class Branchy(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])
                def forward(self, x):
                    x = self.blocks[0](x)
                    if x.sum() > 0:  # data-dependent branch: torch.export refuses it
                        x = x * 2
                    return self.blocks[1](x)
            def build():
                return Branchy(), (torch.ones(1, 4),)
        """),
        "builder_ok.py": textwrap.dedent("""
            import torch
            def build():
                return torch.nn.Sequential(torch.nn.Linear(4, 4)), (torch.zeros(1, 4),)
        """),
    }
    for name, text in scripts.items():
        put(name, text.encode())
    return f


# ------------------------------------------------------------------------------------------------ cases

@dataclass
class Case:
    cls: int                       # issue 17's class number
    name: str
    argv: list[str]                # arguments of `python -m litert_gpu_toolkit` ({name} = a file from make_files)
    code: int                      # the documented exit status
    says: str = ""                 # the message must contain this (case-insensitive)
    absent: str = ""               # ... and must not contain this
    api: str | None = None         # run this Python source instead of the CLI
    kind: str = "cli"              # "cli" | "api" | "signal:<SIG>" (kill the parent mid-run) | "kill_worker"
    env: dict = field(default_factory=dict)
    needs_gpu: bool = False


def _check(*extra):
    return ["check", "{add.tflite}", "--fp16-only", "--timeout", "60", *extra]


_PERMISSION_API = """
import builtins, io, sys
real_open = io.open
def guarded(file, *a, **k):
    if str(file).endswith('add.tflite'):
        raise PermissionError(13, 'Permission denied', str(file))
    return real_open(file, *a, **k)
builtins.open = io.open = guarded  # TEST DOUBLE: the file is unreadable (root ignores chmod 000)
from litert_gpu_toolkit.__main__ import main
sys.exit(main(['check', sys.argv[1]]))
"""

_PARENT = """
import sys
import numpy as np
from litert_gpu_toolkit.runtime import compile_and_run
from litert_gpu_toolkit.tiny_models import add_model_bytes
x = np.ones((1, 8, 8, 4), np.float32)
compile_and_run(add_model_bytes(), {"serving_default": {"x": x, "y": x}}, accelerator="cpu", timeout=120)
"""

CASES = [
    # 1. worker lifetime: the parent dies (or is interrupted) while its runtime child hangs
    Case(1, "parent SIGKILLed mid-compile", [], -9, kind="signal:SIGKILL", env={TEST_FAULT: "hang"}),
    Case(1, "parent SIGTERMed mid-compile", [], -15, kind="signal:SIGTERM", env={TEST_FAULT: "hang"}),
    Case(1, "Ctrl-C (SIGINT) in the parent mid-compile", [], -2, "KeyboardInterrupt", kind="signal:SIGINT",
         env={TEST_FAULT: "hang"}),
    Case(1, "Ctrl-C during `check` (CLI)", _check(), 130, "interrupted", kind="signal:SIGINT",
         env={TEST_FAULT: "hang"}),
    # 4. corrupt flatbuffers
    *[Case(4, f"{cmd}: {name}", [cmd, "{" + name + ".tflite}"], 2, says)
      for cmd in ("check", "lint")
      for name, says in (("custom_op_not_utf8", "not UTF-8"), ("signature_tensor_out_of_range", "names tensor 99"),
                         ("signature_key_not_utf8", "not UTF-8"), ("huge_shape", "beyond any real model"),
                         ("op_input_out_of_range", "input tensor(s) [7]"), ("negative_dim", "negative dimension"))],
    Case(4, "API read_model_info: huge shape", [], 0, "InvalidModelError", kind="api",
         api="import sys\nfrom litert_gpu_toolkit import read_model_info, InvalidModelError\n"
             "try:\n    read_model_info(sys.argv[1].replace('add', 'huge_shape'))\n"
             "except InvalidModelError as e:\n    print('InvalidModelError', e)\n"),
    # 5. files
    Case(5, "check: unreadable file (PermissionError)", [], 2, "permission denied", kind="api", api=_PERMISSION_API),
    Case(5, "check: --json into a folder that does not exist", _check("--json", "{a_file}/r.json"), 2,
         "does not exist"),
    Case(5, "check: --json is a directory", _check("--json", "{root}"), 2, "is a directory"),
    Case(5, "check: --json on a full disk, PASS keeps exit 0", _check("--json", "/dev/full"), 0, "cannot write",
         needs_gpu=True),
    Case(5, "lint: --json into a folder that does not exist", ["lint", "{add.tflite}", "--json", "{a_file}/x.json"],
         2, "does not exist"),
    Case(5, "check: --inputs is a directory", _check("--inputs", "{root}"), 2, "directory"),
    # 6. arguments
    *[Case(6, f"check {' '.join(a)}", _check(*a), 2, says) for a, says in (
        (("--min-corr", "0"), "(0, 1]"), (("--min-corr", "1.5"), "(0, 1]"), (("--min-corr", "nan"), "finite"),
        (("--rtol", "-1"), ">= 0"), (("--atol", "-0.5"), ">= 0"), (("--timeout", "0"), "> 0"),
        (("--timeout", "nan"), "finite"), (("--seed", "-1"), ">= 0"), (("--int-range", "x=0:5"), "integer inputs"),
        (("--inputs", "{empty.npz}"), "no arrays"), (("--inputs", "{bad.npz}"), "not a readable .npz"),
        (("--reference", "{wrong_shape_ref.npz}"), "not the output's shape"))],
    Case(6, "bisect --min-corr 2", ["bisect", "{builder_ok.py}:build", "--min-corr", "2"], 2, "(0, 1]"),
    # 7. commands
    Case(7, "phone run: not a model", ["phone", "run", "{notes.tflite}"], 2, "text file"),
    Case(7, "phone run: bad npz", ["phone", "run", "{add.tflite}", "--inputs", "{bad.npz}"], 2, "not a readable .npz"),
    Case(7, "phone run: unknown phone", ["phone", "run", "{add.tflite}", "--device", "nokia3310"], 2, "unknown phone"),
    Case(7, "bisect: no such function", ["bisect", "{builder_ok.py}:nope"], 2, "no function 'nope'"),
    Case(7, "bisect: syntax error", ["bisect", "{builder_syntax.py}:build"], 2, "syntax error"),
    Case(7, "bisect: the builder raises", ["bisect", "{builder_raises.py}:build"], 2, "weights not found"),
    Case(7, "bisect: the builder returns no model", ["bisect", "{builder_wrong.py}:build"], 2, "(model, example"),
    Case(7, "bisect: no such script", ["bisect", "{root}/none.py:build"], 2, "no such script"),
    Case(7, "bisect: no such boundary", ["bisect", "{builder_ok.py}:build", "--boundaries", "enc.9"], 2,
         "no such module"),
    Case(7, "bisect: the model does not export", ["bisect", "{builder_unexportable.py}:build"], 1,
         "does not convert"),
    # 8. minor
    Case(8, "check: a 4-byte file", ["check", "{four.tflite}"], 2, "too short", absent="text file"),
    Case(8, "check: a symlink loop", ["check", "{loop.tflite}"], 2, "loop", absent="no such file"),
    Case(8, "check: a broken symlink", ["check", "{broken.tflite}"], 2, "broken symbolic link"),
    Case(8, "check: 3 GB non-model file in 1.5 GB of memory", ["check", "{big.tflite}"], 2, "flatbuffer",
         kind="cli:memlimit"),
    Case(8, "check: inf inputs are no 'silent CPU fallback'", _check("--inputs", "{inf.npz}"), 0,
         absent="suspected silent CPU fallback", needs_gpu=True),
    Case(8, "check: worker killed from outside (OOM)", _check(), 1, "not a model fault", kind="kill_worker",
         env={TEST_FAULT: "hang@gpu"}, needs_gpu=True),
]


# ----------------------------------------------------------------------------------------------- runner

@dataclass
class Outcome:
    clean: bool
    code: int | None
    why: str
    text: str
    clean_but_wording: bool = False   # clean except that the message lacks the expected words


def _workers(tmpdir: Path) -> list[int]:
    """Runtime child processes (any toolkit version) whose work folder is under `tmpdir`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"litert_gpu_toolkit._worker" in cmd and any(str(tmpdir).encode() in c for c in cmd):
                pids.append(int(proc.name))
    return sorted(pids)


def _hanging(pid: int) -> bool:
    """True when worker `pid` has reached the injected hang (its work folder's stderr says so)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        work = Path(cmd[cmd.index(b"litert_gpu_toolkit._worker") + 1].decode())
        return "injecting a hang" in (work / "stderr.txt").read_text(errors="replace")
    except (OSError, ValueError, IndexError):
        return False


def _limit_memory():
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))


def run_case(case: Case, files: dict[str, Path], root: Path) -> Outcome:
    """Run one case in a child process; judge it clean or not."""
    tmpdir = Path(tempfile.mkdtemp(prefix="faults-tmp-", dir=root))
    env = {**os.environ, "TMPDIR": str(tmpdir), **case.env}
    fmt = {**{k: str(v) for k, v in files.items()}, "root": str(root)}
    argv = []
    for a in case.argv:
        for key, value in fmt.items():
            a = a.replace("{" + key + "}", value)
        argv.append(a)
    if case.kind == "api":
        cmd = [sys.executable, "-c", case.api, str(files["add.tflite"])]
    elif case.kind.startswith("signal") and not argv:
        cmd = [sys.executable, "-c", _PARENT]
    else:
        cmd = [sys.executable, "-m", "litert_gpu_toolkit", *argv]
    proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_limit_memory if case.kind == "cli:memlimit" else None)
    if case.kind == "kill_worker":
        # kill the worker that is inside the injected hang, not whichever worker happens to be newest: under
        # load the CPU stage's worker may still be listed when the GPU one has not started yet
        deadline = time.time() + 120
        hung: list[int] = []
        while time.time() < deadline and not hung:
            hung = [pid for pid in _workers(tmpdir) if _hanging(pid)]
            time.sleep(0.1)
        for pid in hung:
            os.kill(pid, signal.SIGKILL)
    elif case.kind.startswith("signal"):
        deadline = time.time() + 60
        while time.time() < deadline and not _workers(tmpdir):
            time.sleep(0.1)
        time.sleep(1.0)  # the child is up and inside the (hanging) runtime
        proc.send_signal(getattr(signal, case.kind.split(":")[1]))
    try:
        text, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        text, _ = proc.communicate()
        return Outcome(False, None, "did not finish in 300 s", text)
    for _ in range(50):  # up to 5 s for children to go and folders to be removed
        if not _workers(tmpdir) and not any(tmpdir.iterdir()):
            break
        time.sleep(0.1)
    left = _workers(tmpdir)
    for pid in left:  # never leave them running, whatever the verdict
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    low = text.lower()
    why = []
    if proc.returncode != case.code:
        why.append(f"exit {proc.returncode}, documented {case.code}")
    if "Traceback" in text and case.kind != "signal:SIGINT" or (case.argv and "Traceback" in text):
        why.append("traceback")
    if case.says and case.says.lower() not in low:
        why.append(f"message lacks {case.says!r}")
    if case.absent and case.absent.lower() in low:
        why.append(f"message says {case.absent!r}")
    if left:
        why.append(f"{len(left)} runtime process(es) left running")
    # torch's own compile cache (torchinductor_<user>) is torch's, kept on purpose for later runs
    leftovers = [p for p in tmpdir.iterdir() if not p.name.startswith("torchinductor_")]
    if leftovers:
        why.append(f"left behind {[p.name for p in leftovers]}")
    wording_only = bool(why) and all(w.startswith("message lacks") for w in why)
    return Outcome(not why, proc.returncode, "; ".join(why), text, wording_only)


def _gpu_available() -> bool:
    from litert_gpu_toolkit.runtime import probe_gpu

    return probe_gpu(timeout=120).ok


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    return root, make_files(root)


@pytest.mark.parametrize("case", [c for c in CASES if not c.needs_gpu], ids=lambda c: f"{c.cls}-{c.name}")
def test_fault_case_is_clean(case, files):
    root, paths = files
    out = run_case(case, paths, root)
    assert out.clean, f"{out.why}\n{out.text[-1500:]}"


@pytest.mark.parametrize("case", [c for c in CASES if c.needs_gpu], ids=lambda c: f"{c.cls}-{c.name}")
def test_fault_case_on_the_gpu_is_clean(case, files, gpu):
    root, paths = files
    out = run_case(case, paths, root)
    assert out.clean, f"{out.why}\n{out.text[-1500:]}"


# ----------------------------------------------------------------------------- 4. seeded mutation fuzz

def _mutants(n: int, seed: int = 17):
    from litert_gpu_toolkit.tiny_models import add_model_bytes

    base = add_model_bytes()
    rng = random.Random(seed)
    for _ in range(n):
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        yield bytes(data)


def _read_and_use(data: bytes, counts: dict) -> None:
    """Read a (damaged) model and use it as `check` / `lint` would: only the toolkit's own errors may come out."""
    from litert_gpu_toolkit.diagnosis import _static
    from litert_gpu_toolkit.inputs import InputError, make_inputs
    from litert_gpu_toolkit.lint import lint_for_mobile
    from litert_gpu_toolkit.model_info import InvalidModelError, read_model_info

    try:
        info = read_model_info(data)
    except InvalidModelError:
        counts["invalid"] += 1
        return
    counts["read"] += 1
    _static(info)
    lint_for_mobile(info)
    try:
        make_inputs(info)
    except InputError:
        counts["input_error"] += 1


def test_mutated_flatbuffers_raise_only_invalid_model_error(monkeypatch):
    """600 seeded mutants of the probe model (1-4 bytes changed): reading, the static report, the lint and
    the input generation either work or raise the toolkit's own errors, never IndexError / MemoryError / ..."""
    from litert_gpu_toolkit import inputs as inputs_mod

    monkeypatch.setattr(inputs_mod, "MAX_INPUT_BYTES", 1 << 24)  # keep the fuzz fast: 16 MiB of random inputs
    counts = {"read": 0, "invalid": 0, "input_error": 0}
    for data in _mutants(600):
        _read_and_use(data, counts)
    assert counts["invalid"] > 300 and counts["read"] > 20, counts  # the fuzz reaches both paths


def test_structural_mutants_raise_only_the_toolkits_errors(monkeypatch):
    """600 seeded edits at the schema level (tensor indices of ops, graphs and signatures, shapes, shape
    signatures, types, operator codes) on four small graphs: the same contract as the byte-level fuzz."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    from litert_gpu_toolkit import inputs as inputs_mod
    from litert_gpu_toolkit.tiny_models import add_model_bytes, single_op_model_bytes

    monkeypatch.setattr(inputs_mod, "MAX_INPUT_BYTES", 1 << 24)
    ones = np.ones
    bases = [add_model_bytes(),
             single_op_model_bytes("GATHER", [("table", (5, 7), ones((5, 7), np.float32)), ("ids", (3,), None)],
                                   [("out", (3, 7))]),
             single_op_model_bytes("CONV_2D", [("x", (1, 8, 8, 4), None), ("w", (8, 3, 3, 2), ones((8, 3, 3, 2),
                                                                                              np.float32))],
                                   [("out", (1, 6, 6, 8))]),
             single_op_model_bytes("ADD", [("x", (1, 2, 3, 4, 5), None), ("y", (1, 2, 3, 4, 5), None)],
                                   [("out", (1, 2, 3, 4, 5))])]
    rng = random.Random(1)
    values = [-2, -1, 0, 1, 2, 3, 7, 99, 2 ** 31 - 1]

    def mutate(m):
        sg, what = m.subgraphs[0], rng.randrange(8)
        pick = lambda k: [rng.choice(values) for _ in range(k)]
        if what == 0:
            sg.operators[0].inputs = pick(rng.randint(0, 3))
        elif what == 1:
            sg.operators[0].outputs = pick(rng.randint(0, 2))
        elif what == 2:
            rng.choice(sg.tensors).shape = pick(rng.randint(0, 6))
        elif what == 3:
            rng.choice(sg.tensors).type = rng.choice([0, 2, 5, 9, 13, 16, 17, 40, 99])
        elif what == 4:
            sg.inputs = pick(1)
        elif what == 5 and m.signatureDefs[0].inputs:
            m.signatureDefs[0].inputs[0].tensorIndex = rng.choice(values)
        elif what == 6:
            rng.choice(sg.tensors).shapeSignature = pick(rng.randint(0, 5))
        elif what == 7:
            sg.operators[0].opcodeIndex = rng.choice(values)

    counts = {"read": 0, "invalid": 0, "input_error": 0}
    for _ in range(600):
        m = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(rng.choice(bases), 0))
        for _ in range(rng.randint(1, 3)):
            mutate(m)
        builder = flatbuffers.Builder(1024)
        try:
            builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
        except Exception:  # noqa: BLE001 - flatbuffers cannot even write some of these (negative uint32)
            continue
        _read_and_use(bytes(builder.Output()), counts)
    assert counts["invalid"] > 200 and counts["read"] > 100, counts


def test_mutants_through_the_cli_exit_2_without_traceback(capsys):
    """The check and lint commands (in process, no runtime child) on the first 40 mutants the reader refuses."""
    from litert_gpu_toolkit.__main__ import main
    from litert_gpu_toolkit.model_info import InvalidModelError, read_model_info

    refused = []
    for data in _mutants(400, seed=18):
        try:
            read_model_info(data)
        except InvalidModelError:
            refused.append(data)
        if len(refused) == 40:
            break
    with tempfile.TemporaryDirectory() as tmp:
        for i, data in enumerate(refused):
            path = Path(tmp) / f"m{i}.tflite"
            path.write_bytes(data)
            assert main(["check", str(path)]) == 2
            assert main(["lint", str(path)]) == 2
    out = capsys.readouterr()
    assert "INVALID_MODEL" in out.out and "Traceback" not in out.out + out.err


# --------------------------------------------------------------------------------- 1. in-process checks

def test_api_keyboard_interrupt_kills_the_worker_and_removes_its_folder(monkeypatch, tmp_path):
    """compile_and_run interrupted (Ctrl-C arrives while it waits): the child group is killed at once."""
    from litert_gpu_toolkit import runtime
    from litert_gpu_toolkit.tiny_models import add_model_bytes

    monkeypatch.setenv(TEST_FAULT, "hang")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    real_wait = subprocess.Popen.wait

    def interrupted_wait(self, timeout=None):
        if timeout is not None and timeout > 5:  # the call under test, not the cleanup's wait
            deadline = time.time() + 30
            while not _workers(tmp_path) and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            raise KeyboardInterrupt
        return real_wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", interrupted_wait)
    x = np.ones((1, 8, 8, 4), np.float32)
    with pytest.raises(KeyboardInterrupt):
        runtime.compile_and_run(add_model_bytes(), {"serving_default": {"x": x, "y": x}}, accelerator="cpu",
                                timeout=60)
    assert not _workers(tmp_path)
    assert not list(tmp_path.iterdir())


def test_worker_killed_from_outside_is_not_blamed_on_the_model(monkeypatch):
    from litert_gpu_toolkit.runtime import STATUS_KILLED, compile_and_run
    from litert_gpu_toolkit.tiny_models import add_model_bytes

    monkeypatch.setenv(TEST_FAULT, "oom@cpu")  # the child SIGKILLs itself, as the OOM killer would
    x = np.ones((1, 8, 8, 4), np.float32)
    r = compile_and_run(add_model_bytes(), {"serving_default": {"x": x, "y": x}}, accelerator="cpu", timeout=60)
    assert r.status == STATUS_KILLED and r.returncode == -9
    assert "killed from outside (signal 9 SIGKILL" in r.error and "not a model fault" in r.error


def test_unwritable_output_paths_are_named_before_any_work(tmp_path, monkeypatch):
    """A read-only current directory cannot be made as root (root writes anyway), so os.access is the
    TEST DOUBLE here: it says no for the folder, as it would for an ordinary user in a read-only cwd."""
    from litert_gpu_toolkit.arguments import output_path_problem

    monkeypatch.chdir(tmp_path)
    assert output_path_problem("report.json") is None
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    assert "current directory is read-only" in output_path_problem("report.json")
    assert "is not writable" in output_path_problem(str(tmp_path / "r.json"))


def test_gpu_info_refuses_a_bad_timeout(capsys):
    from litert_gpu_toolkit.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["gpu-info", "--timeout", "-3"])
    assert exc.value.code == 2 and "must be a number of seconds > 0" in capsys.readouterr().err


def test_help_lists_the_exit_statuses():
    from litert_gpu_toolkit.cli import EXIT_STATUS, build_parser

    text = build_parser().format_help()
    assert EXIT_STATUS.splitlines()[0] in text and "130" in text and "3 NO_GPU" in text
    readme = (HERE.parents[1] / "utilities" / "litert_gpu_toolkit" / "README.md").read_text()
    assert EXIT_STATUS in readme, "the README's exit-status block must be EXIT_STATUS verbatim"


# ------------------------------------------------------------------------------------------- the count

def main() -> int:
    """Run every case against the toolkit on PYTHONPATH and print the table and the count."""
    gpu = _gpu_available()
    clean = total = wording = 0
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        root = Path(tmp)
        files = make_files(root)
        print(f"{'class':5s} {'clean':5s} case  [why not]")
        for case in CASES:
            if case.needs_gpu and not gpu:
                print(f"{case.cls:<5d} {'-':5s} {case.name}  [needs a GPU: not run]")
                continue
            out = run_case(case, files, root)
            total += 1
            clean += out.clean
            wording += out.clean_but_wording
            print(
                f"{case.cls:<5d} {'yes' if out.clean else 'NO':5s} {case.name}"
                + ("" if out.clean else f"  [{out.why}]"),
                flush=True,
            )
    print(
        f"clean: {clean} of {total}; {wording} more are clean except for the expected words in the message "
        "(judge those by reading the message)"
    )
    return 0 if clean == total else 1


if __name__ == "__main__":
    sys.exit(main())
