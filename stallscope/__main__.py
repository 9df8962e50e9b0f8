from stallscope.cli import run

run()
