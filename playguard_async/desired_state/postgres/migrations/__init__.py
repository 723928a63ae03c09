"""The PostgreSQL schema of the desired state, as versioned SQL files shipped with the package:
``NNNN_name.sql``, applied in order by ``playguard db migrate``
(``playguard_async.desired_state.postgres.schema``)."""
