"""Layer 2: torch -> .tflite through litert-torch, and the one comparison every proof needs (GPU vs torch)."""
