"""Stampede's settings as Locust custom arguments, so `locust -f scenarios/x.py` and `stampede run` agree.

Registered on Locust's parser (`init_command_line_parser`); each also reads a `STAMPEDE_*` environment
variable. `RunSettings.from_options` turns Locust's parsed namespace into one typed record that the rest of
the harness uses, and is where bad values become one clear error line.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from foundation.cli_help import set_env_var
from foundation.converters import (
    bounded_float,
    bounded_int,
    fraction,
    integer,
    positive_finite_float,
)
from foundation.sandbox_client import CLIENTS, client_named
from harness.errors import UsageError
from harness.locust.run_folder import check_run_id
from harness.locust.setting_values import (
    DEFAULT_PROFILE,
    DEFAULT_PROFILES,
    DEFAULT_PROVIDER,
    MAX_CPU,
    MAX_IN_FLIGHT,
    MAX_MEMORY_MB,
    MAX_RETRIES,
    MAX_SECONDS,
    as_list,
    check_positive,
    check_users_and_rate,
    default_profile,
    in_flight,
    paces_bursts,
    parse_argv,
    parse_key_values,
    parse_rates,
    parse_stages,
    parse_trainer,
    parse_turns,
    scenario_stem,
    seconds,
    seconds_or_zero,
)
from harness.results.figures.knee import DEFAULT_MAX_FAILURE_RATE, DEFAULT_P99_FACTOR
from harness.results.figures.thresholds import Threshold, parse_all
from harness.results.render.cli_options import seconds_option, threshold_option
from harness.wire.plan import (
    DEFAULT_COMMANDS,
    DEFAULT_TURN_COMMAND,
    RolloutPlan,
    commands_to_text,
    parse_commands,
)
from harness.wire.redact import MASK, is_secret_option, redact_data, secret_values
from harness.wire.script_plan import load_plan
from providers import LOCAL_VENDORS, PROVIDERS, sim_profile_names
from providers.base import DEFAULT_LIFETIME_S

DEFAULT_STAGES = (60, 120, 240, 480, 960)
DEFAULT_OUT = "results"
DEFAULT_SPAWN_RATE = 100.0  # users a stage adds per second unless -r says (a burst: all of them at once)
SECRET_OPTIONS = ("token",)
HOLDING_SCENARIOS = frozenset({"burst-hold"})
"""Scenarios whose `--hold` holds each sandbox (`RolloutPlan.hold_s`), not a stage: the scenario's file stem."""
DEFAULT_SANDBOX_HOLD_S = 30.0  # burst-hold without --hold


def holds_sandboxes(scenario: Any) -> bool:
    """Whether the scenario (a name, or a locustfile path as `locust -f` gives it) holds each sandbox."""
    return scenario_stem(scenario) in HOLDING_SCENARIOS


_LOCUST_ONLY_KEYWORDS = ("include_in_web_ui", "is_secret", "is_required", "is_multiple")


def _client_preset(text: str) -> str:
    """`--client`: a preset name of `foundation/sandbox_client.py`."""
    name = str(text).strip()
    if name not in CLIENTS:
        raise argparse.ArgumentTypeError(f"unknown client {name!r} (clients: {', '.join(CLIENTS)})")
    return name


def add_arguments(parser: Any, *, locust: bool = True) -> None:
    """Register stampede's arguments on Locust's parser, or (`locust=False`) on a plain argparse parser.

    One definition serves both, so `stampede run` and `locust -f` cannot drift apart.
    """
    # Locust's own parser only understands its web-UI keywords on the top level, not on groups.
    group = parser if locust else parser.add_argument_group("stampede", "sandbox fleet load test settings")

    def add(*names: str, **kwargs: Any) -> None:
        kwargs.setdefault("include_in_web_ui", False)
        if not locust:
            for keyword in _LOCUST_ONLY_KEYWORDS:
                kwargs.pop(keyword, None)
            env_var = kwargs.pop("env_var", None)
            if env_var and env_var in os.environ:
                raw = os.environ[env_var]
                # argparse converts a string default with `type`, reporting a bad value as a usage error.
                kwargs["default"] = [raw] if kwargs.get("action") == "append" else raw
            if env_var:
                set_env_var(group.add_argument(*names, **kwargs), env_var)
                return
        group.add_argument(*names, **kwargs)

    add(
        "--provider",
        default=DEFAULT_PROVIDER,
        env_var="STAMPEDE_PROVIDER",
        include_in_web_ui=True,
        help=f"sandbox vendor: {', '.join(PROVIDERS)} (stub: the embedded Prime-like stub), or module:Class",
    )
    add(
        "--base-url",
        default=None,
        env_var="STAMPEDE_BASE_URL",
        include_in_web_ui=True,
        help="API endpoint; for --provider stub, a standalone stub instead of the embedded one",
    )
    add(
        "--local",
        "--modal-local",
        "--prime-local",
        dest="local",
        action="store_true",
        default=False,
        env_var="STAMPEDE_LOCAL",
        help="run the provider against its simulated vendor, started for the run on 127.0.0.1 (implied for stub;"
        f" providers with one: {', '.join(LOCAL_VENDORS)})",
    )
    add(
        "--token",
        default=None,
        env_var="STAMPEDE_TOKEN",
        is_secret=True,
        include_in_web_ui=True,
        help="bearer token for --base-url",
    )
    # Locust owns `--profile` (a label for grouping runs), so under `locust -f` ours is `--sim-profile`.
    add(
        *(("--sim-profile",) if locust else ("--profile", "--sim-profile")),
        dest="sim_profile",
        default=None,
        env_var="STAMPEDE_PROFILE",
        include_in_web_ui=True,
        help=f"simulated vendor behaviour (embedded stub, or --local): {', '.join(sim_profile_names())}, or a .toml"
        " path (default: "
        + ", ".join(f"{profile} for --provider {provider}" for provider, profile in DEFAULT_PROFILES.items())
        + f", else {DEFAULT_PROFILE})",
    )
    add(
        "--profile-set",
        action="append",
        default=None,
        env_var="STAMPEDE_PROFILE_SET",
        include_in_web_ui=False,
        help="override one profile value, e.g. quota.max_active=100 (repeatable)",
    )
    add(
        "--time-scale",
        type=positive_finite_float,
        default=None,
        env_var="STAMPEDE_TIME_SCALE",
        include_in_web_ui=True,
        help="simulated vendor seconds x this = real seconds (default: the profile's)",
    )
    add("--seed", type=integer, default=0, env_var="STAMPEDE_SEED", include_in_web_ui=True, help="simulator seed")
    add("--out", default=DEFAULT_OUT, env_var="STAMPEDE_OUT", help="results folder (a run lands in OUT/RUN_ID)")
    add("--run-id", default=None, env_var="STAMPEDE_RUN_ID", help="run id (default: time, scenario and a nonce)")
    add(
        "--stages",
        default=",".join(map(str, DEFAULT_STAGES)),
        env_var="STAMPEDE_STAGES",
        include_in_web_ui=True,
        help="ramp: comma-separated concurrency levels",
    )
    add(
        "--hold",
        type=seconds,
        default=None,
        env_var="STAMPEDE_HOLD",
        include_in_web_ui=True,
        help="seconds to hold each stage once reached (ramp/knee 15, steady 60, soak 600, arrival 30); burst-hold: each"
        " sandbox, from its submit (30)",
    )
    add(
        "--burst-steps",
        type=in_flight,
        default=1,
        env_var="STAMPEDE_BURST_STEPS",
        include_in_web_ui=True,
        help="burst: how many synchronous steps",
    )
    add(
        "--batch",
        type=in_flight,
        default=None,
        env_var="STAMPEDE_BATCH",
        include_in_web_ui=True,
        help="burst: prompts per step B (with --group G, a step is B x G rollouts)",
    )
    add(
        "--group",
        type=in_flight,
        default=None,
        env_var="STAMPEDE_GROUP",
        include_in_web_ui=True,
        help="burst: rollouts per prompt G",
    )
    add(
        "--stagger-ms",
        type=bounded_float(0.0, MAX_SECONDS * 1000, low_open=True),
        default=200.0,
        env_var="STAMPEDE_STAGGER_MS",
        include_in_web_ui=True,
        help="staggered: milliseconds between starts",
    )
    add(
        "--rates",
        default="2",
        env_var="STAMPEDE_RATES",
        include_in_web_ui=True,
        help="arrival: comma-separated start rates (per second), one stage each",
    )
    add(
        "--poisson",
        action="store_true",
        default=False,
        env_var="STAMPEDE_POISSON",
        include_in_web_ui=True,
        help="arrival: Poisson arrivals instead of a fixed interval",
    )
    add(
        "--max-inflight",
        type=in_flight,
        default=10000,
        env_var="STAMPEDE_MAX_INFLIGHT",
        include_in_web_ui=True,
        help="open model: a start finding this many rollouts running is dropped (and counted)",
    )
    add(
        "--knee-max-failure",
        type=fraction,
        default=DEFAULT_MAX_FAILURE_RATE,
        env_var="STAMPEDE_KNEE_MAX_FAILURE",
        include_in_web_ui=True,
        help="knee: a stage with a higher failure rate is past the knee",
    )
    add(
        "--knee-max-p99",
        type=seconds,
        default=None,
        env_var="STAMPEDE_KNEE_MAX_P99",
        include_in_web_ui=True,
        help=f"knee: TTI p99 seconds past the knee (default: {DEFAULT_P99_FACTOR:g}x the first stage's p99)",
    )
    add(
        "--turns",
        default="0",
        env_var="STAMPEDE_TURNS",
        include_in_web_ui=True,
        help="agentic rollouts: tool-call turns after the commands, N or MIN..MAX",
    )
    add(
        "--turn-command",
        default="sh -c 'echo turn {turn}'",
        env_var="STAMPEDE_TURN_COMMAND",
        include_in_web_ui=True,
        help="the command each turn runs ({turn} is the turn number)",
    )
    add(
        "--gen-time",
        default="const:0",
        env_var="STAMPEDE_GEN_TIME",
        include_in_web_ui=True,
        help="emulated model generation time before each turn: const:S, uniform:A,B, lognormal:MEDIAN,SIGMA, exp:MEAN",
    )
    add(
        "--reward-command",
        default=None,
        env_var="STAMPEDE_REWARD_COMMAND",
        include_in_web_ui=True,
        help="a final command scoring the episode",
    )
    add(
        "--rollout-timeout",
        type=seconds,
        default=None,
        env_var="STAMPEDE_ROLLOUT_TIMEOUT",
        include_in_web_ui=True,
        help="one deadline in seconds for a whole rollout",
    )
    add(
        "--retries",
        type=bounded_int(0, MAX_RETRIES),
        default=0,
        env_var="STAMPEDE_RETRIES",
        include_in_web_ui=True,
        help="retry init failures (create/ready) this many times; each attempt is its own row",
    )
    add(
        "--retry-backoff",
        type=seconds_or_zero,
        default=1.0,
        env_var="STAMPEDE_RETRY_BACKOFF",
        help="seconds between attempts",
    )
    add(
        "--client",
        type=_client_preset,
        default="none",
        env_var="STAMPEDE_CLIENT",
        help=f"the RL framework's sandbox client the engine plays around the provider ({', '.join(CLIENTS)}): its "
        "startup deadline (failures client_startup_deadline), STARTING semaphore (per engine), install step, init "
        "budget and leaks; its retries and backoff replace --retries and --retry-backoff",
    )
    add(
        "--tool-time",
        default=None,
        env_var="STAMPEDE_TOOL_TIME",
        help="a distribution drawn for {tool_s} in --turn-command, e.g. lognormal:3,0.6",
    )
    add(
        "--trainer",
        default=None,
        env_var="STAMPEDE_TRAINER",
        help="rehearsal: the emulated trainer's settings as JSON (set by `stampede rehearse`)",
    )
    add(
        "--commands",
        default=commands_to_text(DEFAULT_COMMANDS),
        env_var="STAMPEDE_COMMANDS",
        include_in_web_ui=True,
        help="commands each rollout runs, ';'-separated; the first one ends TTI",
    )
    add(
        "--plan",
        dest="plan_file",
        default=None,
        env_var="STAMPEDE_PLAN",
        help="a rollout plan of steps instead of --commands/--turns: swe-task, grpo-fork, tool-latency "
        "(scenarios/plans/) or a PATH.toml of your own",
    )
    add("--create-timeout", type=seconds, default=300.0, env_var="STAMPEDE_CREATE_TIMEOUT", help="seconds")
    add("--ready-timeout", type=seconds, default=600.0, env_var="STAMPEDE_READY_TIMEOUT", help="seconds")
    add(
        "--exec-timeout",
        type=seconds,
        default=120.0,
        env_var="STAMPEDE_EXEC_TIMEOUT",
        include_in_web_ui=True,
        help="seconds per command",
    )
    add(
        "--image",
        default=None,
        env_var="STAMPEDE_IMAGE",
        include_in_web_ui=True,
        help="sandbox image (default: the provider's)",
    )
    add(
        "--cpu",
        type=bounded_float(0.0, MAX_CPU, low_open=True),
        default=1.0,
        env_var="STAMPEDE_CPU",
        include_in_web_ui=True,
        help="cores per sandbox",
    )
    add(
        "--memory-mb",
        type=bounded_int(1, MAX_MEMORY_MB),
        default=1024,
        env_var="STAMPEDE_MEMORY_MB",
        include_in_web_ui=True,
        help="memory per sandbox",
    )
    add(
        "--lifetime",
        type=seconds,
        default=DEFAULT_LIFETIME_S,
        env_var="STAMPEDE_LIFETIME",
        help="seconds after which the vendor reaps a sandbox even if we die",
    )
    add(
        "--provider-option",
        action="append",
        default=None,
        env_var="STAMPEDE_PROVIDER_OPTION",
        help="KEY=VALUE passed to the provider (repeatable)",
    )
    add(
        "--allow-oversubscribe",
        action="store_true",
        default=False,
        env_var="STAMPEDE_ALLOW_OVERSUBSCRIBE",
        help="run even when the users or in-flight cap exceed what this machine holds (files, memory, SIGTERM)",
    )
    add("--threshold", env_var="STAMPEDE_THRESHOLD", **threshold_option("the run's figures"))
    add(
        "--seconds",
        env_var="STAMPEDE_SECONDS",
        **seconds_option("the end-of-run table (summary.json and thresholds: always vendor)"),
    )
    add(
        "--abort-on-threshold",
        action="store_true",
        default=False,
        env_var="STAMPEDE_ABORT_ON_THRESHOLD",
        help="stop the run (drained, as Ctrl-C) once a --threshold that cannot un-cross is crossed: an upper bound"
        " on a failure count (failures<N, failures.KIND<N); exit 99",
    )
    add(
        "--progress-interval",
        type=seconds_or_zero,
        default=5.0,
        env_var="STAMPEDE_PROGRESS_INTERVAL",
        help="seconds between progress lines (0: none)",
    )


@dataclass(frozen=True, slots=True)
class RunSettings:
    """Everything a run needs to know, typed and validated."""

    provider: str = DEFAULT_PROVIDER
    base_url: str | None = None
    local: bool = False
    token: str | None = None
    profile: str = DEFAULT_PROFILE
    profile_overrides: dict[str, str] = field(default_factory=dict)
    time_scale: float | None = None
    seed: int = 0
    out: str = DEFAULT_OUT
    run_id: str | None = None
    stages: tuple[int, ...] = DEFAULT_STAGES
    hold_s: float | None = None  # None: the shape's own default
    burst_steps: int = 1
    batch: int | None = None
    group: int | None = None
    stagger_ms: float = 200.0
    rates: tuple[float, ...] = (2.0,)
    poisson: bool = False
    max_inflight: int = 10000
    knee_max_failure: float = DEFAULT_MAX_FAILURE_RATE
    knee_max_p99_s: float | None = None
    trainer: dict[str, Any] | None = None  # rehearsal: harness.engine.trainer.TrainerSettings as a dict
    plan: RolloutPlan = field(default_factory=RolloutPlan)
    provider_options: dict[str, str] = field(default_factory=dict)
    progress_interval_s: float = 5.0
    users: int | None = None  # -u as the user gave it: the ramp's cap, the burst's size
    spawn_rate: float | None = None  # -r as the user gave it
    allow_oversubscribe: bool = False  # past harness.locust.run_limits' estimate of what this machine holds
    thresholds: tuple[
        Threshold, ...
    ] = ()  # --threshold, checked at the end of the run (harness.results.figures.thresholds)
    abort_on_threshold: bool = False  # stop once a threshold that cannot un-cross is crossed (threshold_watch)
    seconds: str = "vendor"  # the end-of-run table's seconds: vendor or wall
    burst_pacing: bool = True  # the embedded vendor plays a burst's sending 1:1 (paces_bursts)

    @property
    def embedded_vendor(self) -> bool:
        """We start the simulated vendor ourselves: the stub without --base-url, or any provider with --local."""
        return not self.base_url and (self.provider == "stub" or self.local)

    @classmethod
    def from_options(cls, options: Any) -> RunSettings:
        def get(name: str, default: Any = None) -> Any:
            return getattr(options, name, default)

        for name in ("create_timeout", "ready_timeout", "exec_timeout", "cpu", "lifetime", "stagger_ms"):
            check_positive(name.replace("_", "-"), get(name, 1.0))
        for name in ("hold", "rollout_timeout", "knee_max_p99"):
            if get(name) is not None:
                check_positive(name.replace("_", "-"), get(name))
        for name in ("batch", "group", "max_inflight"):
            if get(name) is not None and int(get(name)) <= 0:
                raise UsageError(f"--{name.replace('_', '-')} must be a positive whole number")
        if int(get("retries", 0) or 0) < 0 or float(get("retry_backoff", 0) or 0) < 0:
            raise UsageError("--retries and --retry-backoff must not be negative")
        if not 0 <= float(get("knee_max_failure", DEFAULT_MAX_FAILURE_RATE)) <= 1:
            raise UsageError("--knee-max-failure is a fraction between 0 and 1")
        if get("memory_mb") is None or int(get("memory_mb")) <= 0:
            raise UsageError("--memory-mb must be a positive whole number")
        if get("time_scale") is not None:
            check_positive("time-scale", get("time_scale"))
        if int(get("burst_steps", 1)) <= 0:
            raise UsageError("--burst-steps must be a positive whole number")
        check_users_and_rate(get("num_users"), get("spawn_rate"))
        turns, turns_max = parse_turns(get("turns", "0") or "0")
        if get("plan_file") and (
            turns
            or get("reward_command")
            or (get("commands") or commands_to_text(DEFAULT_COMMANDS)) != commands_to_text(DEFAULT_COMMANDS)
        ):
            raise UsageError(
                "--plan replaces --commands, --turns and --reward-command: give the plan's exec steps instead"
            )
        client = client_named(str(get("client") or "none"))
        sandbox_hold = holds_sandboxes(get("scenario") or get("locustfile"))
        if sandbox_hold and get("plan_file"):
            raise UsageError("burst-hold holds the commands rollout's sandboxes: it takes no --plan")
        plan = RolloutPlan(
            commands=parse_commands(get("commands") or commands_to_text(DEFAULT_COMMANDS)),
            turns=turns,
            turns_max=turns_max,
            turn_command=parse_argv(get("turn_command"), "turn-command") or DEFAULT_TURN_COMMAND,
            gen_time=str(get("gen_time") or "const:0"),
            tool_time=get("tool_time") or None,
            reward_command=parse_argv(get("reward_command"), "reward-command"),
            rollout_timeout_s=get("rollout_timeout"),
            retries=int(get("retries", 0) or 0) if client.name == "none" else client.retries,
            retry_backoff_s=(
                float(get("retry_backoff", 1.0) if get("retry_backoff") is not None else 1.0)
                if client.name == "none"
                else client.retry_backoff_s
            ),
            client=client.name,
            seed=int(get("seed") or 0),
            create_timeout_s=float(get("create_timeout")),
            ready_timeout_s=float(get("ready_timeout")),
            exec_timeout_s=float(get("exec_timeout")),
            image=get("image"),
            cpu=float(get("cpu")),
            memory_mb=int(get("memory_mb")),
            lifetime_s=float(get("lifetime")),
            script=load_plan(str(get("plan_file"))).to_dict() if get("plan_file") else None,
            hold_s=(float(get("hold") or DEFAULT_SANDBOX_HOLD_S)) if sandbox_hold else None,
        )
        thresholds = parse_all(as_list(get("threshold")))
        if get("batch") and get("group") and int(get("batch")) * int(get("group")) > MAX_IN_FLIGHT:
            raise UsageError(f"--batch x --group must be at most {MAX_IN_FLIGHT} rollouts a step")
        if get("abort_on_threshold", False) and not thresholds:
            raise UsageError("--abort-on-threshold needs a --threshold to act on (e.g. --threshold 'failures<10')")
        token = get("token") or os.environ.get("STAMPEDE_TOKEN")
        return cls(
            provider=str(get("provider") or DEFAULT_PROVIDER),
            base_url=(get("base_url") or None),
            local=bool(get("local", False)),
            token=token or None,
            profile=str(get("sim_profile") or default_profile(str(get("provider") or DEFAULT_PROVIDER))),
            profile_overrides=parse_key_values(get("profile_set"), "profile-set"),
            time_scale=get("time_scale"),
            seed=int(get("seed") or 0),
            out=str(get("out") or DEFAULT_OUT),
            run_id=check_run_id(str(get("run_id"))) if get("run_id") else None,
            stages=parse_stages(get("stages") or ",".join(map(str, DEFAULT_STAGES))),
            hold_s=float(get("hold")) if get("hold") is not None else None,
            burst_steps=int(get("burst_steps", 1)),
            batch=int(get("batch")) if get("batch") else None,
            group=int(get("group")) if get("group") else None,
            stagger_ms=float(get("stagger_ms", 200.0) or 200.0),
            rates=parse_rates(get("rates") or "2"),
            poisson=bool(get("poisson", False)),
            max_inflight=int(get("max_inflight", 10000) or 10000),
            knee_max_failure=float(
                get("knee_max_failure") if get("knee_max_failure") is not None else DEFAULT_MAX_FAILURE_RATE
            ),
            knee_max_p99_s=get("knee_max_p99"),
            trainer=parse_trainer(get("trainer")),
            plan=plan,
            provider_options=parse_key_values(get("provider_option"), "provider-option"),
            progress_interval_s=float(get("progress_interval") or 0.0),
            # Read at init, before headless Locust fills in its own defaults (-u 1 -r 1).
            users=int(get("num_users")) if get("num_users") else None,
            spawn_rate=float(get("spawn_rate")) if get("spawn_rate") else None,
            allow_oversubscribe=bool(get("allow_oversubscribe", False)),
            thresholds=thresholds,
            abort_on_threshold=bool(get("abort_on_threshold", False)),
            seconds="wall" if get("seconds") == "wall" else "vendor",
            burst_pacing=paces_bursts(get("scenario") or get("locustfile")),
        )

    def secrets(self) -> list[str]:
        """The run's secrets: the token and every provider option whose name says secret."""
        return [s for s in (self.token, *secret_values(self.provider_options)) if s]

    def public_dict(self) -> dict[str, Any]:
        """For run.json: every setting, secrets masked (by name, and by value wherever else one was pasted)."""
        data = asdict(self)
        data["plan"] = self.plan.to_dict()
        data["stages"] = list(self.stages)
        data["token"] = MASK if self.token else None
        data["provider_options"] = {
            key: MASK if is_secret_option(key) and value else value for key, value in self.provider_options.items()
        }
        public: dict[str, Any] = redact_data(data, self.secrets())
        return public
