"""Layer 1: LiteRT's CompiledModel in a child process (compile, run, probe the GPU) and where ops ran."""
