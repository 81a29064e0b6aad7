"""A fleet rollout in Prefect: ``flow`` (kubelet-config-fleet-rollout: observe -> rollout.fleet.step
-> save -> act), ``runs`` (the clusters' runs through Prefect), ``store`` (the fleet journal and its
holder), ``shell`` (logs, the clusters table, gates, report, events), ``status`` (`rollout fleet
status`)."""
