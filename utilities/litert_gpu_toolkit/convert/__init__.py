"""Layer 4: the front door. `convert_for_gpu(model, example_inputs, path, ConvertOptions(...))`: rewrites,
conversion, GPU check, repair, and mixed-precision plans."""
