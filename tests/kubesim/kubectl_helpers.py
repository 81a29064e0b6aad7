"""Running the real kubectl binaries against kubesim: fresh HOME/TMPDIR per call, a hard timeout.

The image ships ``kubectl`` (a dispatcher that runs its built-in 1.32 against a 1.23 server) and
versioned binaries next to the resolved file; each one a test can reach is a parameter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

EDITOR_SCRIPT = '''#!{python}
"""Scripted EDITOR for kubectl edit: apply a YAML merge given in $KUBESIM_EDIT to the file."""
import json, os, sys, yaml
path = sys.argv[-1]
doc = yaml.safe_load("".join(l for l in open(path) if not l.startswith("#")))
def merge(dst, src):
    for k, v in src.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            merge(dst[k], v)
        else:
            dst[k] = v
merge(doc, json.loads(os.environ["KUBESIM_EDIT"]))
open(path, "w").write(yaml.safe_dump(doc, default_style='"'))
'''


def kubectl_binaries() -> list[str]:
    """``kubectl`` plus ``kubectl.1.27`` and ``kubectl.1.33`` when present next to it."""
    found = shutil.which("kubectl")
    if not found:
        return []
    directory = Path(os.path.realpath(found)).parent
    binaries = ["kubectl"]
    for minor in ("1.27", "1.33"):
        candidate = directory / f"kubectl.{minor}"
        if candidate.exists():
            binaries.append(str(candidate))
    return binaries


BINARIES = kubectl_binaries()
needs_kubectl = pytest.mark.skipif(not BINARIES, reason="kubectl is not installed")


@dataclass
class Kubectl:
    binary: str
    kubeconfig: Path
    home: Path

    @property
    def label(self) -> str:
        return Path(self.binary).name

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        env.update(HOME=str(self.home), TMPDIR=str(self.home), KUBECONFIG=str(self.kubeconfig), **extra)
        return env

    def run(self, *args: str, timeout: float = 30, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["timeout", str(timeout), self.binary, *args],
            capture_output=True,
            text=True,
            env=self.env(**env),
            timeout=timeout + 10,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{self.label} {' '.join(args)} -> {result.returncode}\n{result.stdout}\n{result.stderr}"
            )
        return result

    def shell(self, script: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a shell pipeline with ``kubectl`` bound to this binary (for ``| jq``)."""
        env = self.env(KUBECTL=self.binary)
        return subprocess.run(
            ["timeout", str(timeout), "bash", "-o", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout + 10,
        )

    def editor(self) -> str:
        import sys

        path = self.home / "editor.py"
        path.write_text(EDITOR_SCRIPT.format(python=sys.executable))
        path.chmod(0o755)
        return str(path)
