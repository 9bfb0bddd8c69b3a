"""The ONNX cache key covers the code that shapes the exported graph: the exporter and every formulation
it swaps in while exporting."""

from __future__ import annotations

import hashlib
import inspect
import sys
from pathlib import Path

from phazec.frontend import export
from phazec.frontend.moe import routing_of, static_experts, static_latent_attention
from phazec.frontend.mtp import add_mtp, mtp_loss_of
from phazec.frontend.rotary import real_rotary


def test_the_key_digests_the_exporter_and_the_formulations_it_swaps_in() -> None:
    swapped_in = {
        static_experts, static_latent_attention, routing_of, real_rotary, add_mtp, mtp_loss_of,
        export.export_proto,
    }  # fmt: skip
    modules = {Path(inspect.getfile(sys.modules[f.__module__])).name for f in swapped_in}
    assert modules == set(export.EXPORT_SOURCES) == {"export.py", "moe.py", "mtp.py", "rotary.py"}
    folder = Path(export.__file__).parent
    expected = hashlib.sha256(b"".join((folder / name).read_bytes() for name in export.EXPORT_SOURCES))
    assert export.export_sources_digest() == expected.hexdigest()
