def main(argv=None):
    import stallscope.bpf, stallscope.analyzer
    print("ok", stallscope.bpf.__file__)
    return 0
