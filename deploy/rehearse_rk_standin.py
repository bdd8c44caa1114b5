"""Copy a bundle and add an ``rk`` section of stand-in files, for deploy/rehearse_board.sh.

    python deploy/rehearse_rk_standin.py --bundle models/default --out /tmp/rk-standin --soc rk3588

The stand-ins are NOT models. Each ``.rknn`` file is the RKNN magic followed by the
metadata scripts/onnx2rknn.py stores (variant, input names and shapes read from the
bundle's ONNX graph, the bundle's encoder digest), and the ``.rkllm`` file is a few bytes.
They pass every check the package makes on files before it touches a runtime, so that a
``--backend rk`` run off a board reaches the real rknn-toolkit-lite2 and the real
librkllmrt.so loader: what a user sees when the models are there but the board's runtime
libraries or NPU driver are not. Real ones come from scripts/onnx2rknn.py and
scripts/export_rkllm.py on a PC with the Rockchip toolkits.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

import onnxruntime as ort

from qwen3asr.backends.rk import rknn_meta

QUANT = {"rk3588": "w8a8", "rk3576": "w4a16_g128"}  # the decoder quantisation docs/board.md uses per SoC


def add_rk_section(bundle_dir: str, soc: str) -> list[str]:
    """Write stand-in ``rk/*.rknn`` / ``.rkllm`` files into ``bundle_dir`` and list them in model.json.

    Returns the written paths, relative to ``bundle_dir``.
    """
    manifest_path = os.path.join(bundle_dir, "model.json")
    with open(manifest_path) as f:
        manifest = json.load(f)
    digest = rknn_meta.encoder_digest(manifest)
    os.makedirs(os.path.join(bundle_dir, "rk"), exist_ok=True)
    entries, written = [], []
    for v in manifest["encoder"]["variants"]:
        sess = ort.InferenceSession(os.path.join(bundle_dir, v["file"]), providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        meta = {"meta_version": rknn_meta.META_VERSION, "form": v["form"], "part": v["part"],
                "n_chunks": v["n_chunks"], "target": soc, "encoder_sha256": digest, "inputs": names,
                "input_shapes": {i.name: list(i.shape) for i in sess.get_inputs()},
                "output_shape": list(sess.get_outputs()[0].shape)}
        rel = f"rk/{os.path.basename(v['file'])[:-len('.onnx')]}_{soc}.rknn"
        with open(os.path.join(bundle_dir, rel), "wb") as f:
            f.write(rknn_meta.RKNN_MAGIC + bytes(60) + rknn_meta.custom_string(meta).encode() + bytes(16))
        entries.append({"form": v["form"], "part": v["part"], "n_chunks": v["n_chunks"], "file": rel})
        written.append(rel)
    decoder = f"rk/decoder_{soc}_{QUANT[soc]}.rkllm"
    with open(os.path.join(bundle_dir, decoder), "wb") as f:
        f.write(b"stand-in written by deploy/rehearse_rk_standin.py, not an RKLLM model\n")
    written.append(decoder)
    rk = manifest.setdefault("rk", {})
    rk.setdefault("rknn", {})[soc] = entries
    rk.setdefault("rkllm", {})[soc] = {"file": decoder, "quant": QUANT[soc], "sha256": "0" * 64,
                                       "max_context": 4096}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=2)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True, help="bundle to copy (e.g. models/default)")
    ap.add_argument("--out", required=True, help="new bundle directory (replaced if it exists)")
    ap.add_argument("--soc", default="rk3588", choices=sorted(QUANT))
    args = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(args.bundle, "model.json")):
        print(f"error: {args.bundle} is not a bundle (no model.json)", file=sys.stderr)
        return 1
    shutil.rmtree(args.out, ignore_errors=True)
    shutil.copytree(args.bundle, args.out)
    written = add_rk_section(args.out, args.soc)
    print(f"{args.out}: {len(written)} stand-in files for {args.soc} in rk/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
