"""The checker's numerics suggestions come only from rules of the class the runs show and with an op to act on
(issue: a convolutional VAD, fp32 as wrong as fp16 on the GPU, got `hierarchical_mean` -- an fp16 accumulation fix
-- right after "not precision", and `patch_recurrent` for a graph without a recurrent op)."""
from collections import Counter

from litert_gpu_toolkit.check.diagnosis import _suggest_for_numerics
from litert_gpu_toolkit.core.symptoms import in_graph


class Graph:
    def __init__(self, *ops):
        self.hist = Counter(ops)

    def op_histogram(self):
        return dict(self.hist)


def rewrites(graph, failures, labels_ok):
    return {r for s in _suggest_for_numerics(graph, failures, labels_ok) for r in s["rewrites"]}


FP16_ONLY = ([("gpu_fp16", "serving_default", "output_0", "degraded")], {"gpu_fp16": False, "gpu_fp32": True})
BOTH = ([("gpu_fp16", "serving_default", "output_0", "degraded"),
         ("gpu_fp32", "serving_default", "output_0", "degraded")], {"gpu_fp16": False, "gpu_fp32": False})


def test_a_miscompute_gets_no_precision_fix_and_no_rule_without_its_op():
    vad = Graph("CONV_2D", "ADD", "MUL", "MEAN", "LOGISTIC", "RELU")       # a sigmoid head, no recurrence
    got = rewrites(vad, *BOTH)
    assert not got & {"hierarchical_mean", "patch_safe_layernorm", "patch_safe_expm1", "patch_split_k"}, got
    assert "patch_recurrent" not in got and "patch_avg_pool" not in got, got
    assert "patch_constant_operand_rank4" in got                          # the miscompute rule that can apply
    evidence = _suggest_for_numerics(vad, *BOTH)[0]["evidence"]
    assert any("GPU miscompute" in e for e in evidence)


def test_a_recurrent_graph_gets_the_recurrent_rule():
    gru = Graph("FULLY_CONNECTED", "ADD", "MUL", "LOGISTIC", "TANH", "SUB")
    assert "patch_recurrent" in rewrites(gru, *BOTH)
    assert in_graph("patch_recurrent", {"LOGISTIC", "TANH"}) and not in_graph("patch_recurrent", {"LOGISTIC"})


def test_an_fp16_problem_gets_only_precision_fixes_that_have_an_op():
    encoder = Graph("FULLY_CONNECTED", "ADD", "MEAN", "RSQRT", "SOFTMAX", "BATCH_MATMUL")
    got = rewrites(encoder, *FP16_ONLY)
    assert {"patch_safe_layernorm", "hierarchical_mean"} <= got
    assert "patch_safe_expm1" not in got                                   # no EXP in the graph
    assert not got & {"patch_recurrent", "patch_constant_operand_rank4", "patch_avg_pool"}, got


class Diagnosis:
    def __init__(self, kind, rewrites=()):
        self.diagnosis, self.rewrites = kind, list(rewrites)


def test_after_the_diagnosis_bisect_is_no_suggestion_and_a_precision_dead_end_gets_a_plan():
    """The convolutional VAD printed 'diagnosis found no fix: compounding at model.conv4; tried a bisect ...' and
    then 'try: bisect' -- the step that had just run."""
    from litert_gpu_toolkit.convert.repair import suggestions_after_diagnosis
    from litert_gpu_toolkit.convert.result import ConvertResult
    from litert_gpu_toolkit.rewrites.registry import Change

    vad = ConvertResult(None, [Change("lstm_cell", "explicit gates", "patch_recurrent", True)], suggestions=["bisect"])
    vad.diagnosis = Diagnosis("compounding")
    assert suggestions_after_diagnosis(vad) == ["plan_precision"]
    miscompute = ConvertResult(None, [], suggestions=["bisect", "patch_recurrent"])
    miscompute.diagnosis = Diagnosis("miscompute", ["patch_constant_operand_rank4"])
    assert suggestions_after_diagnosis(miscompute) == ["patch_recurrent", "patch_constant_operand_rank4"]
    miscompute.dropped = {"patch_constant_operand_rank4": "tried after bisect (miscompute): not better"}
    miscompute.diagnosis = Diagnosis("miscompute", ["patch_constant_operand_rank4"])
    assert suggestions_after_diagnosis(miscompute) == ["patch_recurrent"]
    applied = ConvertResult(None, [Change("gru", "explicit gates", "patch_recurrent", True)], suggestions=["bisect"])
    applied.diagnosis = Diagnosis("miscompute", ["patch_recurrent"])
    assert suggestions_after_diagnosis(applied) == []                  # already in the file: nothing left to try


def test_a_command_names_the_suggestions_as_python_not_as_something_to_try():
    """`export` prints the result for a user who cannot pass a rewrite: no "try: patch_x" line there."""
    from litert_gpu_toolkit.convert.result import ConvertResult

    result = ConvertResult(None, [], suggestions=["patch_recurrent", "plan_precision"])
    assert "  try: patch_recurrent, plan_precision" in result.summary()
    text = result.summary(command=True)
    assert "try:" not in text and "no switch" in text and "patch_recurrent, plan_precision" in text, text
