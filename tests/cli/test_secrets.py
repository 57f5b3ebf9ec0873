"""No secret leaves a run: a canary planted in every input path is found nowhere in what the run writes.

The inputs: `--token`, `--provider-option token_secret=...`, `STAMPEDE_PROVIDER_OPTION=api_key=...` (the
environment), and a leaky vendor (the scripted provider with `echo=1`) that repeats every credential it was
given, as is and upper-cased, plus a per-sandbox gateway token, in each error it raises: exec failures (the
parquet `error` column), terminate failures and a failing end-of-run sweep (run.json, engine-*.json, the
summary). Every file of the run folder (parquet read back as text too), stdout and stderr are searched
case-insensitively.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq

from harness.wire.redact import redact, redact_data, secret_values, short_error
from tests.support.commands import stampede

SCRIPTED = "tests.support.scripted_provider:ScriptedProvider"
MARK = "canary7xw"  # in every planted secret; searched for in any case
TOKEN = "tokCanary7Xw-q1"
SECRET = "secCanary7Xw-q2"
ENV_KEY = "envCanary7Xw-q3"


def _texts_of(run_dir: Path) -> dict[str, str]:
    """Every file of the run folder as text: raw bytes, and parquet tables read back value by value."""
    texts: dict[str, str] = {}
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        name = str(path.relative_to(run_dir))
        texts[name] = path.read_bytes().decode("utf-8", "replace")
        if path.suffix == ".parquet":
            texts[name + " (values)"] = json.dumps(pq.read_table(path).to_pylist(), default=str)
    return texts


def test_a_canary_in_every_input_path_is_in_no_output(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    out = tmp_path / "results"
    env = {**os.environ, "STAMPEDE_PROVIDER_OPTION": f"api_key={ENV_KEY}"}
    env.pop("STAMPEDE_TOKEN", None)
    result = stampede(
        "run",
        "--scenario",
        "ramp",
        "--stages",
        "3",
        "--hold",
        "1",
        "--provider",
        SCRIPTED,
        "--token",
        TOKEN,
        "--out",
        str(out),
        "--progress-interval",
        "0.5",
        "--provider-option",
        f"token_secret={SECRET}",
        "--provider-option",
        "echo=1",
        "--provider-option",
        "fail=exec:exec_error",
        "--provider-option",
        "fail_every=2",
        "--provider-option",
        "terminate_fail=1",
        "--provider-option",
        "cleanup_fail=1",
        "--provider-option",
        f"ledger={ledger}",
        timeout=180,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.is_symlink()]
    gateway_tokens = [json.loads(line)["token"] for line in ledger.read_text().splitlines() if '"token"' in line]
    assert gateway_tokens, "the leaky vendor handed out no per-sandbox token"

    # The vendor did leak: its errors reached the records (redacted), and the sweep failed.
    engine = json.loads(next(run_dir.glob("engine-*.json")).read_text())
    assert engine["sweep_error"] and "***" in engine["sweep_error"]
    errors = pq.read_table(run_dir / "rollouts").column("error").to_pylist()
    assert any(error and "request was" in error for error in errors)

    texts = _texts_of(run_dir)
    texts["stdout"], texts["stderr"] = result.stdout, result.stderr
    needles = [MARK, *(token.lower() for token in gateway_tokens)]
    hits = {name: needle for name, text in texts.items() for needle in needles if needle in text.lower()}
    assert hits == {}, f"secrets found in: {hits}"
    parameters = json.loads((run_dir / "run.json").read_text())["parameters"]
    assert parameters["token"] == "***"
    assert parameters["provider_options"]["token_secret"] == "***"
    assert parameters["provider_options"]["api_key"] == "***"
    assert parameters["provider_options"]["fail"] == "exec:exec_error"  # not a secret: kept


def test_redaction_is_case_insensitive_and_reaches_nested_records():
    secrets = ["Sekr3t-Value"]
    assert redact("said SEKR3T-VALUE and sekr3t-value", secrets) == "said *** and ***"
    nested = {"sweep_error": "boom Sekr3t-Value", "list": ["x SEKR3T-VALUE"], "n": 3}
    assert redact_data(nested, secrets) == {"sweep_error": "boom ***", "list": ["x ***"], "n": 3}
    assert short_error(RuntimeError("key sekr3t-value"), secrets) == "RuntimeError: key ***"


def test_a_gateway_shaped_token_is_masked_without_being_known():
    """Per-sandbox tokens are minted mid-run by the vendor: the harness cannot list them in advance."""
    import secrets as random_secrets

    for _ in range(200):
        token = random_secrets.token_urlsafe(24)
        assert token not in redact(f"HTTP 401: gateway refused {token} for sb-1"), token
    # Ids and words stay readable.
    kept = "sandbox 3f2a9c0e1b7d4e6f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f ClientConnectorCertificateError"
    assert redact(kept) == kept


def test_secret_options_are_found_by_their_names():
    options = {"token_secret": "a1", "api_key": "b2", "token": "c3", "fail": "exec:exec_error", "password": "d4"}
    assert sorted(secret_values(options)) == ["a1", "b2", "c3", "d4"]


def test_a_hint_naming_a_credential_keeps_its_placeholder_and_its_parenthesis():
    """`(or --provider-option api_key=...)` is advice, not a secret; a real value is masked, the sentence's bracket kept."""
    hint = "no API key; set E2B_API_KEY (or --provider-option api_key=...), or use --local"
    assert redact(hint) == hint
    assert redact("refused (token=s3cr3t-value)") == "refused (token=***)"
    assert redact("api_key=<your key>") == "api_key=<your key>"
