"""Lakestream from Python: seal training batches into a lakefs-produce
staging directory (Batch), watch what the producer did with them (pending,
rejected), and read a lakefs-mount's steps in PyTorch (lakestream.torch,
which alone imports torch). The standard library is all this needs.
"""
from .names import check_batch_name, check_file_name, check_step_name
from .staging import Batch, Rejected, is_sealed, pending, rejected

__all__ = ["Batch", "Rejected", "check_batch_name", "check_file_name", "check_step_name",
           "is_sealed", "pending", "rejected"]
__version__ = "0.1.0"
