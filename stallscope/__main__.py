from stallscope.cli import main

raise SystemExit(main())
