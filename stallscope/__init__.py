"""stallscope: what is making tasks wait, and what to change."""

__version__ = "0.1.0"
