"""The PostgreSQL desired state: the source (source.py) and its connection (connection.py), the
row-to-record mapping, the schema and its shipped migrations, the NOTIFY triggers, transfer to and
from YAML, the observed state written back, and ``playguard db check`` (db_check.py)."""
