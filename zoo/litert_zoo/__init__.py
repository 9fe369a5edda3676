"""The zoo: `convert_for_gpu` on many small architectures from five libraries, none written for it.

    python zoo/run.py --help

Modules: `weights` (one entry and the weight rule), `build` (inputs, the output wrapper, the torchvision shim),
`models/` (one module per library), `rows` (the results file), `runner` (one model in a child process), `guard`
(rows that passed and stopped), `table` (the generated README), `cli` (the command). Importing the package
imports neither torch nor any model library; it is not part of the toolkit, which never imports it.
"""
