"""Deep models from shallow exports: a lowered model with two identical blocks, repeated to any depth.

Exporting a 100-layer model to ONNX takes minutes; its blocks are identical, so the bench exports two
and repeats the second block's place in the layer graph (`deepen`). The result has the same layers,
classes and edges as lowering the deep model directly (checked by tests/test_fidelity_models.py).
"""

from dataclasses import replace

from phazec.errors import PhazecError
from phazec.ir.core import Layer, LayerKind, Model


def deepen(model: Model, blocks: int) -> Model:
    """`model` (embedding, exactly two blocks of one class, head) with `blocks` blocks instead.

    Edges from a non-block layer into block 1 go to every block after the first (e.g. a shared mask);
    block 0 -> block 1 becomes every block i -> i + 1; block 1 -> a later layer leaves the last block;
    the others keep their ends.

    Raises:
        PhazecError: the model does not have exactly two blocks of one class, or `blocks` < 2.
    """
    block_ids = [layer.index for layer in model.layers if layer.kind is LayerKind.BLOCK]
    if len(block_ids) != 2 or len({model.layers[i].cls for i in block_ids}) != 1 or blocks < 2:
        raise PhazecError(f"deepen needs a model with two blocks of one class and blocks >= 2, got {blocks}.")
    first, second = block_ids
    extra = blocks - 2

    def moved(index: int) -> int:
        return index + extra if index > second else index

    layers = []
    for layer in model.layers:
        if layer.index == second:
            layers += [Layer(first + i, f"block.{i}", LayerKind.BLOCK, layer.cls) for i in range(1, blocks)]
        elif layer.index != first:
            layers.append(Layer(moved(layer.index), layer.name, layer.kind, layer.cls))
        else:
            layers.append(layer)
    layers.sort(key=lambda layer: layer.index)
    edges = []
    for edge in model.edges:
        if edge.src == first and edge.dst == second:
            edges += [replace(edge, src=first + i, dst=first + i + 1) for i in range(blocks - 1)]
        elif edge.dst == second and edge.src not in block_ids:
            edges += [replace(edge, dst=first + i) for i in range(1, blocks)]
        elif edge.src == second:
            edges.append(replace(edge, src=first + blocks - 1, dst=moved(edge.dst)))
        elif edge.src == first:
            raise PhazecError(f"deepen cannot repeat edge {edge.src} -> {edge.dst} of model {model.name!r}.")
        else:
            edges.append(replace(edge, src=moved(edge.src), dst=moved(edge.dst)))
    edges.sort(key=lambda edge: (edge.src, edge.dst))
    block_cls = model.layers[first].cls
    classes = []
    for c, cls in enumerate(model.classes):
        repeated = tuple(first + i for i in range(blocks))
        members = repeated if c == block_cls else tuple(map(moved, cls.members))
        classes.append(replace(cls, members=members))
    block_params = model.classes[block_cls].graph.parameter_count()
    return replace(
        model,
        layers=layers,
        edges=edges,
        classes=classes,
        parameter_count=model.parameter_count + extra * block_params,
    )
