"""Layer 1: static lint of a .tflite for walls that only phone GPUs show."""
