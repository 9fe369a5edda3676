"""Quantized weights that stay on the GPU: forms (how a weight is stored), plans (which forms a mode tries), and
`quantize_for_gpu` (quantize, check strictly GPU-only against the source, keep float what does not pass)."""
from .forms import FORMS, Form, quantize_tflite, quantizer_package
from .gpu import QuantizeResult, quantize_for_gpu
from .plan import DEFAULT_MIN_CORR, MODES, WeightOp, weight_ops
