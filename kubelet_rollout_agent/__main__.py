from kubelet_rollout_agent.cli import main

main()
