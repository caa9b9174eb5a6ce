from crawler_node.cli import main

raise SystemExit(main())
