"""A kubelet's first download refused (403) right after its assignment is no failure of the config.

The node authorizer learns of a Node's new `spec.configSource` from its informer, a moment after
the write; a kubelet that asks first is refused ("no relationship found between node ... and this
object"), reports `failed to sync: failed to download config`, retries 10-12 s later (its config
sync loop), then restarts onto the config, and only the new process clears the error. A shipped
policy's `syncErrorGrace` must outlast that, or it halts a good rollout (the README's drift
rehearsal did, on a loaded CI machine, with `fast`'s 30 s). Here the authorizer is slower than the
kubelet every time (kubesim's `authz_loses_race`: a lag alone lost the race under CI's load, and
no download was refused), and the shipped `fast` policy, as a person runs it (`--time-scale`),
completes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout_cli.main import EXIT_OK, app  # noqa: E402

pytestmark = pytest.mark.usefixtures("prefect_api")
runner = CliRunner()
AUTHZ_LAG_S = 8.0  # of kubesim's clock: shorter than the kubelet's retry


def test_fast_outlasts_a_403_on_every_first_download(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=3, api_options={"authz_lag": AUTHZ_LAG_S, "authz_loses_race": True}) as c:
        gw = sc.gateway(c)
        config = tmp_path / "kubelet.yaml"
        config.write_text(sc.config_text(gw, maxPods=77))
        result = runner.invoke(app, ["start", "-c", str(config), "-p", "fast", "--name", "refused-first",
                                     "--kubeconfig", str(c.kubeconfig), "--time-scale", str(sc.TIME_SCALE)],
                               catch_exceptions=False)
        assert result.exit_code == EXIT_OK, result.output
        refused = [e for e in c.audit_log.events(verb="get") if (e.get("objectRef") or {}).get("resource") == "configmaps"
                   and str(e["user"]["username"]).startswith("system:node:") and e["responseStatus"]["code"] == 403]
        assert {e["user"]["username"] for e in refused} == {f"system:node:{n}" for n in sc.workers(gw)}
        journal = sc.journal(gw, "refused-first")
        assert not journal.failed_nodes and all(sc.configz_field(gw, n, "maxPods") == 77 for n in sc.workers(gw))
