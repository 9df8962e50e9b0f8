"""stallscope.bpf"""
