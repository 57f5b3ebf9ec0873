"""`stampede run`'s command line, apart from harness/cli/run.py: that module imports Locust (which patches the
interpreter with gevent), and building the parser must not."""

from __future__ import annotations

import argparse
import os

from foundation.cli_help import set_env_var
from foundation.converters import bounded_int
from harness.wire.messages import OTLP_ENDPOINT_ENV

SPAWN_RATE_ENV = "STAMPEDE_SPAWN_RATE"
METRICS_PORT_ENV = "STAMPEDE_METRICS_PORT"
METRICS_HOST_ENV = "STAMPEDE_METRICS_HOST"
MAX_LOCAL_WORKERS = 256  # each is a Locust process and an engine: two busy processes


def workers_count(text: object) -> int | str:
    """`--workers`: `auto`, or how many local workers (0: none)."""
    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        return bounded_int(0, MAX_LOCAL_WORKERS)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or auto)") from None


def add_arguments(run: argparse.ArgumentParser) -> None:
    from harness.locust.setting_values import DEFAULT_SCENARIO, MAX_IN_FLIGHT, in_flight, rate, seconds_or_zero
    from harness.locust.settings import DEFAULT_SPAWN_RATE
    from harness.locust.settings import add_arguments as add_stampede_arguments

    run.add_argument(
        "--scenario", default=DEFAULT_SCENARIO, help="scenario name (ramp, burst, ...) or path to a locustfile"
    )
    dist = run.add_argument_group("distributed (Locust master and workers, each worker with its own engine)")
    dist.add_argument(
        "--workers",
        default="auto",
        type=workers_count,
        help="run a master here and N local worker processes, each with its own engine (default auto: one "
        "process, or as many engines as the peak in flight needs)",
    )
    dist.add_argument("--master", action="store_true", help="be the master for workers on other machines")
    dist.add_argument(
        "--expect-workers", type=bounded_int(1, MAX_IN_FLIGHT), default=1, help="--master: wait for this many workers"
    )
    dist.add_argument(
        "--master-bind-host",
        default="127.0.0.1",
        help="--master: interface to listen on; workers on other machines need another (say 0.0.0.0), and every "
        "worker that connects is handed the vendor token: a private network only",
    )
    dist.add_argument("--worker", action="store_true", help="be a worker of the master at --master-host")
    dist.add_argument("--master-host", default="127.0.0.1", help="--worker: the master's address")
    dist.add_argument(
        "--master-port", type=bounded_int(1, 65535), default=5557, help="the master's port (default 5557)"
    )
    live = run.add_argument_group("live metrics (harness/locust/live/metrics_endpoint.py)")
    metrics_port = live.add_argument(
        "--metrics-port",
        type=bounded_int(0, 65535),
        default=os.environ.get(METRICS_PORT_ENV, 0),  # argparse converts (and checks) a string default with `type`
        help="serve the run's live metrics for Prometheus on this port (the master's, every worker labelled; 0: off)",
    )
    set_env_var(metrics_port, METRICS_PORT_ENV)
    metrics_host = live.add_argument(
        "--metrics-host",
        default=os.environ.get(METRICS_HOST_ENV, "127.0.0.1"),
        help="--metrics-port: interface to listen on (a scraper on another machine needs another, say 0.0.0.0)",
    )
    set_env_var(metrics_host, METRICS_HOST_ENV)
    otlp = live.add_argument(
        "--otlp-endpoint",
        type=otlp_endpoint,
        default=os.environ.get(OTLP_ENDPOINT_ENV, ""),
        metavar="URL",
        help="push the same metrics, and a trace per rollout with a span per phase, to this OpenTelemetry collector "
        "(OTLP over HTTP/protobuf, its base URL, say http://127.0.0.1:4318; needs `stampede[otlp]`; empty: off)",
    )
    set_env_var(otlp, OTLP_ENDPOINT_ENV)
    run.add_argument(
        "-u",
        "--users",
        type=in_flight,
        default=None,
        help="peak concurrency: the last ramp stage, or the burst size (default: the scenario's)",
    )
    spawn_rate = run.add_argument(
        "-r",
        "--spawn-rate",
        type=rate,
        default=os.environ.get(SPAWN_RATE_ENV),  # argparse converts (and checks) a string default with `type`
        help=f"users started per second between stages (default: {DEFAULT_SPAWN_RATE:g}; a burst: all at once)",
    )
    set_env_var(spawn_rate, SPAWN_RATE_ENV)
    run.add_argument(
        "-t", "--run-time", default=None, help="stop after this long, e.g. 90s, 5m (default: the shape's end)"
    )
    run.add_argument(
        "--stop-timeout",
        type=seconds_or_zero,
        default=None,
        help="seconds in-flight rollouts get to finish when the run ends (default: 60)",
    )
    add_stampede_arguments(run, locust=False)


def otlp_endpoint(text: str) -> str:
    """`--otlp-endpoint`: an http(s) base URL with a host (the exporters add /v1/traces and /v1/metrics), or empty."""
    from urllib.parse import urlsplit

    text = text.strip()
    if not text:
        return ""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  # a port out of range raises here
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r}: give the collector's http(s) URL, say http://127.0.0.1:4318")
    return text.rstrip("/")
