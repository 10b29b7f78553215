from orchestrator.router.server import main

main()
