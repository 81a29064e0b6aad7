"""ConfigMap names must equal `kubectl create configmap ... --append-hash` for the same content,
checked against the real kubectl binary (client-side dry run: no server needed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rollout.names import LABEL_CONFIG_HASH, LABEL_ROLLOUT
from rollout.publish import (
    build_configmap,
    configmap_hash,
    configmap_name,
    encode_hash,
    go_json,
    same_published_content,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
KUBECTL = shutil.which("kubectl")

CONTENTS = {
    "minimal": "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\n",
    "good fixture": (FIXTURES / "good.yaml").read_text(),
    "json fixture": (FIXTURES / "good.json").read_text(),
    "html-escaped chars": "kind: KubeletConfiguration\n# a <b> & c\nstaticPodURL: http://x/?a=1&b=2\n",
    "non-ascii and tabs": "kind: KubeletConfiguration\n# café ✓\tdone\r\n",
    "quotes and backslashes": 'staticPodPath: "C:\\\\pods"\n# "quoted"\n',
    "no trailing newline": "maxPods: 110",
}


def kubectl_name(tmp_path: Path, base: str, content: str) -> str:
    source = tmp_path / "kubelet"
    source.write_bytes(content.encode("utf-8"))
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "KUBECONFIG": "/dev/null"}
    out = subprocess.run(
        [
            KUBECTL or "kubectl",
            "create",
            "configmap",
            base,
            f"--from-file=kubelet={source}",
            "--append-hash",
            "--dry-run=client",
            "-o",
            "jsonpath={.metadata.name}",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
@pytest.mark.parametrize("content", list(CONTENTS.values()), ids=list(CONTENTS))
@pytest.mark.parametrize("base", ["kubelet-config", "x"])
def test_name_matches_real_kubectl(tmp_path: Path, base: str, content: str) -> None:
    assert configmap_name(base, {"kubelet": content}) == kubectl_name(tmp_path, base, content)


def test_hash_covers_the_base_name() -> None:
    """kubectl hashes the ConfigMap *with* its base name, so two bases never share a suffix."""
    data = {"kubelet": CONTENTS["minimal"]}
    assert configmap_hash("a", data) != configmap_hash("b", data)
    assert configmap_name("x", data) == "x-98gffh4g5b"  # recorded from kubectl v1.32


def test_encode_hash_substitutes_vowels_and_confusables() -> None:
    assert encode_hash("0123456789abcdef") == "gh2k456789"
    assert encode_hash("aeaeae0000ff") == "mtmtmtgggg"
    with pytest.raises(ValueError):
        encode_hash("abc")


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ({"b": 1, "a": "x"}, '{"a":"x","b":1}'),
        ("<&>", '"\\u003c\\u0026\\u003e"'),
        ("é\n\t", '"é\\n\\t"'),
        ("\u2028", '"\\u2028"'),
        ("\x01", '"\\u0001"'),
    ],
    ids=[
        "sorted keys, no spaces",
        "HTML characters escaped",
        "non-ASCII kept, controls escaped",
        "line separator escaped",
        "other controls as \\u00XX",
    ],
)
def test_go_json_matches_go_encoding(value: object, encoded: str) -> None:
    assert go_json(value) == encoded


def test_build_configmap() -> None:
    text = CONTENTS["good fixture"]
    cm = build_configmap("kube-system", base_name="kubelet-config", config_text=text, rollout_name="canary-1")
    assert cm["metadata"]["name"] == configmap_name("kubelet-config", {"kubelet": text})
    assert cm["metadata"]["namespace"] == "kube-system"
    assert cm["data"] == {"kubelet": text}
    assert cm["immutable"] is True
    assert cm["metadata"]["labels"][LABEL_ROLLOUT] == "canary-1"
    assert cm["metadata"]["name"].endswith("-" + cm["metadata"]["labels"][LABEL_CONFIG_HASH])
    json.dumps(cm)  # serialisable as is


def test_same_content_publishes_the_same_object() -> None:
    first = build_configmap(
        "kube-system", base_name="kubelet-config", config_text="a: 1\n", rollout_name="r1"
    )
    again = build_configmap(
        "kube-system", base_name="kubelet-config", config_text="a: 1\n", rollout_name="r2"
    )
    other = build_configmap(
        "kube-system", base_name="kubelet-config", config_text="a: 2\n", rollout_name="r1"
    )
    assert first["metadata"]["name"] == again["metadata"]["name"] != other["metadata"]["name"]
    assert same_published_content(first, again)
    assert not same_published_content(first, other)
    assert not same_published_content({**first, "immutable": False}, again)


@pytest.mark.parametrize(
    ("base", "rollout"),
    [("Kubelet_Config", "r1"), ("kubelet-config", "bad rollout name"), ("x" * 250, "r1")],
    ids=["base must be a DNS subdomain", "rollout name must be a label value", "name length limit"],
)
def test_build_configmap_rejects_bad_names(base: str, rollout: str) -> None:
    with pytest.raises(ValueError):
        build_configmap("kube-system", base_name=base, config_text="a: 1\n", rollout_name=rollout)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("kind: x\n\udc80", "not UTF-8", id="a lone surrogate is not UTF-8"),
        pytest.param("a: " + "x" * (1024 * 1024), "too large", id="over the 1 MiB ConfigMap limit"),
        pytest.param("a: \x00", "binary", id="a NUL byte"),
    ],
)
def test_text_that_cannot_be_configmap_data_is_a_config_error(text: str, expected: str) -> None:
    from rollout.errors import ConfigError

    with pytest.raises(ConfigError, match=expected):
        build_configmap("kube-system", base_name="kubelet-config", config_text=text, rollout_name="r")
