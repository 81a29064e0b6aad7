"""Which folders become which packages: the one packaging rule pyproject.toml cannot state.

Every package is found by name, except the shipped policies: they live in the top-level
``policies/`` folder and ship inside the package as ``rollout/policies/``, so an installed
``rollout`` finds ``--policy canary`` (``rollout/policy/loading.py`` looks in both places).
Everything else (metadata, dependencies, package data) is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

OURS = ["rollout*", "rollout_cli*", "flows*", "kubesim*", "kubelet_rollout_agent*"]

setup(
    packages=[*find_namespace_packages(include=OURS), "rollout.policies"],
    package_dir={"rollout.policies": "policies"},
)
