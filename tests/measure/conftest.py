"""Shared fixtures of the measurement tests: skip without torch, tiny configs."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("torch", reason="needs torch: pip install 'stepbill[measure]'")
pytest.importorskip("transformers", reason="needs transformers: pip install 'stepbill[measure]'")

# transformers warns about the deprecated gradient_checkpointing_enable name and tiny-vocab token ids.
warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
