"""What every recipe's verify script shares: --device, the residency line, gates, the results file.

A verify script reads top to bottom (docs/writing-a-recipe.md has the full template):

    def main() -> int:
        p = verify_parser(__doc__, HERE)                      # --device, --results-dir, --help
        add_model_argument(p, HERE / "artifacts" / "encoder.tflite", writes=False)
        add_ref_argument(p, HERE / "artifacts" / "encoder_ref.npz", writes=False)
        args = p.parse_args()                                 # an unknown --device exits 2 here
        info = load_model(args.model, "export_encoder.py")    # missing / corrupt artifact -> exit 2
        ref = load_reference(args.ref, "dump_encoder_ref.py")
        run = run_on_device(args.model, {sig: inputs}, args.device)
        res = residency(info, run); print(res.line)
        gates = strict_gates(args.device, res)                # the one strict-residency gate
        if not run.ok: print_failure(run)
        ... compute metrics, gates[...] = ...
        return finish_verify(args, graph="encoder", run=run, residency=res.line, metrics=..., gates=gates,
                             headline=[...])                  # gates, record + provenance, PASSED / FAILED, status

    if __name__ == "__main__":
        sys.exit(verify_main(main))

An export script ends with `finish_export(path, args)`: the `<model>.provenance.json` sidecar (command,
flags, git commit, sha256, op count) that `finish_verify` copies into the record.

Exit status of every verify script (`verify_main`):
  0  all gates passed            1  a gate failed (the run is recorded)
  2  a user mistake: unknown device, missing / empty / corrupt artifact, an unreadable results file
  3  NO_GPU: a GPU device was asked for and no GPU driver / adapter is usable; nothing is recorded
"""
from __future__ import annotations

from ..core.errors import (EXIT_FAILED, EXIT_NO_GPU, EXIT_PASSED, EXIT_USAGE, ArtifactError, DeviceError, NoGpuError,
                      RecipeError, ResultsFileError)
from ..runtime.residency import Residency, residency, residency_line, runtime_version
from .artifacts import load_model, load_reference, require_file, save_reference
from .devices import (HOST_DEVICES, LATENCY_METRIC, NATIVE_DEVICES, STRICT_GATE, Device, add_device_argument,
                      device_label, fixed_inputs_only, is_native, is_phone, known_devices, latency_ms, open_session,
                      print_failure, refuse_no_gpu, resolve_device, run_on_device, startup_metrics, strict_gates,
                      uses_cpu)
from .provenance import read_provenance, sidecar_path, write_provenance
from .results import env_flag, git_commit, git_dirty, read_results, write_results
from .scripts import (EXIT_EPILOG, add_image_size_arguments, add_model_argument, add_quantize_argument,
                      add_ref_argument, add_results_dir_argument, add_weights_argument,
                      check_image_size, export_graph, finish_export, finish_verify, quantized_path, report_gates,
                      script_main, script_parser, verify_main, verify_parser, WRITE_INTERRUPTED)
