"""The two things every command that reads the fleet reaches from settings: the Redis client and
the desired state's source.

They live apart from ``wiring`` (the engine, its phases and remote layer) so that ``status``,
``locks``, ``unlock``, ``pause``, ``pin``, ``describe``, ``history`` and ``rollout`` import Redis
and the desired state only: a short-lived command pays for its imports at every start, and those
commands run no cycle.
"""

from __future__ import annotations

from playguard_async.coordination.client import RedisClient, connect_redis
from playguard_async.desired_state.postgres.connection import DatabaseError
from playguard_async.desired_state.registry import source_kind
from playguard_async.desired_state.source import DesiredState
from playguard_async.settings import Settings, SettingsError


def inventory_source(settings: Settings) -> DesiredState:
    """The desired state the settings name (``desired_state.registry``), read within their size
    and time bounds. A password file that cannot be read is a configuration error now
    (``SettingsError``), as a malformed URL is: only the database itself being out of reach is
    waited out."""
    try:
        return source_kind(settings.desired_state).build(settings)
    except DatabaseError as exc:
        raise SettingsError(str(exc)) from None


def redis_for(settings: Settings) -> RedisClient:
    return connect_redis(
        settings.redis_url,
        socket_timeout=settings.redis_socket_timeout,
        connect_timeout=settings.redis_connect_timeout,
        keepalive=settings.redis_keepalive,
        max_connections=settings.redis_max_connections,
        password=settings.redis_password.get_secret_value() if settings.redis_password else None,
        sentinel_password=(
            settings.redis_sentinel_password.get_secret_value()
            if settings.redis_sentinel_password
            else None
        ),
        tls_ca_file=settings.redis_tls_ca_file,
    )
