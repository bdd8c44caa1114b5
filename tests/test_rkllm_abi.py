"""The ctypes layouts in qwen3asr.backends.rk.rkllm against the C layouts in tests/c/rkllm_layouts_1_*.h.

A small C program prints sizeof/alignof of every struct and offsetof/sizeof of every
(nested) field as JSON; ctypes must agree field by field. On LP64 machines the sizes and
key offsets must also match the figures taken from Rockchip's rkllm.h (docs/rkllm_abi.md).
"""

import ctypes
import json
import shutil
import subprocess

import pytest

from qwen3asr.backends.rk import rkllm

C_DIR = __import__("pathlib").Path(__file__).resolve().parent / "c"

COMMON = {
    "RKLLMExtendParam": rkllm.RKLLMExtendParam,
    "RKLLMEmbedInput": rkllm.RKLLMEmbedInput,
    "RKLLMTokenInput": rkllm.RKLLMTokenInput,
    "RKLLMLoraParam": rkllm.RKLLMLoraParam,
    "RKLLMPromptCacheParam": rkllm.RKLLMPromptCacheParam,
    "RKLLMResultLastHiddenLayer": rkllm.RKLLMResultLastHiddenLayer,
    "RKLLMResultLogits": rkllm.RKLLMResultLogits,
    "RKLLMPerfStat": rkllm.RKLLMPerfStat,
    "RKLLMResult": rkllm.RKLLMResult,
}
STRUCTS = {
    "1.2": dict(COMMON, **{
        "RKLLMParam": rkllm.RKLLMParam12,
        "RKLLMMultiModalInput": rkllm.RKLLMMultiModalInput12,
        "RKLLMInput": rkllm.RKLLMInput12,
        "RKLLMInferParam": rkllm.RKLLMInferParam12,
    }),
    "1.3": dict(COMMON, **{
        "RKLLMParam": rkllm.RKLLMParam13,
        "RKLLMImageInput": rkllm.RKLLMImageInput13,
        "RKLLMVideoInput": rkllm.RKLLMVideoInput13,
        "RKLLMMultiModalInput": rkllm.RKLLMMultiModalInput13,
        "RKLLMInput": rkllm.RKLLMInput13,
        "RKLLMSamplingParam": rkllm.RKLLMSamplingParam,
        "RKLLMInferParam": rkllm.RKLLMInferParam13,
        "RKLLMCallback": rkllm.RKLLMCallback,
    }),
}
HEADERS = {"1.2": "rkllm_layouts_1_2.h", "1.3": "rkllm_layouts_1_3.h"}

# LP64 figures from Rockchip's rkllm.h (release-v1.2.3 f7df8e5 / release-v1.3.0 878f936),
# compiled with g++ on x86-64; they match the figures in shared/reference/rockchip.md.
LP64_SIZES = {
    "1.2": {"RKLLMParam": 208, "RKLLMInput": 64, "RKLLMInferParam": 32, "RKLLMResult": 72,
            "RKLLMExtendParam": 120, "RKLLMMultiModalInput": 48, "RKLLMPerfStat": 20},
    "1.3": {"RKLLMParam": 184, "RKLLMInput": 160, "RKLLMInferParam": 40, "RKLLMResult": 72,
            "RKLLMExtendParam": 120, "RKLLMMultiModalInput": 144, "RKLLMSamplingParam": 36,
            "RKLLMCallback": 48},
}
LP64_OFFSETS = {
    "1.2": {("RKLLMParam", "skip_special_token"): 56, ("RKLLMParam", "is_async"): 57,
            ("RKLLMParam", "img_start"): 64, ("RKLLMParam", "extend_param"): 88,
            ("RKLLMParam", "extend_param.n_batch"): 100, ("RKLLMInput", "input_type"): 12,
            ("RKLLMInput", "embed_input.n_tokens"): 24, ("RKLLMInferParam", "keep_history"): 24,
            ("RKLLMResult", "perf"): 48, ("RKLLMResult", "perf.memory_usage_mb"): 64},
    "1.3": {("RKLLMParam", "ignore_eos_token"): 57, ("RKLLMParam", "is_async"): 58,
            ("RKLLMParam", "extend_param"): 60, ("RKLLMParam", "extend_param.n_batch"): 72,
            ("RKLLMInput", "embed_input.n_tokens"): 24,
            ("RKLLMInput", "multimodal_input.video.frame_height"): 152,
            ("RKLLMInferParam", "sampling_params"): 24, ("RKLLMInferParam", "keep_history"): 32,
            ("RKLLMInferParam", "max_new_tokens"): 36, ("RKLLMCallback", "embed_userdata"): 40},
}


def ctypes_fields(cls, prefix="", base=0):
    """[(C path, offset, size)] of every field of a ctypes Structure/Union, recursively."""
    out = []
    anonymous = set(getattr(cls, "_anonymous_", ()))
    for name, ftype in cls._fields_:
        desc = getattr(cls, name)
        offset = base + desc.offset
        path = prefix if name in anonymous else prefix + name
        if name not in anonymous:
            out.append((path, offset, desc.size))
        if isinstance(ftype, type) and issubclass(ftype, (ctypes.Structure, ctypes.Union)):
            out += ctypes_fields(ftype, path + "." if path else "", offset)
    return out


def c_program(header: str, structs: dict) -> str:
    lines = [f'#include "{header}"', "#include <stdio.h>", "#include <stddef.h>",
             "int main(void) {", '  printf("{\\n");']
    entries = []
    for cname, cls in structs.items():
        entries.append(f'  printf("\\"{cname}\\": [%zu, %zu],\\n", sizeof({cname}), '
                       f"_Alignof({cname}));")
        for path, _, _ in ctypes_fields(cls):
            entries.append(f'  printf("\\"{cname}:{path}\\": [%zu, %zu],\\n", '
                           f"offsetof({cname}, {path}), sizeof((({cname} *)0)->{path}));")
    lines += entries
    lines += ['  printf("\\"end\\": [0, 0]\\n}\\n");', "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def c_layout(tmp_path, header: str, structs: dict, include_dir=C_DIR) -> dict:
    src = tmp_path / "layout.c"
    exe = tmp_path / "layout"
    src.write_text(c_program(header, structs))
    subprocess.run(["gcc", "-std=c11", "-Wall", "-I", str(include_dir), "-o", str(exe), str(src)],
                   check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


@needs_gcc
@pytest.mark.parametrize("abi", ["1.2", "1.3"])
def test_ctypes_layout_matches_c(tmp_path, abi):
    structs = STRUCTS[abi]
    c = c_layout(tmp_path, HEADERS[abi], structs)
    mismatches = []
    n_fields = 0
    for cname, cls in structs.items():
        if c[cname] != [ctypes.sizeof(cls), ctypes.alignment(cls)]:
            mismatches.append(f"{cname}: C size/align {c[cname]}, ctypes "
                              f"{[ctypes.sizeof(cls), ctypes.alignment(cls)]}")
        for path, offset, size in ctypes_fields(cls):
            n_fields += 1
            if c[f"{cname}:{path}"] != [offset, size]:
                mismatches.append(f"{cname}.{path}: C offset/size {c[f'{cname}:{path}']}, "
                                  f"ctypes {[offset, size]}")
    assert mismatches == []
    assert n_fields > 60  # the walk really covered the nested fields


@needs_gcc
def test_layout_check_detects_a_wrong_field(tmp_path):
    """A ctypes struct with one field type changed must show up as a mismatch."""
    class Wrong(ctypes.Structure):
        _fields_ = [("prefill_time_ms", ctypes.c_float), ("prefill_tokens", ctypes.c_int64),
                    ("generate_time_ms", ctypes.c_float), ("generate_tokens", ctypes.c_int),
                    ("memory_usage_mb", ctypes.c_float)]
    c = c_layout(tmp_path, HEADERS["1.2"], {"RKLLMPerfStat": Wrong})
    assert c["RKLLMPerfStat:generate_time_ms"] == [8, 4]
    assert Wrong.generate_time_ms.offset == 16
    assert c["RKLLMPerfStat"][0] != ctypes.sizeof(Wrong)


@pytest.mark.skipif(ctypes.sizeof(ctypes.c_void_p) != 8, reason="LP64 figures need a 64-bit ABI")
@pytest.mark.parametrize("abi", ["1.2", "1.3"])
def test_lp64_figures_from_rockchip_header(abi):
    structs = STRUCTS[abi]
    sizes = {name: ctypes.sizeof(structs[name]) for name in LP64_SIZES[abi]}
    assert sizes == LP64_SIZES[abi]
    offsets = {key: dict((p, o) for p, o, _ in ctypes_fields(structs[key[0]]))[key[1]]
               for key in LP64_OFFSETS[abi]}
    assert offsets == LP64_OFFSETS[abi]


def test_probe_offsets_follow_the_layouts():
    """abi_from_default_param reads n_batch at fixed byte offsets: they must be the real ones."""
    assert rkllm.RKLLMParam12.extend_param.offset + rkllm.RKLLMExtendParam.n_batch.offset == 100
    assert rkllm.RKLLMParam13.extend_param.offset + rkllm.RKLLMExtendParam.n_batch.offset == 72
    assert rkllm.RKLLMParam13.is_async.offset == 58
    assert rkllm.RKLLMParam12.extend_param.offset + rkllm.RKLLMExtendParam.embed_flash.offset == 92
    assert ctypes.sizeof(rkllm._DefaultParamProbe) >= max(
        ctypes.sizeof(rkllm.RKLLMParam12), ctypes.sizeof(rkllm.RKLLMParam13))
