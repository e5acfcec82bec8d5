"""`PipesSubprocessClient.run`, with the command in a process group of its own that is ended as a
whole when the run is terminated.

Dagster's client forwards SIGINT to the launched process alone and, if it has not exited after
`termination_timeout_seconds`, leaves it running. The deepspeed launcher's rank processes, and
whatever a stuck launcher started, would outlive the run. Here the command starts a new session,
so on an interrupt the whole group gets SIGINT and then, whatever is left after the timeout,
SIGKILL. (torchrun puts each rank in a session of its own; those ranks die with torchrun through
`lm_assets.training.orphans`.)
"""

import os
import signal
from collections.abc import Mapping, Sequence
from subprocess import DEVNULL, Popen, TimeoutExpired

import dagster as dg


class ProcessFailed(RuntimeError):
    """The launched process exited with a non-zero status."""


def run_in_process_group(
    client: dg.PipesSubprocessClient,
    *,
    context: dg.AssetExecutionContext,
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> dg.PipesClientCompletedInvocation:
    """`client.run(context=..., command=..., env=..., cwd=...)`, with the client's settings."""
    with dg.open_pipes_session(
        context=context, context_injector=client.context_injector, message_reader=client.message_reader
    ) as session:
        process = Popen(
            command,
            cwd=cwd or client.cwd,
            env={**os.environ, **client.env, **(env or {}), **session.get_bootstrap_env_vars()},
            stdout=None if client.forward_stdio else DEVNULL,
            stderr=None if client.forward_stdio else DEVNULL,
            start_new_session=True,
        )
        try:
            process.wait()
        except BaseException:  # DagsterExecutionInterruptedError when the run is terminated
            context.log.info(f"[pipes] execution interrupted, stopping process group {process.pid}")
            stop_group(process, client.termination_timeout_seconds)
            raise
        if process.returncode != 0:
            raise ProcessFailed(f"External execution process failed with code {process.returncode}")
    return dg.PipesClientCompletedInvocation(session)


def stop_group(process: Popen, timeout: float) -> None:
    """SIGINT to `process`'s group (it leads it), SIGKILL to what is left of it after `timeout`."""
    _signal_group(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=timeout)
    except TimeoutExpired:
        pass
    _signal_group(process.pid, signal.SIGKILL)
    process.wait()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass  # the group is empty


__all__ = ["ProcessFailed", "run_in_process_group", "stop_group"]
