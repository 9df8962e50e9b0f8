"""stallscope.reports"""
