"""A rank does not outlive its launcher.

torchrun starts each rank in a session of its own, so when torchrun is SIGKILLed (or the deepspeed
launcher's `launch.py` is) nothing signals the ranks: they would go on training and writing
checkpoints. `die_with_launcher` asks the Linux kernel to SIGKILL this process when its parent
exits (`PR_SET_PDEATHSIG`); elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def die_with_launcher() -> None:
    if not sys.platform.startswith("linux"):
        return
    launcher = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    # SIGKILL: a rank blocked in a collective, or handling SIGTERM, must still go.
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if os.getppid() != launcher:  # it died before the prctl, so the kernel will not signal us
        sys.stderr.write("launcher exited before this rank started; exiting\n")
        os._exit(1)


__all__ = ["die_with_launcher"]
