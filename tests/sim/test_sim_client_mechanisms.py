"""The client beside the vendor, and the account-level mechanisms, on a VirtualClock (issue #34).

Each test switches one mechanism on and checks the behaviour a user reads the 960 table by: the client's deadline
is the client's failure (the vendor never ends the sandbox), its semaphore bounds STARTING, leaked or slow-to-die
sandboxes hold the account cap, the start bucket and the pipeline's concurrency queue boots instead of refusing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from foundation.errors import UsageError
from foundation.sandbox_client import CLIENT_DEADLINE_KIND, CLIENTS, SandboxClient, client_named
from providers.sim.core import mechanisms_table
from providers.sim.core.clock import VirtualClock
from providers.sim.core.experiments import simulate_burst, simulate_closed_loop
from providers.sim.core.profile import Profile, load_profile
from providers.sim.core.records import CreateRequest, Rejected, RejectReason, SandboxStatus
from providers.sim.core.simulator import VendorSimulator

REQ = CreateRequest(image="python:3.12-slim", labels=("t",), lifetime_s=3600.0)


def _profile(**overrides: object) -> Profile:
    """modal-like with no noise: boots of exactly `boot.median_s`, no injected errors, no power law."""
    base: dict[str, object] = {
        "boot.sigma": 0.0,
        "boot.congestion_exponent": 0.0,
        "boot.load_delay_s": 0.0,
        "errors.create_transient_prob": 0.0,
        "errors.boot_crash_prob": 0.0,
    }
    return load_profile("modal-like").with_overrides({**base, **overrides})


def _client(**fields: Any) -> SandboxClient:
    return dataclasses.replace(CLIENTS["none"], name="test", **fields)


def test_every_preset_names_a_source_for_every_value() -> None:
    for client in CLIENTS.values():
        assert set(client.sources) >= set(client.values()), client.name
    with pytest.raises(ValueError, match="no source"):
        SandboxClient(name="x", description="x")
    with pytest.raises(UsageError, match="swe-rex-uni-agent"):
        client_named("swe-rex")


def test_modal_like_has_no_vendor_deadline_the_client_has_it() -> None:
    assert load_profile("modal-like").startup.deadline_s == float("inf")
    assert CLIENTS["swe-rex-uni-agent"].startup_deadline_s == 300.0
    assert CLIENTS["swe-rex-uni-agent"].message(299.0) == "Runtime did not start within 299s"


def test_a_start_past_the_client_deadline_is_the_clients_failure_and_the_client_deletes_it() -> None:
    profile = _profile(**{"boot.median_s": 1000.0})
    client = _client(startup_deadline_s=300.0)
    result = simulate_burst(profile, 3, client=client)
    assert [s.failure for s in result.samples] == [CLIENT_DEADLINE_KIND] * 3
    assert {s.phase for s in result.samples} == {"ready"}
    # the vendor never gave up on them: the client terminated them (no vendor PROVISIONING_TIMEOUT)
    assert result.stats["ended"] == {str(SandboxStatus.TERMINATED): 3}


def test_the_client_semaphore_bounds_starting_sandboxes() -> None:
    profile = _profile(**{"boot.median_s": 10.0})
    result = simulate_burst(profile, 20, client=_client(max_starting=3))
    assert result.failure_rate == 0.0
    assert result.peak_client_starting == 3
    assert result.stats["peak_provisioning"] <= 3
    # startup runs from the rollout's arrival, so the semaphore's queue shows: 20 / 3 rounds of 10 s boots
    assert result.startups()[-1] >= 60.0


def test_leaked_sandboxes_hold_the_cap_and_refuse_creates() -> None:
    profile = _profile(**{"boot.median_s": 100.0, "quota.max_active": 4})
    leaky = _client(startup_deadline_s=10.0, retries=1, leak_prob=1.0)
    result = simulate_burst(profile, 4, client=leaky)
    assert result.leaked == 4
    assert result.failures() == {str(RejectReason.QUOTA_EXHAUSTED): 4}  # the retries met a full account
    tidy = simulate_burst(profile, 4, client=dataclasses.replace(leaky, leak_prob=0.0))
    assert tidy.leaked == 0
    assert tidy.failures() == {CLIENT_DEADLINE_KIND: 4}  # the retries got in (and timed out again)


def test_a_slow_to_die_sandbox_counts_against_the_cap_until_it_is_gone() -> None:
    clock = VirtualClock()
    sim = VendorSimulator(_profile(**{"quota.max_active": 1, "account.teardown_s": 30.0}), seed=0, clock=clock)
    first = sim.create(REQ)
    clock.run_until(5.0)
    sim.terminate(first.id)
    with pytest.raises(Rejected) as refused:
        sim.create(REQ)
    assert refused.value.reason is RejectReason.QUOTA_EXHAUSTED
    clock.run_until(5.0 + 30.0)
    assert sim.create(REQ).status is SandboxStatus.PENDING
    sim.close()


def test_the_start_bucket_queues_boots_instead_of_refusing_creates() -> None:
    profile = _profile(**{"boot.median_s": 1.0, "account.start_per_s": 1.0, "account.start_burst": 1.0})
    result = simulate_burst(profile, 5)
    assert result.failure_rate == 0.0
    assert result.stats["rejected"] == {}
    # one boot a second: the fifth starts at t = 4 and runs at t = 5
    assert result.ttis()[-1] == pytest.approx(5.0, abs=0.5)
    assert result.stats["start_waits"] == 4


def test_the_start_pipeline_boots_at_most_max_starting_at_once() -> None:
    profile = _profile(**{"boot.median_s": 10.0, "account.max_starting": 2.0})
    result = simulate_burst(profile, 6)
    assert result.failure_rate == 0.0
    assert sorted(round(t) for t in result.ttis()) == [10, 10, 20, 20, 30, 30]


def test_the_closed_loop_holds_its_in_flight_and_paces_creates() -> None:
    result = simulate_closed_loop(_profile(), 8, 3, hold_s=100.0, client=CLIENTS["swe-rex-uni-agent"])
    assert result.failure_rate == 0.0
    assert result.stats["peak_active"] == 8
    assert result.stats["created"] == 24


README = Path(__file__).parents[2] / "README.md"


@pytest.mark.slow
def test_the_checked_in_mechanisms_table_is_the_generators_output() -> None:
    checked_in = Path(mechanisms_table.__file__).with_name("mechanisms-960.md").read_text()
    regenerated = mechanisms_table.report(
        range(mechanisms_table.TABLE_SEEDS), mechanisms_table.ROLLOUTS_PER_WORKER, mechanisms_table.CLIENT_BLOCKS
    )
    assert checked_in == mechanisms_table.HEADER + regenerated
    # the README's Job 2 summary, every row (the scale-up lag's too), is the generator's as well
    assert mechanisms_table.readme_table(mechanisms_table.printed_cells(regenerated)) in README.read_text()


def test_the_readmes_mechanism_table_is_the_checked_in_tables_summary() -> None:
    """Fast half of the check above: README.md's Job 2 table says, row by row, what `mechanisms-960.md` (the
    generator's output, checked by the slow test) says for uni-agent's pre-#47 client; a figure typed into either
    alone fails here."""
    checked_in = mechanisms_table.TABLE_FILE.read_text()
    summary = mechanisms_table.readme_table(mechanisms_table.printed_cells(checked_in))
    assert len(summary.splitlines()) == 2 + len(mechanisms_table.README_ROWS)
    assert summary in README.read_text(), summary


def test_the_readme_summary_reads_the_printed_cells_back() -> None:
    """`printed_cells` reads what `table` prints: the summary from rows and from their printout are the same."""
    rows = [
        mechanisms_table.TableRow(m.name, m.source, 10, 0.5, 0.6, 2.0, 900.0 + i, 1000.0 + i, 0, {})
        for i, m in enumerate(mechanisms_table.MECHANISMS)
    ]
    printed = f"client {mechanisms_table.CLIENT}: described\n\n{mechanisms_table.table(rows)}"
    by_rows = mechanisms_table.readme_table(mechanisms_table.cells(rows))
    assert by_rows == mechanisms_table.readme_table(mechanisms_table.printed_cells(printed))
    assert "| scale-up lag 45 s | assumed | 50.0% | 15.1 / 16.8 min |" in by_rows
