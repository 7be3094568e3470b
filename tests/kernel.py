"""A real Jupyter kernel, started and driven as JupyterLab drives one (jupyter_client), for the
kernel tests (tests/test_kernels.py, tests/test_stop_button.py) and benchmarks/stop_button.py."""

from __future__ import annotations

import os
import queue
import time

from jupyter_client.manager import start_new_kernel


class Kernel:
    """A Jupyter kernel and a client for it; run() executes a cell and returns its outputs."""

    def __init__(self, env: dict[str, str]):
        self.manager, self.client = start_new_kernel(kernel_name="python3",
                                                     env={**os.environ, **env})
        self.pid = self.manager.provisioner.process.pid

    def submit(self, code: str) -> str:
        return self.client.execute(code)

    def wait_busy(self, msg_id: str, timeout: float) -> None:
        """Wait until the kernel says it has begun the submitted cell (its status 'busy');
        everything before that on the IOPub channel belongs to earlier cells."""
        deadline = time.monotonic() + timeout
        while True:
            msg = self.client.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                    and msg["content"]["execution_state"] == "busy"):
                return

    def wait(self, msg_id: str, timeout: float) -> tuple[str, str]:
        """(status, outputs) of a submitted cell; raises TimeoutError if it does not return."""
        outputs, deadline = [], time.monotonic() + timeout
        while True:
            try:
                msg = self.client.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"the cell had not ended after {timeout:g} s; its outputs so "
                                   f"far: {''.join(outputs)[-600:]!r}") from None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            content, kind = msg["content"], msg["msg_type"]
            if kind == "stream":
                outputs.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                outputs.append(content["data"].get("text/plain", ""))
            elif kind == "error":
                outputs.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "status" and content["execution_state"] == "idle":
                break
        while True:  # the reply to this cell: not a late answer to an earlier request
            # (start_new_kernel asks for kernel_info again each second until one reply comes,
            # so on a busy machine a second kernel_info_reply may be waiting here)
            reply = self.client.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"]["status"], "".join(outputs)

    def run(self, code: str, timeout: float = 60) -> str:
        """Execute a cell; return its outputs, or raise AssertionError with its error."""
        status, outputs = self.wait(self.submit(code), timeout)
        assert status == "ok", outputs
        return outputs

    def interrupt(self) -> None:
        """What JupyterLab's stop button does (SIGINT to the kernel)."""
        self.manager.interrupt_kernel()

    def close(self) -> None:
        """Stop the cluster, if one is running, and the kernel (if it is still alive)."""
        if self.manager.is_alive():
            self.run("from helpers.cluster.core import Cluster\n"
                     "if Cluster.current is not None: Cluster.current.stop()", timeout=30)
            self.manager.shutdown_kernel(now=True)
        else:  # killed: close what the manager holds (its control socket, connection file)
            self.manager.cleanup_resources()
        self.client.stop_channels()
