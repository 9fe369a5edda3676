"""Bad input and faults, the way a hostile but ordinary user meets them: every case must end cleanly.

Clean = the documented exit status (`litert_gpu_toolkit.cli.main.EXIT_STATUS`), a message that says what is
wrong, no Python traceback, nothing left behind (no runtime child process, no temporary folder), and --
for a case with its own folder (`make_own`) -- every file that was in it unchanged (nothing destroyed).

`CASES` is the case list, one row per case, grouped by class (issue 17's numbers 1-8, issue 24's 9-15):
  1 worker lifetime      the parent dies or is interrupted while a runtime child works
  4 corrupt model        damaged flatbuffers (hand-made damage + a seeded mutation fuzz)
  5 files                unreadable / unwritable paths
  6 arguments            values that make no sense
  7 commands             `phone run` on a bad model / npz, `bisect` with a bad builder
  8 minor                tiny / looping / huge files, inf inputs, a worker killed from outside
  9 data loss            --json onto an input of the same command (any spelling: ./, .., a symbolic or a
                         hard link), through a link to another file, a disk that fills mid-write
  10 special files       a FIFO, /dev/zero or a folder as model, --inputs, --reference, script or --json
  11 dtypes              arrays of another dtype than the signature's (never cast), CLI and API
  12 blame               NaN inputs, NaN / all-inf references, timeouts under the 10 s floor
  13 exit statuses       bad arguments of zoo, bisect (a builder's sys.exit), check, lint; every --help
  14 API                 convert_for_gpu: dict outputs, a forward that raises anything, train/eval flags
  15 races               planted links at the output and try names, the results lock, phone manifest names
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
Issue 24 (142 cases, every one run; the nine that need a GPU on llvmpipe, as above):
  before, the toolkit and zoo at 18d94d0 with this file: 76 of 142 clean by the table's checks (classes
  1-8: 52 of 52; 9-15: 24 of 90); 7 more miss only the expected words, and reading them 2 are clean
  (/dev/zero as --inputs / --reference: "not a readable .npz") while 5 are not (a FIFO script called "no
  such script", float64 phone inputs never checked, three sub-second timeouts blamed on the model as a
  CPU hang): 78 of 142. after (this file's commit): 142 of 142.
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
ZOO_RUN = HERE.parents[1] / "zoo" / "run.py"
TEST_FAULT = "LITERT_GPU_TOOLKIT_TEST_FAULT"  # the runtime child's documented test-only fault hook


# ------------------------------------------------------------------------------------------ fixtures (files)

def _edited_add_model(edit) -> bytes:
    """The one-op probe model (out = x + y, [1, 8, 8, 4]) after `edit(ModelT)`."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes

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
    from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes

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
    _more_files(root, f, put)
    return f


def _gather_model_bytes() -> bytes:
    """out = GATHER(table [5, 7] float32, ids [3] int32): a model with an integer input."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    from litert_gpu_toolkit.runtime.tiny_models import single_op_model_bytes

    data = single_op_model_bytes("GATHER", [("table", (5, 7), np.ones((5, 7), np.float32)), ("ids", (3,), None)],
                                 [("out", (3, 7))])
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(data, 0))
    model.subgraphs[0].tensors[1].type = schema.TensorType.INT32
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _odd_names(m):
    """Input and output names a whitespace-split manifest line would misread, and a path-like one."""
    m.signatureDefs[0].inputs[0].name = "x y"
    m.signatureDefs[0].inputs[1].name = "../in\n1"
    m.signatureDefs[0].outputs[0].name = "o u/t"


def _more_files(root: Path, f: dict, put) -> None:
    """The files of issue 24's classes: special files, arrays of every wrong dtype, non-finite arrays."""
    ones = np.ones((1, 8, 8, 4), np.float32)
    os.mkfifo(root / "fifo")                      # a FIFO nobody writes to: opening it to read never returns
    f["fifo"] = root / "fifo"
    put("gather.tflite", _gather_model_bytes())
    put("odd_names.tflite", _edited_add_model(_odd_names))

    def npz(name: str, **arrays) -> None:
        np.savez(root / name, **arrays)
        f[name] = root / name

    npz("ok.npz", x=ones, y=ones)
    for dt in ("int64", "uint8", "float64", "float16", "bool", "int32"):
        npz(f"x_{dt}.npz", x=ones.astype(dt), y=ones)
    for dt in ("int64", "float32", "uint8", "bool"):
        npz(f"ids_{dt}.npz", ids=np.array([0, 1, 4]).astype(dt))
    nan_one = ones.copy()
    nan_one[0, 0, 0, 0] = np.nan
    npz("x_nan.npz", x=nan_one, y=ones)
    npz("x_allnan.npz", x=np.full_like(ones, np.nan), y=ones)
    npz("ref_allnan.npz", out=np.full_like(ones, np.nan))
    npz("ref_somenan.npz", out=np.where(np.arange(ones.size).reshape(ones.shape) % 4 == 0, np.nan, 2 * ones))
    npz("ref_allinf.npz", out=np.full_like(ones, np.inf))
    npz("ref_someinf.npz", out=np.where(np.arange(ones.size).reshape(ones.shape) % 16 == 0, -np.inf, 2 * ones))
    scripts = {
        "builder_exit0.py": "import sys\ndef build():\n    sys.exit(0)\n",
        "builder_exit3_import.py": "import sys\nsys.exit(3)\ndef build():\n    pass\n",
        "builder_exit_msg.py": "import sys\ndef build():\n    sys.exit('no weights here')\n",
    }
    for name, text in scripts.items():
        put(name, text.encode())
    runner = root / "phone_fs" / "data" / "local" / "tmp" / "litert_gpu" / "runner"  # the fake phone's runner
    runner.mkdir(parents=True)
    for name in ("litert_gpu_runner", "libLiteRt.so", "libLiteRtClGlAccelerator.so"):
        (runner / name).write_bytes(b"placeholder for the adb test double")


def make_own(case_dir: Path, files: dict[str, Path]) -> None:
    """A case's own folder ({own}): inputs it may try to destroy, and other spellings of them."""
    import shutil

    case_dir.mkdir()
    shutil.copy(files["add.tflite"], case_dir / "add.tflite")
    shutil.copy(files["builder_ok.py"], case_dir / "builder_ok.py")
    shutil.copy(files["ok.npz"], case_dir / "in.npz")
    np.savez(case_dir / "ref.npz", out=np.full((1, 8, 8, 4), 2.0, np.float32))
    (case_dir / "sub").mkdir()
    (case_dir / "model_link.json").symlink_to("add.tflite")
    os.link(case_dir / "add.tflite", case_dir / "model_hard.json")
    (case_dir / "inputs_link.json").symlink_to("in.npz")
    (case_dir / "victim.txt").write_text("somebody's notes: must survive\n")
    (case_dir / "victim_link.json").symlink_to("victim.txt")


def snapshot(folder: Path) -> dict[str, tuple]:
    """What is in `folder`: regular files by content, links by target, anything else by kind (never opened)."""
    import hashlib
    import stat

    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[str(p.relative_to(folder))] = ("link", os.readlink(p))
        elif stat.S_ISREG(st.st_mode):
            out[str(p.relative_to(folder))] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), st.st_ino)
        else:
            out[str(p.relative_to(folder))] = ("other", stat.S_IFMT(st.st_mode))
    return out


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
    own: bool = False              # runs with its own folder ({own}, `make_own`): what was there must survive
    may_change: tuple = ()         # ... except these entries of it (a link the report replaces)
    timeout: float = 300.0         # seconds before the case counts as hung


def _check(*extra):
    return ["check", "{add.tflite}", "--fp16-only", "--timeout", "60", *extra]


_PERMISSION_API = """
import builtins, io, os, sys
real_open, real_os_open = io.open, os.open
def guarded(file, *a, **k):
    if str(file).endswith('add.tflite'):
        raise PermissionError(13, 'Permission denied', str(file))
    return real_open(file, *a, **k)
def guarded_os(file, *a, **k):
    if str(file).endswith('add.tflite'):
        raise PermissionError(13, 'Permission denied', str(file))
    return real_os_open(file, *a, **k)
builtins.open = io.open = guarded  # TEST DOUBLE: the file is unreadable (root ignores chmod 000)
os.open = guarded_os
from litert_gpu_toolkit.__main__ import main
sys.exit(main(['check', sys.argv[1]]))
"""

_PARENT = """
import sys
import numpy as np
from litert_gpu_toolkit.runtime.compiled import compile_and_run
from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes
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


# ------------------------------------------------------------------------------ issue 24's classes (9 - 15)
# 9 data loss        an output path that is an input of the same command (any spelling), links, atomicity
# 10 special files   FIFOs, devices and folders where a file is expected: refused before opening, never a hang
# 11 dtypes          caller arrays of another dtype than the signature's: refused, never cast
# 12 blame           non-finite inputs / references refused as the caller's; timeouts below the floor refused
# 13 exit statuses   bad arguments exit 2 in every command (zoo included); a builder's sys.exit is its fault
# 14 API             convert_for_gpu: dict outputs, a forward that raises, the caller's train/eval state
# 15 races           unpredictable try files, the results lock, names in the phone manifest
# API cases print "ok: ..." and exit 0 when the toolkit behaves as documented, else "WRONG: ..." and exit 1;
# they get argv [add.tflite, their own folder (or the root), the root].

_API_ATOMIC = """
import resource, signal, sys
from pathlib import Path
from litert_gpu_toolkit.core.arguments import write_output
target = Path(sys.argv[2]) / "report.json"
target.write_text("the old report, still needed\\n")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (8, hard))  # files stop growing at 8 bytes (a real kernel limit)
problem = write_output(target, "a new report that does not fit\\n")
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
left = sorted(p.name for p in target.parent.iterdir() if p.name.startswith(".report"))
ok = problem is not None and target.read_text() == "the old report, still needed\\n" and not left
print("ok: the old report is intact" if ok else f"WRONG: problem={problem!r} now={target.read_text()!r} left={left}")
sys.exit(0 if ok else 1)
"""

_API_PRELUDE = """
import sys
import numpy as np
from pathlib import Path
from litert_gpu_toolkit import check_gpu_compatibility
from litert_gpu_toolkit.core.inputs import InputError
model, own = sys.argv[1], Path(sys.argv[2])
ones = np.ones((1, 8, 8, 4), np.float32)
def expect_input_error(**kw):
    try:
        r = check_gpu_compatibility(model, precisions=("fp16",), **{"timeout": 60, **kw})
    except InputError as e:
        print("ok: InputError:", e)
        sys.exit(0)
    print(f"WRONG: no InputError; verdict {r.verdict}: {r.summary}")
    sys.exit(1)
"""


def _api_input_error(call: str) -> str:
    return _API_PRELUDE + call + "\n"


_CONVERT_PRELUDE = """
import sys
import torch
from pathlib import Path
from torch import nn
from litert_gpu_toolkit.convert.pipeline import convert_for_gpu
own = Path(sys.argv[2])
x = torch.linspace(-1, 1, 8).reshape(1, 8)
class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.lin, self.fn = nn.Linear(8, 8), fn
    def forward(self, x):
        return self.fn(self.lin(x))
def verdict(ok, what):
    print(("ok: " if ok else "WRONG: ") + what)
    sys.exit(0 if ok else 1)
"""


def _api_convert(body: str) -> str:
    return _CONVERT_PRELUDE + textwrap.dedent(body)


_RAISES_IN_FORWARD = textwrap.dedent("""
    try:
        r = convert_for_gpu(Fn(boom), (x,), own / "m.tflite", check=False)
    except BaseException as e:
        verdict(False, f"{type(e).__name__} escaped from convert_for_gpu: {e!r}")
    verdict(r.verdict == "ERROR" and r.stage == "run" and WANT in (r.error or ""),
            f"{r.verdict} at stage {r.stage}: {r.error_line}")
""")

_TRAIN_MODE = textwrap.dedent("""
    m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)))
    m.train()
    m[2].eval()          # a mixed state: the root trains, one block is frozen
    m[2][1].train()
    before = [mod.training for mod in m.modules()]
    r = convert_for_gpu(m, (torch.randn(2, 8),), own / "m.tflite", check=False, **KW)
    after = [mod.training for mod in m.modules()]
    verdict(before == after and r.error is None, f"{r.verdict}; training flags before {before}, after {after}")
""")

_OUTPUT_LINK = textwrap.dedent("""
    (own / "m.tflite").symlink_to("victim.txt")
    r = convert_for_gpu(Fn(lambda y: y * 2), (x,), own / "m.tflite", check=False, patches=False)
    victim = (own / "victim.txt").read_text()
    verdict(victim.startswith("somebody's notes") and not (own / "m.tflite").is_symlink()
            and (own / "m.tflite").read_bytes()[4:8] == b"TFL3", f"{r.verdict}; victim now {victim[:40]!r}")
""")

_TRY_LINKS = textwrap.dedent("""
    victims = own / "victims"
    victims.mkdir()
    for i in range(9):       # every name the old code would have used, planted by someone else in the folder
        (own / f".m.try{i}.tflite").symlink_to(victims / f"v{i}")
        (own / f".m.try{i}.tflite.convert.log").symlink_to(victims / f"log{i}")
    r = convert_for_gpu(Fn(lambda y: y * 2), (x,), own / "m.tflite")
    made = sorted(p.name for p in victims.iterdir())
    links = all((own / f".m.try{i}.tflite").is_symlink() for i in range(9))
    out = own / "m.tflite"
    verdict(not made and links and out.is_file() and not out.is_symlink(),
            f"{r.verdict}; files made through the planted links: {made}; links intact: {links}")
""")

_LOCK_LINK = """
import os, sys
from pathlib import Path
from litert_gpu_toolkit.recipe.results import ResultsFileError, write_results
own = Path(sys.argv[2])
os.environ["LITERT_RESULTS_DIR"] = str(own / "results")
(own / "results").mkdir()
(own / "results" / "results.json.lock").symlink_to(own / "planted")   # someone else's link, dangling
try:
    write_results(own, graph="g", device="cpu", run=None, residency="-", metrics={}, gates={"g": True})
    outcome = "written"
except ResultsFileError as e:
    outcome = f"refused: {e}"
made = (own / "planted").exists()
print(("ok: " if not made and outcome.startswith("refused") else "WRONG: ") + f"{outcome}; link target made: {made}")
sys.exit(0 if not made and outcome.startswith("refused") else 1)
"""

_MANIFEST_LINES = """
import json, sys
import numpy as np
from pathlib import Path
from litert_gpu_toolkit.phone.protocol import read_manifest, write_job
own = Path(sys.argv[2])
names = ["x y", "a\\nb", "../../evil", "tab\\there", "%41", "\\u00df", "-"]
inputs = {n: np.full((2,), i, np.float32) for i, n in enumerate(names)}
before = set(Path(sys.argv[3]).rglob("*"))
job = write_job(own / "job", Path(sys.argv[1]), [("serving default", inputs)])
manifest = json.loads((job / "manifest.json").read_text())          # what a runner parses: JSON strings
got = [i["name"] for i in manifest["entries"][0]["inputs"]]
_, entries = read_manifest(job)
files = sorted(p.name for p in job.iterdir())
want_files = sorted(["manifest.json", "model.tflite"] + [f"in_0_{i}.raw" for i in range(len(names))])
outside = sorted(str(p) for p in set(Path(sys.argv[3]).rglob("*")) - before if job not in (p, *p.parents))
ok = (got == names and entries[0][0] == "serving default" and list(entries[0][1]) == names
      and files == want_files and not outside)
print(("ok: " if ok else "WRONG: ") + f"names {got} files {files} outside {outside}")
sys.exit(0 if ok else 1)
"""

_READ_ESCAPES = """
import json, sys
import numpy as np
from pathlib import Path
from litert_gpu_toolkit.phone.protocol import read_outputs, write_outputs
own = Path(sys.argv[2])
(own / "secret.raw").write_bytes(np.arange(4, dtype=np.float32).tobytes())
write_outputs(own / "out", "ok", entries=[("serving_default", {"y": np.zeros(4, np.float32)}, [1.0])])
result = json.loads((own / "out" / "result.json").read_text())
result["entries"][0]["outputs"][0]["file"] = "../secret.raw"    # a runner (or a phone) that names a file outside
(own / "out" / "result.json").write_text(json.dumps(result))
try:
    _, entries = read_outputs(own / "out")
    y = entries[0][1]["y"]
    ok = y.tolist() == [0.0, 0.0, 0.0, 0.0]                     # the named path is never read: files go by index
    print(("ok: ignored the path, read the job's own file " if ok else "WRONG: read ") + f"{y.tolist()}")
    sys.exit(0 if ok else 1)
except ValueError as e:
    print("ok: refused:", e)
"""

_READ_MANIFEST_ESCAPE = """
import json, sys
import numpy as np
from pathlib import Path
from litert_gpu_toolkit.phone.protocol import read_manifest, write_job
own = Path(sys.argv[2])
(own / "secret.raw").write_bytes(np.arange(4, dtype=np.float32).tobytes())
job = write_job(own / "job", Path(sys.argv[1]), [("serving_default", {"x": np.zeros(4, np.float32)})])
m = json.loads((job / "manifest.json").read_text())
m["entries"][0]["inputs"][0]["file"] = "../secret.raw"
(job / "manifest.json").write_text(json.dumps(m))
try:
    _, entries = read_manifest(job)
    x = entries[0][1]["x"]
    ok = x.tolist() == [0.0, 0.0, 0.0, 0.0]
    print(("ok: ignored the path, read the job's own file " if ok else "WRONG: read ") + f"{x.tolist()}")
    sys.exit(0 if ok else 1)
except ValueError as e:
    print("ok: refused:", e)
"""

_FAKE_PHONE = {"FAKE_ADB_ROOT": "{root}/phone_fs", "FAKE_ADB_PYTHON": sys.executable,
               "PATH": f"{HERE / 'phone' / 'fakes'}:{os.environ.get('PATH', '')}"}

_ZOO_NOT_FAST = "vit"   # a zoo row outside --fast (zoo/run.py --list)

CASES += [
    # 9. data loss: every output path is guarded -- never an input of the same command, written atomically
    *[Case(9, f"{argv[0]}: --json onto {what}", argv, 2, "input", own=True) for what, argv in (
        ("the model", ["check", "{own}/add.tflite", "--json", "{own}/add.tflite"]),
        ("the model (lint)", ["lint", "{own}/add.tflite", "--json", "{own}/add.tflite"]),
        ("the inputs", ["check", "{own}/add.tflite", "--inputs", "{own}/in.npz", "--json", "{own}/in.npz"]),
        ("the reference", ["check", "{own}/add.tflite", "--inputs", "{own}/in.npz", "--reference", "{own}/ref.npz",
                           "--json", "{own}/ref.npz"]),
        ("the model spelled ./", ["check", "{own}/add.tflite", "--json", "{own}/./add.tflite"]),
        ("the model spelled sub/..", ["check", "{own}/add.tflite", "--json", "{own}/sub/../add.tflite"]),
        ("a symlink to the model", ["check", "{own}/add.tflite", "--json", "{own}/model_link.json"]),
        ("a hard link to the model", ["check", "{own}/add.tflite", "--json", "{own}/model_hard.json"]),
        ("the model given by a link (lint)", ["lint", "{own}/model_link.json", "--json", "{own}/add.tflite"]),
        ("the inputs given by a link", ["check", "{own}/add.tflite", "--inputs", "{own}/inputs_link.json",
                                        "--json", "{own}/in.npz"]),
        ("the builder script", ["bisect", "{own}/builder_ok.py:build", "--json", "{own}/builder_ok.py"]))],
    Case(9, "lint: --json through a link to another file replaces the link, not the file",
         ["lint", "{own}/add.tflite", "--json", "{own}/victim_link.json"], 0, "no phone-only", own=True,
         may_change=("victim_link.json",)),
    Case(9, "check: --json through a link to another file (INVALID_MODEL report)",
         ["check", "{notes.tflite}", "--json", "{own}/victim_link.json"], 2, "INVALID_MODEL", own=True,
         may_change=("victim_link.json",)),
    Case(9, "API write_output: the disk fills mid-write, the old file survives", [], 0, "ok:", kind="api",
         api=_API_ATOMIC, own=True),
    # 10. special files: refused before they are opened (a FIFO with no writer would block forever)
    *[Case(10, name, argv, 2, says, timeout=60) for name, argv, says in (
        ("check: the model is a FIFO", ["check", "{fifo}"], "not a regular file"),
        ("lint: the model is a FIFO", ["lint", "{fifo}"], "not a regular file"),
        ("phone run: the model is a FIFO", ["phone", "run", "{fifo}"], "not a regular file"),
        ("check: --inputs is a FIFO", _check("--inputs", "{fifo}"), "not a regular file"),
        ("check: --reference is a FIFO", _check("--inputs", "{ok.npz}", "--reference", "{fifo}"),
         "not a regular file"),
        ("phone run: --inputs is a FIFO", ["phone", "run", "{add.tflite}", "--inputs", "{fifo}"],
         "not a regular file"),
        ("check: the model is /dev/zero", ["check", "/dev/zero"], "not a regular file"),
        ("check: --inputs is /dev/zero", _check("--inputs", "/dev/zero"), "not a regular file"),
        ("check: --reference is /dev/zero", _check("--reference", "/dev/zero"), "not a regular file"),
        ("check: --reference is a directory", _check("--reference", "{root}"), "directory"),
        ("bisect: the script is a FIFO", ["bisect", "{fifo}:build"], "not a regular file"),
        ("check: --json is a FIFO nobody reads", ["check", "{notes.tflite}", "--json", "{fifo}"], "cannot write"))],
    Case(10, "lint: --json /dev/null still works (a device is written, never replaced)",
         ["lint", "{add.tflite}", "--json", "/dev/null"], 0, "no phone-only", timeout=60),
    # 11. dtypes: checked against the signature, never cast
    *[Case(11, f"check: {dt} --inputs for a float32 input", _check("--inputs", "{x_" + dt + ".npz}"), 2, "float32")
      for dt in ("int64", "uint8", "float64", "float16", "bool", "int32")],
    *[Case(11, f"check: {dt} --inputs for an int32 input", ["check", "{gather.tflite}", "--fp16-only", "--timeout",
                                                            "60", "--inputs", "{ids_" + dt + ".npz}"], 2, "int32")
      for dt in ("int64", "float32", "uint8", "bool")],
    Case(11, "phone run: float64 --inputs for a float32 input", ["phone", "run", "{add.tflite}", "--inputs",
                                                                 "{x_float64.npz}"], 2, "float32"),
    Case(11, "API check: float64 inputs raise InputError", [], 0, "ok: InputError", kind="api",
         api=_api_input_error("expect_input_error(inputs={'x': np.ones((1, 8, 8, 4)), 'y': ones})")),
    Case(11, "check: float32 --inputs of the signature's dtype PASS", _check("--inputs", "{ok.npz}"), 0, "PASS",
         needs_gpu=True),
    # 12. blame: the caller's non-finite arrays and impossible timeouts are refused, not blamed on the model
    *[Case(12, f"check: {what}", _check(*a), 2, says) for what, a, says in (
        ("an all-NaN --reference", ("--inputs", "{ok.npz}", "--reference", "{ref_allnan.npz}"), "NaN"),
        ("a --reference with some NaN", ("--inputs", "{ok.npz}", "--reference", "{ref_somenan.npz}"), "NaN"),
        ("an all-inf --reference", ("--inputs", "{ok.npz}", "--reference", "{ref_allinf.npz}"), "finite"),
        ("--inputs with a NaN", ("--inputs", "{x_nan.npz}"), "NaN"),
        ("all-NaN --inputs", ("--inputs", "{x_allnan.npz}"), "NaN"),
        ("--timeout 0.000001", ("--timeout", "0.000001"), "at least"),
        ("--timeout 0.5", ("--timeout", "0.5"), "at least"),
        ("--timeout 1e-300", ("--timeout", "1e-300"), "at least"))],
    Case(12, "gpu-info --timeout 0.001", ["gpu-info", "--timeout", "0.001"], 2, "at least"),
    Case(12, "API check: timeout=1e-6 raises InputError", [], 0, "ok: InputError", kind="api",
         api=_api_input_error("expect_input_error(timeout=1e-6)")),
    Case(12, "API check: an all-NaN reference raises InputError", [], 0, "ok: InputError", kind="api",
         api=_api_input_error("expect_input_error(inputs={'x': ones, 'y': ones}, "
                              "reference={'out': np.full_like(ones, np.nan)})")),
    Case(12, "check: a --reference with some -inf (masked) still PASSes",
         _check("--inputs", "{ok.npz}", "--reference", "{ref_someinf.npz}"), 0, "PASS", needs_gpu=True),
    # 13. exit statuses: 2 for bad arguments in every command
    *[Case(13, f"zoo {' '.join(a)}", list(a), 2, says, kind="zoo") for a, says in (
        (("--only", "no_such_model"), "unknown zoo row"), (("--only", ","), "no rows"),
        (("--fast", "--only", _ZOO_NOT_FAST), "no rows"), (("--timeout", "0"), "> 0"),
        (("--timeout", "nan"), "finite"), (("--timeout", "-5"), "> 0"), (("--jobs", "0"), "at least 1"),
        (("--out", "{a_file}"), "not a folder"), (("--bogus",), "unrecognized"),
        (("--baseline", "{root}/none.json"), "no results"))],
    Case(13, "zoo --help names the exit statuses", ["--help"], 0, "bad arguments", kind="zoo"),
    Case(13, "bisect: the builder calls sys.exit(0)", ["bisect", "{builder_exit0.py}:build"], 2, "sys.exit"),
    Case(13, "bisect: the script calls sys.exit(3) on import", ["bisect", "{builder_exit3_import.py}:build"], 2,
         "sys.exit"),
    Case(13, "bisect: the builder calls sys.exit('message')", ["bisect", "{builder_exit_msg.py}:build"], 2,
         "no weights here"),
    Case(13, "check: no model given", ["check"], 2, "required"),
    Case(13, "lint --bogus", ["lint", "{add.tflite}", "--bogus"], 2, "unrecognized"),
    Case(13, "an unknown command (convert)", ["convert", "{add.tflite}"], 2, "invalid choice"),
    *[Case(13, f"{cmd} --help names the exit statuses", [cmd, "--help"], 0, "Exit status (every command)")
      for cmd in ("check", "lint", "bisect", "gpu-info", "phone")],
    # 14. API: convert_for_gpu
    Case(14, "convert_for_gpu: a dict output with int keys", [], 0, "ok:", kind="api", needs_gpu=True,
         api=_api_convert("""
             r = convert_for_gpu(Fn(lambda y: {1: y + 1, 0: y * 2}), (x,), own / "m.tflite")
             verdict(r.verdict == "PASS" and r.signatures["serving_default"]["outputs"] == ["output_0", "output_1"],
                     f"{r.summary()}")
         """)),
    Case(14, "convert_for_gpu: a dict output with tuple keys", [], 0, "ok:", kind="api",
         api=_api_convert("""
             r = convert_for_gpu(Fn(lambda y: {("a", 1): y + 1}), (x,), own / "m.tflite", check=False)
             verdict(r.error is None and r.path is not None, f"{r.verdict}: {r.error_line}")
         """)),
    Case(14, "convert_for_gpu: a dict output with str keys (checked)", [], 0, "ok:", kind="api", needs_gpu=True,
         api=_api_convert("""
             r = convert_for_gpu(Fn(lambda y: {"b": y + 1, "a": {"q": y * 2}}), (x,), own / "m.tflite")
             verdict(r.verdict == "PASS", r.summary())
         """)),
    *[Case(14, f"convert_for_gpu: forward {what}", [], 0, "ok:", kind="api",
           api=_api_convert(pre + _RAISES_IN_FORWARD)) for what, pre in (
        ("raises RuntimeError", "WANT = 'cannot run'\ndef boom(y):\n    raise RuntimeError('cannot run')\n"),
        ("calls sys.exit(1)", "WANT = 'SystemExit'\ndef boom(y):\n    sys.exit(1)\n"),
        ("raises an exception whose str() raises",
         "WANT = 'Unprintable'\nclass Unprintable(Exception):\n    def __str__(self):\n        raise TypeError('no')\n"
         "def boom(y):\n    raise Unprintable()\n"),
        ("raises a frozen exception (no attributes can be set)",
         "WANT = 'Frozen'\nimport dataclasses\n@dataclasses.dataclass(frozen=True)\nclass Frozen(Exception):\n"
         "    why: str = 'immutable'\ndef boom(y):\n    raise Frozen()\n"))],
    Case(14, "convert_for_gpu: the caller's train/eval state is restored", [], 0, "ok:", kind="api",
         api=_api_convert("KW = {}\n" + _TRAIN_MODE)),
    Case(14, "convert_for_gpu(inplace=True): the caller's train/eval state is restored", [], 0, "ok:",
         kind="api", api=_api_convert("KW = {'inplace': True}\n" + _TRAIN_MODE)),
    # 15. races and injection
    Case(15, "convert_for_gpu: the output path is a symlink to another file", [], 0, "ok:", kind="api",
         api=_api_convert(_OUTPUT_LINK), own=True, may_change=("m.tflite",)),
    Case(15, "convert_for_gpu: planted links at the predictable try names", [], 0, "ok:", kind="api",
         api=_api_convert(_TRY_LINKS), needs_gpu=True, own=True),
    Case(15, "write_results: the lock file is a planted symlink", [], 0, "ok:", kind="api", api=_LOCK_LINK, own=True),
    Case(15, "phone manifest: names with spaces, newlines, ../ survive as JSON strings, files by index", [], 0, "ok:",
         kind="api", api=_MANIFEST_LINES, own=True),
    Case(15, "phone protocol: an output file named outside the job is refused", [], 0, "ok:", kind="api",
         api=_READ_ESCAPES, own=True),
    Case(15, "phone protocol: an input file named outside the job is refused", [], 0, "ok:", kind="api",
         api=_READ_MANIFEST_ESCAPE, own=True),
    Case(15, "phone run (adb test double): odd input and output names", ["phone", "run", "{odd_names.tflite}"], 0,
         "status: ok", env=_FAKE_PHONE, needs_gpu=True),
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
            if b"litert_gpu_toolkit.runtime.worker" in cmd and any(str(tmpdir).encode() in c for c in cmd):
                pids.append(int(proc.name))
    return sorted(pids)


def _hanging(pid: int) -> bool:
    """True when worker `pid` has reached the injected hang (its work folder's stderr says so)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        work = Path(cmd[cmd.index(b"litert_gpu_toolkit.runtime.worker") + 1].decode())
        return "injecting a hang" in (work / "stderr.txt").read_text(errors="replace")
    except (OSError, ValueError, IndexError):
        return False


def _default_sigint():
    """A child starts with SIGINT at its default (a shell that runs this file in the background ignores SIGINT,
    and the child would inherit that: the Ctrl-C cases would then measure the shell, not the toolkit)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _limit_memory():
    import resource

    _default_sigint()
    resource.setrlimit(resource.RLIMIT_AS, (3 << 29, 3 << 29))


def run_case(case: Case, files: dict[str, Path], root: Path) -> Outcome:
    """Run one case in a child process; judge it clean or not."""
    tmpdir = Path(tempfile.mkdtemp(prefix="faults-tmp-", dir=root))
    own = Path(tempfile.mkdtemp(prefix="own-", dir=root)) if case.own else root
    if case.own:
        own.rmdir()
        make_own(own, files)
    before = snapshot(own) if case.own else {}
    fmt = {**{k: str(v) for k, v in files.items()}, "root": str(root), "own": str(own)}

    def filled(text: str) -> str:
        for key, value in fmt.items():
            text = text.replace("{" + key + "}", value)
        return text

    env = {**os.environ, "TMPDIR": str(tmpdir), **{k: filled(v) for k, v in case.env.items()}}
    argv = [filled(a) for a in case.argv]
    proc = subprocess.Popen(_command(case, files, argv, root, own), env=env, cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_limit_memory if case.kind == "cli:memlimit" else _default_sigint)
    _interfere(case, proc, tmpdir)
    try:
        text, _ = proc.communicate(timeout=case.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        text, _ = proc.communicate()
        return Outcome(False, None, f"did not finish in {case.timeout:.0f} s", text)
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
    why = _faults(case, proc.returncode, text, left)
    if case.own:
        after = snapshot(own)
        lost = [k for k, v in before.items() if k not in case.may_change and after.get(k) != v]
        if lost:
            why.append(f"destroyed or changed {lost}")
    # torch's own compile cache (torchinductor_<user>) is torch's, kept on purpose for later runs
    leftovers = [p for p in tmpdir.iterdir() if not p.name.startswith("torchinductor_")]
    if leftovers:
        why.append(f"left behind {[p.name for p in leftovers]}")
    wording_only = bool(why) and all(w.startswith("message lacks") for w in why)
    return Outcome(not why, proc.returncode, "; ".join(why), text, wording_only)


def _command(case: Case, files: dict[str, Path], argv: list[str], root: Path, own: Path) -> list[str]:
    if case.kind == "api":
        return [sys.executable, "-c", case.api, str(files["add.tflite"]), str(own), str(root)]
    if case.kind == "zoo":      # a case that runs rows after all must not rewrite the checkout's zoo/results.json
        return [sys.executable, str(ZOO_RUN), "--out", str(root / "zoo_out"), *argv]
    if case.kind.startswith("signal") and not argv:
        return [sys.executable, "-c", _PARENT]
    return [sys.executable, "-m", "litert_gpu_toolkit", *argv]


def _interfere(case: Case, proc, tmpdir: Path) -> None:
    """What the case does to the running child: kill its hung worker, or send it a signal once it is inside."""
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


def _faults(case: Case, returncode: int, text: str, left: list) -> list[str]:
    """What the run did wrong against the case's documented behaviour (exit code, message, children)."""
    low = text.lower()
    why = []
    if returncode != case.code:
        why.append(f"exit {returncode}, documented {case.code}")
    if "Traceback" in text and case.kind != "signal:SIGINT" or (case.argv and "Traceback" in text):
        why.append("traceback")
    if case.says and case.says.lower() not in low:
        why.append(f"message lacks {case.says!r}")
    if case.absent and case.absent.lower() in low:
        why.append(f"message says {case.absent!r}")
    if left:
        why.append(f"{len(left)} runtime process(es) left running")
    return why


def _gpu_available() -> bool:
    from litert_gpu_toolkit.runtime.compiled import probe_gpu

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
    from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes

    base = add_model_bytes()
    rng = random.Random(seed)
    for _ in range(n):
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        yield bytes(data)


def _read_and_use(data: bytes, counts: dict) -> None:
    """Read a (damaged) model and use it as `check` / `lint` would: only the toolkit's own errors may come out."""
    from litert_gpu_toolkit.check.diagnosis import _static
    from litert_gpu_toolkit.core.inputs import InputError, make_inputs
    from litert_gpu_toolkit.lint.mobile import lint_for_mobile
    from litert_gpu_toolkit.core.model_info import InvalidModelError, read_model_info

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
    from litert_gpu_toolkit.core import inputs as inputs_mod

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

    from litert_gpu_toolkit.core import inputs as inputs_mod
    from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes, single_op_model_bytes

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
    from litert_gpu_toolkit.core.model_info import InvalidModelError, read_model_info

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
    from litert_gpu_toolkit.runtime import compiled as runtime
    from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes

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
    from litert_gpu_toolkit.runtime.compiled import STATUS_KILLED, compile_and_run
    from litert_gpu_toolkit.runtime.tiny_models import add_model_bytes

    monkeypatch.setenv(TEST_FAULT, "oom@cpu")  # the child SIGKILLs itself, as the OOM killer would
    x = np.ones((1, 8, 8, 4), np.float32)
    r = compile_and_run(add_model_bytes(), {"serving_default": {"x": x, "y": x}}, accelerator="cpu", timeout=60)
    assert r.status == STATUS_KILLED and r.returncode == -9
    assert "killed from outside (signal 9 SIGKILL" in r.error and "not a model fault" in r.error


def test_unwritable_output_paths_are_named_before_any_work(tmp_path, monkeypatch):
    """A read-only current directory cannot be made as root (root writes anyway), so os.access is the
    TEST DOUBLE here: it says no for the folder, as it would for an ordinary user in a read-only cwd."""
    from litert_gpu_toolkit.core.arguments import output_path_problem

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
    from litert_gpu_toolkit.cli.main import EXIT_STATUS, build_parser

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
