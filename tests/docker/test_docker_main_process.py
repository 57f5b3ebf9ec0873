"""The docker adapter's host-side evidence that a container died: its main process has exited, even while the
daemon (slow to record it on a loaded machine) still says running."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from providers.vendors.docker.commands import main_process_gone


def test_a_live_process_is_not_gone_and_an_unknown_pid_claims_nothing():
    assert not main_process_gone({"Pid": os.getpid()})
    assert not main_process_gone({"Pid": 0}) and not main_process_gone({})


def test_an_exited_process_is_gone_while_a_zombie_and_once_reaped():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    for _ in range(500):  # exited but not yet waited for: a zombie, as a container's init is until its shim reaps it
        with open(f"/proc/{child.pid}/stat", encoding="utf-8") as handle:
            if handle.read().rsplit(")", 1)[-1].split()[0] == "Z":
                break
        time.sleep(0.01)
    assert main_process_gone({"Pid": child.pid})
    child.wait()
    assert main_process_gone({"Pid": child.pid})
