"""The open-files limit a rollout engine, a local Modal and the docker provider lift so thousands of
connections fit: raised toward what is wanted, capped at the hard limit, never lowered."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_soft_limit_rises_to_what_is_wanted_then_the_hard_limit_and_never_falls() -> None:
    script = textwrap.dedent(
        """
        import resource
        from foundation.open_files import raise_open_files_limit
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        raise_open_files_limit(300)
        after_wanted = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        raise_open_files_limit()
        after_max = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        raise_open_files_limit(100)
        after_less = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        new_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        # a process allowed to (CAP_SYS_RESOURCE) lifts a hard limit below the target; others stop at it
        expected_max = 262144 if new_hard == resource.RLIM_INFINITY else min(262144, new_hard)
        assert new_hard == resource.RLIM_INFINITY or new_hard >= min(hard, 262144)
        assert (after_wanted, after_max, after_less) == (300, expected_max, expected_max), (
            after_wanted, after_max, after_less, hard)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_the_reachable_limit_is_what_a_process_may_really_lift_itself_to() -> None:
    """Being root says nothing (a container's root may be held at 20,000): the answer is what setrlimit allows."""
    script = textwrap.dedent(
        """
        import resource
        from foundation.open_files import _kernel_cap, reachable_open_files
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        reachable = reachable_open_files()
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, _kernel_cap()))
            may_lift = True
        except (ValueError, OSError):
            may_lift = False
        assert reachable == (_kernel_cap() if may_lift or hard == resource.RLIM_INFINITY else hard), (reachable, hard)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_a_peak_is_spread_over_as_many_processes_as_its_connections_need() -> None:
    from foundation.open_files import FD_RESERVE, processes_for_open_files

    assert processes_for_open_files(None) == 1 and processes_for_open_files(0, open_files=1_000) == 1
    assert processes_for_open_files(20_000, open_files=20_000) == 2  # this machine: root held at 20,000
    assert processes_for_open_files(1_500 - FD_RESERVE, open_files=1_500) == 1
    assert processes_for_open_files(1_500 - FD_RESERVE + 1, open_files=1_500) == 2
