"""stallscope.tui"""
