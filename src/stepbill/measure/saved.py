"""What autograd saves for backward in one forward of the training step (``saved_tensors_hooks``).

Each saved storage is listed once (deduped by ``untyped_storage()._cdata``: q, k and v views of one fused
projection, or a tensor saved by two ops, cost one storage), with the module that was running when it was
first saved (forward pre/post hooks keep a module stack) and every autograd node that saved it. Node names
come from walking the autograd graph after the forward: reading a node's ``_saved_<arg>`` attribute unpacks
the tensor through our hook, which tells which packed tensor it is — exact even for fake tensors.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from stepbill.measure.build import Attention, Mode
from stepbill.measure.session import Recipe, Recompute, StepSession


@dataclass(frozen=True)
class SavedTensor:
    """One storage kept alive by autograd between forward and backward.

    ``bytes`` is the whole storage's size in bytes (what memory holds), ``shape``/``dtype`` those of the
    first saved view; ``savers`` lists every ``Node.argument`` that saved a view of it (forward order).
    """

    order: int  #: rank of its first save in the forward
    bytes: int
    shape: tuple[int, ...]
    dtype: str
    module: str  #: dotted path of the innermost module running at the first save ("" = model root)
    node: str  #: autograd node of the first saver, e.g. "MmBackward0"
    argument: str  #: which saved argument of that node, e.g. "self" or "result"
    savers: tuple[str, ...] = field(default=())  #: every "Node.argument" that saved this storage
    #: "activation", "parameter", "input" (these two cost no activation memory) or "unreachable" (saved
    #: by a node the loss cannot reach, so freed after the forward).
    kind: str = "activation"

    @property
    def numel(self) -> int:
        """Elements of the first saved view."""
        n = 1
        for s in self.shape:
            n *= s
        return n


class _ModuleStack:
    """Forward pre/post hooks keep the path of the innermost running module."""

    def __init__(self, model: Any) -> None:
        self.stack: list[str] = []
        self.handles: list[Any] = []
        for name, module in model.named_modules():
            self.handles.append(module.register_forward_pre_hook(self._push(name)))
            self.handles.append(module.register_forward_hook(self._pop, always_call=True))

    def _push(self, name: str) -> Any:
        def hook(module: Any, args: Any) -> None:
            self.stack.append(name)

        return hook

    def _pop(self, module: Any, args: Any, output: Any) -> None:
        self.stack.pop()

    @property
    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


class _Recorder:
    """Pack hook stores each saved tensor with its module; unpack tells which one a node attribute holds."""

    def __init__(self, modules: _ModuleStack) -> None:
        self.modules = modules
        self.packed: list[tuple[Any, str]] = []  # (tensor, module at pack time)
        self.unpacked: list[int] = []  # indices unpacked since the last clear

    def pack(self, tensor: Any) -> int:
        self.packed.append((tensor, self.modules.current))
        return len(self.packed) - 1

    def unpack(self, index: int) -> Any:
        self.unpacked.append(index)
        return self.packed[index][0]


def _saved_attributes(node: Any) -> Iterator[tuple[str, Any]]:
    """(argument name, value) of a node's saved tensors; unpacking runs our hook."""
    for attr in dir(node):
        if attr.startswith("_saved_"):
            yield attr.removeprefix("_saved_"), attr
    if hasattr(node, "saved_tensors"):  # python autograd.Function (checkpoint, custom ops)
        yield "saved_tensors", "saved_tensors"


def _walk(root: Any) -> Iterator[Any]:
    seen: set[int] = set()
    todo = [root]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        todo.extend(fn for fn, _ in getattr(node, "next_functions", ()))


def _attribute(root: Any, recorder: _Recorder) -> dict[int, list[str]]:
    """packed index -> ["Node.argument", ...] by reading every saved attribute of every node once."""
    savers: dict[int, list[str]] = {}
    for node in _walk(root):
        for arg, attr in _saved_attributes(node):
            recorder.unpacked.clear()
            try:
                getattr(node, attr)
            except RuntimeError:  # already freed or not a tensor slot
                continue
            # Unpacking may hand back a new Python wrapper, so identity cannot be used: the hook records
            # which packed indices this attribute read (several for a tuple of saved tensors).
            for index in recorder.unpacked:
                savers.setdefault(index, []).append(f"{node.name()}.{arg}")
    return savers


@contextmanager
def recording(model: Any) -> Iterator[_Recorder]:
    """Hooks installed for the duration of one forward."""
    import torch

    modules = _ModuleStack(model)
    recorder = _Recorder(modules)
    try:
        with torch.autograd.graph.saved_tensors_hooks(recorder.pack, recorder.unpack):
            yield recorder
    finally:
        modules.remove()


def collect(session: StepSession) -> list[SavedTensor]:
    """Saved storages of one forward (and loss) of ``session``, in forward order."""
    model = session.model
    params = {p.untyped_storage()._cdata for p in model.parameters()}
    input_storage = session.input_ids.untyped_storage()._cdata
    with recording(model) as recorder:
        loss = session.forward_loss()
    savers = _attribute(loss.grad_fn, recorder)
    reachable = {recorder.packed[i][0].untyped_storage()._cdata for i in savers}
    out: dict[int, SavedTensor] = {}
    extra: dict[int, list[str]] = {}
    for index, (tensor, module) in enumerate(recorder.packed):
        storage = tensor.untyped_storage()
        key = storage._cdata
        # A tensor packed by a node that the loss cannot reach (e.g. DeepSeek's group top-k on a path
        # that ends in integer indices) is freed with that node right after the forward: not kept.
        names = savers.get(index, ["unreachable.?"])
        extra.setdefault(key, []).extend(names)
        if key in out:
            continue
        node, _, arg = names[0].partition(".")
        kind = "parameter" if key in params else "input" if key == input_storage else "activation"
        if key not in reachable:
            kind = "unreachable"
        out[key] = SavedTensor(order=len(out), bytes=int(storage.nbytes()), shape=tuple(int(s) for s in tensor.shape),
                               dtype=str(tensor.dtype).removeprefix("torch."), module=module, node=node,
                               argument=arg, kind=kind)
    del loss
    result = []
    for key, t in out.items():
        names = [n for n in dict.fromkeys(extra[key]) if not n.startswith("unreachable")] or ["unreachable.?"]
        node, _, arg = names[0].partition(".")
        result.append(SavedTensor(**{**t.__dict__, "savers": tuple(names), "node": node, "argument": arg}))
    return result


def saved_tensors(
    config_dict: dict[str, Any],
    *,
    recipe: Recipe = "fp32",
    micro_batch: int = 1,
    seq_len: int = 128,
    recompute: Recompute = "none",
    mode: Mode = "real",
    attention: Attention = "sdpa",
) -> list[SavedTensor]:
    """Storages autograd saves in one forward of the training step of ``config_dict``.

    Runs one warm-up iteration first so that the forward is the steady-state one. With
    ``recompute="full"`` only the inputs of the checkpointed layers (and what lives outside them) appear.
    """
    with StepSession(config_dict, recipe=recipe, micro_batch=micro_batch, seq_len=seq_len,
                     recompute=recompute, mode=mode, attention=attention) as session:
        session.iteration()
        return collect(session)


def total_bytes(tensors: list[SavedTensor], *, kinds: tuple[str, ...] = ("activation",)) -> int:
    """Sum of storage bytes of the given kinds (activations only by default)."""
    return sum(t.bytes for t in tensors if t.kind in kinds)
