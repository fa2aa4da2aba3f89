"""stepbill: the complete bill of one LLM training step, proved against PyTorch."""

from stepbill.errors import StepbillError

__version__ = "0.1.0"
__all__ = ["StepbillError", "__version__"]
