"""DeepSpeed's accelerator for this program when the machine has no GPU.

It is DeepSpeed's own CPU accelerator with two differences, installed through DeepSpeed's public
`set_accelerator` when the program joins its job (`parallel.init_distributed`):
- no shared-memory communication op: DeepSpeed uses it only for inference, and building it is a
  ~60 s JIT compile on the first `init_distributed` of a machine;
- fp16 counts as supported: DeepSpeed reports it unsupported without mkldnn's fp16, yet fp16 with
  loss scaling runs on a CPU (slowly), which lets that path be tested without a GPU.
"""

from __future__ import annotations

from deepspeed.accelerator import get_accelerator, set_accelerator
from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator

SHARED_MEMORY_COMM = "ShareMemCommBuilder"


class TrainingCPUAccelerator(CPU_Accelerator):
    def create_op_builder(self, op_name):
        return None if op_name == SHARED_MEMORY_COMM else super().create_op_builder(op_name)

    def is_fp16_supported(self) -> bool:
        return True


def use_training_accelerator() -> None:
    """On a machine whose DeepSpeed accelerator is the CPU, use `TrainingCPUAccelerator` instead."""
    current = get_accelerator()
    if current.device_name() == "cpu" and not isinstance(current, TrainingCPUAccelerator):
        set_accelerator(TrainingCPUAccelerator())
