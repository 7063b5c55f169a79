from jaggedperf.cli import main

raise SystemExit(main())
