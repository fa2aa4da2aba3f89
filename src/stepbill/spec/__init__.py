"""Inputs of the bill: the model architecture (ModelSpec) and where it comes from."""

from stepbill.spec.model import AttentionSpec, FFNSpec, ModelSpec, MoESpec
from stepbill.spec.presets import load_model, load_preset, preset_names

__all__ = ["AttentionSpec", "FFNSpec", "ModelSpec", "MoESpec", "load_model", "load_preset", "preset_names"]
