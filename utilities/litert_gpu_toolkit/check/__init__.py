"""Layer 2: the checker. A .tflite compiled strictly GPU-only, run, compared, and judged."""
