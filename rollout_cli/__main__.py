from rollout_cli.main import main

main()
