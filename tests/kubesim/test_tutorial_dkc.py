"""Seed 001, "Reconfigure a Node's Kubelet in a Live Cluster", run verbatim with the real kubectl.

The tutorial's commands run as one bash script (``set -euo pipefail``) with ``jq``, once per kubectl
binary the image ships (PATH ``kubectl``, ``kubectl.1.27``, ``kubectl.1.33``), each against its own
node and with a fresh HOME/TMPDIR. Waiting is bounded polling inside the script; any failed step
fails the test with the script's output.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from kubesim.cluster import Cluster

SCRIPT = r"""
set -euo pipefail
NODE_NAME="$1"
step() { echo "### $*"; }
wait_jq() {  # wait_jq <jq filter that prints true> <what>: bounded polling of the node's status.config
  for _ in $(seq 1 300); do
    if [ "$(kubectl get no ${NODE_NAME} -o json | jq "$1")" = "true" ]; then return 0; fi
    sleep 0.1
  done
  echo "timed out waiting for $2:"; kubectl get no ${NODE_NAME} -o json | jq '.status.config'; return 1
}

step "status.config of a DKC kubelet with nothing assigned"
test "$(kubectl get no ${NODE_NAME} -o json | jq -c '.status.config')" = "{}"

step "generate the configuration file from configz through kubectl proxy"
kubectl proxy --port=${PROXY_PORT} &
PROXY_PID=$!
trap 'kill ${PROXY_PID} 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do curl -sf "http://localhost:${PROXY_PORT}/version" >/dev/null && break; sleep 0.1; done
curl -sSL "http://localhost:${PROXY_PORT}/api/v1/nodes/${NODE_NAME}/proxy/configz" | jq '.kubeletconfig|.kind="KubeletConfiguration"|.apiVersion="kubelet.config.k8s.io/v1beta1"' > kubelet_configz_${NODE_NAME}
test "$(jq -r .kind kubelet_configz_${NODE_NAME})" = "KubeletConfiguration"
test "$(jq -r .eventRecordQPS kubelet_configz_${NODE_NAME})" = "5"
kubectl get --raw /api/v1/nodes/${NODE_NAME}/proxy/configz | jq -e '.kubeletconfig.eventRecordQPS == 5'

step "edit eventRecordQPS"
sed -i "s/\"eventRecordQPS\": 5/\"eventRecordQPS\": ${NEW_QPS}/" kubelet_configz_${NODE_NAME}
grep -q "\"eventRecordQPS\": ${NEW_QPS}" kubelet_configz_${NODE_NAME}

step "push the configuration file to the control plane"
kubectl -n kube-system create configmap my-node-config --from-file=kubelet=kubelet_configz_${NODE_NAME} --append-hash -o yaml | tee cm.yaml
CONFIG_MAP_NAME=$(awk '/^  name: my-node-config-/{print $2}' cm.yaml)
test -n "${CONFIG_MAP_NAME}"

step "set the node to use the new configuration (kubectl edit node)"
EDITOR="${ADD_EDITOR}" kubectl edit node ${NODE_NAME}
kubectl get no ${NODE_NAME} -o json | jq -e --arg n "${CONFIG_MAP_NAME}" '.spec.configSource.configMap.name == $n'

step "observe assigned/active, then lastKnownGood"
wait_jq '.status.config.active != null and .status.config.active == .status.config.assigned and (.status.config.error == null)' "active == assigned"
kubectl get no ${NODE_NAME} -o json | jq -e --arg n "${CONFIG_MAP_NAME}" '.status.config.assigned.configMap.name == $n and (.status.config.assigned.configMap.uid | length > 0)'
kubectl get --raw /api/v1/nodes/${NODE_NAME}/proxy/configz | jq -e --argjson q "${NEW_QPS}" '.kubeletconfig.eventRecordQPS == $q'
wait_jq '.status.config.lastKnownGood == .status.config.assigned' "lastKnownGood == assigned"
kubectl get no ${NODE_NAME} -o json | jq '.status.config'

step "a bad config (no kind) reports its error and falls back to lastKnownGood"
jq 'del(.kind)' kubelet_configz_${NODE_NAME} > kubelet_bad_${NODE_NAME}
kubectl -n kube-system create configmap my-node-config --from-file=kubelet=kubelet_bad_${NODE_NAME} --append-hash -o yaml > bad.yaml
BAD_NAME=$(awk '/^  name: my-node-config-/{print $2}' bad.yaml)
kubectl patch node ${NODE_NAME} -p "{\"spec\":{\"configSource\":{\"configMap\":{\"name\":\"${BAD_NAME}\",\"namespace\":\"kube-system\",\"kubeletConfigKey\":\"kubelet\"}}}}"
wait_jq '.status.config.error == "failed to load config, see Kubelet log for details"' "the load error"
kubectl get no ${NODE_NAME} -o json | jq -e --arg n "${BAD_NAME}" --arg g "${CONFIG_MAP_NAME}" \
  '.status.config.assigned.configMap.name == $n and .status.config.active.configMap.name == $g and .status.config.active == .status.config.lastKnownGood'
kubectl get events -n default --field-selector reason=KubeletConfigChanged,involvedObject.name=${NODE_NAME} -o json \
  | jq -e --arg n "${BAD_NAME}" '[.items[].message | select(contains($n))] | length == 1'

step "reset to the local configuration by removing configSource (kubectl edit node)"
EDITOR="${REMOVE_EDITOR}" kubectl edit node ${NODE_NAME}
kubectl get no ${NODE_NAME} -o json | jq -e '.spec.configSource == null'
wait_jq '.status.config == {}' "status.config == {}"
echo "### done"
"""

ADD_EDITOR = r"""#!/usr/bin/env python3
# scripted EDITOR for `kubectl edit node`: add configSource under spec (as the tutorial says)
import os, re, sys
path = sys.argv[-1]
text = open(path).read()
block = ("  configSource:\n    configMap:\n      name: %s\n      namespace: kube-system\n"
         "      kubeletConfigKey: kubelet\n") % os.environ["CONFIG_MAP_NAME_FROM_CM"]
if re.search(r"^spec: \{\}$", text, re.M):
    text = re.sub(r"^spec: \{\}$", "spec:\n" + block.rstrip("\n"), text, flags=re.M)
else:
    text = re.sub(r"^spec:\n", "spec:\n" + block, text, flags=re.M)
open(path, "w").write(text)
"""

REMOVE_EDITOR = r"""#!/usr/bin/env python3
# scripted EDITOR for `kubectl edit node`: remove spec.configSource
import re, sys
path = sys.argv[-1]
lines, out, skipping = open(path).read().splitlines(), [], False
for line in lines:
    if line.startswith("  configSource:"):
        skipping = True
        continue
    if skipping and line.startswith("    "):
        continue
    skipping = False
    out.append(line)
open(path, "w").write("\n".join(out) + "\n")
"""


def _kubectl_dir() -> Path:
    found = shutil.which("kubectl")
    if not found:
        pytest.skip("kubectl is not installed")
    return Path(os.path.realpath(found)).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    if not shutil.which("jq"):
        pytest.skip("jq is not installed")
    with Cluster(nodes=3, time_scale=40, trial_period="160s", node_monitor_grace="120s", ready_timeout=60) as running:
        yield running


@pytest.mark.parametrize(
    "binary, node", [("kubectl", "node-1"), ("kubectl.1.27", "node-2"), ("kubectl.1.33", "node-3")]
)
def test_seed_001_tutorial_runs_verbatim(cluster: Cluster, tmp_path: Path, binary: str, node: str) -> None:
    kubectl = _kubectl_dir() / binary
    if not kubectl.exists():
        pytest.skip(f"{binary} is not shipped in this image")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").symlink_to(kubectl)
    editors = {}
    for name, body in (("add-config-source", ADD_EDITOR), ("remove-config-source", REMOVE_EDITOR)):
        path = tmp_path / name
        path.write_text(body)
        path.chmod(0o755)
        editors[name] = str(path)
    script = tmp_path / "tutorial.sh"
    # the ConfigMap name is only known at run time: the add-editor reads it from the environment,
    # which the script exports right after `create configmap --append-hash`
    script.write_text(
        SCRIPT.replace('EDITOR="${ADD_EDITOR}"', 'CONFIG_MAP_NAME_FROM_CM="${CONFIG_MAP_NAME}" EDITOR="${ADD_EDITOR}"')
    )
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "KUBECONFIG": str(cluster.kubeconfig),
        "PROXY_PORT": str(_free_port()),
        "NEW_QPS": str(6 + int(node.rsplit("-", 1)[1])),  # distinct content -> distinct --append-hash names
        "ADD_EDITOR": editors["add-config-source"],
        "REMOVE_EDITOR": editors["remove-config-source"],
    }
    result = subprocess.run(
        ["bash", str(script), node], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90
    )
    assert result.returncode == 0, f"tutorial failed ({binary}):\n{result.stdout}\n{result.stderr}"
    assert "### done" in result.stdout
