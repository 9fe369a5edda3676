"""The zoo: `convert_for_gpu` on many tiny architectures it was not written for (`python -m litert_gpu_toolkit zoo`).

Modules: `weights` (one entry and the weight rule), `builders` + `architectures` (the models), `rows` (the
results file), `runner` (one model in a child process), `table` (the generated README), `cli` (the command).
Importing the package imports neither torch nor transformers.
"""
from .architectures import ZOO
from .weights import ZooModel, redraw_weights
