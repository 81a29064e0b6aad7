"""`rollout validate` / `rollout start` on bad files: exit 0 or 2, one message, never a traceback.

A small sample of the core fuzz corpus (tests/core/test_input_fuzz.py holds the thousands) run
through the real command line, because the CLI reads the file itself: a missing file, a binary
or a Latin-1 file must reach the user as "invalid input" (exit 2), not as a Python traceback.
Kept apart from the core tests: the CLI app is moving to its own package.
"""

from __future__ import annotations

from pathlib import Path

import input_mutations as im
import pytest
import yaml
from typer.testing import CliRunner

from rollout_cli.main import EXIT_INVALID, EXIT_OK, app
from rollout.policy import DEFAULT_POLICY_DIR

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
runner = CliRunner()


def _seed(path: Path) -> tuple[dict, str]:
    text = path.read_text()
    return yaml.safe_load(text), text


CONFIGS = im.corpus([_seed(FIXTURES / "configs" / "good.yaml")], 20, seed=3)[:20]
POLICIES = im.corpus([_seed(DEFAULT_POLICY_DIR / "canary.yaml")], 8, seed=3)[:8]


def _assert_clean_exit(args: list[str]) -> str:
    result = runner.invoke(app, args)
    output = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (EXIT_OK, EXIT_INVALID), output
    assert "Traceback" not in output
    return output


@pytest.mark.parametrize(("name", "data"), CONFIGS, ids=[f"config-{i}-{n}" for i, (n, _) in enumerate(CONFIGS)])
def test_validate_a_mutated_config(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / "kubelet.yaml"
    path.write_bytes(data)
    _assert_clean_exit(["validate", "--config", str(path)])


@pytest.mark.parametrize(("name", "data"), POLICIES, ids=[f"policy-{i}-{n}" for i, (n, _) in enumerate(POLICIES)])
def test_validate_a_mutated_policy(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(data)
    _assert_clean_exit(["validate", "--policy", str(path)])


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["validate", "--config", "{missing}"], id="validate --config"),
        pytest.param(["validate", "--policy", "{missing}"], id="validate --policy"),
        pytest.param(["start", "--name", "r", "--config", "{missing}"], id="start --config"),
    ],
)
def test_a_missing_file_is_invalid_input_with_a_clear_message(tmp_path: Path, args: list[str]) -> None:
    missing = str(tmp_path / "nope.yaml")
    result = runner.invoke(app, [a.replace("{missing}", missing) for a in args])
    assert result.exit_code == EXIT_INVALID
    assert "nope.yaml: no such file" in " ".join(result.output.split())  # rich wraps long lines
