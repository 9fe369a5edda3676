"""Layer 0: what every other layer uses. Reading a .tflite, inputs and outputs, metrics, the symptom table,
files and quiet conversions. Imports nothing else of the toolkit."""

__version__ = "0.1.0"
