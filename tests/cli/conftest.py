"""Flow tests run the real flows against kubesim and a private Prefect API (one per session).

The Prefect API is ``rollout_cli.local.prefect_home.ephemeral_prefect``: a template-DB copy served by
Prefect's subprocess server (faster than ``prefect_test_harness``), heartbeats off through
``temporary_settings``, ``PREFECT_HOME`` in a temp dir, analytics off.
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory):
    from rollout_cli.local.prefect_home import ephemeral_prefect

    with ephemeral_prefect(tmp_path_factory.mktemp("prefect-home")) as url:
        yield url
