"""Layer 6: the command line, one module per command (`python -m litert_gpu_toolkit COMMAND`)."""
