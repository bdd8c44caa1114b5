"""One ONNX encoder graph for several durations, derived from the bundle's fixed-size graphs.

scripts/export_onnx.py writes one graph per duration (``merged_{N}s.onnx``, ``backend_{N}s.onnx``)
built by the same code (qwen3asr_tools.onnx_graphs), so two sizes of a part differ only where
the size enters: the input and output dimensions, and the target shapes of a few Reshape nodes
(``[n_mels, C, 100]``, ``[C, 13, C_stem*F]``, ``[1, 13*C, d]``). ``dynamic_graph`` compares the
graphs of every size node by node, turns each such Reshape entry into -1 (inferred) and each
such dimension into a named free one, and saves the largest graph so changed next to them (the
weights stay in the shared ``encoder/weights.bin``). rknn-toolkit2 converts it once with
``config(dynamic_input=...)`` (qwen3asr_tools.onnx2rknn): one ``.rknn`` holding one copy of the
weights for every size.

Anything else that differs between two sizes (another op, an initializer that is not a
Reshape target, two size-dependent entries in one shape) is refused with
:class:`DynamicGraphError` rather than guessed at: the result must compute, at each size,
exactly what that size's own graph computes.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

import numpy as np


class DynamicGraphError(ValueError):
    """The fixed-size graphs differ in a way a single graph with free dimensions cannot express."""


@dataclasses.dataclass(frozen=True)
class DynamicGraph:
    """A saved graph with free dimensions and the shapes each size gives it."""

    path: str  # the saved .onnx (next to the fixed graphs: their weights file resolves from there)
    sizes: tuple[int, ...]  # durations in seconds (1 s chunks), ascending
    input_shapes: Mapping[int, Mapping[str, list[int]]]  # size -> input name -> shape
    output_shapes: Mapping[int, list[int]]  # size -> shape of the (first) output


def _dims(value_info) -> list[int]:
    return [int(d.dim_value) for d in value_info.type.tensor_type.shape.dim]


def _load(path: str):
    import onnx

    return onnx.load(path, load_external_data=False)


def dynamic_graph(paths: Mapping[int, str], out_path: str) -> DynamicGraph:
    """Derive and save one graph for every size of ``paths`` (size in seconds -> fixed graph).

    Needs two or more sizes (one size has nothing to vary). ``out_path`` must be in the fixed
    graphs' directory when they keep their weights in an external file.

    Raises:
      DynamicGraphError: fewer than two sizes, or the graphs differ beyond sizes (see the module).
    """
    from onnx import numpy_helper

    sizes = tuple(sorted(int(s) for s in paths))
    if len(sizes) < 2:
        raise DynamicGraphError(f"a dynamic-shape graph needs two or more sizes, got {list(sizes)}")
    models = {s: _load(paths[s]) for s in sizes}
    base = models[sizes[-1]]  # the largest: the toolkit's "MaxShape"
    where = ", ".join(os.path.basename(paths[s]) for s in sizes)
    ops = [(n.op_type, list(n.input), list(n.output)) for n in base.graph.node]
    for s in sizes:
        g = models[s].graph
        if [(n.op_type, list(n.input), list(n.output)) for n in g.node] != ops:
            raise DynamicGraphError(f"{where}: the graphs of {sizes[-1]} s and {s} s have different nodes; "
                                    f"re-export the bundle with one exporter version")
        if [i.name for i in g.input] != [i.name for i in base.graph.input] or \
                [o.name for o in g.output] != [o.name for o in base.graph.output]:
            raise DynamicGraphError(f"{where}: the graphs of {sizes[-1]} s and {s} s have different inputs/outputs")
    reshape_targets = {n.input[1] for n in base.graph.node if n.op_type == "Reshape"}
    other_uses = {i for n in base.graph.node if n.op_type != "Reshape" for i in n.input} | \
        {i for n in base.graph.node if n.op_type == "Reshape" for i in n.input[:1]}
    inits = {s: {t.name: t for t in models[s].graph.initializer} for s in sizes}
    for t in base.graph.initializer:
        blobs = {inits[s][t.name].SerializeToString() if t.name in inits[s] else None for s in sizes}
        if len(blobs) == 1:
            continue  # the same tensor (or the same place in the shared weights file) at every size
        if t.name not in reshape_targets or t.name in other_uses:
            raise DynamicGraphError(f"{where}: initializer {t.name!r} differs between sizes and is not only a "
                                    f"Reshape target shape")
        arrays = [numpy_helper.to_array(inits[s][t.name]) for s in sizes]
        if arrays[0].ndim != 1 or arrays[0].dtype != np.int64 or len({a.shape for a in arrays}) != 1:
            raise DynamicGraphError(f"{where}: Reshape shape {t.name!r} differs in length or type between sizes")
        varying = np.nonzero(np.any(np.stack(arrays) != arrays[-1], axis=0))[0]
        if len(varying) != 1 or np.any(arrays[-1] == -1):
            raise DynamicGraphError(f"{where}: Reshape shape {t.name!r} ({arrays[-1].tolist()}) has "
                                    f"{len(varying)} size-dependent entries and {int(np.sum(arrays[-1] == -1))} "
                                    f"inferred ones; one graph for all sizes needs exactly one and none")
        free = arrays[-1].copy()
        free[varying[0]] = -1
        t.CopyFrom(numpy_helper.from_array(free, t.name))
    in_shapes = {s: {i.name: _dims(i) for i in models[s].graph.input} for s in sizes}
    out_shapes = {s: _dims(models[s].graph.output[0]) for s in sizes}
    for k, vi in enumerate(list(base.graph.input) + list(base.graph.output)):
        per_size = [_dims((list(models[s].graph.input) + list(models[s].graph.output))[k]) for s in sizes]
        if len({len(p) for p in per_size}) != 1:
            raise DynamicGraphError(f"{where}: {vi.name} has a different rank at different sizes")
        for axis, dim in enumerate(vi.type.tensor_type.shape.dim):
            if len({p[axis] for p in per_size}) > 1:
                dim.Clear()
                dim.dim_param = f"{vi.name}_{axis}"
    base.graph.ClearField("value_info")  # shapes inside are the largest size's: let tools infer them
    base.graph.name += "_dynamic"
    import onnx

    onnx.save_model(base, out_path)
    return DynamicGraph(out_path, sizes, in_shapes, out_shapes)


__all__ = ["DynamicGraph", "DynamicGraphError", "dynamic_graph"]
