"""YOLO-family detectors built by `ultralytics` from their yaml (random init, nothing downloaded), 64x64 input.
The row returns the decoded predictions a user post-processes (the per-level feature maps are skipped)."""
from __future__ import annotations

from ..build import built, image, install_torchvision_placeholders
from ..weights import ZooModel


def _yolo(yaml: str):
    def build():
        import os

        install_torchvision_placeholders()
        os.environ.setdefault("YOLO_OFFLINE", "1")
        from ultralytics.nn.tasks import guess_model_task, yaml_model_load
        from ultralytics.nn.tasks import DetectionModel, PoseModel, SegmentationModel, ClassificationModel

        cfg = yaml_model_load(yaml)
        task = guess_model_task(cfg)
        cls = {"detect": DetectionModel, "segment": SegmentationModel, "pose": PoseModel,
               "classify": ClassificationModel}[task]
        model = cls(cfg, verbose=False)
        return built(model, image(64))
    return build


def _row(yaml, fast=False):
    return ZooModel("yolo_" + yaml.removesuffix(".yaml").replace("-", "_"), "detection", _yolo(yaml), fast=fast,
                    library="ultralytics")


ROWS: tuple[ZooModel, ...] = (
    _row("yolov8n.yaml", fast=True),
    _row("yolo11n.yaml"),
    _row("yolov5nu.yaml"),
    _row("yolov8n-seg.yaml"),
    _row("yolov8n-pose.yaml"),
    _row("yolov10n.yaml"),
    _row("yolo11n-cls.yaml"),
)
