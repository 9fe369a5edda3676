"""Layer 1: legalization of the exported graph -- the GPU's op contract met on torch.export's ATen graph, op by op,
whatever Python spelling produced each op.

`legalize(module, args, kwargs)` exports the module, runs each rule over the graph (`RULES`, one module per rule),
checks the result against the module on the example inputs and returns a `Legalized` (the graph module to convert,
what each rule did, what was left and why). `convert_for_gpu` applies it by default as the rewrite named
`legalize`, after the module rewrites (`ConvertOptions(exclude=("legalize",))` turns it off; its fallback drops it
like any rewrite).
"""
from ..rewrites.registry import declare
from .graph import Legalized, NotLegal, legalize  # noqa: F401

NAME = "legalize"
declare(NAME, wall="broadcast_to")   # its first walls: BROADCAST_TO, the bool masks that need one
