from swarmnode.cli import main

raise SystemExit(main())
