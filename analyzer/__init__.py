"""stallscope.analyzer"""
